//! One request as its route's work sees it ([`Work`]): its body read and checked, its lock
//! operation handed to the store's writer, its reads to a reader, a store failure answered 503.

use std::sync::Arc;

use hyper::StatusCode;

use super::access::Caller;
use super::lanes::Lane;
use super::problem::Problem;
use super::reply::{Reply, problem};
use super::shared::Shared;
use crate::lock::{Members, Shape};
use crate::protocol::{Bad, Fields, Target};
use crate::store::{self, LockStore, Operation, op};

/// One request, as its route's work sees it.
pub(super) struct Work<'a> {
    pub(super) state: &'a Arc<Shared>,
    /// Who calls: the owner it names is proved by its token.
    pub(super) caller: &'a Caller,
    pub(super) body: &'a [u8],
    pub(super) query: Option<&'a str>,
}

impl Work<'_> {
    /// The body of a lock operation's request: its members — a single resource's from the
    /// route (which the caller's token was checked against already), a set's from the body's
    /// `resources`, every one of which the caller's token must be allowed to use (else 403
    /// `not-allowed`, naming the first that is not, and nothing read further) — then the rest
    /// of its fields as `read` reads them, none left unread. Refused, the answer to send.
    pub(super) fn read<T>(
        &self,
        target: Target,
        read: impl FnOnce(Members, Shape, &mut Fields) -> Result<T, Bad>,
    ) -> Result<T, Reply> {
        let bad = |bad: Bad| Reply::from(problem(&bad));
        let mut fields = Fields::parse(self.body).map_err(bad)?;
        let (members, shape) = match target {
            Target::One(resource) => (Members::one(resource), Shape::One),
            Target::Set => {
                let members = fields.members().map_err(bad)?;
                self.caller.check_all(members.as_slice())?;
                (members, Shape::Set)
            }
        };
        let read = read(members, shape, &mut fields).map_err(bad)?;
        fields.finish().map_err(bad)?;
        Ok(read)
    }

    /// `op` carried out by the store's writer, in `lane`, in the caller's turn.
    ///
    /// # Errors
    ///
    /// The store's failure, answered 503 ([`unavailable`]).
    pub(super) async fn write<O: Operation>(&self, lane: Lane, op: O) -> Result<O::Output, Reply> {
        let token = self.caller.token_name();
        let op = op.into();
        let name = op.name();
        let outcome = self.state.writer.submit(lane, token.as_ref(), op).await;
        outcome
            .and_then(|outcome| op::output_of::<O>(name, outcome))
            .map_err(|err| unavailable(self.state, &err))
    }

    /// `work` on one of the store's readers.
    pub(super) async fn read_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut dyn LockStore) -> store::Result<T> + Send + 'static,
    ) -> Result<T, Reply> {
        self.state
            .readers
            .read(work)
            .await
            .map_err(|err| unavailable(self.state, &err))
    }
}

/// A store failure: 503 `store-error`, saying what went wrong but not where the store lives
/// ([`Shared::store_names`]); the server's log says it whole.
pub(super) fn unavailable(state: &Shared, err: &store::Error) -> Reply {
    let whole = format!("{err:#}");
    crate::output::warn(format_args!("the store failed: {whole}"));
    let mut told = whole;
    for name in &state.store_names {
        told = told.replace(name.as_str(), "the server's store");
    }
    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-error", told).into()
}
