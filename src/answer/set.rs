//! The answers of a lock set's `acquire`, `renew` and `release` (docs/src/reference/json.md, "Lock sets"). A
//! refusal names one member with the single resource's shapes (`Mismatch`, `NotRenewed`,
//! `NotReleased`); the rest are the set's own. A distlock server also answers `run`'s end of a
//! set, each member on its own, with each member's `DELETE /locks/{r}` shape
//! ([`SetFinishAnswer`]).

use serde::{Deserialize, Serialize};

use super::{
    Acquiring, Answer, Busy, Flag, KeptAnswer, Line, Mismatch, NotReleased, NotRenewed, Refusal,
    Released, Releasing, Renewing, lock_text,
};
use crate::engine::Finish;
use crate::exit::Exit;
use crate::lock::{
    Blocked, Lock, Members, Mode, Resource, SetAcquire, SetRefusal, SetRelease, SetRenew,
};

/// A set's `acquire` 0: `{"acquired":true,"locks":[…]}`, one lock per member, by resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAcquired {
    pub acquired: Flag<true>,
    pub locks: Vec<Lock>,
}

/// A set's `acquire` 75: `{"acquired":false,"resources":[…],"blocked":[…]}`: every member, and
/// each member that is not free for the owner now, by resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetBusy {
    pub acquired: Flag<false>,
    pub resources: Vec<Resource>,
    pub blocked: Vec<Blocked>,
}

/// Every answer of a set's `acquire`.
pub type SetAcquireAnswer = Acquiring<SetAcquired, SetBusy>;

impl SetAcquireAnswer {
    /// The answer to a request for `asked` on `members` that came out as `outcome`.
    pub fn new(members: &Members, outcome: &SetAcquire, asked: Mode) -> SetAcquireAnswer {
        match outcome {
            SetAcquire::Acquired { locks, .. } => SetAcquireAnswer::Acquired(SetAcquired {
                acquired: Flag,
                locks: locks.clone(),
            }),
            SetAcquire::Busy { blocked } => SetAcquireAnswer::Busy(SetBusy {
                acquired: Flag,
                resources: members.as_slice().to_vec(),
                blocked: (blocked.iter())
                    .map(|member| Blocked {
                        position: None,
                        ..member.clone()
                    })
                    .collect(),
            }),
            SetAcquire::Mismatch { resource, holders } => {
                SetAcquireAnswer::Mismatch(Mismatch::new(resource, holders, asked))
            }
        }
    }
}

impl Line for SetAcquired {
    fn line(&self) -> String {
        lines("acquired", &self.locks)
    }
}

/// "busy: a is held by O until T; b is free but reserved for earlier waiters": the text line,
/// and (without its `busy: `) the line `run` writes on stderr.
impl Line for SetBusy {
    fn line(&self) -> String {
        let members: Vec<String> = self
            .blocked
            .iter()
            .map(|member| {
                let one = Busy {
                    acquired: Flag,
                    member: Blocked {
                        position: None,
                        ..member.clone()
                    },
                };
                one.line().trim_start_matches("busy: ").to_owned()
            })
            .collect();
        format!("busy: {}", members.join("; "))
    }
}

/// "acquired a as O until T (fence 7)", one line per lock.
fn lines(verb: &str, locks: &[Lock]) -> String {
    let lines: Vec<String> = locks.iter().map(|lock| lock_text(verb, lock)).collect();
    lines.join("\n")
}

/// The refusal of a set's `renew` or `release`, as a single resource's.
fn refusal(refused: &SetRefusal) -> Refusal {
    if refused.forbidden {
        Refusal::Forbidden
    } else {
        Refusal::NotFound
    }
}

/// A set's `renew` 0: `{"renewed":true,"locks":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRenewed {
    pub renewed: Flag<true>,
    pub locks: Vec<Lock>,
}

/// Every answer of a set's `renew`: renewed, or refused naming the first member (by resource)
/// the owner does not hold live.
pub type SetRenewAnswer = Renewing<SetRenewed>;

