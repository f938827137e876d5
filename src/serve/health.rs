//! Whether the store answers, as `GET /health` and `/metrics` tell it: one probe of the store at
//! a time (a read of nothing, on a blocking thread), which every request asking meanwhile
//! waits for, each for at most [`ANSWER_WITHIN`]. A store that does not answer in that time is
//! unavailable to the caller, while the probe goes on to its own end (the store's call
//! timeouts), holding one blocking thread however many ask.
//!
//! The answer says only "store unavailable": a load balancer or anyone else who may ask
//! `/health` without a token learns no host, user or database. The cause goes to the server's
//! log, one line when the store stops answering and one when it answers again, and to
//! `/metrics`, which needs a token when the server has tokens. The store's own messages never
//! show a password.

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::output::warn;

/// The longest a request waits for the store's answer to a probe: well under a second, so
/// that `/health` answers within 900 ms, the rest left for reading the request and writing the
/// answer, and a load balancer's probe with a 1 s timeout always gets its 503 rather than
/// giving up on the server.
pub const ANSWER_WITHIN: Duration = Duration::from_millis(700);

/// What the probes found, shared by the server's requests.
pub struct Health {
    finding: Mutex<Finding>,
    /// Set while a probe runs: no second one starts.
    pub(super) probing: AtomicBool,
    /// Told when a probe has found something.
    pub(super) found: watch::Sender<()>,
}

/// What the last probes found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Whether the store answered the last probe (before any: yes, as it was opened at start).
    pub up: bool,
    /// The last error a probe met, one line, and when (Unix seconds).
    pub last_error: Option<(String, u64)>,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            finding: Mutex::new(Finding {
                up: true,
                last_error: None,
            }),
            probing: AtomicBool::new(false),
            found: watch::Sender::new(()),
        }
    }
}

impl Health {
    /// What the last probes found.
    pub fn finding(&self) -> Finding {
        self.finding.lock().map_or(
            Finding {
                up: false,
                last_error: None,
            },
            |finding| finding.clone(),
        )
    }

    /// Notes what a probe found: `Err` with why the store did not answer. A change from
    /// answering to not, or back, is one line on stderr.
    pub(super) fn record(&self, probed: Result<(), String>) {
        let Ok(mut finding) = self.finding.lock() else {
            return;
        };
        match probed {
            Ok(()) => {
                if !finding.up {
                    warn(format_args!("the store answers again"));
                }
                finding.up = true;
            }
            Err(why) => {
                if finding.up {
                    warn(format_args!("store unavailable: {why}"));
                }
                finding.up = false;
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs());
                finding.last_error = Some((why, now));
            }
        }
    }
}

/// `text` on one line: a line of the log, or a label of `/metrics`.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<&str>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_on_one_line_until_the_next_and_success_clears_only_up() {
        let health = Health::default();
        assert_eq!(
            health.finding(),
            Finding {
                up: true,
                last_error: None
            }
        );
        health.record(Err(one_line("cannot connect:\n  refused")));
        let finding = health.finding();
        assert!(!finding.up);
        assert_eq!(
            finding.last_error.as_ref().map(|(why, _)| why.as_str()),
            Some("cannot connect: refused")
        );
        health.record(Ok(()));
        let back = health.finding();
        assert!(back.up);
        assert_eq!(back.last_error, finding.last_error, "the last error stays");
    }
}
