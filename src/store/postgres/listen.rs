//! Listening on a PostgreSQL connection: a waiter's `LISTEN` and its wait for a notice of its
//! resources, and a server's watcher, which hears every resource's.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, anyhow};
use postgres::fallible_iterator::FallibleIterator;

use super::batch::{number, required, send};
use super::session::{POOLED, Session};
use super::statements::CHANNEL;
use crate::lock::Resource;
use crate::store::op::Heard;

impl Session {
    /// `LISTEN` on this connection, for a waiter (see [`Backend::subscribe`]).
    pub(super) fn listen(&mut self) -> Result<()> {
        if self.listening.is_none() && !POOLED.load(Ordering::Relaxed) {
            // One message, so a pooler runs both on the same server connection.
            let outputs = send(
                &mut self.client,
                &[
                    format!("LISTEN {CHANNEL}"),
                    "SELECT pg_backend_pid()".to_owned(),
                ],
            )?;
            let row = outputs
                .get(1)
                .and_then(|o| o.rows.first())
                .ok_or_else(|| anyhow!("pg_backend_pid returned no row"))?;
            self.listening = Some(required(number(row, 0)?, 0)?);
        }
        Ok(())
    }

    /// A server's watcher: the resources whose notices came within `timeout` (see
    /// [`Backend::watch`]). A connection that was not listening yet starts to, and says that
    /// anything may have changed meanwhile; one that cannot listen (a pooler in transaction
    /// mode) sleeps and says the same.
    pub(super) fn heard(&mut self, timeout: Duration) -> Result<Heard> {
        if self.listening.is_none() {
            self.listen()?;
            if self.listening.is_none() {
                std::thread::sleep(timeout);
            }
            return Ok(Heard::Anything);
        }
        let mut changed = Vec::new();
        let mut notifications = self.client.notifications();
        let first = notifications.timeout_iter(timeout).next()?;
        if let Some(note) = first {
            changed.push(note.payload().to_owned());
            // And every other notice already here, without waiting.
            let mut more = notifications.iter();
            while let Some(note) = more.next()? {
                changed.push(note.payload().to_owned());
            }
        }
        let mut resources: Vec<Resource> = changed
            .iter()
            .filter_map(|name| Resource::parse(name).ok())
            .collect();
        resources.sort();
        resources.dedup();
        Ok(if resources.is_empty() {
            Heard::Nothing
        } else {
            Heard::Resources(resources)
        })
    }

    /// Waits for a notice of one of `resources`, or `timeout` (see
    /// [`Backend::wait_for_change`]).
    pub(super) fn wait_for_notification(
        &mut self,
        resources: &[Resource],
        timeout: Duration,
    ) -> Result<()> {
        if self.listening.is_none() {
            std::thread::sleep(timeout);
            return Ok(());
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut notifications = self.client.notifications();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match notifications.timeout_iter(left).next()? {
                Some(note) if resources.iter().any(|r| r.as_str() == note.payload()) => {
                    return Ok(());
                }
                // Another resource's change: keep waiting for ours.
                Some(_) if !left.is_zero() => {}
                _ => return Ok(()),
            }
        }
    }
}