impl SetRenewAnswer {
    pub fn new(outcome: &SetRenew) -> SetRenewAnswer {
        match outcome {
            Ok(locks) => SetRenewAnswer::Renewed(SetRenewed {
                renewed: Flag,
                locks: locks.clone(),
            }),
            Err(refused) => {
                SetRenewAnswer::Refused(NotRenewed::new(&refused.resource, refusal(refused)))
            }
        }
    }
}

impl Line for SetRenewed {
    fn line(&self) -> String {
        lines("renewed", &self.locks)
    }
}

/// A set's `release` 0: `{"released":true,"resources":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetReleased {
    pub released: Flag<true>,
    pub resources: Vec<Resource>,
}

/// Every answer of a set's `release`.
pub type SetReleaseAnswer = Releasing<SetReleased>;

impl SetReleaseAnswer {
    pub fn new(members: &Members, outcome: &SetRelease) -> SetReleaseAnswer {
        match outcome {
            Ok(()) => SetReleaseAnswer::Released(SetReleased {
                released: Flag,
                resources: members.as_slice().to_vec(),
            }),
            Err(refused) => {
                SetReleaseAnswer::Refused(NotReleased::new(&refused.resource, refusal(refused)))
            }
        }
    }
}

impl Line for SetReleased {
    fn line(&self) -> String {
        let names: Vec<&str> = self.resources.iter().map(Resource::as_str).collect();
        format!("released {}", names.join(", "))
    }
}

/// A distlock server's answer to `run`'s end of a set (`POST /sets/release` with
/// `"each":true`): `{"members":[…]}`, each member's end in the members' order, as `DELETE
/// /locks/{r}` with that member's fence says it — released, kept for a hold, or not held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetFinishAnswer {
    pub members: Vec<MemberEnd>,
}

/// One member's end in a [`SetFinishAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemberEnd {
    /// `{"released":true,"resource":R}`.
    Released(Released),
    /// `{"released":false,"resource":R,"kept_until":T}`.
    Kept(KeptAnswer),
    /// `{"released":false,"resource":R,"reason":"not_found"}`: the tenure was no longer the
    /// owner's (lost, broken, expired).
    NotHeld(NotReleased),
}

impl SetFinishAnswer {
    /// The answer for `members` whose tenures ended as `ends` says, in the members' order.
    pub fn new(members: &Members, ends: &[Finish]) -> SetFinishAnswer {
        let members = members
            .as_slice()
            .iter()
            .zip(ends)
            .map(|(member, end)| match end {
                Finish::Released => MemberEnd::Released(Released {
                    released: Flag,
                    resource: member.clone(),
                }),
                Finish::Kept { until } => MemberEnd::Kept(KeptAnswer::new(member, *until)),
                Finish::NotFound => MemberEnd::NotHeld(NotReleased {
                    released: Flag,
                    resource: member.clone(),
                    reason: Refusal::NotFound,
                }),
            })
            .collect();
        SetFinishAnswer { members }
    }
}

impl MemberEnd {
    /// The member it is about.
    pub fn resource(&self) -> &Resource {
        match self {
            MemberEnd::Released(released) => &released.resource,
            MemberEnd::Kept(kept) => &kept.resource,
            MemberEnd::NotHeld(refused) => &refused.resource,
        }
    }

    /// How the member's tenure ended, as a local store says it.
    pub fn finish(&self) -> Finish {
        match self {
            MemberEnd::Released(_) => Finish::Released,
            MemberEnd::Kept(kept) => Finish::Kept {
                until: kept.kept_until,
            },
            MemberEnd::NotHeld(_) => Finish::NotFound,
        }
    }
}

impl Answer for SetFinishAnswer {
    fn exit(&self) -> Exit {
        Exit::Done
    }

    fn text(&self) -> String {
        let lines: Vec<String> = self
            .members
            .iter()
            .map(|member| match member {
                MemberEnd::Released(released) => format!("released {}", released.resource),
                MemberEnd::Kept(kept) => {
                    format!("kept {} until {}", kept.resource, kept.kept_until)
                }
                MemberEnd::NotHeld(refused) => refused.reason.text("release", &refused.resource),
            })
            .collect();
        lines.join("\n")
    }
}
