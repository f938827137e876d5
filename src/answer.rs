//! Every answer a lock command gives, as a type: the one place where the contract's JSON
//! objects ("Output", "Lock modes", "Fleet and operators") are defined. Each serializes to
//! exactly the contract's line, keys in its order, and reads back from it (for a client of a
//! distlock server); its exit code and its `--format text` line come from the same value.
//!
//! Fields that appear only when they apply are `Option`s, empty lists or zero counts that
//! serialization leaves out; literal `true`/`false` keys (`"acquired":true`) are [`Flag`]s, so
//! an answer cannot claim the wrong one.

use std::fmt::Write as _;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exit::Exit;
use crate::lock::{
    Acquire, Breach, Event, Fence, Holder, Lock, Mode, Note, Release, Renew, Resource, Status,
};
use crate::store::GcReport;

/// What every answer gives: its exit code and its human line(s).
pub trait Answer: Serialize {
    /// The exit code this answer means (contract, "Exit codes").
    fn exit(&self) -> Exit;
    /// The `--format text` rendering: the same facts, one line per result.
    fn text(&self) -> String;
}

/// A key whose value is always `B` (`"acquired":true`, `"held":false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flag<const B: bool>;

impl<const B: bool> Serialize for Flag<B> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(B)
    }
}

impl<'de, const B: bool> Deserialize<'de> for Flag<B> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Flag<B>, D::Error> {
        if bool::deserialize(deserializer)? == B {
            Ok(Flag)
        } else {
            Err(serde::de::Error::custom(format!("expected {B}")))
        }
    }
}

/// Why a release, renew or break was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// No live lock (of this owner): exit 1.
    NotFound,
    /// A live lock of another owner: exit 77.
    Forbidden,
}

impl Refusal {
    fn exit(self) -> Exit {
        match self {
            Refusal::NotFound => Exit::NotHeld,
            Refusal::Forbidden => Exit::Forbidden,
        }
    }

    /// "cannot release R: it is not held".
    fn text(self, verb: &str, resource: &Resource) -> String {
        match self {
            Refusal::Forbidden => format!("cannot {verb} {resource}: it is held by another owner"),
            Refusal::NotFound => format!("cannot {verb} {resource}: it is not held"),
        }
    }
}

/// The one reason of a mismatch answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchReason {
    Mismatch,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

// ---------------------------------------------------------------------------------------------
// acquire (and `run`'s refusals)

/// `acquire` 0: `{"acquired":true,"lock":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquired {
    pub acquired: Flag<true>,
    pub lock: Lock,
}

/// `acquire` 75: `{"acquired":false,"resource":"R","holder":{…},"holders":[…],"waiting":K}`;
/// `holder` is the tenure whose lease ends first (none when the resource is free but reserved
/// for earlier waiters), `holders` only for shared or semaphore holders, `waiting` only when
/// someone waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    pub acquired: Flag<false>,
    pub resource: Resource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: usize,
}

/// `acquire` 78: `{"acquired":false,"resource":"R","reason":"mismatch","holders":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    pub acquired: Flag<false>,
    pub resource: Resource,
    pub reason: MismatchReason,
    pub holders: Vec<Holder>,
    /// The mode that was asked for, for the text line (the JSON does not carry it).
    #[serde(skip)]
    pub asked: Mode,
}

/// Every answer of `acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AcquireAnswer {
    Acquired(Acquired),
    Mismatch(Mismatch),
    Busy(Busy),
}

impl AcquireAnswer {
    /// The answer to a request for `asked` on `resource` that came out as `outcome`.
    pub fn new(resource: &Resource, outcome: &Acquire, asked: Mode) -> AcquireAnswer {
        match outcome {
            Acquire::Acquired { lock, .. } => AcquireAnswer::Acquired(Acquired {
                acquired: Flag,
                lock: lock.clone(),
            }),
            Acquire::Busy {
                holder,
                holders,
                waiting,
                ..
            } => AcquireAnswer::Busy(Busy {
                acquired: Flag,
                resource: resource.clone(),
                holder: holder.clone(),
                holders: holders.clone(),
                waiting: *waiting,
            }),
            Acquire::Mismatch { holders } => AcquireAnswer::Mismatch(Mismatch {
                acquired: Flag,
                resource: resource.clone(),
                reason: MismatchReason::Mismatch,
                holders: holders.clone(),
                asked,
            }),
        }
    }
}

