//! Signals: how distlock catches them, in one place. Three mechanisms, each kept where it is
//! needed and nowhere else, because each answers a different question.
//!
//! - **A waiter** (`acquire --wait`, `run --wait`) must leave the queue before it exits, or it
//!   blocks those behind it until its place's liveness runs out. It notes the [`ENDING`]
//!   signals in a flag ([`Interrupts`], signal-hook's flag handlers: a store write in a
//!   handler, nothing else) and looks at the flag between attempts; a server's client whose one
//!   call is a long poll looks at it too ([`interrupted`]), so that it gives the poll up at
//!   once. Exiting 128+N after leaving, the waiter ends as if it had died of the signal.
//! - **`run`'s guard** must let no signal end it while its command runs unguarded, and must
//!   pass each on to the command: it catches every signal it can ([`forwarded`], all but
//!   [`KEPT`]), each with one `sigaction` whose handler writes the signal's number to a
//!   self-pipe that wakes the guard's event loop. That handler is the guard's own
//!   (`src/guard/process.rs`, the guard's only `unsafe`): a signal library's registry would
//!   copy its whole table at each of the sixty-odd registrations, doubling what a short `run`
//!   costs, and the numbers must arrive in order, real-time signals included.
//! - **The server** runs on tokio, whose signal streams wake the async task that waits for
//!   them ([`ServerSignals`]): SIGTERM and SIGINT stop it, SIGHUP rereads its files, and the
//!   signals that would otherwise end it though they ask nothing of it ([`shrugged_off`]:
//!   SIGUSR1, SIGALRM, …) are said in one line and change nothing.
//!
//! And in every process, SIGXFSZ is handled ([`survive_file_size_limit`]), so that a write
//! past a file-size limit fails with an error instead of killing distlock without a word.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals that ask a process to end: those a terminal, a service manager or `kill`
/// sends, `^\` (SIGQUIT) included. A waiter leaves the queue at any of them; `run` that gets
/// one before its command started does not start it.
pub const ENDING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The signals `run` keeps to itself rather than forwarding, each for its reason:
/// - SIGKILL and SIGSTOP cannot be caught;
/// - SIGSEGV, SIGBUS, SIGILL and SIGFPE report a fault in `run` itself, whose default action
///   is the only safe one; the command then dies with the guard through its parent-death
///   signal (Linux);
/// - SIGCHLD is `run`'s own news of its command: it wakes the loop and is not forwarded;
/// - SIGPIPE and SIGXFSZ are already harmless: ignored (Rust's runtime) and handled
///   ([`survive_file_size_limit`]), so that a write fails with an error instead; forwarding
///   them would hand the command signals that `run`'s own writes raised.
pub const KEPT: [i32; 9] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGCHLD,
    libc::SIGPIPE,
    libc::SIGXFSZ,
];

/// The highest signal number with a name of its own (31 on Linux and the BSDs, 31 on macOS).
const LAST_NAMED: i32 = 31;

/// Every signal `run` forwards to its command, by number: the named ones but those it keeps
/// ([`KEPT`]), and on Linux the real-time signals from `SIGRTMIN` to `SIGRTMAX` (the C
/// library keeps the two below `SIGRTMIN` for itself).
pub fn forwarded() -> Vec<i32> {
    let named = (1..=LAST_NAMED).filter(|signal| !KEPT.contains(signal));
    #[cfg(target_os = "linux")]
    let realtime = libc::SIGRTMIN()..=libc::SIGRTMAX();
    #[cfg(not(target_os = "linux"))]
    let realtime = 0..=-1;
    named.chain(realtime).collect()
}

/// Handles SIGXFSZ for the rest of the process's life: past a file-size limit (`ulimit -f`) a
/// write would otherwise kill distlock with it, leaving no message and, under `run`, an
/// unguarded command. Handled, the write fails with EFBIG instead, an ordinary store error
/// (74). `exec` resets handlers, so `run`'s command keeps the default. Best effort: a process
/// that cannot install it goes on as before.
pub fn survive_file_size_limit() {
    let _ = signal_hook::flag::register(libc::SIGXFSZ, Arc::new(AtomicBool::new(false)));
}

