//! Tenures as distlock prints them, in each lock mode (exclusive, shared, semaphore of N), and
//! the contract's JSON answers built from them: the lock object, the holder object, busy (75),
//! mismatch (78) and held (`status` 0).
//!
//! Tests read a [`Tenure`] from distlock's own answer (its fence and times), then compare whole
//! parsed objects with the shapes built here, so that every key — present or absent — is
//! checked. Key order is checked only where the contract promises today's bytes (a plain
//! exclusive lock, [`Tenure::plain_lock_text`]).

use serde_json::{Value, json};

use super::output::{fence, timestamp_millis};

/// How a tenure holds its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The default (and `--limit 1`): one owner.
    Exclusive,
    /// `--shared`: any number of shared owners.
    Shared,
    /// `--limit N`, N ≥ 2: at most N owners.
    Limit(u32),
}

impl Mode {
    /// The flags of `acquire` and `run` that ask for this mode.
    pub fn flags(self) -> Vec<String> {
        match self {
            Mode::Exclusive => Vec::new(),
            Mode::Shared => vec!["--shared".to_owned()],
            Mode::Limit(n) => vec!["--limit".to_owned(), n.to_string()],
        }
    }

    /// Adds the fields this mode gives a lock, holder or log object: `"shared":true`,
    /// `"limit":N`, or nothing.
    pub fn mark(self, object: &mut Value) {
        let map = object.as_object_mut().expect("an object");
        match self {
            Mode::Exclusive => {}
            Mode::Shared => {
                map.insert("shared".to_owned(), json!(true));
            }
            Mode::Limit(n) => {
                map.insert("limit".to_owned(), json!(n));
            }
        }
    }
}

/// One tenure: an owner's hold on a resource, as its lock object shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    pub resource: String,
    pub owner: String,
    pub fence: i64,
    /// As printed (RFC 3339 UTC with milliseconds).
    pub acquired_at: String,
    pub expires_at: String,
    pub mode: Mode,
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} must be a string in {value}"))
}

/// A JSON string literal, as serde_json writes it.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

impl Tenure {
    /// Reads a lock object that must describe a tenure in `mode`: its fence and times are
    /// taken as printed, and every other key must be exactly what the contract says.
    pub fn read(lock: &Value, mode: Mode) -> Tenure {
        let tenure = Tenure {
            resource: text(lock, "resource").to_owned(),
            owner: text(lock, "owner").to_owned(),
            fence: fence(lock),
            acquired_at: text(lock, "acquired_at").to_owned(),
            expires_at: text(lock, "expires_at").to_owned(),
            mode,
        };
        assert!(
            tenure.acquired_ms() < tenure.expires_ms(),
            "acquired_at must come before expires_at: {lock}"
        );
        assert_eq!(*lock, tenure.lock(), "a {mode:?} lock object");
        tenure
    }

    pub fn acquired_ms(&self) -> i64 {
        timestamp_millis(&self.acquired_at)
    }

    pub fn expires_ms(&self) -> i64 {
        timestamp_millis(&self.expires_at)
    }

    /// The lock object: `resource, owner, fence, acquired_at, expires_at`, and the mode's field.
    pub fn lock(&self) -> Value {
        let mut lock = json!({
            "resource": self.resource,
            "owner": self.owner,
            "fence": self.fence,
            "acquired_at": self.acquired_at,
            "expires_at": self.expires_at,
        });
        self.mode.mark(&mut lock);
        lock
    }

    /// The lock object of an exclusive tenure, byte for byte as distlock printed it before lock
    /// modes existed (keys in the contract's order).
    pub fn plain_lock_text(&self) -> String {
        self.assert_plain("locks");
        format!(
            r#"{{"resource":{},"owner":{},"fence":{},"acquired_at":{},"expires_at":{}}}"#,
            quoted(&self.resource),
            quoted(&self.owner),
            self.fence,
            quoted(&self.acquired_at),
            quoted(&self.expires_at)
        )
    }