impl Answer for AcquireAnswer {
    fn exit(&self) -> Exit {
        match self {
            AcquireAnswer::Acquired(_) => Exit::Done,
            AcquireAnswer::Busy(_) => Exit::Busy,
            AcquireAnswer::Mismatch(_) => Exit::Mismatch,
        }
    }

    fn text(&self) -> String {
        match self {
            AcquireAnswer::Acquired(acquired) => lock_text("acquired", &acquired.lock),
            AcquireAnswer::Busy(busy) => busy.text(),
            AcquireAnswer::Mismatch(mismatch) => mismatch.text(),
        }
    }
}

impl Busy {
    /// "busy: R is held by O until T; 3 waiting": the text line, and (without its `busy: `)
    /// the line `run` writes on stderr.
    pub fn text(&self) -> String {
        let resource = &self.resource;
        let queue = waiting_text(self.waiting);
        let Some(holder) = &self.holder else {
            return format!("busy: {resource} is free but reserved for earlier waiters{queue}");
        };
        let others = match self.holders.len() {
            0 | 1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        format!(
            "busy: {resource} is held by {}{} until {}{others}{queue}",
            holder.owner,
            holder_text(holder),
            holder.expires_at
        )
    }
}

impl Mismatch {
    /// "mismatch: R is held by …; a request for … conflicts with how it is held …".
    pub fn text(&self) -> String {
        let held: Vec<String> = self
            .holders
            .iter()
            .map(|h| format!("{}{}", h.owner, holder_text(h)))
            .collect();
        let asked = self
            .asked
            .describe()
            .unwrap_or_else(|| "exclusive".to_owned());
        format!(
            "mismatch: {} is held by {}; a request for {asked} conflicts with how it is \
             held (everyone must ask the same way)",
            self.resource,
            held.join(", ")
        )
    }
}

// ---------------------------------------------------------------------------------------------
// status

/// `status` 0: `{"held":true,"lock":{…oldest…},"locks":[…],"waiting":K}`; `locks` (every live
/// tenure, by fence) only for shared or semaphore tenures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub held: Flag<true>,
    pub lock: Lock,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<Lock>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: usize,
}

/// `status` 1: `{"held":false,"resource":"R","waiting":K}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Free {
    pub held: Flag<false>,
    pub resource: Resource,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: usize,
}

/// Every answer of `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusAnswer {
    Held(Held),
    Free(Free),
}

impl StatusAnswer {
    pub fn new(resource: &Resource, status: &Status) -> StatusAnswer {
        match status.locks.first() {
            None => StatusAnswer::Free(Free {
                held: Flag,
                resource: resource.clone(),
                waiting: status.waiting,
            }),
            Some(oldest) => {
                let modal = status.locks.iter().any(|l| l.mode != Mode::Exclusive);
                StatusAnswer::Held(Held {
                    held: Flag,
                    lock: oldest.clone(),
                    locks: if modal {
                        status.locks.clone()
                    } else {
                        Vec::new()
                    },
                    waiting: status.waiting,
                })
            }
        }
    }
}

impl Answer for StatusAnswer {
    fn exit(&self) -> Exit {
        match self {
            StatusAnswer::Held(_) => Exit::Done,
            StatusAnswer::Free(_) => Exit::NotHeld,
        }
    }

