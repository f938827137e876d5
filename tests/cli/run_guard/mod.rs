//! `distlock run`, the exec guard.
//!
//! | file | tests |
//! | --- | --- |
//! | [`run`] | exit statuses, the busy path, the command's environment, the heartbeat, a lost lease, `--wait`, exec failures, joining a tenure |
//! | [`guard`] | signals forwarded to the command, job control, a SIGKILLed guard, orphans reaped, how the command is started |

mod guard;
mod run;
