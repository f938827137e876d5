//! Every answer a lock command gives, as a type: the one place where the JSON objects of
//! docs/src/reference/json.md are defined. Each serializes to exactly the reference's line, keys in its
//! order, and reads back from it (for a client of a distlock server); its exit code and its
//! `--format text` line come from the same value.
//!
//! Fields that appear only when they apply are `Option`s, empty lists or zero counts that
//! serialization leaves out; literal `true`/`false` keys (`"acquired":true`) are [`Flag`]s, so
//! an answer cannot claim the wrong one.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exit::Exit;
use crate::lock::{Fence, Holder, Lock, Mode, Remark, Resource};

mod acquire;
mod change;
mod kinds;
mod set;
mod shaped;
mod status;

pub use acquire::{AcquireAnswer, Acquired, Busy};
pub use change::{
    BreakAnswer, Broken, KeptAnswer, NotBroken, ReleaseAnswer, Released, RenewAnswer, Renewed,
};
pub use kinds::{Acquiring, Line, Mismatch, NotReleased, NotRenewed, Releasing, Renewing};
pub use set::{
    MemberEnd, SetAcquireAnswer, SetAcquired, SetBusy, SetFinishAnswer, SetReleaseAnswer,
    SetReleased, SetRenewAnswer, SetRenewed,
};
pub use shaped::{Shaped, ShapedAcquire, ShapedRelease, ShapedRenew};
pub use status::{Free, Held, ListAnswer, QueuesAnswer, StatusAnswer};

/// What every answer gives: its exit code and its human line(s).
pub trait Answer: Serialize {
    /// The exit code this answer means (docs/src/reference/exit-codes.md).
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

// serde's `skip_serializing_if` hands the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// " (fence 7)", " (fence 7, shared, note: …)": what a text line adds after a tenure.
fn tenure_text(fence: Fence, mode: Mode, note: Option<&Remark>) -> String {
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
