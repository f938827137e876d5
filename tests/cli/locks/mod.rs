//! The lock commands, each on every store (and through a server where the answer must not
//! change).
//!
//! | file | tests |
//! | --- | --- |
//! | [`core`] | `acquire`, `status`, `release`, `renew`: the seed's attacks and every exit code, validation, races, fences, expiry, the SQLite file |
//! | [`modes`] | shared locks (`--shared`) and counting semaphores (`--limit N`) |
//! | [`sets`] | lock sets: several resources taken, renewed and released together, all or nothing |
//! | [`front_door`] | what `--db` names, `--help`, answers that cannot be written, terminal escapes, and what the commands do to the file `--db` names |

mod core;
mod front_door;
mod modes;
mod sets;
