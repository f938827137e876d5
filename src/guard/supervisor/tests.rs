//! The supervisor's rules as tables: events at given offsets in, actions at given offsets out.
//!
//! [`Sim`] plays the runner: it delivers [`Event::Timer`] exactly when [`Supervisor::deadline`]
//! comes, and can play a command that reacts to the signals it is sent.

use std::collections::VecDeque;

use crate::lock::Resource;

use super::*;

const R: &str = "r";

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).expect("a valid ttl")
}

fn warn(text: &str) -> Action {
    Action::Warn(text.to_owned())
}

const TERM_ALL: Action = Action::SignalAll(Signal::SIGTERM);
const KILL_ALL: Action = Action::SignalAll(Signal::SIGKILL);
const LOST: Action = Action::Exit(Exit::LeaseLost);

fn stopping_for_renewals() -> Action {
    warn("the lock on r could not be renewed and may expire; stopping the command")
}

fn lost_because(reason: &str) -> Action {
    warn(&format!(
        "lost the lock on r: {reason}; stopping the command"
    ))
}

/// How the simulated command answers signals.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Model {
    /// It reacts to nothing; the test says when it exits.
    Passive,
    /// It survives SIGTERM, and dies 1 ms after SIGKILL.
    IgnoresTerm,
    /// It exits this long after SIGTERM, leaving workers behind that never finish (no
    /// [`Event::Emptied`]); dies 1 ms after SIGKILL.
    ExitsOnTerm(Duration),
}

/// A supervisor with a simulated runner and clock. Offsets are from the acquire, whose lease
/// ends at `t0 + ttl`.
struct Sim {
    t0: Instant,
    now: Instant,
    supervisor: Supervisor,
    model: Model,
    command_alive: bool,
    /// Events still to come, by time; in the order scheduled at equal times.
    queue: VecDeque<(Instant, Event)>,
    /// Every action, with the offset it was given at.
    log: Vec<(Duration, Action)>,
}

impl Sim {
    fn new(ttl_secs: u64, kill_after: Duration) -> Sim {
        Sim::with(ttl_secs, kill_after, Model::Passive)
    }

    fn with(ttl_secs: u64, kill_after: Duration, model: Model) -> Sim {
        let t0 = Instant::now();
        let ttl = ttl(ttl_secs);
        Sim {
            t0,
            now: t0,
            supervisor: Supervisor::new(
                Resource::parse(R).expect("a valid resource"),
                ttl,
                kill_after,
                t0 + ttl.as_duration(),
            ),
            model,
            command_alive: true,
            queue: VecDeque::new(),
            log: Vec::new(),
        }
    }

    fn instant(&self, offset: Duration) -> Instant {
        self.t0 + offset
    }

    fn deadline(&self) -> Option<Duration> {
        self.supervisor.deadline().map(|at| at - self.t0)
    }

    /// Schedules `event` at `offset`, without letting time pass.
    fn schedule(&mut self, offset: Duration, event: Event) {
        let at = self.instant(offset);
        self.push(at, event);
    }

    fn push(&mut self, at: Instant, event: Event) {
        let index = self.queue.partition_point(|(queued, _)| *queued <= at);
        self.queue.insert(index, (at, event));
    }

    /// Delivers `event` at `offset` (timers due before it first) and returns what it caused.
    fn at(&mut self, offset: Duration, event: Event) -> Vec<Action> {
        self.run_to(offset);
        self.apply(event)
    }

    /// Lets time pass until `offset` while `run` is suspended (stopped by job control): no
    /// timer can fire meanwhile. Then delivers [`Event::Continued`].
    fn continued_at(&mut self, offset: Duration) -> Vec<Action> {
        self.now = self.now.max(self.instant(offset));
        self.apply(Event::Continued)
    }

    /// Lets time pass until `offset`, delivering scheduled events and due timers in order (a
    /// scheduled event before a timer due at the same instant).
    fn run_to(&mut self, offset: Duration) {
        let end = self.instant(offset);
        for _ in 0..10_000 {
            let next_event = self.queue.front().map(|(at, _)| *at);
            let next_timer = self.supervisor.deadline();
            let (when, from_queue) = match (next_timer, next_event) {
                (Some(timer), Some(at)) if timer < at => (timer, false),
                (_, Some(at)) => (at, true),
                (Some(timer), None) => (timer, false),
                (None, None) => break,
            };
            if when > end {
                break;
            }
            self.now = self.now.max(when);
            let event = if from_queue {
                self.queue
                    .pop_front()
                    .map_or(Event::Timer, |(_, event)| event)
            } else {
                Event::Timer
            };
            self.apply(event);
        }
        assert!(
            self.supervisor.deadline().is_none_or(|at| at > end)
                && self.queue.iter().all(|(at, _)| *at > end),
            "the simulation did not settle by {offset:?}"
        );
        self.now = self.now.max(end);
    }

    fn apply(&mut self, event: Event) -> Vec<Action> {
        let actions = self.supervisor.step(event, self.now);
        for action in &actions {
            self.log.push((self.now - self.t0, action.clone()));
            let dies_in = match (self.model, action) {
                (Model::Passive, _) => None,
                (_, Action::SignalAll(Signal::SIGKILL)) => Some((ms(1), 9)),
                (Model::ExitsOnTerm(delay), Action::SignalAll(Signal::SIGTERM)) => {
                    Some((delay, 15))
                }
                _ => None,
            };
            if let Some((delay, signal)) = dies_in.filter(|_| self.command_alive) {
                self.command_alive = false;
                let at = self.now + delay;
                self.push(at, Event::Exited(Ended::Signal(signal)));
            }
        }
        actions
    }

    /// The offsets at which `action` was given.
    fn times_of(&self, action: &Action) -> Vec<Duration> {
        self.log
            .iter()
            .filter(|(_, logged)| logged == action)
            .map(|(at, _)| *at)
            .collect()
    }