    fn text(&self) -> String {
        match self {
            StatusAnswer::Free(free) => {
                format!(
                    "{} is not held{}",
                    free.resource,
                    waiting_text(free.waiting)
                )
            }
            StatusAnswer::Held(held) => {
                let locks = if held.locks.is_empty() {
                    std::slice::from_ref(&held.lock)
                } else {
                    held.locks.as_slice()
                };
                let mut lines: Vec<String> = locks.iter().map(held_text).collect();
                if let Some(last) = lines.last_mut() {
                    last.push_str(&waiting_text(held.waiting));
                }
                lines.join("\n")
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// release, renew

/// `release` 0: `{"released":true,"resource":"R"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    pub released: Flag<true>,
    pub resource: Resource,
}

/// `release` 1/77: `{"released":false,"resource":"R","reason":"not_found"|"forbidden"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReleased {
    pub released: Flag<false>,
    pub resource: Resource,
    pub reason: Refusal,
}

/// Every answer of `release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReleaseAnswer {
    Released(Released),
    Refused(NotReleased),
}

impl ReleaseAnswer {
    pub fn new(resource: &Resource, outcome: &Release) -> ReleaseAnswer {
        let refused = |reason| {
            ReleaseAnswer::Refused(NotReleased {
                released: Flag,
                resource: resource.clone(),
                reason,
            })
        };
        match outcome {
            Release::Released => ReleaseAnswer::Released(Released {
                released: Flag,
                resource: resource.clone(),
            }),
            Release::NotFound => refused(Refusal::NotFound),
            Release::Forbidden => refused(Refusal::Forbidden),
        }
    }
}

impl Answer for ReleaseAnswer {
    fn exit(&self) -> Exit {
        match self {
            ReleaseAnswer::Released(_) => Exit::Done,
            ReleaseAnswer::Refused(refused) => refused.reason.exit(),
        }
    }

    fn text(&self) -> String {
        match self {
            ReleaseAnswer::Released(released) => format!("released {}", released.resource),
            ReleaseAnswer::Refused(refused) => refused.reason.text("release", &refused.resource),
        }
    }
}

/// `renew` 0: `{"renewed":true,"lock":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    pub renewed: Flag<true>,
    pub lock: Lock,
}

/// `renew` 1/77: `{"renewed":false,"resource":"R","reason":"not_found"|"forbidden"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRenewed {
    pub renewed: Flag<false>,
    pub resource: Resource,
    pub reason: Refusal,
}

/// Every answer of `renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RenewAnswer {
    Renewed(Renewed),
    Refused(NotRenewed),
}

impl RenewAnswer {
    pub fn new(resource: &Resource, outcome: &Renew) -> RenewAnswer {
        let refused = |reason| {
            RenewAnswer::Refused(NotRenewed {
                renewed: Flag,
                resource: resource.clone(),
                reason,
            })
        };
        match outcome {
            Renew::Renewed { lock } => RenewAnswer::Renewed(Renewed {
                renewed: Flag,
                lock: lock.clone(),
            }),
            Renew::NotFound => refused(Refusal::NotFound),
            Renew::Forbidden => refused(Refusal::Forbidden),
        }
    }
}

impl Answer for RenewAnswer {
    fn exit(&self) -> Exit {
        match self {
            RenewAnswer::Renewed(_) => Exit::Done,
            RenewAnswer::Refused(refused) => refused.reason.exit(),
        }
    }

    fn text(&self) -> String {
        match self {
            RenewAnswer::Renewed(renewed) => lock_text("renewed", &renewed.lock),
            RenewAnswer::Refused(refused) => refused.reason.text("renew", &refused.resource),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// list, log, gc

/// `list` 0: `{"locks":[…]}`, one entry per live tenure, by resource, then fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAnswer {
    pub locks: Vec<Lock>,
}

impl Answer for ListAnswer {
    fn exit(&self) -> Exit {
        Exit::Done
    }

    fn text(&self) -> String {
        if self.locks.is_empty() {
            return "no live locks".to_owned();
        }
        let lines: Vec<String> = self.locks.iter().map(held_text).collect();
        lines.join("\n")
    }
}

/// `log` prints one [`Event`] per line.
impl Answer for Event {
    fn exit(&self) -> Exit {
        Exit::Done
    }

    fn text(&self) -> String {
        let tenure = tenure_text(self.fence, self.mode, self.note.as_ref());
        if let Some(breach) = &self.broken {
            // The owner is the evicted holder, not who broke it.
            return format!(
                "{} {} broken by {}: the tenure of {}{} ({})",
                self.at, self.resource, breach.by, self.owner, tenure, breach.reason
            );
        }
        let mut line = format!(
            "{} {} {} by {}{tenure}",
            self.at,
            self.resource,
            self.event.as_str().replace('_', " "),
            self.owner,
        );
        if let Some(previous) = &self.previous_owner {
            let _ = write!(line, " from {previous}");
        }
        line
    }
}

/// `gc` 0: `{"expired_locks":N,"history_events":M}`.
impl Answer for GcReport {
    fn exit(&self) -> Exit {
        Exit::Done
    }

    fn text(&self) -> String {
        format!(
            "removed {} expired locks and {} history events",
            self.expired_locks, self.history_events
        )
    }
}

// ---------------------------------------------------------------------------------------------
// break

/// `break` 0: `{"broken":true,"resource":"R","locks":[…removed tenures…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broken {
    pub broken: Flag<true>,
    pub resource: Resource,
    pub locks: Vec<Lock>,
    /// Who broke it and why, for the text line (the history keeps them; this JSON does not).
    #[serde(skip)]
    pub breach: Option<Breach>,
}

/// `break` 1: `{"broken":false,"resource":"R","reason":"not_found"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotBroken {
    pub broken: Flag<false>,
    pub resource: Resource,
    pub reason: Refusal,
}

