//! Rendering results: one JSON object per line (the default, for scripts) or one human line.
//!
//! A write error on stdout (a closed pipe, a full disk) is an error of its own, exit 74 with
//! one line on stderr: a script must never take an exit 0 for an answer it did not get.

use std::io::Write;

use crate::answer::Answer;
use crate::error::{Error, Result};
use crate::lock::{Holder, Timestamp, visible};

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

    /// Prints `answer` as its JSON line or its text, followed by a newline.
    ///
    /// # Errors
    ///
    /// [`Error::Output`] when stdout cannot be written or flushed.
    pub fn emit(&self, answer: &impl Answer) -> Result<()> {
        let line = match self.format {
            // Serializing these types cannot fail: their maps have string keys only.
            Format::Json => serde_json::to_string(answer).unwrap_or_default(),
            // One line per result: each escaped on its own.
            Format::Text => {
                let lines: Vec<String> = answer.text().lines().map(visible).collect();
                lines.join("\n")
            }
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(Error::Output)
    }
}

/// Prints clap's help or version text on stdout, in colour on a terminal.
///
/// # Errors
///
/// [`Error::Output`] when stdout cannot be written or flushed.
pub fn print_help(shown: &clap::Error) -> Result<()> {
    let rendered = shown.render();
    let text = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        rendered.ansi().to_string()
    } else {
        rendered.to_string()
    };
    let mut out = std::io::stdout().lock();
    write!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(Error::Output)
}

/// Writes a one-line message on stderr, ignoring failures (see the module note). Messages are
/// promised as one line, and store errors (SQLite's, PostgreSQL's) can carry newlines of their
/// own, so those become spaces here. The line is written with one call: stderr is unbuffered,
/// and a server logs a line per request, from several threads, before it answers.
pub fn warn(message: std::fmt::Arguments<'_>) {
    let line = visible(&message.to_string().replace(['\n', '\r'], " "));
    let _ = std::io::stderr().write_all(format!("distlock: {line}\n").as_bytes());
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
    /// on `what` (a resource, or a lock set's members), when there is one (see
    /// [`StatusLine::for_wait`]). The line is cleared when the returned closure is dropped.
    pub fn reporter(
        wait: Option<std::time::Duration>,
        what: &dyn std::fmt::Display,
    ) -> impl FnMut(Option<&Holder>, usize) + use<> {
        let mut line = StatusLine::for_wait(wait);
        let what = what.to_string();
        move |holder, position| {
            if let Some(line) = line.as_mut() {
                line.waiting(&what, holder, position);
            }
        }
    }

    /// Shows who holds the lock being waited for (for a set, its first busy member), and the
    /// place in the queue (1 = next).
    pub fn waiting(&mut self, resource: &str, holder: Option<&Holder>, position: usize) {
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