    fn warnings(&self) -> Vec<&str> {
        self.log
            .iter()
            .filter_map(|(_, action)| match action {
                Action::Warn(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The command's own end, while the lease holds

#[test]
fn the_commands_status_passes_through_and_a_death_by_signal_n_is_128_plus_n() {
    let table = [
        (Ended::Code(0), 0),
        (Ended::Code(1), 1),
        (Ended::Code(42), 42),
        (Ended::Code(255), 255),
        (Ended::Code(256 + 7), 7),
        (Ended::Code(-1), 255),
        (Ended::Signal(2), 130),
        (Ended::Signal(9), 137),
        (Ended::Signal(15), 143),
        (Ended::Signal(127), 255),
        (Ended::Signal(200), 255),
    ];
    for (ended, code) in table {
        let mut sim = Sim::new(30, secs(5));
        let actions = sim.at(secs(1), Event::Exited(ended.clone()));
        assert_eq!(actions, [Action::Exit(Exit::Child(code))], "{ended:?}");
        assert!(sim.supervisor.is_done(), "{ended:?}");
    }
}

#[test]
fn wait_results_become_events() {
    use crate::guard::process::ChildState;
    let exited = |ended| Some(Event::Exited(ended));
    let rtmin = libc::SIGRTMIN();
    let table = [
        (Ok(ChildState::Exited(0)), exited(Ended::Code(0))),
        (Ok(ChildState::Exited(3)), exited(Ended::Code(3))),
        (Ok(ChildState::Killed(9)), exited(Ended::Signal(9))),
        // A real-time signal has no typed name, and still counts.
        (Ok(ChildState::Killed(rtmin)), exited(Ended::Signal(rtmin))),
        // The job-control stops are news; a stop by SIGSTOP or a real-time signal, or
        // nothing new, are not.
        (
            Ok(ChildState::Stopped(libc::SIGTSTP)),
            Some(Event::Stopped(Signal::SIGTSTP)),
        ),
        (
            Ok(ChildState::Stopped(libc::SIGTTIN)),
            Some(Event::Stopped(Signal::SIGTTIN)),
        ),
        (
            Ok(ChildState::Stopped(libc::SIGTTOU)),
            Some(Event::Stopped(Signal::SIGTTOU)),
        ),
        (Ok(ChildState::Stopped(libc::SIGSTOP)), None),
        (Ok(ChildState::Stopped(rtmin)), None),
        (Ok(ChildState::Running), None),
        (
            Err(std::io::Error::from_raw_os_error(libc::ECHILD)),
            exited(Ended::Unknown(
                std::io::Error::from_raw_os_error(libc::ECHILD).to_string(),
            )),
        ),
    ];
    for (waited, event) in table {
        let shown = format!("{waited:?}");
        assert_eq!(Event::from_wait(waited), event, "{shown}");
    }
}

#[test]
fn a_command_that_exits_on_its_own_ends_supervision_at_once_without_signals() {
    let mut sim = Sim::new(3, secs(5));
    sim.at(ms(500), Event::Renewed(sim.instant(ms(400)) + secs(3)));
    sim.at(ms(700), Event::Exited(Ended::Code(0)));
    assert_eq!(sim.log, [(ms(700), Action::Exit(Exit::Child(0)))]);
    assert_eq!(sim.deadline(), None);
}

#[test]
fn a_command_whose_end_is_unknown_is_killed_with_all_it_started_and_run_exits_124() {
    let mut sim = Sim::new(30, secs(5));
    let actions = sim.at(
        secs(2),
        Event::Exited(Ended::Unknown("no child process".into())),
    );
    assert_eq!(
        actions,
        [
            warn("lost track of the command: no child process"),
            KILL_ALL,
            LOST
        ]
    );
}

#[test]
fn a_command_exiting_just_before_the_stop_deadline_keeps_its_own_status() {
    // ttl 30: renewals failing from the start stop the command at 22 s.
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Trouble("database is locked".into()));
    let actions = sim.at(ms(21_999), Event::Exited(Ended::Code(3)));
    assert_eq!(actions, [Action::Exit(Exit::Child(3))]);
    assert_eq!(sim.times_of(&TERM_ALL), Vec::<Duration>::new());
}

// ---------------------------------------------------------------------------------------------
// Forwarded signals

/// Every signal `run` forwards, by number (the real-time ones included).
fn every_forwarded_signal() -> Vec<SignalNumber> {
    crate::signals::forwarded()
}

#[test]
fn every_signal_is_forwarded_to_the_process_group_only() {
    for signal in every_forwarded_signal() {
        let mut sim = Sim::new(30, secs(5));
        assert_eq!(
            sim.at(secs(1), Event::Signal(signal)),
            [Action::SignalGroup(signal)],
            "{signal}"
        );
        // Forwarding changes nothing else: the command keeps running under a held lease.
        assert_eq!(sim.deadline(), Some(secs(22)), "{signal}");
        assert!(!sim.supervisor.is_done(), "{signal}");
    }
}

#[test]
fn a_signal_that_arrives_as_the_command_starts_is_forwarded_before_anything_else() {
    // The runner's first look after the spawn may find a signal, the command's end and a
    // renewal at once, in that order: the signal reaches the command, then its status counts.
    for signal in every_forwarded_signal() {
        let mut sim = Sim::new(30, secs(5));
        assert_eq!(
            sim.at(Duration::ZERO, Event::Signal(signal)),
            [Action::SignalGroup(signal)],
            "{signal}"
        );
        assert_eq!(
            sim.at(Duration::ZERO, Event::Exited(Ended::Signal(signal))),
            [Action::Exit(Exit::Child(
                u8::try_from(128 + signal).unwrap_or(u8::MAX)
            ))],
            "{signal}"
        );
    }
}

#[test]
fn signals_are_forwarded_in_every_phase_until_the_exit() {
    // (what happens first, the phase it leads to)
    let mut stopping = Sim::new(30, secs(5));
    stopping.at(secs(1), Event::Lost("gone".into()));
    let mut killed = Sim::new(30, secs(5));
    killed.at(secs(1), Event::Lost("gone".into()));
    killed.run_to(secs(6));
    let mut draining = Sim::new(30, secs(5));
    draining.at(secs(1), Event::Lost("gone".into()));
    draining.at(secs(2), Event::Exited(Ended::Signal(15)));
    let mut capped = capped(30, secs(5), secs(2), Model::IgnoresTerm);
    capped.run_to(secs(3));
    for (name, mut sim) in [
        ("stopping", stopping),
        ("killed", killed),
        ("draining", draining),
        ("stopping at --max-runtime", capped),
    ] {
        for signal in every_forwarded_signal() {
            let now = sim.now - sim.t0;
            assert_eq!(
                sim.at(now, Event::Signal(signal)),
                [Action::SignalGroup(signal)],
                "{name}: {signal}"
            );
        }
    }
    let mut done = Sim::new(30, secs(5));
    done.at(secs(1), Event::Exited(Ended::Code(0)));
    for signal in every_forwarded_signal() {
        assert_eq!(done.at(secs(2), Event::Signal(signal)), [], "{signal}");
    }
}

// ---------------------------------------------------------------------------------------------
// Job control: ^Z, a background read, `fg`

const CONT: Action = Action::SignalGroup(Signal::SIGCONT as SignalNumber);
const CONT_ALL: Action = Action::SignalAll(Signal::SIGCONT);

#[test]
fn a_command_stopped_by_job_control_suspends_run_with_the_same_signal() {
    for signal in [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU] {
        let mut sim = Sim::new(30, secs(5));
        // Everything the command started stops with it, then `run`.
        assert_eq!(
            sim.at(secs(1), Event::Stopped(signal)),
            [Action::SignalAll(Signal::SIGSTOP), Action::Suspend(signal)],
            "{signal}"
        );
        // Continued soon after (`fg`): the terminal goes back to the command, and everything
        // continues.
        assert_eq!(
            sim.continued_at(secs(4)),
            [Action::Foreground, CONT_ALL],
            "{signal}"
        );
        assert!(sim.warnings().is_empty());
        assert_eq!(sim.supervisor.stopped(), None);
        assert_eq!(sim.deadline(), Some(secs(22)), "{signal}");
    }
}

#[test]
fn a_job_continued_past_what_its_lease_allows_is_stopped_or_killed_not_continued() {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Then {
        /// Continued: the terminal and the command back.
        Resumed,
        /// SIGTERM and a SIGCONT so it acts on it; SIGKILL at the given offset.
        Stopped(Duration),
        /// SIGKILL at once, the command never continued.
        Killed,
    }
    // (ttl, kill_after, continued at, renewed until) → then
    let cases = [
        // Lease end 30 s, margin 3 s, grace 5 s: the renewal stop is at 22 s.
        (30, secs(5), secs(21), None, Then::Resumed),
        // Between the renewal stop and lease end − margin: SIGKILL by 27 s at the latest.
        (30, secs(5), secs(22), None, Then::Stopped(secs(27))),
        (30, secs(60), secs(23), None, Then::Stopped(secs(27))),
        (30, secs(1), secs(26), None, Then::Stopped(secs(27))),
        // At or past lease end − margin: killed while still stopped.
        (30, secs(5), secs(27), None, Then::Killed),
        (30, secs(5), secs(40), None, Then::Killed),
        (3, secs(5), secs(3600), None, Then::Killed),
        // A renewal just before the stop moved the lease end to 40 s: continued long after
        // the acquire, before the stop at 40 − 3 − 5 s; after it; past 37 s.
        (30, secs(5), secs(31), Some(secs(40)), Then::Resumed),
        (
            30,
            secs(5),
            secs(33),
            Some(secs(40)),
            Then::Stopped(secs(37)),
        ),
        (30, secs(5), secs(45), Some(secs(40)), Then::Killed),
    ];
    for (ttl_secs, kill_after, continued, renewed, then) in cases {
        let shown = format!("ttl {ttl_secs}, continued at {continued:?}, renewed {renewed:?}");
        let mut sim = Sim::with(ttl_secs, kill_after, Model::IgnoresTerm);
        if let Some(until) = renewed {
            let lease_end = sim.instant(until);
            sim.at(ms(50), Event::Renewed(lease_end));
        }
        assert_eq!(
            sim.at(ms(100), Event::Stopped(Signal::SIGTSTP)),
            [
                Action::SignalAll(Signal::SIGSTOP),
                Action::Suspend(Signal::SIGTSTP)
            ]
        );
        let actions = sim.continued_at(continued);
        match then {
            Then::Resumed => {
                assert_eq!(actions, [Action::Foreground, CONT_ALL], "{shown}");
                continue;
            }
            Then::Stopped(kill_at) => {
                assert_eq!(
                    actions,
                    [
                        warn(
                            "the lock on r may expire soon after the job was stopped; stopping the command"
                        ),
                        TERM_ALL,
                        CONT
                    ],
                    "{shown}"
                );
                sim.run_to(continued + secs(120));
                assert_eq!(sim.times_of(&KILL_ALL).first(), Some(&kill_at), "{shown}");
            }
            Then::Killed => {
                assert_eq!(
                    actions,
                    [
                        warn(
                            "the lock on r may have expired while the job was stopped; killing the command"
                        ),
                        KILL_ALL,
                    ],
                    "{shown}"
                );
                // Its death is all that is left to hear.
                sim.run_to(continued + secs(120));
                assert!(!sim.log.iter().any(|(_, a)| *a == CONT), "{shown}");
            }
        }
        assert_eq!(sim.times_of(&LOST).len(), 1, "{shown}");
        assert_eq!(sim.supervisor.stopped(), Some(Stop::LeaseLost), "{shown}");
    }
}

#[test]
fn a_command_stopped_while_being_stopped_is_continued_so_it_gets_the_sigterm() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(1), Event::Lost("gone".into()));
    assert_eq!(sim.at(secs(2), Event::Stopped(Signal::SIGTSTP)), [CONT]);
    // A `run` continued in any phase but the first continues its command, nothing more.
    assert_eq!(sim.at(secs(3), Event::Continued), [CONT]);
    sim.run_to(secs(10));
    assert_eq!(sim.times_of(&KILL_ALL).first(), Some(&secs(6)));
    let mut done = Sim::new(30, secs(5));
    done.at(secs(1), Event::Exited(Ended::Code(0)));
    assert_eq!(done.at(secs(2), Event::Stopped(Signal::SIGTSTP)), []);
    assert_eq!(done.at(secs(2), Event::Continued), []);
}

// ---------------------------------------------------------------------------------------------
// Renewals: the heartbeat's news

#[test]
fn successful_renewals_say_nothing_and_move_the_stop_deadline() {
    let mut sim = Sim::new(30, secs(5));
    assert_eq!(
        sim.deadline(),
        Some(secs(22)),
        "30 - 3 - 5 from the acquire"
    );
    assert_eq!(
        sim.at(secs(10), Event::Renewed(sim.instant(ms(9_990)) + secs(30))),
        []
    );
    assert_eq!(sim.deadline(), Some(ms(9_990 + 22_000)));
}

#[test]
fn an_older_renewal_never_shortens_the_lease() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Renewed(sim.instant(secs(10)) + secs(30)));
    // A renewal that was slow to answer reports an earlier lease end than the last one.
    sim.at(secs(11), Event::Renewed(sim.instant(secs(5)) + secs(30)));
    assert_eq!(sim.deadline(), Some(secs(32)));
}

