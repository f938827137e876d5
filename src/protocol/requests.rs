//! The requests of the API as types, one per lock operation: what a client sends
//! ([`Serialize`], with the route of [`AcquireRequest::route`] and its kin) and what the server
//! reads back (`read`, from the body's [`Fields`]). One type serves a single resource and a lock
//! set alike: its [`Shape`] says which route it takes, and so whether its members are named in
//! the path or in the body's `resources`.
//!
//! Reading is strict and in a fixed order, the order of each `read` below: a set's `resources`
//! first (the server checks the caller's token against them before anything else is read), then
//! the fields as listed, then [`Fields::finish`] refuses any field left.

use std::time::Duration;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::Bad;
use super::body::{Fields, Whole};
use super::query::Params;
use super::routes::{Route, Target};

use crate::engine::Request;
use crate::lock::{Fence, Grant, Members, Mode, Owner, Remark, Resource, Shape, Ttl};

/// `POST /locks/{r}` or `POST /sets`: take a tenure (or wait in line for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireRequest {
    pub members: Members,
    pub shape: Shape,
    /// The owner, TTL, mode, note and whether `run` asks (`guarded`); `waits` is not sent: a
    /// request waits when it gives `wait_seconds`.
    pub request: Request,
    /// How long the server may wait in line for it, in seconds (`None`: it does not wait).
    pub wait_seconds: Option<u64>,
}

/// `POST /locks/{r}/renew` or `POST /sets/renew`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewRequest {
    pub members: Members,
    pub shape: Shape,
    pub owner: Owner,
    pub ttl: Ttl,
    /// The tenures renewed, in the members' order (`None`: the owner's, whichever they are).
    pub fences: Option<Vec<Fence>>,
}

/// `DELETE /locks/{r}` or `POST /sets/release`: a release, or `run`'s end of its tenures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    pub members: Members,
    pub shape: Shape,
    pub owner: Owner,
    /// The tenures ended, in the members' order (`None`: the owner's).
    pub fences: Option<Vec<Fence>>,
    pub end: End,
}

/// How a [`ReleaseRequest`] ends its tenures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Released, all or nothing.
    Release,
    /// `run`'s end: each tenure released or, with a hold (`hold_at_least_seconds`), kept until
    /// its start + the hold; a set's members each on their own (`"each":true`). A single
    /// resource's end without a hold is its release, and is sent as one.
    Finish { hold: Option<Duration> },
}

/// `POST /locks/{r}/break`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakRequest {
    pub resource: Resource,
    pub reason: Remark,
    /// Only this owner's tenures (by name, whatever token took them).
    pub owner: Option<Owner>,
    /// Who breaks it, in the caller's words.
    pub by: Option<Remark>,
}

/// `POST /locks/{r}/leave` or `POST /sets/leave`: a waiter gives its place up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveRequest {
    pub members: Members,
    pub shape: Shape,
    pub owner: Owner,
}

/// The route a request of `shape` on `members` takes.
fn target(members: &Members, shape: Shape) -> Target {
    match shape {
        Shape::One => Target::One(members.first().clone()),
        Shape::Set => Target::Set,
    }
}

impl AcquireRequest {
    pub fn route(&self) -> Route {
        Route::Acquire(target(&self.members, self.shape))
    }

    /// Reads the fields: `owner`, `ttl_seconds`, `shared` and `limit`, `note`, `wait_seconds`,
    /// `guarded`.
    ///
    /// # Errors
    ///
    /// The first field that is missing or breaks its rule.
    pub fn read(members: Members, shape: Shape, fields: &mut Fields) -> Result<Self, Bad> {
        let owner = fields.owner()?;
        let ttl = fields.ttl()?;
        let mode = fields.mode()?;
        let note = fields.remark("note")?;
        let wait = fields.seconds("wait_seconds", Whole::WAIT)?;
        // `distlock run` through the server: its tenure is guarded by that run.
        let guarded = fields.flag("guarded")?;
        let request = Request {
            owner,
            ttl,
            mode,
            note,
            waits: false,
            guarded,
        };
        Ok(AcquireRequest {
            members,
            shape,
            request,
            wait_seconds: wait.map(|wait| wait.as_secs()),
        })
    }
}

