//! The exit codes: every number a script may branch on, in one place (docs/src/reference/exit-codes.md).

/// What a `distlock` process exits with. `run` may also exit with its command's own status
/// (or 128+N for a command killed by signal N); see [`Exit::Child`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Acquired, renewed, released; `status`: the lock is held.
    Done,
    /// `status` of a free or expired lock; `release`/`renew` of a missing or expired lock.
    NotHeld,
    /// Bad arguments or invalid values; nothing was changed.
    Usage,
    /// The store cannot be opened, read or written, is corrupt, newer, or stayed busy.
    Store,
    /// A live lock is held by another owner (also when `--wait` runs out).
    Busy,
    /// `release`/`renew` of a live lock held by another owner.
    Forbidden,
    /// `acquire`/`run` asked for a mode that conflicts with how the live holders hold it.
    Mismatch,
    /// `run`: the lease was lost while the command ran; the command was stopped.
    LeaseLost,
    /// `run`: the command exists but cannot be executed.
    CannotExecute,
    /// `run`: the command was not found.
    CommandNotFound,
    /// `run`: the command's own exit status, or `--conflict-exit-code`.
    Child(u8),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::NotHeld => 1,
            Exit::Usage => 64,
            Exit::Store => 74,
            Exit::Busy => 75,
            Exit::Forbidden => 77,
            Exit::Mismatch => 78,
            Exit::LeaseLost => 124,
            Exit::CannotExecute => 126,
            Exit::CommandNotFound => 127,
            Exit::Child(code) => code,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn exit_codes_match_the_reference() {
        assert_eq!(Exit::Done.code(), 0);
        assert_eq!(Exit::NotHeld.code(), 1);
        assert_eq!(Exit::Usage.code(), 64);
        assert_eq!(Exit::Store.code(), 74);
        assert_eq!(Exit::Busy.code(), 75);
        assert_eq!(Exit::Forbidden.code(), 77);
        assert_eq!(Exit::Mismatch.code(), 78);
        assert_eq!(Exit::LeaseLost.code(), 124);
        assert_eq!(Exit::CannotExecute.code(), 126);
        assert_eq!(Exit::CommandNotFound.code(), 127);
        assert_eq!(Exit::Child(42).code(), 42);
    }
}
