//! What every request of one server shares ([`Shared`]): the pool of open stores, the counts
//! and health the metrics show, the waiting requests, and the tokens.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

use std::sync::atomic::Ordering;

use super::health::{ANSWER_WITHIN, Health, one_line};
use super::metrics::Metrics;
use super::tokens::{Tokens, TokensFile};
use super::waits::Waits;
use crate::store::{self, Location, LockStore, Locks, op};

/// The most open stores kept for reuse: enough for 64 clients at once, so that a busy
/// server does not open and close PostgreSQL sessions all the time.
const IDLE_STORES: usize = 64;

/// What every request shares.
pub struct Shared {
    pub(super) stores: Stores,
    pub(super) metrics: Metrics,
    /// Whether the store answers, for `/health` and `/metrics`.
    pub(super) health: Health,
    /// Requests waiting in a queue now.
    pub(super) waiting: AtomicUsize,
    /// Who those are, so that an owner that leaves the queue ends its own
    /// ([`super::waits`]).
    pub(super) waits: Waits,
    /// Set at SIGTERM or SIGINT: waits end at once.
    pub(super) stopping: AtomicBool,
    /// The tokens of `--tokens`, replaced whole when SIGHUP rereads the file; `None`: no
    /// tokens.
    pub(super) tokens: Option<Arc<TokensFile>>,
}

impl Shared {
    /// The tokens as they are now.
    pub(super) fn tokens(&self) -> Option<Arc<Tokens>> {
        self.tokens.as_ref().map(|file| file.now())
    }
}

/// Open stores, each used by one request at a time and put back after it.
pub(super) struct Stores {
    location: Location,
    idle: Mutex<Vec<Box<dyn LockStore>>>,
}

impl Stores {
    /// The pool of stores at `location`, `first` (opened already) in it.
    pub(super) fn new(location: Location, first: Box<dyn LockStore>) -> Stores {
        Stores {
            location,
            idle: Mutex::new(vec![first]),
        }
    }

    /// Runs `work` on a store of the pool (a new one if none is free). A store whose work
    /// failed is not put back: its connection may be what failed.
    pub(super) fn with<T>(
        &self,
        work: impl FnOnce(&mut dyn LockStore) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut store = match pooled {
            Some(store) => store,
            None => store::open(&self.location, store::Access::Create)?,
        };
        let done = work(store.as_mut());
        if done.is_ok() {
            // What `run` does while its command runs, a server does after each operation: a
            // SQLite store's WAL is checkpointed and started over once it is long, else it
            // would grow for as long as the server serves.
            let _ = store.perform(op::Tidy);
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < IDLE_STORES {
                    idle.push(store);
                }
            }
        }
        done
    }
}

/// Whether the store answers now: the next probe's finding (one is started unless one is under
/// way), or no when none has come within [`ANSWER_WITHIN`].
pub(super) async fn store_answers(state: &Arc<Shared>) -> bool {
    let health = &state.health;
    // Told of any probe that finishes from here on, so that none is missed.
    let mut found = health.found.subscribe();
    if !health.probing.swap(true, Ordering::SeqCst) {
        let state = Arc::clone(state);
        tokio::task::spawn_blocking(move || {
            let probe = || op::List {
                prefix: "\u{1}".to_owned(),
            };
            let probed = (state.stores).with(|store| Ok(store.perform(probe()).map(drop)?));
            let probed = probed.map_err(|err| one_line(&format!("{err:#}")));
            state.health.record(probed);
            state.health.probing.store(false, Ordering::SeqCst);
            state.health.found.send_replace(());
        });
    }
    match tokio::time::timeout(ANSWER_WITHIN, found.changed()).await {
        Ok(Ok(())) => health.finding().up,
        _ => false,
    }
}
