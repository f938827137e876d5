//! The kinds of answer a lock operation has, whatever its shape (one resource's, or a lock
//! set's): `acquire` grants, finds busy or a mode that conflicts; `renew` and `release` do, or
//! are refused naming the (first) resource the owner does not hold live. The refusals that
//! name one resource are the same in both shapes.

use serde::{Deserialize, Serialize};

use super::{Answer, Flag, MismatchReason, Refusal, holder_text};
use crate::exit::Exit;
use crate::lock::{Holder, Mode, Resource};

/// What an answer's part says in its `--format text` line.
pub trait Line {
    fn line(&self) -> String;
}

/// `acquire`'s answers, one resource's or a set's: granted (`G`), a mode that conflicts with
/// the holders', or busy (`B`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Acquiring<G, B> {
    Acquired(G),
    Mismatch(Mismatch),
    Busy(B),
}

impl<G: Line + Serialize, B: Line + Serialize> Answer for Acquiring<G, B> {
    fn exit(&self) -> Exit {
        match self {
            Acquiring::Acquired(_) => Exit::Done,
            Acquiring::Busy(_) => Exit::Busy,
            Acquiring::Mismatch(_) => Exit::Mismatch,
        }
    }

    fn text(&self) -> String {
        match self {
            Acquiring::Acquired(acquired) => acquired.line(),
            Acquiring::Busy(busy) => busy.line(),
            Acquiring::Mismatch(mismatch) => mismatch.text(),
        }
    }
}

/// `renew`'s answers, one resource's or a set's: renewed (`R`), or refused naming the
/// (first) resource the owner does not hold live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Renewing<R> {
    Renewed(R),
    Refused(NotRenewed),
}

impl<R: Line + Serialize> Answer for Renewing<R> {
    fn exit(&self) -> Exit {
        match self {
            Renewing::Renewed(_) => Exit::Done,
            Renewing::Refused(refused) => refused.reason.exit(),
        }
    }

    fn text(&self) -> String {
        match self {
            Renewing::Renewed(renewed) => renewed.line(),
            Renewing::Refused(refused) => refused.reason.text("renew", &refused.resource),
        }
    }
}

/// `release`'s answers, one resource's or a set's: released (`R`), or refused naming the
/// (first) resource the owner does not hold live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Releasing<R> {
    Released(R),
    Refused(NotReleased),
}

impl<R: Line + Serialize> Answer for Releasing<R> {
    fn exit(&self) -> Exit {
        match self {
            Releasing::Released(_) => Exit::Done,
            Releasing::Refused(refused) => refused.reason.exit(),
        }
    }

    fn text(&self) -> String {
        match self {
            Releasing::Released(released) => released.line(),
            Releasing::Refused(refused) => refused.reason.text("release", &refused.resource),
        }
    }
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

impl Mismatch {
    /// The refusal of a request for `asked`: `resource`'s `holders` hold it another way.
    pub fn new(resource: &Resource, holders: &[Holder], asked: Mode) -> Mismatch {
        Mismatch {
            acquired: Flag,
            resource: resource.clone(),
            reason: MismatchReason::Mismatch,
            holders: holders.to_vec(),
            asked,
        }
    }

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

/// `release` 1/77: `{"released":false,"resource":"R","reason":"not_found"|"forbidden"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotReleased {
    pub released: Flag<false>,
    pub resource: Resource,
    pub reason: Refusal,
}

/// `renew` 1/77: `{"renewed":false,"resource":"R","reason":"not_found"|"forbidden"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRenewed {
    pub renewed: Flag<false>,
    pub resource: Resource,
    pub reason: Refusal,
}

impl NotReleased {
    pub fn new(resource: &Resource, reason: Refusal) -> NotReleased {
        NotReleased {
            released: Flag,
            resource: resource.clone(),
            reason,
        }
    }
}

impl NotRenewed {
    pub fn new(resource: &Resource, reason: Refusal) -> NotRenewed {
        NotRenewed {
            renewed: Flag,
            resource: resource.clone(),
            reason,
        }
    }
}
