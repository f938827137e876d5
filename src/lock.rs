//! The lock domain: validated names, durations, fences, and the outcomes of each lock operation.
//!
//! Values are checked once, where they enter (clap's value parsers call the `parse` functions
//! here), so nothing past the edge re-validates. An expected "no" — the lock is busy, not found,
//! owned by someone else — is an outcome variant, never an `Err`: `Err` is reserved for store
//! failures.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

mod mode;
mod queue;
mod set;
mod text;
mod time;

pub use mode::{Family, MAX_LIMIT, Mode};
pub use queue::{Place, Queue, queues};
pub use set::{
    Blocked, MAX_MEMBERS, Members, SetAcquire, SetRefusal, SetRelease, SetRenew, Shape,
    released_one, renewed_one,
};
pub use text::{
    MAX_NAME_BYTES, MAX_REMARK_BYTES, Owner, Remark, Resource, TokenName, shown, shown_line,
    visible,
};
pub use time::{MAX_DURATION, MAX_TTL_SECS, Timestamp, Ttl, parse_duration, parse_span};

/// A fencing token: strictly increases with every new tenure of a resource, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fence(pub i64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One tenure of a lock, as the store holds it. As JSON, a lock object gains fields only when
/// they apply: `"shared":true`, `"limit":N`, `"note":"…"`; a plain exclusive lock is exactly
/// the lock object of docs/src/reference/json.md.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub resource: Resource,
    pub owner: Owner,
    /// The token that proved the owner (`distlock serve --tokens`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenName>,
    pub fence: Fence,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    #[serde(flatten)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<Remark>,
}

/// Who holds a lock that someone else asked for: its owner and lease end, and the mode and
/// note fields as a lock object has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub owner: Owner,
    pub expires_at: Timestamp,
    #[serde(flatten)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<Remark>,
}

/// How an acquire that succeeded came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A new tenure with a new, larger fence (the lock was free or had expired).
    New,
    /// The same owner already held the live lock: same tenure and fence, lease moved to now + ttl.
    Extended,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Acquired {
        lock: Lock,
        tenure: Grant,
    },
    /// Held by others in a mode that does not admit this request now, or reserved for
    /// earlier waiters.
    Busy {
        /// The live tenure whose lease ends first; `None` when nobody holds the resource but
        /// earlier waiters have it reserved.
        holder: Option<Holder>,
        /// Every live tenure, by fence, when the holders are shared or a semaphore's; empty
        /// for an exclusive holder.
        holders: Vec<Holder>,
        /// Live waiters queued for the resource, the requester aside.
        waiting: usize,
        /// The requester's place in the queue (1 = next), when it waits.
        position: Option<usize>,
    },
    /// The request's mode conflicts with how the resource is held (exit 78): a configuration
    /// error, answered at once.
    Mismatch {
        /// Every live tenure, by fence.
        holders: Vec<Holder>,
    },
}

/// What `status` finds: the live tenures (oldest first) and the live waiters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    pub locks: Vec<Lock>,
    pub waiting: usize,
}

/// What `release` finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    Released,
    /// No live lock (missing, expired, or a different tenure of this owner).
    NotFound,
    /// A live lock held by another owner.
    Forbidden,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    Renewed { lock: Lock },
    NotFound,
    Forbidden,
}

/// One recorded state change, as `log` prints it: a lock object's fields, the event, the
/// previous owner of a `taken_over`, and who broke a `broken` tenure and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at: Timestamp,
    pub resource: Resource,
    pub owner: Owner,
    /// The token that proved the owner (`distlock serve --tokens`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenName>,
    pub fence: Fence,
    pub event: EventKind,
    /// The end of the lease the event left (not for `released` and `broken`, which end it;
    /// not recorded before schema version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_owner: Option<Owner>,
    #[serde(flatten)]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<Remark>,
    /// Who broke the tenure, and why (a `broken` event).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<Breaking>,
}

/// Who broke a lock with `break`, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaking {
    /// Who the caller says it is (`--by`, or `<user>@<hostname>`): free text, proving nothing.
    pub by: Remark,
    /// The operator's token that a server let break it (`distlock serve --tokens`): who the
    /// server knows it was. Never taken from what the caller sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_token: Option<TokenName>,
    pub reason: Remark,
}

impl Breaking {
    /// Who broke it, as a message names them: `by`, and the operator's token when there was
    /// one (`alice@ops (token ops)`).
    pub fn breaker(&self) -> String {
        match &self.by_token {
            Some(token) => format!("{} (token {token})", self.by),
            None => self.by.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Acquired,
    Extended,
    Renewed,
    Released,
    TakenOver,
    /// `run --hold-at-least`: the command ended before the hold did, so the lease was set to
    /// end at the tenure's start + the hold instead of being released.
    Kept,
    /// An operator's `break` removed the tenure.
    Broken,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Extended => "extended",
            EventKind::Renewed => "renewed",
            EventKind::Released => "released",
            EventKind::TakenOver => "taken_over",
            EventKind::Kept => "kept",
            EventKind::Broken => "broken",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        Some(match s {
            "acquired" => EventKind::Acquired,
            "extended" => EventKind::Extended,
            "renewed" => EventKind::Renewed,
            "released" => EventKind::Released,
            "taken_over" => EventKind::TakenOver,
            "kept" => EventKind::Kept,
            "broken" => EventKind::Broken,
            _ => return None,
        })
    }
}

/// What `gc` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    pub expired_locks: u64,
    pub history_events: u64,
}

