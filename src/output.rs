//! Rendering results: one JSON object per line (the default, for scripts) or one human line.
//!
//! Write errors on stdout (a closed pipe, a full disk) are ignored: the exit code still tells
//! the outcome, and distlock must never panic because a reader went away.

use std::io::Write;

use serde_json::{Value, json};

use crate::lock::{Event, Fence, Holder, Lock, Mode, Note, Resource, Status, Timestamp};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line, for scripts.
    Json,
    /// One human line per result.
    Text,
}

#[derive(Debug, Clone, Copy)]
pub struct Printer {
    format: Format,
}

impl Printer {
    pub fn new(format: Format) -> Printer {
        Printer { format }
    }

    /// Prints `json`, or the line `text` builds, followed by a newline.
    pub fn emit(&self, json: &Value, text: impl FnOnce() -> String) {
        let line = match self.format {
            Format::Json => json.to_string(),
            Format::Text => text(),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }
}

/// " (fence 7)", " (fence 7, shared, note: …)": what a text line adds after a tenure.
fn tenure_text(fence: Fence, mode: Mode, note: Option<&Note>) -> String {
    let mut parts = vec![format!("fence {fence}")];
    parts.extend(mode.describe());
    if let Some(note) = note {
        parts.push(format!("note: {note}"));
    }
    format!(" ({})", parts.join(", "))
}

/// " (shared, note: …)" for a holder; empty for a plain exclusive one.
fn holder_text(holder: &Holder) -> String {
    let mut parts: Vec<String> = holder.mode.describe().into_iter().collect();
    if let Some(note) = &holder.note {
        parts.push(format!("note: {note}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

pub fn lock_text(verb: &str, lock: &Lock) -> String {
    format!(
        "{verb} {} as {} until {}{}",
        lock.resource,
        lock.owner,
        lock.expires_at,
        tenure_text(lock.fence, lock.mode, lock.note.as_ref())
    )
}

pub fn held_text(lock: &Lock) -> String {
    format!(
        "{} is held by {} until {}{}",
        lock.resource,
        lock.owner,
        lock.expires_at,
        tenure_text(lock.fence, lock.mode, lock.note.as_ref())
    )
}

pub fn acquired(lock: &Lock) -> Value {
    json!({ "acquired": true, "lock": lock })
}

/// The busy answer (75): the holder whose lease ends first (none when the resource is free
/// but reserved for earlier waiters), every holder when they are shared or a semaphore's, and
/// how many wait.
pub fn busy(
    resource: &Resource,
    holder: Option<&Holder>,
    holders: &[Holder],
    waiting: usize,
) -> Value {
    let mut value = json!({ "acquired": false, "resource": resource });
    if let Some(holder) = holder {
        value["holder"] = json!(holder);
    }
    if !holders.is_empty() {
        value["holders"] = json!(holders);
    }
    if waiting > 0 {
        value["waiting"] = json!(waiting);
    }
    value
}

/// The first line of a busy answer; the same words `run` writes on stderr.
pub fn busy_text(
    resource: &Resource,
    holder: Option<&Holder>,
    holders: &[Holder],
    waiting: usize,
) -> String {
    let queue = waiting_text(waiting);
    let Some(holder) = holder else {
        return format!("busy: {resource} is free but reserved for earlier waiters{queue}");
    };
    let others = match holders.len() {
        0 | 1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    format!(
        "busy: {resource} is held by {}{} until {}{others}{queue}",
        holder.owner,
        holder_text(holder),
        holder.expires_at
    )
}

/// "; 3 waiting", or nothing.
fn waiting_text(waiting: usize) -> String {
    if waiting > 0 {
        format!("; {waiting} waiting")
    } else {
        String::new()
    }
}

/// The mismatch answer (78): every live tenure, so the user sees how it is held.
pub fn mismatch(resource: &Resource, holders: &[Holder]) -> Value {
    json!({ "acquired": false, "resource": resource, "reason": "mismatch", "holders": holders })
}

pub fn mismatch_text(resource: &Resource, asked: Mode, holders: &[Holder]) -> String {
    let held: Vec<String> = holders
        .iter()
        .map(|h| format!("{}{}", h.owner, holder_text(h)))
        .collect();
    let asked = asked.describe().unwrap_or_else(|| "exclusive".to_owned());
    format!(
        "mismatch: {resource} is held by {}; a request for {asked} conflicts with how it is \
         held (everyone must ask the same way)",
        held.join(", ")
    )
}

/// `status`: not held (with the waiters, if any), or its oldest tenure, and every live tenure
/// when they are shared or a semaphore's.
pub fn status(resource: &Resource, status: &Status) -> Value {
    let mut value = match status.locks.first() {
        None => json!({ "held": false, "resource": resource }),
        Some(oldest) => json!({ "held": true, "lock": oldest }),
    };
    if status.locks.iter().any(|l| l.mode != Mode::Exclusive) {
        value["locks"] = json!(status.locks);
    }
    if status.waiting > 0 {
        value["waiting"] = json!(status.waiting);
    }
    value
}

pub fn status_text(resource: &Resource, status: &Status) -> String {
    let queue = waiting_text(status.waiting);
    if status.locks.is_empty() {
        return format!("{resource} is not held{queue}");
    }
    let mut lines: Vec<String> = status.locks.iter().map(held_text).collect();
    if let Some(last) = lines.last_mut() {
        last.push_str(&queue);
    }
    lines.join("\n")
}

pub fn event_text(event: &Event) -> String {
    let tenure = tenure_text(event.fence, event.mode, event.note.as_ref());
    if let Some(breach) = &event.broken {
        // The owner is the evicted holder, not who broke it.
        return format!(
            "{} {} broken by {}: the tenure of {}{} ({})",
            event.at, event.resource, breach.by, event.owner, tenure, breach.reason
        );
    }
    let mut line = format!(
        "{} {} {} by {}{tenure}",
        event.at,
        event.resource,
        event.event.as_str().replace('_', " "),
        event.owner,
    );
    if let Some(previous) = &event.previous_owner {
        line.push_str(&format!(" from {previous}"));
    }
    line
}

/// Writes a one-line message on stderr, ignoring failures (see the module note). Messages are
/// promised as one line, and store errors (SQLite's, PostgreSQL's) can carry newlines of their
/// own, so those become spaces here.
pub fn warn(message: std::fmt::Arguments<'_>) {
    let line = message.to_string().replace(['\n', '\r'], " ");
    let _ = writeln!(std::io::stderr().lock(), "distlock: {line}");
}

/// A one-line status on stderr, redrawn in place while distlock waits for a lock, and cleared
/// when it is done. Only on a terminal: piped or logged stderr never sees it.
pub struct StatusLine {
    shown: bool,
}

impl StatusLine {
    /// A status line for a wait of `wait`, if there is one and stderr is a terminal.
    pub fn for_wait(wait: Option<std::time::Duration>) -> Option<StatusLine> {
        let waits = wait.is_some_and(|wait| !wait.is_zero());
        (waits && std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .then_some(StatusLine { shown: false })
    }

    /// What a wait loop calls after each busy attempt: redraws the line for a wait of `wait`
    /// on `resource`, when there is one (see [`StatusLine::for_wait`]). The line is cleared
    /// when the returned closure is dropped.
    pub fn reporter(
        wait: Option<std::time::Duration>,
        resource: &Resource,
    ) -> impl FnMut(Option<&Holder>, usize) + use<> {
        let mut line = StatusLine::for_wait(wait);
        let resource = resource.clone();
        move |holder, position| {
            if let Some(line) = line.as_mut() {
                line.waiting(&resource, holder, position);
            }
        }
    }

    /// Shows who holds the lock being waited for, and the place in the queue (1 = next).
    pub fn waiting(&mut self, resource: &Resource, holder: Option<&Holder>, position: usize) {
        let held = match holder {
            Some(holder) => {
                let left = Timestamp::now().millis_until(holder.expires_at).max(0);
                let secs = (left + 999) / 1000;
                format!("held by {}, expires in {secs}s", holder.owner)
            }
            None => "reserved for earlier waiters".to_owned(),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2Kwaiting for {resource} — {held}; place {position} in the queue"
        )
        .and_then(|()| err.flush());
        self.shown = true;
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K").and_then(|()| err.flush());
        }
    }
}
