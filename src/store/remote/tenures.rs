//! The changes of tenures through a distlock server — `renew`, `release`, `run`'s end, and
//! `break` — read back into the outcomes a local store gives. A renewal or release of one
//! resource is refused with 404 or 403 alone; a set's names the first member it found not
//! held live by the owner. `run`'s end is one request, a set's too (`/sets/release` with
//! `"each":true`), so that a server that goes away cannot leave some members ended and the
//! rest held.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::RemoteStore;
use super::exchange::{HttpAnswer, HttpRequest};
use super::http::{CALL_TIMEOUT, CONNECT_BUDGET};
use crate::answer::{BreakAnswer, KeptAnswer, MemberEnd, SetFinishAnswer, SetRenewAnswer};
use crate::engine::Finish;
use crate::lock::{Lock, Members, Resource, SetRefusal, SetRelease, SetRenew, Shape};
use crate::protocol::{BreakRequest, End, ReleaseRequest, RenewRequest};
use crate::store::op::{self, Break, Release, Renew};
use crate::store::{Error, Result};

impl RemoteStore {
    /// `POST /locks/{r}/renew` or `POST /sets/renew`. A renewal answered after the lease has
    /// ended (`lease_end`) is of no use: no try of it starts or lasts past then
    /// ([`renewal_bounds`]), so that no request of `run`'s outlives its lease.
    pub(super) fn renew(&self, renew: &Renew) -> Result<SetRenew> {
        let Renew {
            members,
            owner,
            ttl,
            fences,
            lease_end,
        } = renew;
        let Some((timeout, until)) = renewal_bounds(Instant::now(), *lease_end) else {
            return Err(Error::Failed(anyhow!(
                "the lease ended before a renewal could reach the distlock server {}",
                self.client.url().as_str()
            )));
        };
        let shape = members.shape();
        let body = RenewRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
            ttl: *ttl,
            fences: fences.clone(),
        };
        let request = HttpRequest::with_body(&body.route(), &body, timeout);
        let answer = self.client.call(&request, until)?;
        match (answer.status, shape) {
            (200, Shape::One) => match answer.json::<crate::answer::RenewAnswer>()? {
                crate::answer::RenewAnswer::Renewed(renewed) => Ok(Ok(vec![renewed.lock])),
                crate::answer::RenewAnswer::Refused(_) => Err(answer.unexpected(self.client.url())),
            },
            (200, Shape::Set) => match answer.json::<SetRenewAnswer>()? {
                SetRenewAnswer::Renewed(renewed) => Ok(Ok(renewed.locks)),
                SetRenewAnswer::Refused(_) => Err(answer.unexpected(self.client.url())),
            },
            _ => self.refusal(&answer, members, shape).map(Err),
        }
    }

    /// `DELETE /locks/{r}` or `POST /sets/release`.
    pub(super) fn release(&self, release: &Release) -> Result<SetRelease> {
        let Release {
            members,
            owner,
            fences,
        } = release;
        let shape = members.shape();
        let body = ReleaseRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
            fences: fences.clone(),
            end: End::Release,
        };
        let answer = self.call(&HttpRequest::with_body(&body.route(), &body, CALL_TIMEOUT))?;
        match (answer.status, shape) {
            (204, Shape::One) => Ok(Ok(())),
            (200, Shape::Set) => match answer.json::<crate::answer::SetReleaseAnswer>()? {
                crate::answer::SetReleaseAnswer::Released(_) => Ok(Ok(())),
                crate::answer::SetReleaseAnswer::Refused(_) => {
                    Err(answer.unexpected(self.client.url()))
                }
            },
            _ => self.refusal(&answer, members, shape).map(Err),
        }
    }

    /// The first member a `renew` or `release` found not held live by the owner, from the
    /// server's refusal (404: not held; 403: another's): one resource's is that resource, a
    /// set's is named in the problem document.
    fn refusal(&self, answer: &HttpAnswer, members: &Members, shape: Shape) -> Result<SetRefusal> {
        let forbidden = match answer.status {
            404 => false,
            403 => true,
            _ => return Err(answer.unexpected(self.client.url())),
        };
        let resource = match shape {
            Shape::One => members.first().clone(),
            Shape::Set => answer
                .member::<Option<Resource>>("resource")?
                .ok_or_else(|| answer.unexpected(self.client.url()))?,
        };
        Ok(SetRefusal {
            resource,
            forbidden,
        })
    }

    /// `run`'s end of its tenures, each named by its fence: `DELETE /locks/{r}` (with
    /// `hold_at_least_seconds`) or `POST /sets/release` with `"each":true`, each tenure
    /// released, or kept until its start + `hold`, on its own — a member already lost leaves the
    /// others to be let go. Harmless twice, it is sent again while it gets no answer or a 503,
    /// until the lease's end ([`super::http::Client::call_again`]).
    pub(super) fn finish(&self, finish: &op::Finish) -> Result<Vec<Finish>> {
        let op::Finish {
            members,
            owner,
            fences,
            hold,
            until,
        } = finish;
        let shape = members.shape();
        let body = ReleaseRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
            fences: Some(fences.clone()),
            end: End::Finish { hold: *hold },
        };
        let request = HttpRequest::with_body(&body.route(), &body, CALL_TIMEOUT);
        let until = until.unwrap_or_else(|| Instant::now() + CONNECT_BUDGET);
        let answer = self.client.call_again(&request, until)?;
        match (answer.status, shape) {
            (204, Shape::One) => Ok(vec![Finish::Released]),
            (200, Shape::One) => Ok(vec![Finish::Kept {
                until: answer.json::<KeptAnswer>()?.kept_until,
            }]),
            (404 | 403, Shape::One) => Ok(vec![Finish::NotFound]),
            (200, Shape::Set) => {
                let ended = answer.json::<SetFinishAnswer>()?;
                let named: Vec<&Resource> = ended.members.iter().map(MemberEnd::resource).collect();
                if named.iter().copied().ne(members.as_slice()) {
                    return Err(Error::Failed(anyhow!(
                        "the distlock server {} answered the end of another set",
                        self.client.url().as_str()
                    )));
                }
                Ok(ended.members.iter().map(MemberEnd::finish).collect())
            }
            _ => Err(answer.unexpected(self.client.url())),
        }
    }

    /// `POST /locks/{r}/break`; the tenures it removed.
    pub(super) fn break_lock(&self, broken: &Break) -> Result<Vec<Lock>> {
        let body = BreakRequest {
            resource: broken.resource.clone(),
            reason: broken.breaking.reason.clone(),
            owner: broken.owner.clone(),
            by: Some(broken.breaking.by.clone()),
        };
        let answer = self.call(&HttpRequest::with_body(&body.route(), &body, CALL_TIMEOUT))?;
        match answer.status {
            200 => match answer.json::<BreakAnswer>()? {
                BreakAnswer::Broken(broken) => Ok(broken.locks),
                BreakAnswer::NotBroken(_) => Ok(Vec::new()),
            },
            404 => Ok(Vec::new()),
            _ => Err(answer.unexpected(self.client.url())),
        }
    }
}