#[test]
fn healthy_renewals_never_stop_the_command() {
    for ttl_secs in [1, 2, 3, 10, 30] {
        let ttl_d = secs(ttl_secs);
        let mut sim = Sim::new(ttl_secs, secs(5));
        // 300 renewals, each sent every ttl/3 and answered 50 ms later.
        for k in 1..=300u32 {
            let sent = ttl_d / 3 * k;
            sim.at(sent + ms(50), Event::Renewed(sim.instant(sent) + ttl_d));
        }
        assert_eq!(sim.log, [], "ttl {ttl_secs}");
    }
}

#[test]
fn a_renewal_outage_is_reported_once_however_many_retries_fail() {
    let mut sim = Sim::new(30, secs(5));
    let first = sim.at(secs(10), Event::Trouble("disk I/O error".into()));
    assert_eq!(
        first,
        [warn(
            "cannot renew the lock on r (retrying): disk I/O error"
        )]
    );
    for retry in 11..20 {
        assert_eq!(
            sim.at(secs(retry), Event::Trouble("disk I/O error".into())),
            []
        );
    }
    assert_eq!(sim.warnings().len(), 1);
}

#[test]
fn the_end_of_an_outage_is_reported_once() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Trouble("timeout".into()));
    let back = sim.at(secs(11), Event::Renewed(sim.instant(secs(11)) + secs(30)));
    assert_eq!(back, [warn("renewing the lock on r again")]);
    let quiet = sim.at(secs(21), Event::Renewed(sim.instant(secs(21)) + secs(30)));
    assert_eq!(quiet, []);
}