/// The interrupt the handlers of [`Interrupts`] noted (0: none), shared with a store whose
/// one call may itself wait long (a distlock server's long poll), so that it gives the call
/// up as soon as one arrives.
static NOTED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

/// Whether an interrupt arrived while this process waits in a queue.
pub fn interrupted() -> bool {
    NOTED
        .get()
        .is_some_and(|noted| noted.load(Ordering::SeqCst) != 0)
}

/// The [`ENDING`] signals, noted instead of ending the process while it waits, so that it can
/// leave the queue first. Dropping it puts the signals' actions back.
pub struct Interrupts {
    arrived: Arc<AtomicUsize>,
    ids: Vec<signal_hook::SigId>,
}

impl Interrupts {
    /// `None` if the handlers cannot be installed: the waiter then dies of the signal as
    /// before, and its place expires by its liveness lease.
    pub fn install() -> Option<Interrupts> {
        let arrived = Arc::clone(NOTED.get_or_init(|| Arc::new(AtomicUsize::new(0))));
        arrived.store(0, Ordering::SeqCst);
        let mut ids = Vec::new();
        for signal in ENDING {
            let id = signal_hook::flag::register_usize(
                signal,
                Arc::clone(&arrived),
                usize::try_from(signal).unwrap_or(usize::MAX),
            )
            .ok()?;
            ids.push(id);
        }
        Some(Interrupts { arrived, ids })
    }

