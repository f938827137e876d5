//! The lock domain: validated names, durations, fences, and the outcomes of each lock operation.
//!
//! Values are checked once, where they enter (clap's value parsers call the `parse` functions
//! here), so nothing past the edge re-validates. An expected "no" — the lock is busy, not found,
//! owned by someone else — is an outcome variant, never an `Err`: `Err` is reserved for store
//! failures.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

/// The longest resource name or owner, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// The longest lease a lock may be given.
pub const MAX_TTL_SECS: u64 = 365 * 24 * 60 * 60;

/// The longest `--wait`, `--kill-after` or `--since`: far beyond any real use, and small enough
/// that adding it to a clock reading can never overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(1000 * 366 * 24 * 60 * 60);

/// The name of a lockable resource, exactly as the user gave it (not trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Resource(String);

impl Resource {
    /// Checks a resource name against the contract: 1..=255 bytes, not blank, no control
    /// characters.
    ///
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Resource, String> {
        check_name("resource", raw)?;
        if raw.trim().is_empty() {
            return Err("resource must not be blank".into());
        }
        Ok(Resource(raw.to_owned()))
    }

    /// A name read back from the store, which only ever holds validated names.
    pub(crate) fn from_store(raw: &str) -> Resource {
        Resource(raw.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds (or wants) a lock. Surrounding whitespace is trimmed, so `" w1 "` and `"w1"` are
/// one owner and `"   "` is no owner at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Owner(String);

impl Owner {
    /// Trims `raw`, then checks it against the contract: 1..=255 bytes, no control characters.
    ///
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Owner, String> {
        let trimmed = raw.trim();
        check_name("owner", trimmed)?;
        Ok(Owner(trimmed.to_owned()))
    }

    /// An owner read back from the store, which only ever holds validated owners.
    pub(crate) fn from_store(raw: &str) -> Owner {
        Owner(raw.to_owned())
    }

    /// An owner name unique to this process: `<hostname>:<pid>:<8 random hex digits>`.
    pub fn unique_for_process() -> Owner {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| Owner::parse(h).is_ok())
            .unwrap_or_else(|| "localhost".to_owned());
        let suffix = format!(":{}:{:08x}", std::process::id(), fastrand::u32(..));
        // Keep the whole name within the length limit even on a host with a very long name.
        let mut host = host;
        while host.len() + suffix.len() > MAX_NAME_BYTES {
            host.pop();
        }
        Owner(host + &suffix)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_name(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{what} is {} bytes long; the limit is {MAX_NAME_BYTES}",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters"));
    }
    Ok(())
}

/// A lease length: a whole number of seconds, 1 s ..= 365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(Duration);

impl Ttl {
    /// Parses a TTL: a bare integer (seconds) or a humantime duration (`90s`, `5m`, `1h30m`)
    /// that comes to a whole number of seconds.
    ///
    /// # Errors
    ///
    /// A message for zero, negative, fractional, out-of-range or unreadable values.
    pub fn parse(raw: &str) -> Result<Ttl, String> {
        // Fractions are for waits (`--wait 0.5`); a TTL is whole seconds, even as `60.0`.
        if raw.contains('.') {
            return Err(format!(
                "ttl must be a whole number of seconds, got {raw:?}"
            ));
        }
        let duration = parse_duration(raw)?;
        if duration.subsec_nanos() != 0 {
            return Err(format!(
                "ttl must be a whole number of seconds, got {raw:?}"
            ));
        }
        Ttl::from_secs(duration.as_secs())
    }

    /// # Errors
    ///
    /// A message when `secs` is outside 1 ..= 365 days.
    pub fn from_secs(secs: u64) -> Result<Ttl, String> {
        if !(1..=MAX_TTL_SECS).contains(&secs) {
            return Err(format!("ttl must be between 1s and 365 days, got {secs}s"));
        }
        Ok(Ttl(Duration::from_secs(secs)))
    }

    pub fn as_duration(self) -> Duration {
        self.0
    }

    pub fn as_millis(self) -> i64 {
        // At most 365 days: always fits.
        self.0.as_millis() as i64
    }
}

/// Parses a non-negative duration for `--wait`, `--kill-after` and `--since`: a bare number of
/// seconds (fractions allowed, as with `flock -w 0.5`) or a humantime duration.
///
/// # Errors
///
/// A message for negative, non-finite, unreadable or absurdly large values.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let value = raw;
    let too_long = || format!("duration {raw:?} is too long");
    let duration = if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !value.is_empty() {
        let secs: f64 = value
            .parse()
            .map_err(|_| format!("invalid duration {raw:?}"))?;
        Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration {raw:?}"))?
    } else {
        let unreadable = |detail: &str| {
            format!("invalid duration {raw:?} ({detail}); use forms like 30, 90s, 5m or 1h30m")
        };
        // humantime 2.4 panics when a sum lands exactly on u64::MAX seconds with a carry of
        // nanoseconds, so anything beyond our own bound is refused before it gets there.
        if humantime_nanos(value).map_err(|e| unreadable(&e))? > MAX_DURATION.as_nanos() {
            return Err(too_long());
        }
        humantime::parse_duration(value).map_err(|e| unreadable(&e.to_string()))?
    };
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}