#[test]
fn each_new_outage_is_reported_again() {
    let mut sim = Sim::new(30, secs(5));
    for start in [10, 20, 30] {
        sim.at(secs(start), Event::Trouble(format!("outage at {start}")));
        sim.at(secs(start + 1), Event::Trouble("retry".into()));
        sim.at(
            secs(start + 2),
            Event::Renewed(sim.instant(secs(start + 2)) + secs(30)),
        );
    }
    assert_eq!(
        sim.warnings(),
        [
            "cannot renew the lock on r (retrying): outage at 10",
            "renewing the lock on r again",
            "cannot renew the lock on r (retrying): outage at 20",
            "renewing the lock on r again",
            "cannot renew the lock on r (retrying): outage at 30",
            "renewing the lock on r again",
        ]
    );
    assert_eq!(sim.times_of(&TERM_ALL), Vec::<Duration>::new());
}

#[test]
fn a_renewal_that_succeeds_late_in_an_outage_pushes_the_stop_back() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Trouble("timeout".into()));
    sim.at(secs(21), Event::Renewed(sim.instant(secs(20)) + secs(30)));
    sim.run_to(secs(41));
    assert_eq!(
        sim.times_of(&TERM_ALL),
        Vec::<Duration>::new(),
        "not at 22 s any more"
    );
    sim.run_to(secs(42));
    assert_eq!(sim.times_of(&TERM_ALL), [secs(42)], "20 + 30 - 3 - 5");
}

// ---------------------------------------------------------------------------------------------
// The lease lost: the store says the lock is gone or taken

#[test]
fn a_lost_lease_sends_sigterm_to_everything_and_sigkill_kill_after_later() {
    let mut sim = Sim::new(3, secs(1));
    sim.at(secs(1), Event::Renewed(sim.instant(secs(1)) + secs(3)));
    let actions = sim.at(ms(2_000), Event::Lost("it expired or was released".into()));
    assert_eq!(
        actions,
        [lost_because("it expired or was released"), TERM_ALL]
    );
    assert_eq!(sim.deadline(), Some(secs(3)));
    sim.run_to(ms(2_999));
    assert_eq!(
        sim.times_of(&KILL_ALL),
        Vec::<Duration>::new(),
        "not before --kill-after"
    );
    sim.run_to(secs(3));
    assert_eq!(sim.times_of(&KILL_ALL), [secs(3)]);
    assert_eq!(sim.deadline(), None, "only the command's end is awaited");
    let end = sim.at(ms(3_010), Event::Exited(Ended::Signal(9)));
    assert_eq!(end, [KILL_ALL, LOST], "what it forked meanwhile goes too");
}

#[test]
fn a_refused_renewal_stops_the_command_at_once_and_kills_it_before_the_lease_can_end() {
    let refused = "the distlock server http://h refused the token: unknown token";
    // (ttl, --kill-after, refused at) → SIGKILL at. The lease runs on after the refusal and
    // frees the lock when it ends, so the SIGKILL comes by `lease_end - margin` (margin:
    // ttl/10) however long the grace, unlike for a lease already lost.
    let cases = [
        (6, secs(5), secs(2), ms(5_400)),
        (30, secs(5), secs(10), secs(15)),
        (30, secs(60), secs(10), secs(27)),
        (3, Duration::ZERO, secs(1), secs(1)),
    ];
    for (ttl, kill_after, at, kill) in cases {
        let case = format!("ttl {ttl}, --kill-after {kill_after:?}, refused at {at:?}");
        let mut sim = Sim::new(ttl, kill_after);
        let actions = sim.at(at, Event::Refused(refused.into()));
        assert_eq!(actions, [lost_because(refused), TERM_ALL], "{case}");
        sim.run_to(secs(ttl));
        assert_eq!(sim.times_of(&KILL_ALL), [kill], "{case}");
        let end = sim.at(secs(ttl), Event::Exited(Ended::Signal(9)));
        assert_eq!(end.last(), Some(&LOST), "{case}: 124");
    }
    // A refusal after the command was stopped, or once it ended, changes nothing.
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(1), Event::Lost("another owner holds it".into()));
    assert_eq!(sim.at(secs(2), Event::Refused(refused.into())), []);
    assert_eq!(sim.deadline(), Some(secs(6)));
}

