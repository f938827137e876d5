//! A distlock server's lock sets (`POST /sets`, `/sets/renew`, `/sets/release`,
//! `/sets/leave`), read back into the outcomes a local store gives. A set's acquire is posted,
//! and waits, as one resource's does ([`RemoteStore::post_acquire`]); the server says in
//! `Distlock-Grant` how each member's tenure came about, in the members' order. `run`'s end
//! of a set is one request too (`/sets/release` with `"each":true`), so that a server that
//! goes away cannot leave some members ended and the rest held.

use anyhow::anyhow;

use super::RemoteStore;
use super::http::{CALL_TIMEOUT, Call, Reply};
use crate::answer::{
    MemberEnd, SetAcquireAnswer, SetFinishAnswer, SetReleaseAnswer, SetRenewAnswer,
};
use crate::engine::{Finish, Request};
use crate::lock::{
    Blocked, Fence, Holder, Members, Owner, Resource, SetAcquire, SetRefusal, SetRelease, SetRenew,
    Shape, Ttl,
};
use crate::protocol::{End, ReleaseRequest, RenewRequest, read_grant_header};
use crate::store::op::Outcome;
use crate::store::{Error, Result};

impl RemoteStore {
    /// `POST /sets`: a lock set's acquire, all or nothing.
    pub(super) fn acquire_set(&mut self, members: &Members, request: &Request) -> Result<Outcome> {
        let unread = Outcome::AcquireSet(SetAcquire::Busy {
            blocked: members
                .as_slice()
                .iter()
                .map(|member| Blocked {
                    resource: member.clone(),
                    holder: None,
                    holders: Vec::new(),
                    waiting: 0,
                    position: Some(1),
                })
                .collect(),
        });
        let leave = Self::leave_call(members, Shape::Set, &request.owner);
        self.post_acquire(members, Shape::Set, request, &leave, unread, |reply| {
            Ok(Some(Outcome::AcquireSet(match reply.status {
                200 => match reply.json::<SetAcquireAnswer>()? {
                    SetAcquireAnswer::Acquired(acquired) => {
                        // One `new` or `extended` per member, in the members' order.
                        let tenures =
                            read_grant_header(reply.grant.as_deref(), acquired.locks.len());
                        SetAcquire::Acquired {
                            locks: acquired.locks,
                            tenures,
                        }
                    }
                    SetAcquireAnswer::Busy(busy) => SetAcquire::Busy {
                        blocked: busy
                            .blocked
                            .into_iter()
                            .map(|member| Blocked {
                                resource: member.resource,
                                holder: member.holder,
                                holders: member.holders,
                                waiting: member.waiting,
                                position: member.position,
                            })
                            .collect(),
                    },
                    SetAcquireAnswer::Mismatch(mismatch) => SetAcquire::Mismatch {
                        resource: mismatch.resource,
                        holders: mismatch.holders,
                    },
                },
                409 => SetAcquire::Mismatch {
                    resource: reply
                        .member::<Option<Resource>>("resource")?
                        .ok_or_else(|| anyhow!("the server's mismatch names no resource"))?,
                    holders: reply.member::<Vec<Holder>>("holders")?,
                },
                _ => return Ok(None),
            })))
        })
    }

    /// A set's `release` of `fences` (none: the owner's), ended as `end` says.
    fn set_release(members: &Members, owner: &Owner, fences: Option<&[Fence]>, end: End) -> Call {
        let release = ReleaseRequest {
            members: members.clone(),
            shape: Shape::Set,
            owner: owner.clone(),
            fences: fences.map(<[Fence]>::to_vec),
            end,
        };
        Call::with_body(&release.route(), &release, CALL_TIMEOUT)
    }

    /// The first member a set's `renew` or `release` found not held live by the owner, from
    /// the server's refusal (404: not held; 403: another's).
    fn refusal(&self, reply: &Reply) -> Result<SetRefusal> {
        let forbidden = match reply.status {
            404 => false,
            403 => true,
            _ => return Err(reply.unexpected(self.client.url())),
        };
        let resource = reply
            .member::<Option<Resource>>("resource")?
            .ok_or_else(|| reply.unexpected(self.client.url()))?;
        Ok(SetRefusal {
            resource,
            forbidden,
        })
    }

    /// `POST /sets/renew`.
    pub(super) fn renew_set(
        &self,
        members: &Members,
        owner: &Owner,
        ttl: Ttl,
        fences: Option<&[Fence]>,
    ) -> Result<SetRenew> {
        let renew = RenewRequest {
            members: members.clone(),
            shape: Shape::Set,
            owner: owner.clone(),
            ttl,
            fences: fences.map(<[Fence]>::to_vec),
        };
        let reply = self.call(&Call::with_body(&renew.route(), &renew, CALL_TIMEOUT))?;
        match reply.status {
            200 => match reply.json::<SetRenewAnswer>()? {
                SetRenewAnswer::Renewed(renewed) => Ok(Ok(renewed.locks)),
                SetRenewAnswer::Refused(_) => Err(reply.unexpected(self.client.url())),
            },
            _ => self.refusal(&reply).map(Err),
        }
    }

    /// `POST /sets/release`.
    pub(super) fn release_set(
        &self,
        members: &Members,
        owner: &Owner,
        fences: Option<&[Fence]>,
    ) -> Result<SetRelease> {
        let reply = self.call(&Self::set_release(members, owner, fences, End::Release))?;
        match reply.status {
            200 => match reply.json::<SetReleaseAnswer>()? {
                SetReleaseAnswer::Released(_) => Ok(Ok(())),
                SetReleaseAnswer::Refused(_) => Err(reply.unexpected(self.client.url())),
            },
            _ => self.refusal(&reply).map(Err),
        }
    }

    /// `POST /sets/release` with `"each":true`: `run`'s end of its set in one request, each
    /// member's tenure (named by its fence) released, or kept until its start + `hold`, on its
    /// own — a member already lost leaves the others to be let go. Harmless twice, it is sent
    /// again while it gets no answer or a 503, until the lease's end
    /// ([`RemoteStore::call_again`]).
    pub(super) fn finish_set(
        &self,
        members: &Members,
        owner: &Owner,
        fences: &[Fence],
        hold: Option<std::time::Duration>,
    ) -> Result<Vec<Finish>> {
        let end = End::Finish { hold };
        let reply = self.call_again(&Self::set_release(members, owner, Some(fences), end))?;
        if reply.status != 200 {
            return Err(reply.unexpected(self.client.url()));
        }
        let answer = reply.json::<SetFinishAnswer>()?;
        let named: Vec<&Resource> = answer.members.iter().map(MemberEnd::resource).collect();
        if named.iter().copied().ne(members.as_slice()) {
            return Err(Error::Failed(anyhow!(
                "the distlock server {} answered the end of another set",
                self.client.url().as_str()
            )));
        }
        Ok(answer.members.iter().map(MemberEnd::finish).collect())
    }
}
