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
    /// Checks a resource name against the contract: 1..=255 bytes, not blank, no control
    /// characters.
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
    /// Trims `raw`, then checks it against the contract: 1..=255 bytes, no control characters.
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
