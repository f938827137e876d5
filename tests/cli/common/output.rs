//! What distlock prints, checked against the contract's shapes: one JSON object on one line (a
//! finished command's answer, its exit code checked), JSON lines (`log`) and their event names,
//! the keys of an object, a fence, RFC 3339 UTC times with milliseconds (read, and written for
//! expected answers), and the usage (64) and store (74) error shapes.

use std::process::Output;

use serde_json::Value;

use super::process::Finished;

/// Parses stdout that must be exactly one JSON object on one line.
pub fn parse_line(stdout: &[u8]) -> Value {
    let text = std::str::from_utf8(stdout).expect("utf-8 stdout");
    assert!(
        text.ends_with('\n') && text.matches('\n').count() == 1,
        "expected exactly one line, got {text:?}"
    );
    let value: Value = serde_json::from_str(text).expect("valid JSON");
    assert!(value.is_object(), "expected an object, got {value}");
    value
}

/// A finished lock command's one JSON line, after checking its exit code.
pub fn answer(finished: &Finished, code: i32, what: &str) -> Value {
    assert_eq!(
        finished.code(),
        Some(code),
        "{what}: {}",
        finished.describe()
    );
    parse_line(&finished.output.stdout)
}

/// Parses stdout that must be JSON values, one per line (`log`); empty stdout is no lines.
pub fn parse_lines(stdout: &[u8]) -> Vec<Value> {
    std::str::from_utf8(stdout)
        .expect("utf-8 stdout")
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {line:?} is not JSON: {e}"))
        })
        .collect()
}

/// The `"event"` of each of `log`'s events, in order.
pub fn event_names(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().expect("event name"))
        .collect()
}

/// The sorted keys of a JSON object.
pub fn keys(value: &Value) -> Vec<&str> {
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("expected an object, got {value}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

/// The `"fence"` of a lock object or an event, which must be an integer: a missing or
/// mistyped fence fails the test instead of comparing as `None`.
pub fn fence(lock: &Value) -> i64 {
    lock["fence"]
        .as_i64()
        .unwrap_or_else(|| panic!("fence must be an integer in {lock}"))
}

/// Checks a usage error (exit 64): a message on stderr, nothing on stdout.
pub fn assert_usage_error(out: &Output, what: &dyn std::fmt::Debug) {
    assert_eq!(
        out.status.code(),
        Some(64),
        "{what:?} must be a usage error\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{what:?}: a usage error prints nothing on stdout"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
        "{what:?}: a usage error explains itself on stderr"
    );
}

/// Checks a store error (exit 74): exactly one line `distlock: …` on stderr, nothing on stdout.
/// Returns that line.
pub fn assert_store_error(out: &Output, what: &dyn std::fmt::Debug) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(74),
        "{what:?} must be a store error\nstdout: {}\nstderr: {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "{what:?}: a store error prints nothing on stdout"
    );
    assert!(
        stderr.starts_with("distlock: ") && stderr.ends_with('\n') && stderr.lines().count() == 1,
        "{what:?}: a store error is one line `distlock: …` on stderr, got {stderr:?}"
    );
    stderr
}

/// Checks that `text` is an RFC 3339 UTC time with milliseconds (`2026-11-30T04:08:52.123Z`)
/// and returns it as milliseconds since the Unix epoch.
pub fn timestamp_millis(text: &str) -> i64 {
    let shape = text.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b'T',
        13 | 16 => b == b':',
        19 => b == b'.',
        23 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    assert!(
        text.len() == 24 && shape,
        "{text:?} is not RFC 3339 UTC with milliseconds"
    );
    let time = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let since_epoch = time
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a time after 1970");
    i64::try_from(since_epoch.as_millis()).expect("a time in range")
}

/// Milliseconds since the Unix epoch as the contract prints a time: RFC 3339 UTC with
/// milliseconds (the inverse of [`timestamp_millis`]).
pub fn rfc3339_millis(millis: i64) -> String {
    let since_epoch =
        std::time::Duration::from_millis(u64::try_from(millis).expect("a time after 1970"));
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + since_epoch).to_string()
}

/// The test's own clock, in milliseconds since the Unix epoch.
pub fn now_millis() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since_epoch.as_millis()).expect("a time in range")
}
