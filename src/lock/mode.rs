//! How a tenure holds its resource: exclusive, shared, or one of N.

use serde::{Deserialize, Serialize};

/// How a tenure holds its resource (docs/src/reference/semantics.md, "Modes"). In a lock or holder object it is
/// the fields that apply (`"shared":true`, `"limit":N`, none for an exclusive one), flattened
/// into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "ModeFields", try_from = "ModeFields")]
pub enum Mode {
    /// One owner at a time (the default, and `--limit 1`).
    #[default]
    Exclusive,
    /// Any number of shared owners and no exclusive one: a read lock, as `flock -s`.
    Shared,
    /// At most N owners (N ≥ 2), each asking with the same N, as `consul lock -n N`.
    Semaphore(u32),
}

/// Which modes may hold one resource together (docs/src/reference/semantics.md, "Admission").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Exclusive and shared: a read/write lock.
    ReadWrite,
    /// A semaphore of N, with every holder asking the same N.
    Semaphore(u32),
}

/// A [`Mode`] as the fields of a lock or holder object.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct ModeFields {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shared: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
}

impl From<Mode> for ModeFields {
    fn from(mode: Mode) -> ModeFields {
        match mode {
            Mode::Exclusive => ModeFields::default(),
            Mode::Shared => ModeFields {
                shared: true,
                limit: None,
            },
            Mode::Semaphore(n) => ModeFields {
                shared: false,
                limit: Some(n),
            },
        }
    }
}

impl TryFrom<ModeFields> for Mode {
    type Error = String;

    fn try_from(fields: ModeFields) -> Result<Mode, String> {
        match fields {
            ModeFields {
                shared: false,
                limit: None,
            } => Ok(Mode::Exclusive),
            ModeFields {
                shared: true,
                limit: None,
            } => Ok(Mode::Shared),
            ModeFields {
                shared: false,
                limit: Some(n),
            } => Mode::parse_limit(&n.to_string()),
            ModeFields {
                shared: true,
                limit: Some(_),
            } => Err("a lock is not both shared and limited".to_owned()),
        }
    }
}

/// The largest `--limit`.
pub const MAX_LIMIT: u32 = 10_000;

impl Mode {
    /// The mode `--limit N` asks for: 1 is the plain exclusive lock.
    ///
    /// # Errors
    ///
    /// A message for anything but a whole number 1 ..= [`MAX_LIMIT`].
    pub fn parse_limit(raw: &str) -> Result<Mode, String> {
        match raw.parse::<u32>() {
            Ok(1) => Ok(Mode::Exclusive),
            Ok(n) if (2..=MAX_LIMIT).contains(&n) => Ok(Mode::Semaphore(n)),
            _ => Err(format!(
                "limit must be a whole number from 1 to {MAX_LIMIT}, got {raw:?}"
            )),
        }
    }

    /// The family a mode belongs to: exclusive and shared share one (a read/write lock);
    /// a semaphore's is its own N. Modes of two families never hold a resource together.
    pub fn family(self) -> Family {
        match self {
            Mode::Exclusive | Mode::Shared => Family::ReadWrite,
            Mode::Semaphore(n) => Family::Semaphore(n),
        }
    }

    /// How the mode reads in text output: "", "shared", "limit 3".
    pub fn describe(self) -> Option<String> {
        match self {
            Mode::Exclusive => None,
            Mode::Shared => Some("shared".to_owned()),
            Mode::Semaphore(n) => Some(format!("limit {n}")),
        }
    }
}