/// An upper bound of a humantime duration (`1h 30m`, `90s`, `2days`, `1.5h`) in nanoseconds,
/// saturating instead of overflowing, with humantime's units; exact without fractions.
fn humantime_nanos(text: &str) -> Result<u128, String> {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let mut total: u128 = 0;
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err("expected a number".into());
        }
        let mut number = rest[..digits].bytes().fold(0u128, |n, d| {
            n.saturating_mul(10).saturating_add(u128::from(d - b'0'))
        });
        rest = &rest[digits..];
        // A fraction (`1.5h`) adds less than one more of its unit.
        if let Some(fraction) = rest.strip_prefix('.') {
            let digits = fraction.len()
                - fraction
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            number = number.saturating_add(1);
            rest = &fraction[digits..];
        }
        rest = rest.trim_start();
        let letters = rest.len() - rest.trim_start_matches(|c: char| c.is_alphabetic()).len();
        let unit = match &rest[..letters] {
            "nanos" | "nsec" | "ns" => 1,
            "usec" | "us" | "µs" => 1_000,
            "millis" | "msec" | "ms" => 1_000_000,
            "seconds" | "second" | "secs" | "sec" | "s" => NANOS_PER_SEC,
            "minutes" | "minute" | "mins" | "min" | "m" => 60 * NANOS_PER_SEC,
            "hours" | "hour" | "hrs" | "hr" | "h" => 3_600 * NANOS_PER_SEC,
            "days" | "day" | "d" => 86_400 * NANOS_PER_SEC,
            "weeks" | "week" | "wks" | "wk" | "w" => 604_800 * NANOS_PER_SEC,
            "months" | "month" | "M" => 2_630_016 * NANOS_PER_SEC,
            "years" | "year" | "yrs" | "yr" | "y" => 31_557_600 * NANOS_PER_SEC,
            "" => return Err("a unit is missing".into()),
            other => return Err(format!("unknown unit {other:?}")),
        };
        total = total.saturating_add(number.saturating_mul(unit));
        rest = rest[letters..].trim_start();
    }
    Ok(total)
}

/// Parses `--hold-at-least` and `--max-runtime`: a duration from 1 s to 365 days (fractions
/// allowed, as for `--wait`).
///
/// # Errors
///
/// A message for anything shorter, longer or unreadable.
pub fn parse_span(raw: &str) -> Result<Duration, String> {
    let duration = parse_duration(raw)?;
    if duration < Duration::from_secs(1) || duration > Duration::from_secs(MAX_TTL_SECS) {
        return Err(format!("must be between 1s and 365 days, got {raw:?}"));
    }
    Ok(duration)
}

/// A fencing token: strictly increases with every new tenure of a resource, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Fence(pub i64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A point in time, in milliseconds since the Unix epoch (UTC). Rendered as RFC 3339 with
/// milliseconds, e.g. `2026-11-30T04:08:52.123Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn now() -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    pub fn millis_until(self, later: Timestamp) -> i64 {
        later.0.saturating_sub(self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = u64::try_from(self.0).unwrap_or(0);
        let time = UNIX_EPOCH + Duration::from_millis(millis);
        write!(f, "{}", humantime::format_rfc3339_millis(time))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// How a tenure holds its resource (contract, "Lock modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// One owner at a time (the default, and `--limit 1`).
    #[default]
    Exclusive,
    /// Any number of shared owners and no exclusive one: a read lock, as `flock -s`.
    Shared,
    /// At most N owners (N ≥ 2), each asking with the same N, as `consul lock -n N`.
    Semaphore(u32),
}

/// The largest `--limit`.
pub const MAX_LIMIT: u32 = 10_000;

impl Mode {
    /// The mode `--limit N` asks for: 1 is the plain exclusive lock.
    ///
    /// # Errors
    ///
    /// A message for anything but a whole number 1 ..= [`MAX_LIMIT`].
    pub fn parse_limit(raw: &str) -> Result<Mode, String> {
        match raw.parse::<u32>() {
            Ok(1) => Ok(Mode::Exclusive),
            Ok(n) if (2..=MAX_LIMIT).contains(&n) => Ok(Mode::Semaphore(n)),
            _ => Err(format!(
                "limit must be a whole number from 1 to {MAX_LIMIT}, got {raw:?}"
            )),
        }
    }

