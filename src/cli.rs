//! The command line, as clap types. Value parsers turn raw strings into validated domain values
//! here, at the edge, so a bad name or duration is a usage error (exit 64) before any store is
//! touched.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::lock::{Mode, Owner, Remark, Resource, TokenName, Ttl, parse_duration, parse_span};

const AFTER_HELP: &str = "\
Exit codes: 0 done/held, 1 not held, 64 usage, 74 store error, 75 busy, 77 forbidden,
78 mode mismatch; run also: the command's status, 124 lease lost, 126 cannot execute,
127 not found.";

// The crontab line is short enough to stay one line at 80 columns, so it survives a paste.
const RUN_AFTER_HELP: &str = "\
Examples:
# cron: back up every 5 minutes, skip quietly while the last run holds the lock
*/5 * * * * distlock run --resource backup --conflict-exit-code 0 -- backup.sh

# wait up to 10 minutes for the deploy lock, then deploy
distlock run --resource deploy --wait 10m -- ./deploy.sh production

# take the database and the cache together, all or nothing, in any order
distlock run --resource db --resource cache -- ./migrate-and-flush.sh

Exit codes: the command's own status (128+N if it died of signal N); 75 busy (or
--conflict-exit-code); 78 mode mismatch; 124 distlock stopped the command (lease
lost, or --max-runtime); 126 cannot execute; 127 command (or its interpreter) not
found; 64 usage; 74 store error.";

const RUN_LONG_ABOUT: &str = "\
Run a command while holding a lock, renewing it until the command exits.

run acquires the lock (waiting in line up to --wait), starts the command directly (no shell), \
with DISTLOCK_RESOURCE, DISTLOCK_OWNER, DISTLOCK_FENCE and DISTLOCK_DB in its environment, and \
renews the lease every ttl/3. If the lease is lost (the lock expired and was taken, was \
broken, or renewals failed so long that it could expire), or the command runs past \
--max-runtime, run stops the command and everything it started (SIGTERM, SIGKILL after \
--kill-after) and exits 124; with failing renewals the command is gone before the lease can \
end.

Every signal run can catch is forwarded to the command; ^Z stops both, and fg continues \
both. When the command exits, run releases the lock (or keeps it until --hold-at-least) and \
exits with the command's status.

