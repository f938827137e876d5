//! The stores and what they must survive.
//!
//! | file | tests |
//! | --- | --- |
//! | [`postgres`] | what only PostgreSQL has to prove: races over the network, the server's clock, an unreachable, dying or hanging server, passwords, TLS |
//! | [`pooler`] | PostgreSQL behind a private PgBouncer, in transaction and session mode |
//! | [`network_fs`] | a SQLite store on a network filesystem (a FUSE mount) is refused |
//! | [`upgrade`] | stores written by earlier versions, upgraded in place |
//! | [`faults`] | a private PostgreSQL restarted, its sessions terminated, its clients stopped or partitioned, connections cut |
//! | [`reliability`] | contention, SIGKILL at random moments, a paused holder, hostile input, damaged, read-only and full stores |

mod faults;
mod network_fs;
mod pooler;
mod postgres;
mod reliability;
mod upgrade;
