//! What every request of one server shares ([`Shared`]): the store's writer and readers, the
//! waiting requests, the counts and health the metrics show, and the tokens.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::health::{ANSWER_WITHIN, Health, one_line};
use super::metrics::Metrics;
use super::readers::Readers;
use super::tokens::{Tokens, TokensFile};
use super::waiters::Waiters;
use super::writer::Writer;
use crate::store::{Locks, op};

/// What every request shares.
pub struct Shared {
    /// Carries out every lock operation, in batches ([`super::writer`]).
    pub(super) writer: Arc<Writer>,
    /// Carry out the reads ([`super::readers`]).
    pub(super) readers: Arc<Readers>,
    /// The requests waiting in a queue now ([`super::waiters`]).
    pub(super) waiters: Arc<Waiters>,
    pub(super) metrics: Metrics,
    /// Whether the store answers, for `/health` and `/metrics`.
    pub(super) health: Health,
    /// Set at SIGTERM or SIGINT: waits end at once.
    pub(super) stopping: AtomicBool,
    /// The tokens of `--tokens`, replaced whole when SIGHUP rereads the file; `None`: no
    /// tokens.
    pub(super) tokens: Option<Arc<TokensFile>>,
    /// The store's names ([`crate::store::Location::names`]), left out of the store errors the
    /// callers are told (the server's log has them whole).
    pub(super) store_names: Vec<String>,
}

impl Shared {
    /// The tokens as they are now.
    pub(super) fn tokens(&self) -> Option<Arc<Tokens>> {
        self.tokens.as_ref().map(|file| file.now())
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
        tokio::spawn(async move {
            let probe = op::List {
                prefix: "\u{1}".to_owned(),
            };
            let probed = (state.readers)
                .read(move |store| store.perform(probe).map(drop))
                .await;
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
