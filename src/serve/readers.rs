//! The store's readers: `status`, `list`, `log`, the health probe and `/metrics` read on
//! read-only connections of their own (WAL snapshots on SQLite, a few sessions on
//! PostgreSQL), never queued behind the writer. At most `--store-connections` read at once, each
//! on a blocking thread while it reads; the connections are kept open for the next reads.

use std::sync::{Arc, Mutex, PoisonError};

use anyhow::anyhow;
use tokio::sync::Semaphore;

use crate::store::{self, Location, LockStore};

/// The read-only connections of one server.
pub struct Readers {
    location: Location,
    idle: Mutex<Vec<Box<dyn LockStore>>>,
    /// One permit per connection that may read at once.
    permits: Semaphore,
}

impl Readers {
    pub fn new(location: Location, most: usize) -> Readers {
        Readers {
            location,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(most),
        }
    }

    /// Runs `work` on a read-only connection (a new one if none is free), once one of the
    /// `--store-connections` is free. A connection whose work failed is not kept: it may be
    /// what failed.
    ///
    /// # Errors
    ///
    /// The store's failure.
    pub async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&mut dyn LockStore) -> store::Result<T> + Send + 'static,
    ) -> store::Result<T> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| store::Error::Failed(anyhow!("the server is stopping")))?;
        let readers = Arc::clone(self);
        let read = tokio::task::spawn_blocking(move || {
            let pooled = readers
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut store = match pooled {
                Some(store) => store,
                None => store::open(&readers.location, store::Access::ReadOnly)?,
            };
            let done = work(store.as_mut());
            if done.is_ok() {
                readers
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(store);
            }
            done
        });
        read.await
            .unwrap_or_else(|_| Err(store::Error::Failed(anyhow!("the read failed"))))
    }
}