    /// The busy answer (75) beside this exclusive tenure alone, byte for byte as distlock printed
    /// it before lock modes existed.
    pub fn plain_busy_text(&self) -> String {
        self.assert_plain("holders");
        let holder = format!(
            r#"{{"owner":{},"expires_at":{}}}"#,
            quoted(&self.owner),
            quoted(&self.expires_at)
        );
        let resource = quoted(&self.resource);
        format!(r#"{{"acquired":false,"resource":{resource},"holder":{holder}}}"#)
    }

    /// Only exclusive tenures print what distlock printed before lock modes existed.
    fn assert_plain(&self, what: &str) {
        assert_eq!(
            self.mode,
            Mode::Exclusive,
            "only exclusive {what} keep the old bytes"
        );
    }

    /// The holder object: `owner, expires_at`, and the mode's field.
    pub fn holder(&self) -> Value {
        let mut holder = json!({ "owner": self.owner, "expires_at": self.expires_at });
        self.mode.mark(&mut holder);
        holder
    }

    /// A history event of this tenure, as `log` prints it: the tenure's own time for `event`
    /// is `at` (the caller takes it from the log), and the mode's field.
    pub fn event(&self, at: &str, event: &str) -> Value {
        let mut object = json!({
            "at": at,
            "resource": self.resource,
            "owner": self.owner,
            "fence": self.fence,
            "event": event,
        });
        self.mode.mark(&mut object);
        object
    }
}

/// A history event as [`Tenure::event`] writes it: without the end of the lease it left, which
/// every event but `released` and `broken` carries (checked here), an RFC 3339 time.
pub fn without_lease_end(event: &Value) -> Value {
    let mut event = event.clone();
    let kind = event["event"].as_str().unwrap_or_default().to_owned();
    let lease_end = event.as_object_mut().and_then(|o| o.remove("expires_at"));
    match kind.as_str() {
        "released" | "broken" => assert!(lease_end.is_none(), "no lease end in {event}"),
        _ => {
            let end = lease_end.unwrap_or_else(|| panic!("a lease end in {event}"));
            let end = end.as_str().unwrap_or_else(|| panic!("a time: {end}"));
            crate::common::output::timestamp_millis(end);
        }
    }
    event
}

/// `tenures` ordered by fence.
fn by_fence<'a>(tenures: &[&'a Tenure]) -> Vec<&'a Tenure> {
    let mut sorted = tenures.to_vec();
    sorted.sort_by_key(|t| t.fence);
    sorted
}

fn only_exclusive(tenures: &[&Tenure]) -> bool {
    tenures.iter().all(|t| t.mode == Mode::Exclusive)
}

/// The busy answer (75) of `acquire` on `resource` beside `holders` (every live tenure):
/// `"holder"` is the one whose lease ends first; `"holders"` (by fence) only when they hold it
/// shared or as a semaphore.
pub fn busy(resource: &str, holders: &[&Tenure]) -> Value {
    let first = holders
        .iter()
        .min_by_key(|t| t.expires_ms())
        .expect("a busy resource has a holder");
    let mut answer = json!({
        "acquired": false,
        "resource": resource,
        "holder": first.holder(),
    });
    if !only_exclusive(holders) {
        let list: Vec<Value> = by_fence(holders).iter().map(|t| t.holder()).collect();
        answer["holders"] = Value::Array(list);
    }
    answer
}

/// The mismatch answer (78) of `acquire` on `resource` beside `holders` (every live tenure, by
/// fence).
pub fn mismatch(resource: &str, holders: &[&Tenure]) -> Value {
    let list: Vec<Value> = by_fence(holders).iter().map(|t| t.holder()).collect();
    json!({
        "acquired": false,
        "resource": resource,
        "reason": "mismatch",
        "holders": list,
    })
}

/// `status` of a held resource (exit 0) whose live tenures are `tenures`: `"lock"` is the
/// oldest, and `"locks"` (all, by fence) appears only for shared or semaphore tenures.
///
/// "Oldest" is read as the tenure that began first, the lowest fence: a re-acquire moves a
/// tenure's `acquired_at` to now but keeps the tenure (and its fence), so it does not make it
/// younger.
pub fn held(tenures: &[&Tenure]) -> Value {
    let sorted = by_fence(tenures);
    let mut answer = json!({ "held": true, "lock": sorted[0].lock() });
    if !only_exclusive(tenures) {
        answer["locks"] = Value::Array(sorted.iter().map(|t| t.lock()).collect());
    }
    answer
}
