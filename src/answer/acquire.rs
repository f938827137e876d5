//! The answers of `acquire`, which `run` also gives on stderr when it is refused.

use serde::{Deserialize, Serialize};

use super::{Answer, Flag, MismatchReason, holder_text, is_zero, lock_text, waiting_text};
use crate::exit::Exit;
use crate::lock::{Acquire, Holder, Lock, Mode, Resource};

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
    /// The requester's place in the queue (1 = next), in a distlock server's answer to a
    /// request that waited and is to ask again; the command line never prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
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
                position: None,
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