    /// The family a mode belongs to: exclusive and shared share one (a read/write lock);
    /// a semaphore's is its own N.
    pub fn family(self) -> Option<u32> {
        match self {
            Mode::Exclusive | Mode::Shared => None,
            Mode::Semaphore(n) => Some(n),
        }
    }

    /// How the mode reads in text output: "", "shared", "limit 3".
    pub fn describe(self) -> Option<String> {
        match self {
            Mode::Exclusive => None,
            Mode::Shared => Some("shared".to_owned()),
            Mode::Semaphore(n) => Some(format!("limit {n}")),
        }
    }
}

/// Why or for whom a lock is held: 1..=1024 bytes after trimming, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Note(String);

/// The longest `--note`, `--reason` or `--by`, in bytes of UTF-8 after trimming.
pub const MAX_NOTE_BYTES: usize = 1024;

impl Note {
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Note, String> {
        let text = raw.trim();
        if text.is_empty() {
            return Err("the text must not be empty".into());
        }
        if text.len() > MAX_NOTE_BYTES {
            return Err(format!(
                "the text is {} bytes long; the limit is {MAX_NOTE_BYTES}",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err("the text must not contain control characters".into());
        }
        Ok(Note(text.to_owned()))
    }

    /// A note read back from the store, trusted as written.
    pub(crate) fn from_store(raw: &str) -> Note {
        Note(raw.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes the fields a lock or holder object gains only when they apply: `"shared":true`,
/// `"limit":N`, `"note":"…"`. A plain exclusive lock prints exactly as before modes existed.
fn serialize_extras<M: serde::ser::SerializeMap>(
    map: &mut M,
    mode: Mode,
    note: Option<&Note>,
) -> Result<(), M::Error> {
    match mode {
        Mode::Exclusive => {}
        Mode::Shared => map.serialize_entry("shared", &true)?,
        Mode::Semaphore(n) => map.serialize_entry("limit", &n)?,
    }
    if let Some(note) = note {
        map.serialize_entry("note", note)?;
    }
    Ok(())
}

/// One tenure of a lock, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub resource: Resource,
    pub owner: Owner,
    pub fence: Fence,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub mode: Mode,
    pub note: Option<Note>,
}

impl Serialize for Lock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("resource", &self.resource)?;
        map.serialize_entry("owner", &self.owner)?;
        map.serialize_entry("fence", &self.fence)?;
        map.serialize_entry("acquired_at", &self.acquired_at)?;
        map.serialize_entry("expires_at", &self.expires_at)?;
        serialize_extras(&mut map, self.mode, self.note.as_ref())?;
        map.end()
    }
}

/// Who holds a lock that someone else asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: Owner,
    pub expires_at: Timestamp,
    pub mode: Mode,
    pub note: Option<Note>,
}

impl Serialize for Holder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("owner", &self.owner)?;
        map.serialize_entry("expires_at", &self.expires_at)?;
        serialize_extras(&mut map, self.mode, self.note.as_ref())?;
        map.end()
    }
}

/// How an acquire that succeeded came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tenure {
    /// A new tenure with a new, larger fence (the lock was free or had expired).
    New,
    /// The same owner already held the live lock: same tenure and fence, lease moved to now + ttl.
    Extended,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    Acquired {
        lock: Lock,
        tenure: Tenure,
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

/// The seed's `ReleaseResult`.
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

/// One recorded state change, as `log` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Timestamp,
    pub resource: Resource,
    pub owner: Owner,
    pub fence: Fence,
    pub event: EventKind,
    pub previous_owner: Option<Owner>,
    pub mode: Mode,
    pub note: Option<Note>,
    /// Who broke the tenure, and why (a `broken` event).
    pub broken: Option<Breach>,
}

/// Who broke a lock with `break`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub by: Note,
    pub reason: Note,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("at", &self.at)?;
        map.serialize_entry("resource", &self.resource)?;
        map.serialize_entry("owner", &self.owner)?;
        map.serialize_entry("fence", &self.fence)?;
        map.serialize_entry("event", &self.event)?;
        if let Some(previous) = &self.previous_owner {
            map.serialize_entry("previous_owner", previous)?;
        }
        serialize_extras(&mut map, self.mode, self.note.as_ref())?;
        if let Some(breach) = &self.broken {
            map.serialize_entry("by", &breach.by)?;
            map.serialize_entry("reason", &breach.reason)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// Which history to read.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub resource: Option<Resource>,
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
            Note::parse("  deploy v1.4 ").unwrap().as_str(),
            "deploy v1.4"
        );
        assert!(Note::parse(&"x".repeat(1024)).is_ok());
        for bad in [
            String::new(),
            "   ".into(),
            "x".repeat(1025),
            "a\nb".into(),
            "a\u{7f}".into(),
        ] {
            assert!(Note::parse(&bad).is_err(), "{bad:?} should be rejected");
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
