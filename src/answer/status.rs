//! The answers that only read: `status`, `list`, `GET /queues`, `log`, and `gc`'s report.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Answer, Flag, held_text, is_zero, tenure_text, waiting_text};
use crate::exit::Exit;
use crate::lock::GcReport;
use crate::lock::{Event, Lock, Mode, Queue, Resource, Status};

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

/// `GET /queues`: `{"queues":[{"resource":…,"waiters":[…]}]}`, one entry per resource with
/// live places, by resource, each place in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuesAnswer {
    pub queues: Vec<Queue>,
}

/// `log` prints one [`Event`] per line.
impl Answer for Event {
    fn exit(&self) -> Exit {
        Exit::Done
    }

    fn text(&self) -> String {
        let tenure = tenure_text(self.fence, self.mode, self.note.as_ref());
        if let Some(breaking) = &self.broken {
            // The owner is the holder whose tenure was broken, not who broke it.
            return format!(
                "{} {} broken by {}: the tenure of {}{} ({})",
                self.at,
                self.resource,
                breaking.breaker(),
                self.owner,
                tenure,
                breaking.reason
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