#[test]
fn a_lost_lease_gives_the_full_kill_after_even_beyond_the_ttl() {
    // The lease is gone already: there is no lease end left to respect, so the user's grace
    // holds, unlike with failing renewals.
    let mut sim = Sim::new(2, secs(30));
    sim.at(secs(1), Event::Lost("another owner holds it".into()));
    assert_eq!(sim.deadline(), Some(secs(31)));
}

#[test]
fn a_lost_lease_with_no_grace_kills_at_once() {
    let mut sim = Sim::new(3, Duration::ZERO);
    sim.at(secs(1), Event::Lost("another owner holds it".into()));
    sim.run_to(secs(1));
    assert_eq!(
        sim.log,
        [
            (secs(1), lost_because("another owner holds it")),
            (secs(1), TERM_ALL),
            (secs(1), KILL_ALL),
        ]
    );
}

#[test]
fn news_after_the_stop_changes_nothing_and_says_nothing() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(1), Event::Lost("it expired or was released".into()));
    for (offset, event) in [
        (ms(1_100), Event::Lost("another owner holds it".into())),
        (ms(1_200), Event::Trouble("timeout".into())),
        (ms(1_300), Event::Renewed(sim.instant(ms(1_300)) + secs(30))),
        (ms(1_400), Event::Emptied),
        (ms(1_500), Event::Timer),
    ] {
        let shown = format!("{event:?}");
        assert_eq!(sim.at(offset, event), [], "{shown}");
        assert_eq!(sim.deadline(), Some(secs(6)), "{shown}");
    }
}

#[test]
fn a_stop_for_failing_renewals_is_not_undone_by_a_late_renewal() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Trouble("timeout".into()));
    sim.run_to(secs(22));
    let back = sim.at(secs(23), Event::Renewed(sim.instant(secs(9)) + secs(30)));
    assert_eq!(back, [], "no \"again\": the command is being stopped");
    sim.run_to(secs(27));
    assert_eq!(sim.times_of(&KILL_ALL), [secs(27)]);
}

// ---------------------------------------------------------------------------------------------
// After the stop: the command exits, what it started gets the rest of its grace

#[test]
fn after_a_stop_the_commands_exit_leaves_its_workers_the_rest_of_their_grace() {
    let mut sim = Sim::new(30, secs(2));
    sim.at(secs(1), Event::Lost("it expired or was released".into()));
    assert_eq!(sim.at(ms(1_050), Event::Exited(Ended::Signal(15))), []);
    assert_eq!(sim.deadline(), Some(secs(3)));
    sim.run_to(ms(2_999));
    assert_eq!(sim.times_of(&KILL_ALL), Vec::<Duration>::new());
    sim.run_to(secs(3));
    assert_eq!(
        sim.log[2..],
        [(secs(3), KILL_ALL), (secs(3), LOST)],
        "{:?}",
        sim.log
    );
    assert!(sim.supervisor.is_done());
}

#[test]
fn after_a_stop_run_exits_as_soon_as_nothing_is_left() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(1), Event::Lost("it expired or was released".into()));
    sim.at(ms(1_050), Event::Exited(Ended::Code(0)));
    assert_eq!(
        sim.at(ms(1_500), Event::Timer),
        [],
        "a probe: workers remain"
    );
    assert_eq!(sim.at(ms(1_600), Event::Emptied), [KILL_ALL, LOST]);
    assert_eq!(sim.deadline(), None);
}

#[test]
fn a_command_exiting_after_its_kill_time_ends_supervision_at_once() {
    // The runner may hear of the exit before its own timer: SIGKILL is due, so it goes now.
    let mut sim = Sim::new(30, secs(1));
    sim.at(secs(1), Event::Lost("it expired or was released".into()));
    let now = sim.instant(secs(5));
    assert_eq!(
        sim.supervisor.step(Event::Exited(Ended::Code(0)), now),
        [KILL_ALL, LOST]
    );
}

#[test]
fn an_unknown_end_after_the_stop_is_treated_like_any_end() {
    let mut sim = Sim::new(30, secs(2));
    sim.at(secs(1), Event::Lost("it expired or was released".into()));
    assert_eq!(
        sim.at(ms(1_500), Event::Exited(Ended::Unknown("ECHILD".into()))),
        [],
        "no second message: the lease is lost anyway"
    );
    sim.run_to(secs(3));
    assert_eq!(sim.times_of(&LOST), [secs(3)]);
}

#[test]
fn emptied_means_nothing_before_the_command_exited_after_a_stop() {
    let mut running = Sim::new(30, secs(5));
    assert_eq!(running.at(secs(1), Event::Emptied), []);
    assert_eq!(running.deadline(), Some(secs(22)));
    let mut stopping = Sim::new(30, secs(5));
    stopping.at(secs(1), Event::Lost("gone".into()));
    assert_eq!(stopping.at(secs(2), Event::Emptied), []);
    assert_eq!(stopping.deadline(), Some(secs(6)));
}

#[test]
fn once_done_every_event_is_ignored() {
    let mut sim = Sim::new(3, secs(1));
    sim.at(secs(1), Event::Exited(Ended::Code(0)));
    for event in [
        Event::Exited(Ended::Code(1)),
        Event::Signal(Signal::SIGTERM as SignalNumber),
        Event::Stopped(Signal::SIGTSTP),
        Event::Continued,
        Event::Renewed(sim.instant(secs(1)) + secs(3)),
        Event::Lost("gone".into()),
        Event::Trouble("timeout".into()),
        Event::Timer,
        Event::Emptied,
    ] {
        let shown = format!("{event:?}");
        assert_eq!(sim.at(secs(10), event), [], "{shown}");
    }
    assert_eq!(sim.deadline(), None);
}

// ---------------------------------------------------------------------------------------------
// Failing renewals: stop before the lease can expire