/// Every answer of `break`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BreakAnswer {
    Broken(Broken),
    NotBroken(NotBroken),
}

impl BreakAnswer {
    /// The answer to `breach` on `resource` that removed `removed`.
    pub fn new(resource: &Resource, removed: Vec<Lock>, breach: &Breach) -> BreakAnswer {
        if removed.is_empty() {
            return BreakAnswer::NotBroken(NotBroken {
                broken: Flag,
                resource: resource.clone(),
                reason: Refusal::NotFound,
            });
        }
        BreakAnswer::Broken(Broken {
            broken: Flag,
            resource: resource.clone(),
            locks: removed,
            breach: Some(breach.clone()),
        })
    }
}

impl Answer for BreakAnswer {
    fn exit(&self) -> Exit {
        match self {
            BreakAnswer::Broken(_) => Exit::Done,
            BreakAnswer::NotBroken(_) => Exit::NotHeld,
        }
    }

    fn text(&self) -> String {
        match self {
            BreakAnswer::NotBroken(refused) => {
                format!("cannot break {}: nothing live matched", refused.resource)
            }
            BreakAnswer::Broken(broken) => {
                let owners: Vec<&str> = broken.locks.iter().map(|l| l.owner.as_str()).collect();
                let (by, reason) = broken
                    .breach
                    .as_ref()
                    .map_or(("?", "?"), |b| (b.by.as_str(), b.reason.as_str()));
                format!(
                    "broke {}: removed the tenure of {} (by {by}: {reason})",
                    broken.resource,
                    owners.join(", ")
                )
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Text pieces

/// " (fence 7)", " (fence 7, shared, note: …)": what a text line adds after a tenure.
fn tenure_text(fence: Fence, mode: Mode, note: Option<&Note>) -> String {
    let mut parts = vec![format!("fence {fence}")];
    parts.extend(mode.describe());
    if let Some(note) = note {
        parts.push(format!("note: {note}"));
    }
    format!(" ({})", parts.join(", "))
}

/// " (shared, note: …)" for a holder; empty for a plain exclusive one.
fn holder_text(holder: &Holder) -> String {
    let mut parts: Vec<String> = holder.mode.describe().into_iter().collect();
    if let Some(note) = &holder.note {
        parts.push(format!("note: {note}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// "acquired R as O until T (fence 7)".
fn lock_text(verb: &str, lock: &Lock) -> String {
    format!(
        "{verb} {} as {} until {}{}",
        lock.resource,
        lock.owner,
        lock.expires_at,
        tenure_text(lock.fence, lock.mode, lock.note.as_ref())
    )
}

/// "R is held by O until T (fence 7)".
fn held_text(lock: &Lock) -> String {
    format!(
        "{} is held by {} until {}{}",
        lock.resource,
        lock.owner,
        lock.expires_at,
        tenure_text(lock.fence, lock.mode, lock.note.as_ref())
    )
}

/// "; 3 waiting", or nothing.
fn waiting_text(waiting: usize) -> String {
    if waiting > 0 {
        format!("; {waiting} waiting")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests;
