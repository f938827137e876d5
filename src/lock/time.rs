//! Lease lengths, the other durations the command line takes, and points in time.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest lease a lock may be given.
pub const MAX_TTL_SECS: u64 = 365 * 24 * 60 * 60;

/// The longest `--wait`, `--kill-after` or `--since`: far beyond any real use, and small enough
/// that adding it to a clock reading can never overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(1000 * 366 * 24 * 60 * 60);

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
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
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

impl Timestamp {
    /// Reads an RFC 3339 time (`2026-11-30T04:08:52.123Z`), as [`Timestamp`]'s `Display`
    /// writes it.
    ///
    /// # Errors
    ///
    /// A message for anything else, or a time before the Unix epoch.
    pub fn parse(text: &str) -> Result<Timestamp, String> {
        let time = humantime::parse_rfc3339(text).map_err(|e| format!("{text:?}: {e}"))?;
        let since = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| format!("{text:?} is before 1970"))?;
        i64::try_from(since.as_millis())
            .map(Timestamp)
            .map_err(|_| format!("{text:?} is too far ahead"))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}
