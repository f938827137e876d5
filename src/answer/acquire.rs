//! The answers of `acquire`, which `run` also gives on stderr when it is refused.

use serde::{Deserialize, Serialize};

use super::{Acquiring, Flag, Line, Mismatch, holder_text, lock_text, waiting_text};
use crate::lock::{Acquire, Blocked, Lock, Mode, Resource};

/// `acquire` 0: `{"acquired":true,"lock":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquired {
    pub acquired: Flag<true>,
    pub lock: Lock,
}

/// `acquire` 75: `{"acquired":false,"resource":"R","holder":{…},"holders":[…],"waiting":K}`:
/// the busy resource's fields as a set's busy answer names each of its busy members
/// ([`Blocked`]); the command line never prints the requester's `position`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    pub acquired: Flag<false>,
    #[serde(flatten)]
    pub member: Blocked,
}

/// Every answer of `acquire`.
pub type AcquireAnswer = Acquiring<Acquired, Busy>;

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
                member: Blocked {
                    resource: resource.clone(),
                    holder: holder.clone(),
                    holders: holders.clone(),
                    waiting: *waiting,
                    position: None,
                },
            }),
            Acquire::Mismatch { holders } => {
                AcquireAnswer::Mismatch(Mismatch::new(resource, holders, asked))
            }
        }
    }
}

impl Line for Acquired {
    fn line(&self) -> String {
        lock_text("acquired", &self.lock)
    }
}

/// "busy: R is held by O until T; 3 waiting": the text line, and (without its `busy: `) the
/// line `run` writes on stderr.
impl Line for Busy {
    fn line(&self) -> String {
        let member = &self.member;
        let resource = &member.resource;
        let queue = waiting_text(member.waiting);
        let Some(holder) = &member.holder else {
            return format!("busy: {resource} is free but reserved for earlier waiters{queue}");
        };
        let others = match member.holders.len() {
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
