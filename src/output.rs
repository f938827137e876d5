//! Rendering results: one JSON object per line (the default, for scripts) or one human line.
//!
//! A write error on stdout (a closed pipe, a full disk) is an error of its own, exit 74 with
//! one line on stderr: a script must never take an exit 0 for an answer it did not get.

use std::io::Write;

use crate::answer::Answer;
use crate::error::{Error, Result};
use crate::lock::{Holder, Timestamp};

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

/// Characters that show nothing, or move the text around it, in a terminal: the
/// bidirectional controls (Unicode's Bidi_Control property), the zero-width and invisible
/// format characters, the line and paragraph separators, the interlinear annotations, the
/// variation selectors and the tags. Escaped, two names that differ only in them look
/// different.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

fn push_visible(out: &mut String, c: char) {
    if c.is_control() || invisible(c) {
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
        for c in [
            '\u{200b}',
            '\u{feff}',
            '\u{034f}',
            '\u{180e}',
            '\u{fff9}',
            '\u{e0001}',
            '\u{2028}',
            '\u{2029}',
        ] {
            assert_eq!(
                visible(&format!("a{c}b")),
                format!("a\\u{{{:x}}}b", u32::from(c))
            );
        }
        assert_eq!(
            shown_line(&"y".repeat(300)),
            format!("{}…", "y".repeat(256))
        );
    }
}
