//! What the server reads from files, read again at SIGHUP.
//!
//! Each such thing is a [`Reread`]: it reads its files again and takes what they hold, or,
//! when they cannot be read or used, keeps what it had and says why. A SIGHUP rereads them all
//! off the async threads ([`Rereads::reread_soon`]), one SIGHUP's rereads at a time, and writes
//! one `distlock:` line on stderr for each: reloaded, or why not and that the old one is kept;
//! after a reload, one more line for a warning about what was read (a certificate near its end),
//! as at start ([`Rereads::warn_now`]).

use std::sync::{Arc, Mutex, PoisonError};

use crate::output::warn;

/// Something the server reads from files that SIGHUP rereads.
pub trait Reread: Send + Sync {
    /// What it is, for the lines on stderr, without an article: "TLS certificate and key
    /// (FILES)".
    fn what(&self) -> String;

    /// Reads the files again and takes what they hold.
    ///
    /// # Errors
    ///
    /// One line saying why the files cannot be used; what was held before is kept.
    fn reread(&self) -> Result<(), String>;

    /// A warning about what is held now, if there is one (a certificate near its end): said
    /// at start and after each reread that takes new files.
    fn warning(&self) -> Option<String> {
        None
    }
}

/// Everything SIGHUP rereads.
pub struct Rereads {
    items: Vec<Arc<dyn Reread>>,
    /// Held while a SIGHUP's rereads run, so that two in a row never interleave (the later
    /// read would otherwise be overwritten by the earlier one finishing late).
    running: Mutex<()>,
}

impl Rereads {
    pub fn new(items: Vec<Arc<dyn Reread>>) -> Rereads {
        Rereads {
            items,
            running: Mutex::new(()),
        }
    }

    /// Rereads everything on a blocking thread, so that the server goes on accepting meanwhile.
    pub fn reread_soon(self: &Arc<Self>) {
        let rereads = Arc::clone(self);
        tokio::task::spawn_blocking(move || rereads.reread_all());
    }

    /// Says each warning about what is held now, one line each (at start, once the first line
    /// has said where the server listens).
    pub fn warn_now(&self) {
        for warning in self.items.iter().filter_map(|item| item.warning()) {
            warn(format_args!("{warning}"));
        }
    }

    /// Rereads everything now, with one line on stderr for each.
    fn reread_all(&self) {
        let _running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if self.items.is_empty() {
            warn(format_args!(
                "SIGHUP: nothing to reload: the server reads no files"
            ));
        }
        for item in &self.items {
            match item.reread() {
                Ok(()) => {
                    warn(format_args!("SIGHUP: reloaded the {}", item.what()));
                    if let Some(warning) = item.warning() {
                        warn(format_args!("{warning}"));
                    }
                }
                Err(why) => warn(format_args!(
                    "SIGHUP: reload failed, serving on with the old {}: {why}",
                    item.what()
                )),
            }
        }
    }
}
