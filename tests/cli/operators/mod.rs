//! What operators and fleets use.
//!
//! | file | tests |
//! | --- | --- |
//! | [`history`] | `list`, `log`, `gc` and their text lines; the waiting line on a terminal |
//! | [`fleet`] | `--note`, `run --hold-at-least`, `run --max-runtime`, `break` |

mod fleet;
mod history;