/// Which history to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub resource: Option<Resource>,
    /// Only the resources that start with this.
    pub prefix: Option<String>,
    /// Only events from this long ago until now, by the store's clock.
    pub since: Option<Duration>,
    /// At most this many events (the newest ones), still printed oldest first.
    pub limit: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_is_taken_as_given() {
        assert_eq!(Resource::parse(" a ").unwrap().as_str(), " a ");
        assert!(Resource::parse("").is_err());
        assert!(Resource::parse("   ").is_err());
        assert!(Resource::parse("a\nb").is_err());
        assert!(Resource::parse("a\u{7f}").is_err());
        assert!(Resource::parse(&"x".repeat(255)).is_ok());
        assert!(Resource::parse(&"x".repeat(256)).is_err());
        // 255 bytes is the limit, not 255 characters.
        assert!(Resource::parse(&"é".repeat(128)).is_err());
        assert!(Resource::parse("payment:42'; DROP TABLE locks; --").is_ok());
    }

    #[test]
    fn owner_is_trimmed() {
        assert_eq!(Owner::parse("  w1 ").unwrap().as_str(), "w1");
        assert!(Owner::parse("").is_err());
        assert!(Owner::parse(" \t ").is_err());
        assert!(Owner::parse("a\u{0}b").is_err());
        assert!(Owner::parse(&format!(" {} ", "x".repeat(255))).is_ok());
        assert!(Owner::parse(&"x".repeat(256)).is_err());
    }

    #[test]
    fn unique_owner_is_valid_and_unique() {
        let a = Owner::unique_for_process();
        let b = Owner::unique_for_process();
        assert_ne!(a, b);
        assert_eq!(Owner::parse(a.as_str()).unwrap(), a);
        assert!(a.as_str().contains(&format!(":{}:", std::process::id())));
    }

    #[test]
    fn ttl_accepts_whole_seconds_only() {
        assert_eq!(Ttl::parse("30").unwrap().as_millis(), 30_000);
        assert_eq!(Ttl::parse("90s").unwrap().as_millis(), 90_000);
        assert_eq!(Ttl::parse("1h30m").unwrap().as_millis(), 5_400_000);
        assert_eq!(Ttl::parse("2000ms").unwrap().as_millis(), 2_000);
        assert_eq!(Ttl::parse("365d").unwrap().as_millis(), 31_536_000_000);
        for bad in [
            "0",
            "-1",
            "-100",
            "60.5",
            "1500ms",
            "abc",
            "",
            "366d",
            "1s500ms",
            "3600 ",
            "1e3",
            "18446744073709551616",
            "99999999999999999999999y",
        ] {
            assert!(Ttl::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn durations_are_non_negative_and_bounded() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_duration("1h 30m").unwrap(),
            Duration::from_secs(5_400)
        );
        assert_eq!(
            parse_duration("2days").unwrap(),
            Duration::from_secs(172_800)
        );
        assert_eq!(
            parse_duration("10000000000000ns").unwrap(),
            Duration::from_secs(10_000)
        );
        for bad in [
            "-1",
            "x",
            "",
            "1..2",
            "1e400",
            "2000y",
            "NaN",
            "inf",
            // humantime 2.4 would panic on these: its carry check is off by one.
            "18446744073709551615s 1000ms",
            "18446744073709551615s 1000000us",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn limit_one_is_exclusive_and_the_rest_is_bounded() {
        assert_eq!(Mode::parse_limit("1"), Ok(Mode::Exclusive));
        assert_eq!(Mode::parse_limit("2"), Ok(Mode::Semaphore(2)));
        assert_eq!(Mode::parse_limit("10000"), Ok(Mode::Semaphore(10_000)));
        for bad in ["0", "10001", "-1", "2.5", "x", "", " 3", "1e3"] {
            assert!(
                Mode::parse_limit(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn notes_are_trimmed_and_bounded() {
        assert_eq!(
            Remark::parse("  deploy v1.4 ").unwrap().as_str(),
            "deploy v1.4"
        );
        assert!(Remark::parse(&"x".repeat(1024)).is_ok());
        for bad in [
            String::new(),
            "   ".into(),
            "x".repeat(1025),
            "a\nb".into(),
            "a\u{7f}".into(),
        ] {
            assert!(Remark::parse(&bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn timestamps_render_as_rfc3339_millis_utc() {
        assert_eq!(
            Timestamp(1_796_011_732_123).to_string(),
            "2026-11-30T04:08:52.123Z"
        );
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
    }
}
