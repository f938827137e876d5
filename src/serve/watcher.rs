//! The store's watcher: one thread that hears the changes other processes make (the command
//! line on the same SQLite file, another server over the same PostgreSQL database) and rings
//! the waiting requests they may let in. The server's own commits ring their waiters
//! themselves ([`super::writer`]); the watcher is for everything else. On SQLite it sleeps on
//! the turnstile, which every process that lets a waiter in rings; on PostgreSQL it holds one
//! `LISTEN` session, whatever the number of waiters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::waiters::Waiters;
use crate::store::op::{Heard, Watch};
use crate::store::{self, Location, Locks};

/// How long one watch sleeps before it looks again; also the pause before a store that
/// failed is opened again.
const WATCH: Duration = Duration::from_secs(1);

/// Rings for "anything may have changed" (a store that cannot say what, a connection found
/// again) at most this often: every waiter looks again then, and they look by themselves
/// within this anyway.
const EVERYONE_AT_MOST: Duration = Duration::from_secs(2);

/// Starts the watcher's thread.
///
/// # Errors
///
/// When the system refuses the thread.
pub fn start(location: Location, waiters: Arc<Waiters>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("watcher".to_owned())
        .spawn(move || watch(&location, &waiters))?;
    Ok(())
}

fn watch(location: &Location, waiters: &Waiters) {
    let mut store = None;
    let mut everyone_rung = Instant::now();
    loop {
        let watching = match store.as_mut() {
            Some(watching) => watching,
            None => match store::open(location, store::Access::Create) {
                Ok(opened) => store.insert(opened),
                Err(_) => {
                    std::thread::sleep(WATCH);
                    continue;
                }
            },
        };
        match watching.perform(Watch { timeout: WATCH }) {
            Ok(Heard::Nothing) => {}
            Ok(Heard::Anything) => {
                if everyone_rung.elapsed() >= EVERYONE_AT_MOST {
                    waiters.ring_all();
                    everyone_rung = Instant::now();
                }
            }
            // The resources are named: their waiters are found by the registry's index.
            Ok(Heard::Resources(changed)) => {
                for resource in &changed {
                    waiters.ring(resource, None);
                }
            }
            Ok(heard) => waiters.ring_where(|members, owner| heard.concerns(members, owner)),
            Err(_) => {
                store = None;
                std::thread::sleep(WATCH);
            }
        }
    }
}
