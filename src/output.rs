//! Rendering results: one JSON object per line (the default, for scripts) or one human line.
//!
//! A write error on stdout (a closed pipe, a full disk) is an error of its own, exit 74 with
//! one line on stderr: a script must never take an exit 0 for an answer it did not get.

use std::io::Write;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::lock::{Event, Fence, Holder, Lock, Mode, Note, Resource, Status, Timestamp};

/// The longest part of a value that a message echoes, in characters.
const SHOWN_CHARS: usize = 64;

/// `value` as a message may echo it: at most [`SHOWN_CHARS`] characters (then `…` and how
/// long it was), with control characters and the invisible direction controls escaped
/// (`\u{202e}`), so that a hostile value can neither flood nor rewrite a terminal.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    for (index, c) in value.chars().enumerate() {
        if index == SHOWN_CHARS {
            out.push_str(&format!("… ({} bytes)", value.len()));
            break;
        }
        push_visible(&mut out, c);
    }
    out
}

/// A line of a message, cut at 256 characters and with its control characters escaped.
pub fn shown_line(line: &str) -> String {
    let mut out = String::new();
    for (index, c) in line.chars().enumerate() {
        if index == 256 {
            out.push('…');
            break;
        }
        push_visible(&mut out, c);
    }
    out
}

/// A text line's field: control characters and direction controls escaped, so that a name
/// that holds them (a store written by hand, or by another version) cannot rewrite the line.
fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    text.chars().for_each(|c| push_visible(&mut out, c));
    out
}

fn push_visible(out: &mut String, c: char) {
    // The bidirectional formatting characters (Unicode's Bidi_Control property).
    let direction = matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if c.is_control() || direction {
        out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
    } else {
        out.push(c);
    }
}

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

    /// Prints `json`, or the lines `text` builds (one per tenure for `list` and a shared
    /// `status`, each made visible on its own), followed by a newline.
    ///
    /// # Errors
    ///
    /// [`Error::Output`] when stdout cannot be written or flushed.
    pub fn emit(&self, json: &Value, text: impl FnOnce() -> String) -> Result<()> {
        let line = match self.format {
            Format::Json => json.to_string(),
            Format::Text => text()
                .split('\n')
                .map(visible)
                .collect::<Vec<_>>()
                .join("\n"),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(Error::Output)
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
    let line = visible(&message.to_string().replace(['\n', '\r'], " "));
    let _ = writeln!(std::io::stderr().lock(), "distlock: {line}");
}

/// A one-line status on stderr, redrawn in place while distlock waits for a lock, and cleared
/// when it is done. Only on a terminal: piped or logged stderr never sees it.
pub struct StatusLine {
    shown: bool,
}

impl StatusLine {
    /// A status line for a wait of `wait`, if there is one and stderr is a terminal that can
    /// redraw a line (`TERM` is not `dumb`).
    pub fn for_wait(wait: Option<std::time::Duration>) -> Option<StatusLine> {
        let waits = wait.is_some_and(|wait| !wait.is_zero());
        let redraws = std::env::var_os("TERM").is_none_or(|term| term != "dumb");
        (waits && redraws && std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
        let text = visible(&format!(
            "waiting for {resource} — {held}; place {position} in the queue"
        ));
        let _ = write!(err, "\r\x1b[2K{text}").and_then(|()| err.flush());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_values_are_short_and_cannot_drive_a_terminal() {
        let long = "x".repeat(100_000);
        let cases: [(&str, String); 8] = [
            ("plain", "plain".to_owned()),
            ("", String::new()),
            ("tab\there", "tab\\u{9}here".to_owned()),
            ("\u{1b}[31mred", "\\u{1b}[31mred".to_owned()),
            ("c1\u{85}\u{9b}", "c1\\u{85}\\u{9b}".to_owned()),
            ("evil\u{202e}txt.exe", "evil\\u{202e}txt.exe".to_owned()),
            ("\u{2066}iso\u{2069}", "\\u{2066}iso\\u{2069}".to_owned()),
            (
                &long,
                format!("{}… (100000 bytes)", "x".repeat(SHOWN_CHARS)),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(shown(value), want, "{value:.20?}");
        }
        // Ordinary text outside ASCII is left as it is.
        assert_eq!(shown("zürich-écluse-東京"), "zürich-écluse-東京");
        assert_eq!(visible("a\u{200f}b\u{7f}c"), "a\\u{200f}b\\u{7f}c");
        assert_eq!(
            shown_line(&"y".repeat(300)),
            format!("{}…", "y".repeat(256))
        );
    }
}