    /// The signal that arrived, if one did.
    pub fn arrived(&self) -> Option<i32> {
        match self.arrived.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// The signals whose default action would end the server, though they ask nothing of it,
/// and which a user may send it by mistake (`kill -USR1` meant for another process, a timer's
/// SIGALRM, a profiler's SIGPROF): the server catches them, says so in one line, and serves
/// on. Left out, each for its reason: SIGPIPE, ignored from the start (Rust's runtime), so
/// that a write to a closed connection fails with an error instead; SIGQUIT, which asks to
/// quit at once with a core dump; the faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
/// SIGTRAP, SIGSYS), whose default is the only safe answer; SIGXCPU, a limit set on purpose;
/// and SIGXFSZ, handled already ([`survive_file_size_limit`]).
pub fn shrugged_off() -> Vec<(i32, &'static str)> {
    let everywhere = [
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGVTALRM, "SIGVTALRM"),
        (libc::SIGPROF, "SIGPROF"),
        (libc::SIGIO, "SIGIO"),
    ];
    #[cfg(target_os = "linux")]
    let only_here = [(libc::SIGPWR, "SIGPWR"), (libc::SIGSTKFLT, "SIGSTKFLT")];
    #[cfg(not(target_os = "linux"))]
    let only_here: [(i32, &'static str); 0] = [];
    everywhere.into_iter().chain(only_here).collect()
}

/// What a signal tells the server to do.
pub enum Told {
    /// SIGTERM or SIGINT: stop accepting, answer the waiting requests, finish, exit 0.
    Stop,
    /// SIGHUP: reread the files (the tokens, the TLS certificate and key).
    Reread,
    /// One of [`shrugged_off`], named: nothing to do but say so.
    Ignored(&'static str),
}

/// The signals the server answers, caught from start to exit (on its tokio runtime).
pub struct ServerSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
    /// [`shrugged_off`]'s, each with its name.
    ignored: Vec<(Signal, &'static str)>,
}

impl ServerSignals {
    /// Catches SIGTERM, SIGINT, SIGHUP and those of [`shrugged_off`]; from here on none of
    /// them has its default action.
    ///
    /// # Errors
    ///
    /// A signal that cannot be caught, named.
    pub fn catch() -> anyhow::Result<ServerSignals> {
        let catch = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("cannot catch {name}"))
        };
        let ignored = shrugged_off()
            .into_iter()
            .map(|(number, name)| Ok((catch(SignalKind::from_raw(number), name)?, name)))
            .collect::<anyhow::Result<_>>()?;
        Ok(ServerSignals {
            terminate: catch(SignalKind::terminate(), "SIGTERM")?,
            interrupt: catch(SignalKind::interrupt(), "SIGINT")?,
            hangup: catch(SignalKind::hangup(), "SIGHUP")?,
            ignored,
        })
    }

    /// The next signal's meaning. Cancel-safe: a signal that arrives while this is dropped is
    /// kept for the next call.
    pub async fn next(&mut self) -> Told {
        let ignored = &mut self.ignored;
        let shrugged = std::future::poll_fn(|cx| {
            for (stream, name) in ignored.iter_mut() {
                // `None` only once the runtime is going away: nothing to say then.
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*name);
                }
            }
            Poll::Pending
        });
        tokio::select! {
            _ = self.terminate.recv() => Told::Stop,
            _ = self.interrupt.recv() => Told::Stop,
            // `None` only once the runtime is going away: then this arm is left out.
            Some(()) = self.hangup.recv() => Told::Reread,
            name = shrugged => Told::Ignored(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catchable_signal_is_forwarded_but_faults_chld_pipe_and_xfsz() {
        let forwarded = forwarded();
        let named = [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTRAP,
            libc::SIGABRT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
            libc::SIGTERM,
            libc::SIGCONT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGURG,
            libc::SIGXCPU,
            libc::SIGVTALRM,
            libc::SIGPROF,
            libc::SIGWINCH,
            libc::SIGSYS,
        ];
        for signal in named {
            assert!(forwarded.contains(&signal), "{signal} is not forwarded");
        }
        #[cfg(target_os = "linux")]
        for signal in [
            libc::SIGSTKFLT,
            libc::SIGPWR,
            libc::SIGRTMIN(),
            libc::SIGRTMAX(),
        ] {
            assert!(forwarded.contains(&signal), "{signal} is not forwarded");
        }
        for signal in KEPT {
            assert!(!forwarded.contains(&signal), "{signal} is forwarded");
        }
        // Every one fits in the byte the guard's handler writes.
        assert!(forwarded.iter().all(|&signal| (1..128).contains(&signal)));
        // The C library's own real-time signals are left alone.
        #[cfg(target_os = "linux")]
        assert!(!forwarded.contains(&(libc::SIGRTMIN() - 1)));
        let mut sorted = forwarded.clone();
        sorted.dedup();
        assert_eq!(sorted, forwarded, "each signal once, in order");
        // A waiter leaves at each of the signals that end a process, and `run` forwards them.
        assert!(ENDING.iter().all(|signal| forwarded.contains(signal)));
    }

    #[test]
    fn the_server_shrugs_off_only_signals_that_ask_nothing_of_it() {
        let shrugged = shrugged_off();
        for (number, name) in &shrugged {
            // Named as `kill -l` names them.
            let named = nix::sys::signal::Signal::try_from(*number).expect("a signal");
            assert_eq!(named.as_str(), *name);
        }
        let numbers: Vec<i32> = shrugged.iter().map(|(number, _)| *number).collect();
        for signal in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM] {
            assert!(numbers.contains(&signal), "{signal} is not shrugged off");
        }
        // What the server answers, what asks it to quit, the faults, SIGPIPE (ignored from
        // the start) and SIGXFSZ (handled) are not.
        let answered = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];
        let left = [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGABRT,
        ];
        let others = [libc::SIGPIPE, libc::SIGXFSZ, libc::SIGXCPU, libc::SIGKILL];
        for signal in answered.iter().chain(&left).chain(&others) {
            assert!(!numbers.contains(signal), "{signal} is shrugged off");
        }
    }
}
