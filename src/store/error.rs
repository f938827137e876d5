//! Why a store could not carry an operation out: the seam's one error type. The failures the
//! layers above act on each have a variant of their own — a server's refusal of the token
//! (exit 77), a SQLite store that vanished (a lease lost at once, never a store made anew), a
//! server out of reach — and every other failure is [`Error::Failed`], with its causes in
//! words. An expected "no" (busy, not held, another owner's) is never an error: it is an
//! outcome.

use std::fmt;
use std::path::PathBuf;

/// Why a store could not carry an operation out.
#[derive(Debug)]
pub enum Error {
    /// A distlock server refused the token, or the request is outside the token's scope
    /// (exit 77): the server's reason, in words that never show the token.
    NotAllowed(String),
    /// The SQLite store at this path was there and is gone: its file (or folder) was removed
    /// after this process opened it. The locks it held are lost to everyone; whoever opens the
    /// path next makes an empty store there.
    Vanished(PathBuf),
    /// A distlock server that could not be reached, or did not answer, named in the words.
    Unreachable(anyhow::Error),
    /// Any other failure: the store cannot be opened, read or written, is corrupt or newer,
    /// stayed busy, or answered what this build cannot read.
    Failed(anyhow::Error),
}

impl Error {
    /// The same error, a [`Error::Failed`] one's words changed by `words` (the others say what
    /// they are already).
    #[must_use]
    pub fn reworded(self, words: impl FnOnce(anyhow::Error) -> anyhow::Error) -> Error {
        match self {
            Error::Failed(err) => Error::Failed(words(err)),
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotAllowed(reason) => f.write_str(reason),
            Error::Vanished(path) => write!(f, "the store {} no longer exists", path.display()),
            // `{:#}` prints anyhow's whole context chain as one sentence.
            Error::Unreachable(err) | Error::Failed(err) => write!(f, "{err:#}"),
        }
    }
}

/// The causes are in the words already ([`fmt::Display`]), so no source is given: a chain
/// printed with `{:#}` says each once.
impl std::error::Error for Error {}

impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Error {
        Error::Failed(err)
    }
}

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Error {
        Error::Failed(err.into())
    }
}

impl From<postgres::Error> for Error {
    fn from(err: postgres::Error) -> Error {
        Error::Failed(err.into())
    }
}

/// The result of a store's work.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_says_what_it_is_and_only_failed_ones_are_reworded() {
        let cases = [
            (
                Error::NotAllowed("the distlock server http://h refused the token".into()),
                "the distlock server http://h refused the token",
            ),
            (
                Error::Vanished(PathBuf::from("/x/locks.db")),
                "the store /x/locks.db no longer exists",
            ),
            (
                Error::Unreachable(anyhow::anyhow!("refused").context("cannot reach h")),
                "cannot reach h: refused",
            ),
            (
                Error::Failed(anyhow::anyhow!("disk full").context("cannot write")),
                "cannot write: disk full",
            ),
        ];
        for (err, words) in cases {
            assert_eq!(err.to_string(), words);
            let failed = matches!(err, Error::Failed(_));
            let reworded = err.reworded(|err| err.context("again")).to_string();
            assert_eq!(
                reworded,
                if failed {
                    format!("again: {words}")
                } else {
                    words.to_owned()
                }
            );
        }
        // Wrapped in anyhow, as the server logs it, it is said once.
        let wrapped = anyhow::Error::new(Error::Failed(anyhow::anyhow!("a").context("b")));
        assert_eq!(format!("{wrapped:#}"), "b: a");
    }
}
