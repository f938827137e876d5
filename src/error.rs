//! The one error type below `main`: each failure knows its exit code (docs/src/reference/exit-codes.md), so
//! nothing has to guess that "every `Err` is 74".
//!
//! An expected "no" (busy, not held, forbidden) is never an [`Error`]: it is an outcome value
//! (see [`crate::lock`]). An `Error` is what stops a command from getting an answer at all.

use std::fmt;

use crate::exit::Exit;

#[derive(Debug)]
pub enum Error {
    /// A value the command line cannot mean (exit 64). Mostly caught by clap at the edge; this
    /// covers what can only be checked later, such as an unreadable `--db` URL.
    Usage(String),
    /// The store cannot be opened, read or written, is corrupt or newer, stayed busy, or the
    /// server is unreachable (exit 74); a server refused the token, or the request is outside
    /// its scope (exit 77).
    Store(crate::store::Error),
    /// The operating system refused what distlock needs to guard a command — a thread, a signal
    /// handler (exit 74, as docs/src/reference/exit-codes.md gives a failure before the command starts; it says
    /// what was refused, so it is never mistaken for a store problem).
    System(anyhow::Error),
    /// The answer could not be written to stdout: a full disk, a closed pipe (exit 74). Whatever
    /// the command did in the store stands.
    Output(std::io::Error),
}

impl Error {
    /// The exit code this failure ends the process with.
    pub fn exit(&self) -> Exit {
        match self {
            Error::Usage(_) => Exit::Usage,
            // A distlock server refused the token, or the request is outside its scope.
            Error::Store(crate::store::Error::NotAllowed(_)) => Exit::Forbidden,
            Error::Store(_) | Error::System(_) | Error::Output(_) => Exit::Store,
        }
    }

    pub fn system(context: &str, err: impl Into<anyhow::Error>) -> Error {
        Error::System(err.into().context(context.to_owned()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) => f.write_str(message),
            Error::Store(err) => write!(f, "{err}"),
            // `{:#}` prints anyhow's whole context chain as one sentence.
            Error::System(err) => write!(f, "{err:#}"),
            Error::Output(err) => write!(f, "cannot write the answer to stdout: {err}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::store::Error> for Error {
    fn from(err: crate::store::Error) -> Error {
        Error::Store(err)
    }
}

/// What reaches the command layer as a plain `anyhow::Error` comes from the store's side (a
/// store's own words, with context): a store failure.
impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Error {
        Error::Store(crate::store::Error::Failed(err))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_exit_code() {
        assert_eq!(Error::Usage("bad".into()).exit(), Exit::Usage);
        let store = |err| Error::Store(err);
        assert_eq!(store(anyhow::anyhow!("disk").into()).exit(), Exit::Store);
        let refused = crate::store::Error::NotAllowed("the server refused the token".into());
        assert_eq!(store(refused).exit(), Exit::Forbidden);
        let gone = crate::store::Error::Vanished("/x/locks.db".into());
        assert_eq!(store(gone).exit(), Exit::Store);
        let system = Error::system("cannot start a thread", std::io::Error::other("EAGAIN"));
        assert_eq!(system.exit(), Exit::Store);
        assert_eq!(system.to_string(), "cannot start a thread: EAGAIN");
        let full = Error::Output(std::io::Error::from_raw_os_error(28));
        assert_eq!(full.exit(), Exit::Store);
        assert!(
            full.to_string()
                .starts_with("cannot write the answer to stdout: No space left on device"),
            "{full}"
        );
    }
}