impl Serialize for AcquireRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = &self.request;
        let mut body = serializer.serialize_map(None)?;
        if self.shape == Shape::Set {
            body.serialize_entry("resources", self.members.as_slice())?;
        }
        body.serialize_entry("owner", request.owner.as_str())?;
        body.serialize_entry("ttl_seconds", &whole_seconds(request.ttl.as_duration()))?;
        match request.mode {
            Mode::Exclusive => {}
            Mode::Shared => body.serialize_entry("shared", &true)?,
            Mode::Semaphore(n) => body.serialize_entry("limit", &n)?,
        }
        if let Some(note) = &request.note {
            body.serialize_entry("note", note.as_str())?;
        }
        if request.guarded {
            body.serialize_entry("guarded", &true)?;
        }
        if let Some(wait) = self.wait_seconds {
            body.serialize_entry("wait_seconds", &wait)?;
        }
        body.end()
    }
}

impl RenewRequest {
    pub fn route(&self) -> Route {
        Route::Renew(target(&self.members, self.shape))
    }

    /// Reads the fields: `owner`, `ttl_seconds`, and a single resource's `fence` or a set's
    /// `fences`.
    ///
    /// # Errors
    ///
    /// The first field that is missing or breaks its rule.
    pub fn read(members: Members, shape: Shape, fields: &mut Fields) -> Result<Self, Bad> {
        let owner = fields.owner()?;
        let ttl = fields.ttl()?;
        let fences = read_fences(&members, shape, fields)?;
        Ok(RenewRequest {
            members,
            shape,
            owner,
            ttl,
            fences,
        })
    }
}

impl Serialize for RenewRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_map(None)?;
        if self.shape == Shape::Set {
            body.serialize_entry("resources", self.members.as_slice())?;
        }
        body.serialize_entry("owner", self.owner.as_str())?;
        body.serialize_entry("ttl_seconds", &whole_seconds(self.ttl.as_duration()))?;
        write_fences(&mut body, &self.members, self.shape, self.fences.as_deref())?;
        body.end()
    }
}

impl ReleaseRequest {
    pub fn route(&self) -> Route {
        Route::Release(target(&self.members, self.shape))
    }

    /// Reads a single resource's release: the owner from the body or the query (`?owner=`,
    /// `owner` given as read by [`ReleaseRequest::owner_param`]; both must then name the same
    /// one), `fence`, `hold_at_least_seconds` (which makes it `run`'s end).
    ///
    /// # Errors
    ///
    /// The first field that is missing or breaks its rule.
    pub fn read_one(
        resource: Resource,
        owner: Option<&str>,
        fields: &mut Fields,
    ) -> Result<Self, Bad> {
        let owner = fields.owner_or(owner)?;
        let fence = fields.fence()?;
        // As `run --hold-at-least`: 1 s to 365 days.
        let hold = fields.seconds("hold_at_least_seconds", Whole::TTL)?;
        Ok(ReleaseRequest {
            members: Members::one(resource),
            shape: Shape::One,
            owner,
            fences: fence.map(|fence| vec![fence]),
            end: match hold {
                Some(hold) => End::Finish { hold: Some(hold) },
                None => End::Release,
            },
        })
    }

    /// The query of a single resource's release: `owner` and nothing else, read before its
    /// body.
    ///
    /// # Errors
    ///
    /// A query that is not percent-encoded, gives `owner` twice or gives another parameter.
    pub fn owner_param(query: Option<&str>) -> Result<Option<String>, Bad> {
        let mut params = Params::parse(query)?;
        let owner = params.take("owner");
        params.finish()?;
        Ok(owner)
    }

    /// Reads a lock set's release: `owner`, `fences`, `each` (`run`'s end, which needs
    /// `fences`) and `hold_at_least_seconds` (only with `each`).
    ///
    /// # Errors
    ///
    /// The first field that is missing or breaks its rule.
    pub fn read_set(members: Members, fields: &mut Fields) -> Result<Self, Bad> {
        let owner = fields.owner()?;
        let fences = fields.fences(&members)?;
        let each = fields.flag("each")?;
        // As `run --hold-at-least`: 1 s to 365 days.
        let hold = fields.seconds("hold_at_least_seconds", Whole::TTL)?;
        let end = match (each, &fences, hold) {
            (false, _, Some(_)) => {
                return Err(Bad::Invalid(
                    "hold_at_least_seconds goes with \"each\":true".into(),
                ));
            }
            (true, None, _) => {
                return Err(Bad::Invalid(
                    "\"each\":true ends the tenures that fences names: fences is required".into(),
                ));
            }
            (true, Some(_), hold) => End::Finish { hold },
            (false, _, None) => End::Release,
        };
        Ok(ReleaseRequest {
            members,
            shape: Shape::Set,
            owner,
            fences,
            end,
        })
    }
}

