//! One function per subcommand: call the store, print the result, return the exit code.

use crate::answer::{
    Answer, BreakAnswer, ListAnswer, ShapedAcquire, ShapedRelease, ShapedRenew, StatusAnswer,
};
use crate::cli::{
    AcquireArgs, BreakArgs, Cli, Command, GcArgs, ListArgs, LogArgs, ReleaseArgs, RenewArgs,
    RunArgs, ServeArgs, TokenAddArgs, TokenCommand,
};
use crate::engine::Request;
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::guard::{self, RunSpec};
use crate::lock::{Breaking, LogQuery, MAX_REMARK_BYTES, Members, Remark, Resource};
use crate::output::{Printer, StatusLine};
use crate::store::{self, Access, Location, LockStore, Locks, NetworkFs, op};
use crate::wait;

/// Runs the parsed command line.
///
/// # Errors
///
/// Failures that keep a command from an answer, each with its exit code ([`Error::exit`]);
/// every expected "no" is an [`Exit`] value.
pub fn dispatch(cli: Cli) -> Result<Exit> {
    let printer = Printer::new(cli.format.into());
    // A token is made where the server's tokens file is, with no store at all.
    let cli = match cli.command {
        Command::Token(TokenCommand::Add(args)) => return token_add(printer, args),
        command => Cli { command, ..cli },
    };
    let db = match cli.db {
        Some(db) => Some(db),
        None => db_from_env()?,
    };
    let network_fs = NetworkFs::from_env(std::env::var_os("DISTLOCK_ALLOW_NETWORK_FS").as_deref())
        .map_err(Error::Usage)?;
    let location = Location::resolve(db.as_deref(), network_fs).map_err(Error::Usage)?;
    // Three ways in, by what the command may do to a SQLite store: `acquire` and `run` create
    // it if needed; the commands that change only what they find create nothing (a store that
    // is not there holds nothing to change: they answer as for an empty one); the read-only
    // commands open it read-only, and create nothing either.
    if let Location::Server(url) = &location {
        // A token that cannot be sent is the command line's mistake, not the server's.
        store::server_authorization().map_err(Error::Usage)?;
        match &cli.command {
            Command::Gc(_) => {
                return Err(Error::Usage(format!(
                    "gc runs where the store is, not through the distlock server {}: run it \
                     there with its --db",
                    url.as_str()
                )));
            }
            Command::Serve(_) => {
                return Err(Error::Usage(format!(
                    "a server serves a store, not another server ({}): give serve a file path \
                     or a postgres:// URL",
                    url.as_str()
                )));
            }
            _ => {}
        }
    }
    let open = || store::open(&location, Access::Create).map_err(Error::Store);
    let existing = || store::open(&location, Access::Existing).map_err(Error::Store);
    let read_only = || store::open(&location, Access::ReadOnly).map_err(Error::Store);
    // A lock set's members are checked before the store is opened: like every other
    // argument, too many of them leave the store untouched (not even created).
    match cli.command {
        Command::Run(args) => guard::run(&location, run_spec(args)?),
        Command::Acquire(mut args) => {
            let members = members(std::mem::take(&mut args.resources))?;
            acquire(open()?.as_mut(), printer, &members, args)
        }
        Command::Status(args) => status(read_only()?.as_mut(), printer, &args.resource),
        Command::Release(mut args) => {
            let members = members(std::mem::take(&mut args.resources))?;
            release(existing()?.as_mut(), printer, &members, &args)
        }
        Command::Renew(mut args) => {
            let members = members(std::mem::take(&mut args.resources))?;
            renew(existing()?.as_mut(), printer, &members, &args)
        }
        Command::List(args) => list(read_only()?.as_mut(), printer, args),
        Command::Log(args) => log(read_only()?.as_mut(), printer, args),
        Command::Gc(args) => gc(existing()?.as_mut(), printer, args),
        Command::Break(args) => break_lock(existing()?.as_mut(), printer, args),
        Command::Serve(args) => crate::serve::run(location, serve_spec(args)?),
        Command::Token(TokenCommand::Add(args)) => token_add(printer, args),
    }
}

/// `DISTLOCK_DB`, when `--db` is not given; empty counts as unset.
///
/// # Errors
///
/// A usage error for a value that is not UTF-8.
fn db_from_env() -> Result<Option<String>> {
    match std::env::var_os("DISTLOCK_DB") {
        None => Ok(None),
        Some(value) if value.is_empty() => Ok(None),
        Some(value) => value
            .into_string()
            .map(Some)
            .map_err(|_| Error::Usage("DISTLOCK_DB must be valid UTF-8".to_owned())),
    }
}

/// What `serve` was asked for, as plain values.
///
/// # Errors
///
/// A usage error for `--tls-cert` without `--tls-key`, or the other way round.
fn serve_spec(args: ServeArgs) -> Result<crate::serve::Spec> {
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(crate::serve::TlsFiles { cert, key }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::Usage(
                "--tls-cert needs --tls-key: give both PEM files, or neither".to_owned(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::Usage(
                "--tls-key needs --tls-cert: give both PEM files, or neither".to_owned(),
            ));
        }
    };
    Ok(crate::serve::Spec {
        listen: args.listen,
        tls,
        insecure_http: args.insecure_http,
        tokens: args.tokens,
        bounds: crate::serve::Bounds {
            waiters: args.max_waiters as usize,
            waiters_per_token: args.max_waiters_per_token as usize,
            store_connections: args.store_connections as usize,
        },
    })
}

