//! The answers of `release`, `renew` and `break`.

use serde::{Deserialize, Serialize};

use super::{Answer, Flag, Line, NotReleased, NotRenewed, Refusal, Releasing, Renewing, lock_text};
use crate::exit::Exit;
use crate::lock::{Breaking, Lock, Release, Renew, Resource, Timestamp};

/// `release` 0: `{"released":true,"resource":"R"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    pub released: Flag<true>,
    pub resource: Resource,
}

/// A distlock server's answer to a release with `hold_at_least_seconds` whose hold is still
/// ahead (as `run --hold-at-least` keeps it): `{"released":false,"resource":"R","kept_until":T}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptAnswer {
    pub released: Flag<false>,
    pub resource: Resource,
    pub kept_until: Timestamp,
}

impl KeptAnswer {
    pub fn new(resource: &Resource, until: Timestamp) -> KeptAnswer {
        KeptAnswer {
            released: Flag,
            resource: resource.clone(),
            kept_until: until,
        }
    }
}

/// Every answer of `release`.
pub type ReleaseAnswer = Releasing<Released>;

impl ReleaseAnswer {
    pub fn new(resource: &Resource, outcome: &Release) -> ReleaseAnswer {
        let refused = |reason| ReleaseAnswer::Refused(NotReleased::new(resource, reason));
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

impl Line for Released {
    fn line(&self) -> String {
        format!("released {}", self.resource)
    }
}

/// `renew` 0: `{"renewed":true,"lock":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    pub renewed: Flag<true>,
    pub lock: Lock,
}

/// Every answer of `renew`.
pub type RenewAnswer = Renewing<Renewed>;

impl RenewAnswer {
    pub fn new(resource: &Resource, outcome: &Renew) -> RenewAnswer {
        let refused = |reason| RenewAnswer::Refused(NotRenewed::new(resource, reason));
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

impl Line for Renewed {
    fn line(&self) -> String {
        lock_text("renewed", &self.lock)
    }
}

/// `break` 0: `{"broken":true,"resource":"R","locks":[…removed tenures…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Broken {
    pub broken: Flag<true>,
    pub resource: Resource,
    pub locks: Vec<Lock>,
    /// Who broke it and why, for the text line (the history keeps them; this JSON does not).
    #[serde(skip)]
    pub breaking: Option<Breaking>,
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
    /// The answer to a `break` (`breaking`) on `resource` that removed `removed`.
    pub fn new(resource: &Resource, removed: Vec<Lock>, breaking: &Breaking) -> BreakAnswer {
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
            breaking: Some(breaking.clone()),
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
                let (by, reason) = broken.breaking.as_ref().map_or_else(
                    || ("?".to_owned(), "?"),
                    |b| (b.breaker(), b.reason.as_str()),
                );
                format!(
                    "broke {}: removed the tenure of {} (by {by}: {reason})",
                    broken.resource,
                    owners.join(", ")
                )
            }
        }
    }
}
