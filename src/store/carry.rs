//! Every lock operation written once over a [`Backend`]: as its decision over its members
//! ([`plan`]), carried out in a transaction of its own ([`LockStore::carry_out`]) or decided in
//! turn with others in one ([`super::batch`], a server's group commit).

use super::Result;
use super::backend::{Backend, DecideSet, Durability, Reads};
use super::batch::Planned;
use super::op::{
    Acquire, Acquisition, Batch, Batched, Break, Finish, Leave, Left, LockStore, Op, Outcome,
    Release, Renew,
};
use crate::engine::{self, SetDecision};
use crate::lock::{Members, Owner};

impl<B: Backend> LockStore for B {
    fn carry_out(&mut self, op: Op) -> Result<Outcome> {
        let op = match plan(op) {
            Ok(mut planned) => {
                let reads = planned.reads.as_ref().map_or(Reads::All, Reads::Owner);
                let resources = std::mem::take(&mut planned.resources);
                let mut outcome =
                    self.transact_set(&resources, planned.durability, reads, &mut planned.decide)?;
                if let Outcome::Acquire(acquisition) = &mut outcome {
                    acquisition.notice = self.notice();
                }
                return Ok(outcome);
            }
            Err(op) => *op,
        };
        Ok(match op {
            Op::Status(status) => {
                let resource = &status.resource;
                Outcome::Status(engine::status(resource, &self.read(resource)?))
            }
            Op::List(list) => Outcome::List(self.scan(&list.prefix)?),
            Op::Queues(read) => Outcome::Queues(crate::lock::queues(self.places(&read.prefix)?)),
            Op::Log(log) => Outcome::Log(self.history(&log.query)?),
            Op::Gc(gc) => Outcome::Gc(self.prune(gc.keep_history)?),
            Op::Subscribe(subscribe) => {
                let members = subscribe.members.as_slice();
                Outcome::Subscribe(Backend::subscribe(self, members, &subscribe.owner)?)
            }
            Op::WaitForChange(wait) => {
                let members = wait.members.as_slice();
                Outcome::WaitForChange(Backend::wait_for_change(self, members, wait.timeout)?)
            }
            Op::Tidy(_) => {
                Backend::tidy(self);
                Outcome::Tidy(())
            }
            Op::Batch(Batch { ops }) => Outcome::Batch(batched(self, ops)?),
            Op::Watch(watch) => Outcome::Watch(Backend::watch(self, watch.timeout)?),
            // Planned above.
            Op::Acquire(_)
            | Op::Renew(_)
            | Op::Release(_)
            | Op::Finish(_)
            | Op::Break(_)
            | Op::Leave(_) => unreachable!("a lock operation is planned"),
        })
    }
}