/// The members of the lock set `resources` names.
///
/// # Errors
///
/// A usage error for more than 64 once deduplicated.
fn members(resources: Vec<Resource>) -> Result<Members> {
    Members::new(resources).map_err(Error::Usage)
}

fn run_spec(args: RunArgs) -> Result<RunSpec> {
    Ok(RunSpec {
        members: members(args.resources)?,
        owner: args.owner,
        ttl: args.ttl,
        wait: args.wait,
        mode: args.mode.mode(),
        note: args.mode.note,
        conflict_exit_code: args.conflict_exit_code,
        kill_after: args.kill_after,
        hold_at_least: args.hold_at_least,
        max_runtime: args.max_runtime,
        command: args.command,
    })
}

fn acquire(
    store: &mut dyn LockStore,
    printer: Printer,
    members: &Members,
    args: AcquireArgs,
) -> Result<Exit> {
    let request = Request {
        owner: args.owner.owner,
        ttl: args.ttl,
        mode: args.mode.mode(),
        note: args.mode.note,
        waits: false,
        guarded: false,
    };
    let mut on_busy = StatusLine::reporter(args.wait, &members.listed());
    let waited = wait::acquire(store, members, &request, args.wait, &mut on_busy)?;
    drop(on_busy);
    match waited.attempt(&members.listed()) {
        Ok(attempt) => {
            let outcome = &attempt.outcome;
            let shaped = ShapedAcquire::new(members.shape(), members, outcome, request.mode);
            answer(printer, &shaped)
        }
        Err(interrupted) => Ok(interrupted),
    }
}

fn status(store: &mut dyn LockStore, printer: Printer, resource: &Resource) -> Result<Exit> {
    let status = store.perform(op::Status {
        resource: resource.clone(),
    })?;
    answer(printer, &StatusAnswer::new(resource, &status))
}

fn release(
    store: &mut dyn LockStore,
    printer: Printer,
    members: &Members,
    args: &ReleaseArgs,
) -> Result<Exit> {
    let outcome = store.perform(op::Release {
        members: members.clone(),
        owner: args.owner.owner.clone(),
        fences: None,
    })?;
    answer(
        printer,
        &ShapedRelease::new(members.shape(), members, &outcome),
    )
}

fn renew(
    store: &mut dyn LockStore,
    printer: Printer,
    members: &Members,
    args: &RenewArgs,
) -> Result<Exit> {
    let outcome = store.perform(op::Renew {
        members: members.clone(),
        owner: args.owner.owner.clone(),
        ttl: args.ttl,
        fences: None,
        lease_end: None,
    })?;
    answer(
        printer,
        &ShapedRenew::new(members.shape(), members, &outcome),
    )
}

fn list(store: &mut dyn LockStore, printer: Printer, args: ListArgs) -> Result<Exit> {
    let locks = store.perform(op::List {
        prefix: args.prefix,
    })?;
    answer(printer, &ListAnswer { locks })
}

fn log(store: &mut dyn LockStore, printer: Printer, args: LogArgs) -> Result<Exit> {
    let query = LogQuery {
        resource: args.resource,
        prefix: None,
        since: args.since,
        limit: args.limit,
    };
    for event in store.perform(op::Log { query })? {
        printer.emit(&event)?;
    }
    Ok(Exit::Done)
}

fn break_lock(store: &mut dyn LockStore, printer: Printer, args: BreakArgs) -> Result<Exit> {
    let resource = &args.resource;
    // A token is recorded only by a server, which knows the caller's.
    let breaking = Breaking {
        by: args.by.unwrap_or_else(operator),
        by_token: None,
        reason: args.reason,
    };
    let removed = store.perform(op::Break {
        resource: resource.clone(),
        owner: args.owner,
        breaking: breaking.clone(),
    })?;
    answer(printer, &BreakAnswer::new(resource, removed, &breaking))
}

/// Prints `answer` and returns its exit code.
fn answer(printer: Printer, answer: &impl Answer) -> Result<Exit> {
    printer.emit(answer)?;
    Ok(answer.exit())
}

/// `<user>@<hostname>`: who runs this `break`, for the history.
fn operator() -> Remark {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::Uid::current())
                .ok()
                .flatten()
                .map(|user| user.name)
        })
        .unwrap_or_else(|| format!("uid {}", nix::unistd::Uid::current()));
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned());
    let mut text: String = format!("{user}@{host}")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    while text.len() > MAX_REMARK_BYTES {
        text.pop();
    }
    Remark::parse(&text).unwrap_or_else(|_| Remark::from_store("operator"))
}

fn gc(store: &mut dyn LockStore, printer: Printer, args: GcArgs) -> Result<Exit> {
    let report = store.perform(op::Gc {
        keep_history: args.keep_history,
    })?;
    answer(printer, &report)
}

/// `token add`: a new token in the tokens file, its secret printed once.
fn token_add(printer: Printer, args: TokenAddArgs) -> Result<Exit> {
    use crate::serve::tokens::{AllResources, Resources};
    let resources = if args.all_resources {
        Resources::All(AllResources::All)
    } else {
        Resources::Prefixes(args.prefixes)
    };
    // The secret is shown once: a token is added only where it is seen, and taken out again
    // when it cannot be shown.
    crate::serve::tokens::check_secret_reaches_stdout()?;
    crate::serve::tokens::add(&args.tokens, args.name, resources, args.operator, |made| {
        printer.emit(made)
    })?;
    Ok(Exit::Done)
}