impl Serialize for ReleaseRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_map(None)?;
        if self.shape == Shape::Set {
            body.serialize_entry("resources", self.members.as_slice())?;
        }
        body.serialize_entry("owner", self.owner.as_str())?;
        write_fences(&mut body, &self.members, self.shape, self.fences.as_deref())?;
        if let End::Finish { hold } = self.end {
            if self.shape == Shape::Set {
                body.serialize_entry("each", &true)?;
            }
            if let Some(hold) = hold {
                body.serialize_entry("hold_at_least_seconds", &whole_seconds(hold).max(1))?;
            }
        }
        body.end()
    }
}

impl BreakRequest {
    pub fn route(&self) -> Route {
        Route::Break(self.resource.clone())
    }

    /// Reads the fields: `reason` (required), `owner`, `by`.
    ///
    /// # Errors
    ///
    /// The first field that is missing or breaks its rule.
    pub fn read(resource: Resource, fields: &mut Fields) -> Result<Self, Bad> {
        let reason = fields
            .remark("reason")?
            .ok_or_else(|| Bad::Invalid("reason is required".into()))?;
        let owner = fields.optional_owner()?;
        let by = fields.remark("by")?;
        Ok(BreakRequest {
            resource,
            reason,
            owner,
            by,
        })
    }
}

impl Serialize for BreakRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_map(None)?;
        body.serialize_entry("reason", self.reason.as_str())?;
        if let Some(by) = &self.by {
            body.serialize_entry("by", by.as_str())?;
        }
        if let Some(owner) = &self.owner {
            body.serialize_entry("owner", owner.as_str())?;
        }
        body.end()
    }
}

impl LeaveRequest {
    pub fn route(&self) -> Route {
        Route::Leave(target(&self.members, self.shape))
    }

    /// Reads the field: `owner`.
    ///
    /// # Errors
    ///
    /// A missing or invalid owner.
    pub fn read(members: Members, shape: Shape, fields: &mut Fields) -> Result<Self, Bad> {
        let owner = fields.owner()?;
        Ok(LeaveRequest {
            members,
            shape,
            owner,
        })
    }
}

impl Serialize for LeaveRequest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_map(None)?;
        if self.shape == Shape::Set {
            body.serialize_entry("resources", self.members.as_slice())?;
        }
        body.serialize_entry("owner", self.owner.as_str())?;
        body.end()
    }
}

/// A single resource's `fence`, or a set's `fences` (`{name: fence}`, every member and no
/// other), in the members' order.
fn read_fences(
    members: &Members,
    shape: Shape,
    fields: &mut Fields,
) -> Result<Option<Vec<Fence>>, Bad> {
    match shape {
        Shape::One => Ok(fields.fence()?.map(|fence| vec![fence])),
        Shape::Set => fields.fences(members),
    }
}

/// What [`read_fences`] reads.
fn write_fences<M: SerializeMap>(
    body: &mut M,
    members: &Members,
    shape: Shape,
    fences: Option<&[Fence]>,
) -> Result<(), M::Error> {
    let Some(fences) = fences else {
        return Ok(());
    };
    match shape {
        Shape::One => match fences.first() {
            Some(fence) => body.serialize_entry("fence", fence),
            None => Ok(()),
        },
        Shape::Set => {
            let named: serde_json::Map<String, serde_json::Value> = (members.as_slice().iter())
                .zip(fences)
                .map(|(member, fence)| (member.as_str().to_owned(), fence.0.into()))
                .collect();
            body.serialize_entry("fences", &named)
        }
    }
}

/// The value of [`super::GRANT_HEADER`] for a grant of `tenures`: `new` or `extended` for each,
/// in the members' order, separated by commas.
pub fn grant_header(tenures: &[Grant]) -> String {
    let how: Vec<&str> = tenures
        .iter()
        .map(|tenure| match tenure {
            Grant::New => "new",
            Grant::Extended => "extended",
        })
        .collect();
    how.join(",")
}

/// What a grant's [`super::GRANT_HEADER`] says of each of its `count` tenures: `extended` for
/// the owner's own tenure, joined; anything else, or nothing, a new tenure.
pub fn read_grant_header(told: Option<&str>, count: usize) -> Vec<Grant> {
    let mut told = told.unwrap_or_default().split(',');
    (0..count)
        .map(|_| match told.next().map(str::trim) {
            Some("extended") => Grant::Extended,
            _ => Grant::New,
        })
        .collect()
}

/// Whole seconds, rounded up: the API counts in seconds.
pub fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests;
