//! The lock server, `distlock serve`, from outside: a real server process, a real HTTP client.
//!
//! | file | tests |
//! | --- | --- |
//! | [`engine`] | the engine under load: kill -9, one bad operation in a batch, 10,000 waiters, renewals under a flood, the waiting bounds |
//! | [`serve`] | the HTTP API over each store, the seed's attacks through HTTP; [`serve::http`] holds it to RFC 9110, [`serve::sets`] covers lock sets |
//! | [`tokens`] | `serve --tokens`: bearer tokens, scopes, operators, secrets never shown |
//! | [`tls`] | HTTPS, the exposure rule, the handshake's time limit, SIGHUP |
//! | [`dashboard`] | the dashboard at `/ui/` in a real headless Chromium over each store: locks, queues, the timeline and health live, hostile names as text, tokens; its files' headers; `/queues` and `/log?prefix=` |
//! | [`through_server`] | every command through a server (`--db http://…`): the same answers as on the store |

mod dashboard;
mod engine;
mod serve;
mod through_server;
mod tls;
pub mod tokens;