/// The bounds of a renewal sent at `now` whose lease ends at `lease_end`: its timeout, and
/// until when a server that cannot be connected to is sought again. They are the call's own
/// ([`CALL_TIMEOUT`], [`CONNECT_BUDGET`]), each cut at the lease's end, past which a renewal
/// is of no use; `None` once the lease has ended.
fn renewal_bounds(now: Instant, lease_end: Option<Instant>) -> Option<(Duration, Instant)> {
    let own = (CALL_TIMEOUT, now + CONNECT_BUDGET);
    let Some(end) = lease_end else {
        return Some(own);
    };
    let left = end.saturating_duration_since(now);
    (!left.is_zero()).then(|| (own.0.min(left), own.1.min(end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_never_outlives_the_lease_it_renews() {
        let now = Instant::now();
        let s = Duration::from_secs;
        // (the lease ends this long from now, or never said) → (timeout, sought until)
        let cases = [
            (None, Some((CALL_TIMEOUT, now + CONNECT_BUDGET))),
            (Some(s(60)), Some((CALL_TIMEOUT, now + CONNECT_BUDGET))),
            (Some(s(7)), Some((s(7), now + CONNECT_BUDGET))),
            (Some(s(2)), Some((s(2), now + s(2)))),
            (
                Some(Duration::from_millis(30)),
                Some((Duration::from_millis(30), now + Duration::from_millis(30))),
            ),
            // Over: nothing is sent.
            (Some(Duration::ZERO), None),
        ];
        for (left, bounds) in cases {
            assert_eq!(
                renewal_bounds(now, left.map(|left| now + left)),
                bounds,
                "{left:?}"
            );
        }
        let ended = now.checked_sub(s(1)).unwrap_or(now);
        assert_eq!(renewal_bounds(now, Some(ended)), None, "ended before");
    }
}