#[test]
fn failing_renewals_stop_the_command_at_its_grace_before_lease_end_minus_margin() {
    // (ttl s, --kill-after, SIGTERM at, SIGKILL at), renewals failing from the acquire on.
    let table = [
        // margin 3 s, grace min(5 s, 7.5 s)
        (30, secs(5), ms(22_000), ms(27_000)),
        // margin 3 s, grace 1 s
        (30, secs(1), ms(26_000), ms(27_000)),
        // margin 400 ms, grace capped at ttl/4 = 1 s
        (4, secs(30), ms(2_600), ms(3_600)),
        // margin at least 100 ms, grace ttl/4 = 250 ms
        (1, secs(5), ms(650), ms(900)),
        // margin 100 ms (ttl/10 = 100 ms), grace 200 ms
        (1, ms(200), ms(700), ms(900)),
        // margin 6 min, grace 5 s
        (3_600, secs(5), ms(3_235_000), ms(3_240_000)),
        // no grace: both at once
        (10, Duration::ZERO, ms(9_000), ms(9_000)),
    ];
    for (ttl_secs, kill_after, term_at, kill_at) in table {
        let mut sim = Sim::new(ttl_secs, kill_after);
        sim.at(ms(10), Event::Trouble("unreachable".into()));
        sim.run_to(secs(ttl_secs));
        let case = format!("ttl {ttl_secs}, kill-after {kill_after:?}");
        assert_eq!(sim.times_of(&stopping_for_renewals()), [term_at], "{case}");
        assert_eq!(sim.times_of(&TERM_ALL), [term_at], "{case}");
        assert_eq!(sim.times_of(&KILL_ALL), [kill_at], "{case}");
    }
}

#[test]
fn failing_renewals_warn_then_signal_in_that_order() {
    let mut sim = Sim::new(30, secs(5));
    sim.at(secs(10), Event::Trouble("disk I/O error".into()));
    sim.run_to(secs(28));
    assert_eq!(
        sim.log,
        [
            (
                secs(10),
                warn("cannot renew the lock on r (retrying): disk I/O error")
            ),
            (secs(22), stopping_for_renewals()),
            (secs(22), TERM_ALL),
            (secs(27), KILL_ALL),
        ]
    );
}

#[test]
fn the_stop_comes_even_when_the_heartbeat_never_reports() {
    // A renewal blocked inside the store reports nothing at all: the deadline alone decides.
    let mut sim = Sim::new(6, secs(5));
    sim.at(secs(2), Event::Renewed(sim.instant(secs(2)) + secs(6)));
    sim.run_to(secs(8));
    // lease end 8 s, margin 600 ms, grace min(5 s, 1.5 s)
    assert_eq!(sim.times_of(&TERM_ALL), [ms(5_900)]);
    assert_eq!(sim.times_of(&KILL_ALL), [ms(7_400)]);
    assert_eq!(sim.warnings(), [stopping_for_renewals_text()]);
}

fn stopping_for_renewals_text() -> &'static str {
    "the lock on r could not be renewed and may expire; stopping the command"
}

#[test]
fn a_timer_before_its_deadline_does_nothing() {
    let mut sim = Sim::new(30, secs(5));
    for offset in [ms(0), secs(10), ms(21_999)] {
        assert_eq!(sim.at(offset, Event::Timer), [], "{offset:?}");
    }
    sim.at(secs(22), Event::Timer); // due now (delivered by run_to first)
    assert_eq!(sim.times_of(&TERM_ALL), [secs(22)]);
    assert_eq!(
        sim.at(ms(26_999), Event::Timer),
        [],
        "SIGKILL is due at 27 s"
    );
}

#[test]
fn a_late_timer_stops_at_once_and_kills_no_later_than_lease_end_minus_margin() {
    // The runner woke up late (a stalled host): SIGTERM now, SIGKILL right away since
    // lease_end - margin has passed too.
    let mut sim = Sim::new(30, secs(5));
    let now = sim.instant(ms(27_500));
    assert_eq!(
        sim.supervisor.step(Event::Timer, now),
        [stopping_for_renewals(), TERM_ALL]
    );
    assert_eq!(sim.deadline(), Some(secs(27)), "already due");
    assert_eq!(sim.supervisor.step(Event::Timer, now), [KILL_ALL]);
}

#[test]
fn the_deadline_in_each_phase() {
    let mut sim = Sim::new(30, secs(2));
    assert_eq!(
        sim.deadline(),
        Some(secs(25)),
        "running: 30 - 3 - min(2, 7.5)"
    );
    sim.at(secs(1), Event::Lost("gone".into()));
    assert_eq!(sim.deadline(), Some(secs(3)), "stopping: SIGKILL at 1 + 2");
    sim.at(secs(2), Event::Exited(Ended::Code(0)));
    assert_eq!(
        sim.deadline(),
        Some(secs(3)),
        "draining: the same SIGKILL time"
    );
    sim.run_to(secs(3));
    assert_eq!(sim.deadline(), None, "done");
    let mut killed = Sim::new(30, secs(2));
    killed.at(secs(1), Event::Lost("gone".into()));
    killed.run_to(secs(3));
    assert_eq!(killed.deadline(), None, "killed: only the exit is awaited");
}

#[test]
fn the_safety_margin_is_a_tenth_of_the_ttl_but_at_least_100_ms() {
    for (ttl_secs, margin) in [
        (1, ms(100)),
        (2, ms(200)),
        (3, ms(300)),
        (30, secs(3)),
        (86_400, secs(8_640)),
    ] {
        assert_eq!(safety_margin(ttl(ttl_secs)), margin, "ttl {ttl_secs}");
    }
}

// ---------------------------------------------------------------------------------------------
// The invariant, over many combinations

/// How renewals fail once they start failing.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// Every retry reports a store error (each `retry` apart).
    Reported,
    /// The renewal in flight blocks: nothing is heard at all.
    Silent,
    /// Errors, then one renewal (sent before the stop) succeeds after the stop began.
    LateSuccess,
}

