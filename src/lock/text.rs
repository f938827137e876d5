//! The text a user gives a lock: resource names, owners, and notes (`--note`, `--reason`,
//! `--by`), each checked once where it enters.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A text type that is a checked `String`: it converts into one, and out of one through its
/// `parse`, which is how serde reads it back from JSON.
macro_rules! checked_text {
    ($type:ident) => {
        impl From<$type> for String {
            fn from(value: $type) -> String {
                value.0
            }
        }

        impl TryFrom<String> for $type {
            type Error = String;

            fn try_from(raw: String) -> Result<$type, String> {
                $type::parse(&raw)
            }
        }
    };
}

/// The longest resource name or owner, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// The name of a lockable resource, exactly as the user gave it (not trimmed). Read back from
/// JSON (a server's answer), it is checked as a command-line value is.
/// Resources order by their bytes, as both stores sort them (`COLLATE "C"` on PostgreSQL).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Resource(String);

checked_text!(Resource);

impl Resource {
    /// Checks a resource name against docs/src/reference/validation.md: 1..=255 bytes, not
    /// blank, no control characters.
    ///
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Resource, String> {
        check_name("resource", raw)?;
        if raw.trim().is_empty() {
            return Err("resource must not be blank".into());
        }
        Ok(Resource(raw.to_owned()))
    }

    /// A name read back from the store, which only ever holds validated names.
    pub(crate) fn from_store(raw: &str) -> Resource {
        Resource(raw.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who holds (or wants) a lock: the name its caller gives, and, through a server with
/// tokens, the token that the caller proved (`distlock serve --tokens`). A name proves nothing
/// (anyone can read it with `status`), so two owners are one only when both their names and
/// their tokens are: a tenure taken with one token is another owner's to a caller with another
/// token, or with none. As JSON an owner is its name alone.
///
/// Surrounding whitespace is trimmed, so `" w1 "` and `"w1"` are one owner and `"   "` is no
/// owner at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Owner {
    name: String,
    token: Option<TokenName>,
}

impl From<Owner> for String {
    fn from(value: Owner) -> String {
        value.name
    }
}

impl TryFrom<String> for Owner {
    type Error = String;

    fn try_from(raw: String) -> Result<Owner, String> {
        Owner::parse(&raw)
    }
}

impl Owner {
    /// Trims `raw`, then checks it against docs/src/reference/validation.md: 1..=255 bytes, no
    /// control characters.
    /// The owner has no token.
    ///
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Owner, String> {
        let trimmed = raw.trim();
        check_name("owner", trimmed)?;
        Ok(Owner::named(trimmed.to_owned()))
    }

    fn named(name: String) -> Owner {
        Owner { name, token: None }
    }

    /// An owner read back from the store, which only ever holds validated owners, with the
    /// token column as the stores keep it (empty: no token).
    pub(crate) fn from_store(name: &str, token: &str) -> Owner {
        Owner {
            name: name.to_owned(),
            token: (!token.is_empty()).then(|| TokenName(token.to_owned())),
        }
    }

    /// The same name, proved by `token` (a server's caller) or by none.
    #[must_use]
    pub fn with_token(self, token: Option<TokenName>) -> Owner {
        Owner { token, ..self }
    }

    /// The token that proved this owner, if any.
    pub fn token(&self) -> Option<&TokenName> {
        self.token.as_ref()
    }

    /// The token as the stores' `token` column keeps it: its name, or empty for none.
    pub(crate) fn token_column(&self) -> &str {
        self.token.as_ref().map_or("", TokenName::as_str)
    }

    /// Whether `other` goes by the same name, whatever token proved either. A resource holds
    /// one tenure per name at most.
    pub fn same_name(&self, other: &Owner) -> bool {
        self.name == other.name
    }

    /// An owner name unique to this process: `<hostname>:<pid>:<8 random hex digits>`.
    pub fn unique_for_process() -> Owner {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| Owner::parse(h).is_ok())
            .unwrap_or_else(|| "localhost".to_owned());
        let suffix = format!(":{}:{:08x}", std::process::id(), fastrand::u32(..));
        // Keep the whole name within the length limit even on a host with a very long name.
        let mut host = host;
        while host.len() + suffix.len() > MAX_NAME_BYTES {
            host.pop();
        }
        Owner::named(host + &suffix)
    }

    /// The name (never the token).
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The name of a token of `distlock serve --tokens`: 1..=64 bytes of ASCII letters, digits,
/// `.`, `_` and `-`, so that it is safe in a log line and a history event. (The name is not
/// secret; the token's secret never leaves the caller and the server.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TokenName(String);

checked_text!(TokenName);

impl TokenName {
    /// The longest token name, in bytes.
    pub const MAX_BYTES: usize = 64;

    /// Checks a token name.
    ///
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<TokenName, String> {
        if raw.is_empty() {
            return Err("a token name must not be empty".into());
        }
        if raw.len() > TokenName::MAX_BYTES {
            return Err(format!(
                "a token name is at most {} bytes long",
                TokenName::MAX_BYTES
            ));
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(format!(
                "token name {raw:?} may hold only ASCII letters, digits, '.', '_' and '-'"
            ));
        }
        Ok(TokenName(raw.to_owned()))
    }

    /// A token name read back from the store, which only ever holds validated names.
    pub(crate) fn from_store(name: &str) -> TokenName {
        TokenName(name.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TokenName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_name(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{what} is {} bytes long; the limit is {MAX_NAME_BYTES}",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters"));
    }
    Ok(())
}

/// A short text a person gives a lock: why or for whom it is held (`--note`), why it was broken
/// and by whom (`--reason`, `--by`). 1..=1024 bytes after trimming, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Remark(String);

checked_text!(Remark);

/// The longest `--note`, `--reason` or `--by`, in bytes of UTF-8 after trimming.
pub const MAX_REMARK_BYTES: usize = 1024;

impl Remark {
    /// # Errors
    ///
    /// A message naming the rule that `raw` breaks.
    pub fn parse(raw: &str) -> Result<Remark, String> {
        let text = raw.trim();
        if text.is_empty() {
            return Err("the text must not be empty".into());
        }
        if text.len() > MAX_REMARK_BYTES {
            return Err(format!(
                "the text is {} bytes long; the limit is {MAX_REMARK_BYTES}",
                text.len()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err("the text must not contain control characters".into());
        }
        Ok(Remark(text.to_owned()))
    }

    /// A note read back from the store, trusted as written.
    pub(crate) fn from_store(raw: &str) -> Remark {
        Remark(raw.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Remark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// What a message may show of a value that came from outside: never more than a screenful, and
// never a character that drives or hides from a terminal.

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
pub fn visible(text: &str) -> String {
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