/// A lock operation as its decision over its members: what one transaction of its own carries
/// out ([`LockStore::carry_out`]) and what a batch decides in turn with others
/// ([`super::batch`]). Every lock operation is written here once; any other operation is given
/// back.
///
/// # Errors
///
/// The operation, when it is not a lock operation.
pub fn plan(op: Op) -> std::result::Result<Planned<'static, Outcome>, Box<Op>> {
    use Durability::{Durable, Relaxed};
    let planned =
        |resources: &Members, durability, reads, decide: Box<DecideSet<'static, Outcome>>| {
            Planned {
                resources: resources.as_slice().to_vec(),
                durability,
                reads,
                decide,
            }
        };
    Ok(match op {
        Op::Acquire(Acquire {
            members, request, ..
        }) => {
            let mut again = false;
            planned(
                &members.clone(),
                Durable,
                None,
                Box::new(move |states, fresh| {
                    // Decided again, the first decision was not written (another client's write
                    // came first): a waiter then takes its place in line before it is granted.
                    if std::mem::replace(&mut again, true) {
                        if let Some(queued) =
                            engine::queue_first(members.as_slice(), states, &request)
                        {
                            return Ok(queued.map(|outcome| {
                                Outcome::Acquire(Acquisition {
                                    outcome,
                                    decided: None,
                                    notice: None,
                                })
                            }));
                        }
                    }
                    let decision =
                        engine::acquire_set(members.as_slice(), states, &request, fresh)?;
                    Ok(decision.map(|outcome| {
                        Outcome::Acquire(Acquisition {
                            outcome,
                            decided: None,
                            notice: None,
                        })
                    }))
                }),
            )
        }
        Op::Renew(Renew {
            members,
            owner,
            ttl,
            fences,
            ..
        }) => planned(
            &members.clone(),
            Durable,
            Some(owner.clone()),
            Box::new(move |states, _| {
                let decision =
                    engine::renew_set(members.as_slice(), states, &owner, ttl, fences.as_deref());
                Ok(decision.map(Outcome::Renew))
            }),
        ),
        // A release need not survive power loss (see `Durability`).
        Op::Release(Release {
            members,
            owner,
            fences,
        }) => planned(
            &members.clone(),
            Relaxed,
            Some(owner.clone()),
            Box::new(move |states, _| {
                let decision =
                    engine::release_set(members.as_slice(), states, &owner, fences.as_deref());
                Ok(decision.map(Outcome::Release))
            }),
        ),
        // A kept lease must survive power loss (the hold is what stops a second host); a
        // release need not.
        Op::Finish(Finish {
            members,
            owner,
            fences,
            hold,
            ..
        }) => planned(
            &members.clone(),
            if hold.is_some() { Durable } else { Relaxed },
            Some(owner.clone()),
            Box::new(move |states, _| {
                let decision =
                    engine::finish_set(members.as_slice(), states, &owner, &fences, hold);
                Ok(decision.map(Outcome::Finish))
            }),
        ),
        other => return plan_operator(other),
    })
}

/// [`plan`] for the operations that act on others' places and tenures: `break`, a waiter
/// leaving.
fn plan_operator(op: Op) -> std::result::Result<Planned<'static, Outcome>, Box<Op>> {
    use Durability::{Durable, Relaxed};
    Ok(match op {
        Op::Break(Break {
            resource,
            owner,
            breaking,
        }) => planned(
            &Members::one(resource.clone()),
            Durable,
            None,
            Box::new(move |states, _| {
                let decision =
                    engine::break_tenures(&resource, &states[0], owner.as_ref(), &breaking);
                Ok(SetDecision {
                    outcome: Outcome::Break(decision.outcome),
                    changes: vec![decision.changes],
                })
            }),
        ),
        Op::Leave(Leave { members, owner, .. }) => planned(
            &members,
            Relaxed,
            Some(owner.clone()),
            Box::new(move |states, _| {
                let decision = engine::leave_set(states, &owner);
                Ok(decision.map(|()| Outcome::Leave(Left { at_once: true })))
            }),
        ),
        other => return Err(Box::new(other)),
    })
}

/// A lock operation on `resources`, decided by `decide`.
fn planned(
    resources: &Members,
    durability: Durability,
    reads: Option<Owner>,
    decide: Box<DecideSet<'static, Outcome>>,
) -> Planned<'static, Outcome> {
    Planned {
        resources: resources.as_slice().to_vec(),
        durability,
        reads,
        decide,
    }
}

/// A [`Batch`] carried out in one transaction ([`super::batch::transact_batch`]); an
/// operation that is not a lock operation fails alone.
///
/// # Errors
///
/// The batch's failure as a whole on a connection that is gone.
fn batched<B: Backend + ?Sized>(store: &mut B, ops: Vec<Op>) -> Result<Batched> {
    let mut planned = Vec::with_capacity(ops.len());
    let mut refused = Vec::new();
    for (at, op) in ops.into_iter().enumerate() {
        match plan(op) {
            Ok(plan) => planned.push(plan),
            Err(op) => refused.push((at, format!("{} cannot be batched", op.name()))),
        }
    }
    let done = super::batch::transact_batch(store, &mut planned)?;
    let mut outcomes: Vec<std::result::Result<Outcome, String>> = done
        .outcomes
        .into_iter()
        .map(|outcome| outcome.map_err(|err| format!("{err:#}")))
        .collect();
    for (at, why) in refused {
        outcomes.insert(at, Err(why));
    }
    Ok(Batched {
        outcomes,
        wake: done.wake,
    })
}