With --resource given more than once, run takes a lock set: every resource at once, in one \
transaction, or none (see distlock acquire). The command then gets DISTLOCK_RESOURCES, a JSON \
array of the names, and DISTLOCK_FENCES, a JSON object from each name to its fence \
({\"cache\":7,\"db\":8}), instead of DISTLOCK_RESOURCE and DISTLOCK_FENCE. One heartbeat \
renews the whole set; if any member is lost or broken, the lease is lost: the command is \
stopped (124) and the other members are released.";

const ACQUIRE_LONG_ABOUT: &str = "\
Take a lock (or extend your own); exit 75 if another owner holds it.

Several resources make a lock set, taken all at once or not at all: one transaction grants a \
tenure on every member, or changes nothing. The members are sorted and repeats dropped (1 to \
64 of them), so the order they are listed in does not matter, and two sets listed in opposite \
orders never deadlock. --shared, --limit and --note apply to every member. With --wait, a set \
waits in line on every member at once and holds nothing while it waits; nobody who comes \
later overtakes it on any member, so a member that is free meanwhile is kept for it.

A set's answer: {\"acquired\":true,\"locks\":[...]}, a lock per member, each with its own \
fence; busy (75): {\"acquired\":false,\"resources\":[...],\"blocked\":[...]}, each member that \
is not free now with its holder; a mode mismatch (78) names the first such member. Each \
member is a tenure of its own for status, list, log and break.";

const RENEW_LONG_ABOUT: &str = "\
Extend your lock's lease; exit 1 if not held, 77 if another owner holds it.

Several resources: a lock set, renewed in one transaction only if you hold every member live; \
otherwise nothing changes, and the answer and the exit code are those of the first member, by \
resource, that is not yours.";

const RELEASE_LONG_ABOUT: &str = "\
Give up your lock; exit 1 if not held, 77 if another owner holds it.

Several resources: a lock set, released in one transaction only if you hold every member live; \
otherwise nothing changes, and the answer and the exit code are those of the first member, by \
resource, that is not yours.";

/// Leased, named locks for scripts, cron jobs and CI steps.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// Lock store: a SQLite file path, a postgres:// URL, or a distlock server's http(s):// URL
    /// [env: DISTLOCK_DB]
    /// [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]
    // Read by hand, not through clap's `env`: an empty DISTLOCK_DB counts as unset, and the
    // variable may hold a password, which help and usage lines must never show.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<String>,

    /// Output format of lock commands
    #[arg(long, global = true, value_enum, default_value_t = FormatArg::Json)]
    pub format: FormatArg,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub enum FormatArg {
    /// One JSON object per line
    Json,
    /// One human-readable line per result
    Text,
}

impl From<FormatArg> for crate::output::Format {
    fn from(format: FormatArg) -> Self {
        match format {
            FormatArg::Json => crate::output::Format::Json,
            FormatArg::Text => crate::output::Format::Text,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock (or extend your own); exit 75 if another owner holds it
    #[command(long_about = ACQUIRE_LONG_ABOUT)]
    Acquire(AcquireArgs),
    /// Show who holds a lock; exit 1 if nobody does
    Status(StatusArgs),
    /// Give up your lock; exit 1 if not held, 77 if another owner holds it
    #[command(long_about = RELEASE_LONG_ABOUT)]
    Release(ReleaseArgs),
    /// Extend your lock's lease; exit 1 if not held, 77 if another owner holds it
    #[command(long_about = RENEW_LONG_ABOUT)]
    Renew(RenewArgs),
    /// Run a command while holding a lock, renewing it until the command exits
    #[command(after_help = RUN_AFTER_HELP, long_about = RUN_LONG_ABOUT)]
    Run(RunArgs),
    /// List the live locks, sorted by resource
    List(ListArgs),
    /// Show lock history, oldest first
    Log(LogArgs),
    /// Delete expired locks and old history
    Gc(GcArgs),
    /// Force-release a lock (operators): remove its live tenures, recording who and why
    Break(BreakArgs),
    /// Serve the HTTP lock API over the store, for CI runners and programs
    #[command(long_about = SERVE_LONG_ABOUT)]
    Serve(ServeArgs),
    /// Make tokens for distlock serve --tokens
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Add a token to a tokens file and print its secret, this once only
    #[command(long_about = TOKEN_ADD_LONG_ABOUT)]
    Add(TokenAddArgs),
}

const TOKEN_ADD_LONG_ABOUT: &str = "\
Add a token to a tokens file and print its secret, this once only.

The file (made readable by its owner only, when missing) keeps the token's name, the SHA-256 \
of its secret, the resources it may use and whether it is an operator's; never the secret. \
The answer is one JSON line: {\"token\":NAME,\"secret\":\"dl_...\",\"file\":PATH}. Give the secret \
to the caller (as DISTLOCK_TOKEN, or Authorization: Bearer), then send SIGHUP to a running \
server to reread the file.

The secret is shown only this once, so a token is added only where it can be seen: with stdout \
closed or /dev/null nothing is added, and when the answer cannot be written (a full disk, a \
closed pipe) the token is taken out of the file again (exit 74 either way). A file, or a \
folder above it, that group or others may write is refused (64), as the server refuses it.";

#[derive(Debug, Args)]
pub struct TokenAddArgs {
    /// The token's name, as the server's log lines and history events show it (letters,
    /// digits, '.', '_', '-')
    #[arg(value_parser = TokenName::parse)]
    pub name: TokenName,
    /// The tokens file to add it to
    #[arg(long, value_name = "FILE")]
    pub tokens: std::path::PathBuf,
    /// A resource prefix the token may use (repeat for more); "deploy/" allows deploy/prod
    #[arg(
        long = "prefix",
        value_name = "PREFIX",
        value_parser = parse_prefix,
        required_unless_present = "all_resources",
        conflicts_with = "all_resources"
    )]
    pub prefixes: Vec<String>,
    /// The token may use every resource
    #[arg(long)]
    pub all_resources: bool,
    /// The token is an operator's: it may break any lock, and sees every resource in list
    /// and log
    #[arg(long)]
    pub operator: bool,
}

/// A resource prefix, by the rule a tokens file's prefixes follow too
/// ([`crate::serve::tokens::check_prefix`]).
fn parse_prefix(raw: &str) -> Result<String, String> {
    crate::serve::tokens::check_prefix(raw)?;
    Ok(raw.to_owned())
}

const SERVE_LONG_ABOUT: &str = "\
Serve the HTTP lock API over the store, for CI runners and programs.

POST /locks/{r} acquires (owner, ttl_seconds; optional shared, limit, note, wait_seconds), GET \
/locks/{r} shows the holder (404 when free), DELETE /locks/{r} releases (204; 404 not held, \
403 another owner's), POST /locks/{r}/renew and POST /locks/{r}/break as the commands of the \
same names, GET /locks?prefix=P lists, GET /log shows the history, GET /health and GET \
/metrics report on the server (HEAD as GET, without the body). The bodies are the JSON the \
commands print; every other answer is a problem document (RFC 9457). The first line on stderr \
names the address served (http:// or https://), one line per address; then one line per \
request. GET /health answers within 1 s, 503 \"store unavailable\" when the store does not \
answer; the cause goes to stderr and /metrics.

--listen takes an address or a host name (localhost:7878): a name is listened on at every \
address it resolves to, on one port, and each must pass the rule below.

Without tokens the server listens on loopback addresses only. With --tls-cert and --tls-key \
(PEM files: the certificate chain, the server's own certificate first, and its private key) \
it serves HTTPS; --insecure-http is for plain HTTP beyond loopback, behind a proxy that \
terminates TLS. A TLS handshake, like a request's headers, must be done within 10 s; a \
client that reads none of its answers for 10 s is disconnected.

The tokens file is trusted as ssh trusts authorized_keys: a regular file, that neither it nor \
a folder above it may be written by group or others (a sticky folder of root's, as /tmp, \
aside), owned like those folders by the server's user or root; else the server does not start \
(64). A certificate that has expired, or expires within 7 days, is served but named in a \
warning line on stderr.

SIGHUP rereads the tokens file and the TLS files: new connections get the new certificate, \
open ones keep theirs; a file that cannot be read or used keeps the old tokens or \
certificate, with one line on stderr saying why. SIGTERM or SIGINT: waiting requests are \
answered, the others finish, exit 0.";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address or host name and port to listen on (loopback only without tokens); a name
    /// is listened on at every address it resolves to; port 0 picks a free one
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:7878",
        value_parser = crate::serve::Listen::parse
    )]
    pub listen: crate::serve::Listen,
    /// Callers must show a token of this file (see distlock token add); SIGHUP rereads it
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<std::path::PathBuf>,
    /// Serve HTTPS with the certificate chain in this PEM file (with --tls-key)
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert's certificate, a PEM file
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub tls_key: Option<std::path::PathBuf>,
    /// Serve plain HTTP beyond loopback, for a proxy in front that terminates TLS
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
    pub insecure_http: bool,
    /// The most requests waiting in a queue at once; past it a waiting request is answered
    /// 429 with Retry-After
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_waiters: u32,
    /// The most requests of one token waiting at once (callers without a token count as one)
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_waiters_per_token: u32,
    /// The most connections to the store for reads (status, list, log), beside the one that
    /// writes and the one that listens, whatever the number of waiters
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub store_connections: u32,
}

#[derive(Debug, Args)]
pub struct OwnerArg {
    /// Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$
    #[arg(long, env = "DISTLOCK_OWNER", hide_env_values = true, value_parser = Owner::parse)]
    pub owner: Owner,
}

/// How to hold the lock: exclusive (the default), shared, or one of N; and why.
#[derive(Debug, Args)]
pub struct ModeArgs {
    /// Hold a shared lock: any number of shared holders at once, and no exclusive one (as
    /// flock -s)
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
    /// Hold one of N slots: at most N holders at once, each asking with the same N (2-10000;
    /// 1 is the plain exclusive lock)
    #[arg(long, value_name = "N", value_parser = Mode::parse_limit, allow_hyphen_values = true)]
    pub limit: Option<Mode>,
    /// Why or for whom the lock is held (shown by status, list and log)
    #[arg(long, value_name = "TEXT", value_parser = Remark::parse)]
    pub note: Option<Remark>,
}

impl ModeArgs {
    pub fn mode(&self) -> Mode {
        if self.shared {
            Mode::Shared
        } else {
            self.limit.unwrap_or_default()
        }
    }
}

#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The resource to lock, e.g. payment:42 (1-255 bytes, no control characters); several
    /// make a lock set, taken all at once or not at all (at most 64)
    #[arg(value_parser = Resource::parse, required = true, num_args = 1.., value_name = "RESOURCE")]
    pub resources: Vec<Resource>,
    #[command(flatten)]
    pub owner: OwnerArg,
    /// Lease length: whole seconds, e.g. 30, 90s, 5m, 1h30m (at most 365 days)
    #[arg(long, value_parser = Ttl::parse, allow_hyphen_values = true)]
    pub ttl: Ttl,
    /// Keep trying for this long while another owner holds the lock [default: 0, try once]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    #[command(flatten)]
    pub mode: ModeArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The resource to look up
    #[arg(value_parser = Resource::parse)]
    pub resource: Resource,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The resource to unlock; several: a lock set, every member released or none
    #[arg(value_parser = Resource::parse, required = true, num_args = 1.., value_name = "RESOURCE")]
    pub resources: Vec<Resource>,
    #[command(flatten)]
    pub owner: OwnerArg,
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The resource whose lease to extend; several: a lock set, every member renewed or none
    #[arg(value_parser = Resource::parse, required = true, num_args = 1.., value_name = "RESOURCE")]
    pub resources: Vec<Resource>,
    #[command(flatten)]
    pub owner: OwnerArg,
    /// New lease length from now: whole seconds, e.g. 30, 90s, 5m
    #[arg(long, value_parser = Ttl::parse, allow_hyphen_values = true)]
    pub ttl: Ttl,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The resource to lock while the command runs; repeat it for a lock set, taken all at
    /// once (at most 64)
    #[arg(long = "resource", value_parser = Resource::parse, required = true, value_name = "RESOURCE")]
    pub resources: Vec<Resource>,
    /// Owner name (never read from DISTLOCK_OWNER) [default: <hostname>:<pid>:<random>]
    #[arg(long, value_parser = Owner::parse)]
    pub owner: Option<Owner>,
    /// Lease length, renewed every ttl/3 while the command runs
    #[arg(long, value_parser = Ttl::parse, default_value = "30s", allow_hyphen_values = true)]
    pub ttl: Ttl,
    /// Keep trying for this long while another owner holds the lock [default: 0, try once]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    #[command(flatten)]
    pub mode: ModeArgs,
    /// Exit with this code (0-255) instead of 75 when the lock is busy; 0 skips quietly
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub conflict_exit_code: Option<u8>,
    /// Keep the lock until this long after the tenure started, however soon the command ends
    /// (once per period across hosts); e.g. 50m
    #[arg(long, value_parser = parse_span, value_name = "DURATION", allow_hyphen_values = true)]
    pub hold_at_least: Option<Duration>,
    /// Stop the command (exit 124) if it still runs this long after it started; e.g. 2h
    #[arg(long, value_parser = parse_span, value_name = "DURATION", allow_hyphen_values = true)]
    pub max_runtime: Option<Duration>,
    /// When run stops the command, wait this long between SIGTERM and SIGKILL (all of it
    /// after a lost lease or --max-runtime; while renewals fail, no longer than the lease could
    /// last)
    #[arg(
        long,
        value_parser = parse_duration,
        default_value = "5s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub kill_after: Duration,
    /// The command and its arguments, run directly (no shell)
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only locks whose resource starts with this
    #[arg(long, default_value = "", hide_default_value = true)]
    pub prefix: String,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Only this resource's history
    #[arg(value_parser = Resource::parse)]
    pub resource: Option<Resource>,
    /// Only events from this long ago until now, e.g. 1h or 7d
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", allow_hyphen_values = true)]
    pub since: Option<Duration>,
    /// At most this many events (the newest), still printed oldest first
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// The resource whose lock to break
    #[arg(value_parser = Resource::parse)]
    pub resource: Resource,
    /// Why (recorded in the history, and told to the evicted run)
    #[arg(long, value_name = "TEXT", value_parser = Remark::parse)]
    pub reason: Remark,
    /// Only this owner's tenure (never read from DISTLOCK_OWNER) [default: every tenure]
    #[arg(long, value_parser = Owner::parse)]
    pub owner: Option<Owner>,
    /// Who breaks it, as the history records it; through a server with tokens the history
    /// also records the operator's token (by_token) [default: <user>@<hostname>]
    #[arg(long, value_name = "NAME", value_parser = Remark::parse)]
    pub by: Option<Remark>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Keep history events younger than this
    #[arg(
        long,
        value_parser = parse_duration,
        default_value = "30d",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub keep_history: Duration,
}

/// Clap's message for a command line it refused, made safe to print: every value it echoes
/// (the bad value, the unknown argument) is shortened and has its control characters escaped
/// ([`crate::lock::shown`]). `None` when nothing needs it, so clap prints its own, in colour
/// where the terminal has it.
pub fn refusal(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let echoed: Vec<&str> = err
        .context()
        .flat_map(|(_, value)| match value {
            ContextValue::String(value) => vec![value.as_str()],
            ContextValue::Strings(values) => values.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        })
        .filter(|value| crate::lock::shown(value) != *value)
        .collect();
    if echoed.is_empty() {
        return None;
    }
    let arg = err.get(ContextKind::InvalidArg);
    let value = err.get(ContextKind::InvalidValue);
    if let (ErrorKind::ValueValidation, Some(arg), Some(ContextValue::String(value))) =
        (err.kind(), arg, value)
    {
        // Clap's own rendering drops what looks like a terminal escape from the value, so the
        // line is written here, whole.
        let why = std::error::Error::source(err).map_or(String::new(), |why| format!(": {why}"));
        return Some(format!(
            "error: invalid value '{}' for '{arg}'{why}\n\nFor more information, try '--help'.\n",
            crate::lock::shown(value)
        ));
    }
    let mut text = err.render().to_string();
    for value in echoed {
        text = text.replace(value, &crate::lock::shown(value));
    }
    // What could not be found to be replaced is cut short all the same.
    let lines: Vec<String> = text.lines().map(crate::lock::shown_line).collect();
    Some(lines.join("\n") + "\n")
}

/// `--version` (or `-V`) was given with other arguments, which it would ignore.
pub fn version_with_extra_arguments() -> bool {
    std::env::args_os().len() > 2
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