/// One run: renewals succeed `good` times (answered `latency` after being sent, every
/// ttl/3), then fail. Returns the simulation after `ttl * (good + 3)` and the lease end the
/// successful renewals established before the stop.
fn failing_run(
    ttl_secs: u64,
    kill_after: Duration,
    good: u32,
    latency: Duration,
    failure: Failure,
    model: Model,
) -> (Sim, Duration) {
    let ttl_d = secs(ttl_secs);
    let interval = ttl_d / 3;
    let retry = interval.min(secs(1));
    let mut sim = Sim::with(ttl_secs, kill_after, model);
    let mut lease_end = ttl_d;
    for k in 1..=good {
        let sent = interval * k;
        sim.schedule(sent + latency, Event::Renewed(sim.instant(sent) + ttl_d));
        lease_end = sent + ttl_d;
    }
    let first_failure = interval * (good + 1);
    match failure {
        Failure::Reported | Failure::LateSuccess => {
            let mut sent = first_failure;
            while sent < lease_end + ttl_d {
                sim.schedule(sent + latency, Event::Trouble("unreachable".into()));
                sent += retry;
            }
        }
        Failure::Silent => {}
    }
    if let Failure::LateSuccess = failure {
        // Sent just before the stop was due, answered just after it.
        let stop = lease_end - safety_margin(ttl(ttl_secs)) - kill_after.min(ttl_d / 4);
        let sent = stop.saturating_sub(ms(1)).max(first_failure);
        sim.schedule(stop + ms(1), Event::Renewed(sim.instant(sent) + ttl_d));
    }
    sim.run_to(lease_end + ttl_d * 3);
    (sim, lease_end)
}

fn combinations() -> Vec<(u64, Duration, u32, Duration, Failure)> {
    let mut all = Vec::new();
    for ttl_secs in [1, 2, 3, 4, 5, 7, 10, 30, 61, 600] {
        for kill_after in [
            Duration::ZERO,
            ms(1),
            ms(100),
            ms(333),
            secs(1),
            secs(5),
            secs(60),
            secs(3_600),
        ] {
            for good in [0, 1, 2, 7] {
                for latency in [Duration::ZERO, ms(7), ms(90)] {
                    for failure in [Failure::Reported, Failure::Silent, Failure::LateSuccess] {
                        all.push((ttl_secs, kill_after, good, latency, failure));
                    }
                }
            }
        }
    }
    all
}

fn check_invariant(model: Model) {
    let combinations = combinations();
    assert!(combinations.len() > 2_000);
    for (ttl_secs, kill_after, good, latency, failure) in combinations {
        let (sim, lease_end) = failing_run(ttl_secs, kill_after, good, latency, failure, model);
        let case = format!(
            "ttl {ttl_secs}s, kill-after {kill_after:?}, {good} renewals, latency {latency:?}, \
             {failure:?}, {model:?}: {:?}",
            sim.log
        );
        let margin = safety_margin(ttl(ttl_secs));
        let grace = kill_after.min(secs(ttl_secs) / 4);
        let kills = sim.times_of(&KILL_ALL);
        let first_kill = *kills
            .first()
            .unwrap_or_else(|| panic!("no SIGKILL: {case}"));
        // The invariant itself.
        assert!(first_kill <= lease_end - margin, "SIGKILL too late: {case}");
        // And the schedule that keeps it, exactly.
        let terms = sim.times_of(&TERM_ALL);
        assert_eq!(terms, [lease_end - margin - grace], "SIGTERM: {case}");
        assert_eq!(
            first_kill,
            (lease_end - margin).min(terms[0] + kill_after),
            "SIGKILL: {case}"
        );
        assert_eq!(sim.times_of(&LOST).len(), 1, "exit 124 once: {case}");
        assert!(sim.supervisor.is_done(), "{case}");
        let warnings = sim.warnings();
        assert_eq!(
            warnings
                .iter()
                .filter(|w| **w == stopping_for_renewals_text())
                .count(),
            1,
            "{case}"
        );
        assert!(warnings.iter().all(|w| !w.ends_with("again")), "{case}");
        assert!(
            warnings
                .iter()
                .filter(|w| w.starts_with("cannot renew"))
                .count()
                <= 1,
            "{case}"
        );
    }
}

#[test]
fn invariant_a_command_ignoring_sigterm_is_killed_no_later_than_lease_end_minus_margin() {
    check_invariant(Model::IgnoresTerm);
}

#[test]
fn invariant_workers_left_by_a_command_that_exits_on_sigterm_are_killed_in_time() {
    for delay in [Duration::ZERO, ms(50), ms(400)] {
        check_invariant(Model::ExitsOnTerm(delay));
    }
}

// ---------------------------------------------------------------------------------------------
// --max-runtime

/// A simulation whose command may run at most `limit` from the acquire.
fn capped(ttl_secs: u64, kill_after: Duration, limit: Duration, model: Model) -> Sim {
    let mut sim = Sim::with(ttl_secs, kill_after, model);
    sim.supervisor = sim.supervisor.clone().with_max_runtime(limit, sim.t0);
    sim
}

fn renew_every(sim: &mut Sim, ttl_secs: u64, until: Duration) {
    let interval = secs(ttl_secs) / 3;
    let mut at = interval;
    while at < until {
        let lease_end = sim.instant(at + secs(ttl_secs));
        sim.schedule(at, Event::Renewed(lease_end));
        at += interval;
    }
}

#[test]
fn max_runtime_stops_the_command_with_sigterm_then_sigkill_and_exits_124() {
    let mut sim = capped(30, secs(5), secs(10), Model::IgnoresTerm);
    renew_every(&mut sim, 30, secs(60));
    sim.run_to(secs(60));
    assert_eq!(
        sim.times_of(&Action::SignalAll(Signal::SIGTERM)),
        [secs(10)],
        "SIGTERM at the limit"
    );
    assert_eq!(
        sim.times_of(&Action::SignalAll(Signal::SIGKILL)),
        [secs(15), secs(15) + ms(1)],
        "SIGKILL --kill-after later, and to what is left once it died"
    );
    assert_eq!(sim.times_of(&Action::Exit(Exit::LeaseLost)).len(), 1);
    assert_eq!(sim.supervisor.stopped(), Some(Stop::MaxRuntime));
    assert_eq!(
        sim.warnings(),
        ["the command ran for its --max-runtime of 10s; stopping it"]
    );
}

#[test]
fn under_max_runtime_kill_after_is_honoured_while_renewals_keep_the_lease() {
    // (ttl, --kill-after, limit) with renewals every ttl/3: SIGKILL exactly --kill-after
    // after the SIGTERM at the limit, also when that is later than the lease known at the
    // limit would allow.
    for (ttl_secs, kill_after, limit) in [
        (3, secs(10), secs(2)),
        (6, secs(30), secs(1)),
        (30, secs(60), secs(15)),
        (30, secs(5), secs(10)),
    ] {
        let shown = format!("ttl {ttl_secs}, kill_after {kill_after:?}, limit {limit:?}");
        let mut sim = capped(ttl_secs, kill_after, limit, Model::IgnoresTerm);
        renew_every(&mut sim, ttl_secs, limit + kill_after + secs(10));
        sim.run_to(limit + kill_after + secs(5));
        assert_eq!(sim.times_of(&TERM_ALL), [limit], "{shown}");
        assert_eq!(
            sim.times_of(&KILL_ALL).first(),
            Some(&(limit + kill_after)),
            "{shown}"
        );
        assert_eq!(sim.supervisor.stopped(), Some(Stop::MaxRuntime), "{shown}");
    }
}

