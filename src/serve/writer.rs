//! The store's one writer: every lock operation of the server's callers is carried out by one
//! thread, which commits whatever is queued together (a group commit).
//!
//! - **Together, in arrival order.** Callers queue their operations ([`Writer::submit`]); the
//!   writer takes everything queued (up to [`MOST`]) as one [`op::Batch`]: one write
//!   transaction, each operation decided in turn on what the ones before it left, a failure
//!   undoing only itself, one commit. Only then is each caller answered, so every grant is
//!   durable before its answer, as for one operation alone.
//! - **No delay.** The writer never waits for a batch to fill: a lone request is committed at
//!   once, and under load the next batch gathers while this one commits.
//! - **Holders first, callers in turn** ([`Lanes`]): renewals, releases, leaves and breaks are
//!   taken before acquires, and within each, one operation per token in turn.
//! - **It wakes the next waiter.** A commit that may let a waiter in rings the first one left
//!   in that resource's queue ([`Waiters::ring`]).
//!
//! On SQLite this is one writer of the file beside the command line's processes, which stay
//! correct beside it: they are other writers, serialised by SQLite's write lock.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use anyhow::anyhow;
use tokio::sync::oneshot;

use super::lanes::{Lane, Lanes};
use super::waiters::Waiters;
use crate::lock::TokenName;
use crate::store::{self, LockStore, Op, Outcome, op};

/// The most operations one transaction carries: enough that a batch's commit serves every
/// caller of a busy server, few enough that one batch's answers are not held up long.
const MOST: usize = 256;

/// A batch that failed as a whole after this long was failing to reach the store (a search
/// for a PostgreSQL server that is away takes its 5 s): the requests queued meanwhile share its
/// answer.
const SOUGHT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the writer stays awake for the requests of the waiters it just rang.
const AWAKE_FOR_THE_RUNG: std::time::Duration = std::time::Duration::from_micros(300);

/// The store's writer, shared by every request.
pub struct Writer {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// How many batches and operations it committed, for `/metrics`.
    batches: std::sync::atomic::AtomicU64,
    operations: std::sync::atomic::AtomicU64,
}

/// The queued operations, and whether the writer sleeps waiting for one (only then is it
/// woken: a busy writer takes what came meanwhile when its batch is done).
#[derive(Default)]
struct Queue {
    lanes: Lanes<Job>,
    sleeping: bool,
}

/// One queued operation and where its outcome goes.
struct Job {
    op: Op,
    answer: oneshot::Sender<store::Result<Outcome>>,
}

impl Writer {
    /// Starts the writer's thread with `store`, which it alone uses from now on.
    ///
    /// # Errors
    ///
    /// When the system refuses the thread.
    pub fn start(store: Box<dyn LockStore>, waiters: Arc<Waiters>) -> std::io::Result<Arc<Writer>> {
        let writer = Arc::new(Writer {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            batches: 0.into(),
            operations: 0.into(),
        });
        let running = Arc::clone(&writer);
        std::thread::Builder::new()
            .name("writer".to_owned())
            .spawn(move || running.run(store, &waiters))?;
        Ok(writer)
    }

    /// The batches committed so far, and the operations they carried.
    pub fn written(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.batches.load(Relaxed), self.operations.load(Relaxed))
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding the lock; were it poisoned, the queue is still whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `op` of the caller `token` in `lane` and waits for its outcome, answered once
    /// the batch that carried it committed.
    ///
    /// # Errors
    ///
    /// The store's failure, for this operation or its whole batch.
    pub async fn submit(
        &self,
        lane: Lane,
        token: Option<&TokenName>,
        op: Op,
    ) -> store::Result<Outcome> {
        let (answer, answered) = oneshot::channel();
        let sleeping = {
            let mut queue = self.queue();
            queue.lanes.push(lane, token, Job { op, answer });
            queue.sleeping
        };
        if sleeping {
            self.ready.notify_one();
        }
        answered
            .await
            .unwrap_or_else(|_| Err(store::Error::Failed(anyhow!("the store's writer stopped"))))
    }

    /// After ringing waiters: waits a moment awake for what they ask (their grant, most
    /// likely), so that a handoff does not also pay for waking this thread from its sleep.
    fn expect_the_rung(&self) {
        let until = std::time::Instant::now() + AWAKE_FOR_THE_RUNG;
        while self.queue().lanes.is_empty() && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
    }

    /// The writer's loop: a batch of whatever is queued, committed, answered; the waiters it
    /// may let in rung; the store tidied when nothing is left to do. A connection lost under
    /// it (a PostgreSQL restarted) is found again by the store itself, which tries the batch
    /// again when nothing of it can have been committed.
    fn run(&self, mut store: Box<dyn LockStore>, waiters: &Waiters) {
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            let jobs = {
                let mut queue = self.queue();
                while queue.lanes.is_empty() {
                    queue.sleeping = true;
                    queue = (self.ready.wait(queue)).unwrap_or_else(PoisonError::into_inner);
                }
                queue.sleeping = false;
                queue.lanes.next_batch(MOST)
            };
            let (ops, answers): (Vec<Op>, Vec<_>) =
                jobs.into_iter().map(|job| (job.op, job.answer)).unzip();
            self.batches.fetch_add(1, Relaxed);
            self.operations.fetch_add(ops.len() as u64, Relaxed);
            let started = std::time::Instant::now();
            match store.carry_out(Op::Batch(op::Batch { ops })) {
                Ok(Outcome::Batch(batched)) => {
                    for (answer, outcome) in answers.into_iter().zip(batched.outcomes) {
                        let outcome = outcome.map_err(|why| store::Error::Failed(anyhow!(why)));
                        // A caller gone meanwhile is not told.
                        let _ = answer.send(outcome);
                    }
                    for (resource, head) in &batched.wake {
                        waiters.ring(resource, Some(head));
                    }
                    if !batched.wake.is_empty() {
                        self.expect_the_rung();
                    }
                }
                answered => {
                    let why = match answered {
                        Err(err) => format!("{err:#}"),
                        Ok(other) => format!("the store answered a batch with {other:?}"),
                    };
                    let mut answers = answers;
                    if started.elapsed() >= SOUGHT {
                        // The store was sought, in vain, while more requests queued: they are
                        // answered with this failure now, not after a search of their own, so
                        // that no request waits for more than one (docs/src/guarantees/faults.md).
                        let mut queue = self.queue();
                        let queued = queue.lanes.len();
                        let more = queue.lanes.next_batch(queued);
                        answers.extend(more.into_iter().map(|job| job.answer));
                    }
                    for answer in answers {
                        let _ = answer.send(Err(store::Error::Failed(anyhow!("{why}"))));
                    }
                }
            }
            if self.queue().lanes.is_empty() {
                // A SQLite store's WAL is checkpointed and started over once it is long.
                let _ = store.carry_out(Op::Tidy(op::Tidy));
            }
        }
    }
}
