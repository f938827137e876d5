//! The turnstile where there are no futexes: one that never opens, so that every waiter polls
//! (see the README).

use std::path::Path;
use std::time::Duration;

/// A turnstile that cannot exist: [`Turnstile::open`] always answers `None`.
pub enum Turnstile {}

impl Turnstile {
    /// Never opens: waiters poll.
    pub fn open(_db: &Path, _create: bool) -> Option<Turnstile> {
        None
    }

    pub fn read(&self, _slot: usize) -> Option<u32> {
        match *self {}
    }

    pub fn wait(&self, _slot: usize, _seen: u32, _timeout: Duration) -> Option<bool> {
        match *self {}
    }

    pub fn ring(&self, _slot: usize) {
        match *self {}
    }

    pub fn read_all(&self) -> Option<Vec<u32>> {
        match *self {}
    }
}