#[test]
fn under_max_runtime_renewals_failing_during_the_grace_bring_the_sigkill_forward() {
    // Renewed every 3 s, last at 12 s; then the store stops answering: the lease may end at
    // 12 + 9 s, so the SIGKILL comes at 21 − margin 0.9 = 20.1 s, not at the limit + 60 s.
    let mut sim = capped(9, secs(60), secs(13), Model::IgnoresTerm);
    renew_every(&mut sim, 9, secs(13));
    sim.schedule(secs(13), Event::Trouble("unreachable".into()));
    sim.run_to(secs(120));
    assert_eq!(sim.times_of(&TERM_ALL), [secs(13)]);
    let kills = sim.times_of(&KILL_ALL);
    let last_lease_end = secs(12) + secs(9);
    assert_eq!(
        kills.first(),
        Some(&(last_lease_end - safety_margin(ttl(9))))
    );
}

#[test]
fn a_command_that_ends_before_its_max_runtime_keeps_its_own_status() {
    let mut sim = capped(30, secs(5), secs(10), Model::Passive);
    renew_every(&mut sim, 30, secs(9));
    sim.run_to(secs(9));
    let actions = sim.at(secs(9), Event::Exited(Ended::Code(3)));
    assert_eq!(actions, [Action::Exit(Exit::Child(3))]);
    assert_eq!(sim.supervisor.stopped(), None);
    assert!(sim.warnings().is_empty());
}

#[test]
fn max_runtime_is_the_deadline_while_it_comes_before_the_renewal_stop() {
    let cases = [
        // (ttl, limit, expected first deadline)
        (30, secs(2), secs(2)),
        (30, secs(3600), secs(30) - secs(3) - secs(5)),
        (3, secs(1), ms(1_000)),
    ];
    for (ttl_secs, limit, expected) in cases {
        let sim = capped(ttl_secs, secs(5), limit, Model::Passive);
        assert_eq!(
            sim.deadline(),
            Some(expected),
            "ttl {ttl_secs}, limit {limit:?}"
        );
    }
}

#[test]
fn a_max_runtime_stop_still_kills_before_the_lease_could_end() {
    // The limit comes while renewals fail: the SIGKILL may not wait for --kill-after past
    // lease_end - margin.
    for (ttl_secs, kill_after, limit) in [
        (10, secs(60), secs(2)),
        (6, secs(30), secs(1)),
        (30, secs(20), secs(15)),
    ] {
        let mut sim = capped(ttl_secs, kill_after, limit, Model::IgnoresTerm);
        sim.schedule(secs(1), Event::Trouble("unreachable".into()));
        sim.run_to(secs(ttl_secs * 4));
        let lease_end = secs(ttl_secs);
        let margin = safety_margin(ttl(ttl_secs));
        let kills = sim.times_of(&Action::SignalAll(Signal::SIGKILL));
        assert!(
            kills.first().is_some_and(|k| *k <= lease_end - margin),
            "ttl {ttl_secs}, kill_after {kill_after:?}, limit {limit:?}: SIGKILL at {kills:?}"
        );
    }
}

#[test]
fn news_after_a_max_runtime_stop_changes_nothing() {
    let mut sim = capped(30, secs(5), secs(2), Model::IgnoresTerm);
    sim.run_to(secs(2));
    assert_eq!(sim.supervisor.stopped(), Some(Stop::MaxRuntime));
    let actions = sim.at(secs(3), Event::Lost("it was broken by op (stuck)".into()));
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(sim.supervisor.stopped(), Some(Stop::MaxRuntime));
}

#[test]
fn a_lost_lease_before_the_max_runtime_is_a_lost_lease() {
    let mut sim = capped(30, secs(5), secs(20), Model::IgnoresTerm);
    let actions = sim.at(secs(4), Event::Lost("it was broken by op (stuck)".into()));
    assert_eq!(
        actions,
        [
            Action::Warn(
                "lost the lock on r: it was broken by op (stuck); stopping the command".into()
            ),
            Action::SignalAll(Signal::SIGTERM)
        ]
    );
    sim.run_to(secs(60));
    assert_eq!(sim.supervisor.stopped(), Some(Stop::LeaseLost));
    assert_eq!(sim.times_of(&Action::SignalAll(Signal::SIGTERM)), [secs(4)]);
}

#[test]
fn a_grant_too_late_to_renew_starts_nothing() {
    // (ttl, --kill-after, how long after the lease began the command would start) → the
    // reason it does not, if it does not. The renewal stop is at
    // lease end - margin - min(kill_after, ttl/4); the margin is max(ttl/10, 100 ms).
    let ended = Some("the lease had already ended");
    let ending = Some("the lease would end before it could be renewed");
    let cases: [(u64, Duration, Duration, Option<&str>); 10] = [
        (30, secs(5), secs(0), None),
        (30, secs(5), secs(21) + ms(999), None),
        (30, secs(5), secs(22), ending),
        (30, secs(5), secs(26) + ms(999), ending),
        (30, secs(5), secs(27), ended),
        (30, secs(5), secs(40), ended),
        (3, secs(5), ms(1949), None),
        (3, secs(5), ms(1950), ending),
        (1, ms(0), ms(899), None),
        (1, ms(0), ms(900), ended),
    ];
    for (ttl_secs, kill_after, at, expected) in cases {
        let t0 = Instant::now();
        let supervisor = Supervisor::new(R, ttl(ttl_secs), kill_after, t0 + secs(ttl_secs));
        let expected = expected.map(|why| {
            format!("the lock on r was granted too late: {why}; the command was not started")
        });
        assert_eq!(
            supervisor.too_late(t0 + at),
            expected,
            "ttl {ttl_secs}, --kill-after {kill_after:?}, starting {at:?} into the lease"
        );
    }
}
