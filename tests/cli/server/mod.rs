//! The lock server, `distlock serve`, from outside: a real server process, a real HTTP client.
//!
//! | file | tests |
//! | --- | --- |
//! | [`serve`] | the HTTP API over each store, the seed's attacks through HTTP; [`serve::http`] holds it to RFC 9110, [`serve::sets`] covers lock sets |
//! | [`tokens`] | `serve --tokens`: bearer tokens, scopes, operators, secrets never shown |
//! | [`tls`] | HTTPS, the exposure rule, the handshake's time limit, SIGHUP |
//! | [`dashboard`] | the dashboard at `/ui/` in a real headless Chromium over each store: locks, queues, the timeline and health live, hostile names as text, tokens; its files' headers; `/queues` and `/log?prefix=` |
//! | [`through_server`] | every command through a server (`--db http://…`): the same answers as on the store |

mod dashboard;
mod serve;
mod through_server;
mod tls;
pub mod tokens;
