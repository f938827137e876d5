//! `distlock serve`: the HTTP lock API over the store that `--db` names, with the same engine,
//! so every rule of the command line holds through it. Over PostgreSQL the server keeps no
//! state of its own (any number of servers may serve one database); over SQLite it is one
//! node beside the command line's own users of the file.
//!
//! - **HTTP/1.1 with hyper** on a small tokio runtime (two threads), plain or over TLS
//!   ([`tls`], with `--tls-cert` and `--tls-key`). Every lock operation is carried out by the
//!   store's one writer thread, which commits whatever is queued together ([`writer`]); reads
//!   run on read-only connections, at most `--store-connections` at once ([`readers`]); never
//!   on the async threads.
//! - **Limits:** headers must arrive within 10 s (a client that trickles them is dropped) and
//!   fit in 16 KiB (past 64 KiB the HTTP layer itself refuses them, with no problem document);
//!   a body holds at most 64 KiB; at most [`MAX_CONNECTIONS`] connections are served at once,
//!   and a connection that stays idle between requests is closed by the same header timeout.
//!   A TLS handshake has the same 10 s, and runs in the connection's own task: a client that
//!   connects and says nothing holds one connection's place for 10 s and never delays the
//!   accepting of others. A write that makes no progress for 10 s (a client that reads none of
//!   its answers) closes the connection ([`stall`]).
//! - **Where:** `--listen` takes an address or a host name ([`Listen`]), resolved at start and
//!   listened on at each of its addresses, on one port.
//! - **Health** ([`health`]): `/health` waits at most 700 ms for one shared probe of the
//!   store, so that it answers within 900 ms, and says only whether the store answers; the
//!   cause goes to the log and `/metrics`.
//! - **Waiting** requests are tasks that sleep between their looks ([`waiting`]), rung by the
//!   writer and by one watcher of the store ([`watcher`]), for at most 30 s per request; the
//!   place in the queue is kept for the client's next request. They are bounded per token and
//!   per server ([`waiters`]): past a bound, 429.
//! - **Signals:** SIGTERM or SIGINT stop the accepting, answer the waiting requests at once
//!   (busy, their places kept), let the requests in flight finish, and exit 0. SIGHUP rereads
//!   what the server reads from files ([`reread`]: the TLS certificate and key), and never
//!   stops the server. A signal that asks nothing of the server but would end it by default
//!   (SIGUSR1, SIGUSR2, SIGALRM, …: [`crate::signals::shrugged_off`]) is one line, `ignoring
//!   SIGUSR1`, and changes nothing. All are caught before the first line on stderr says where
//!   the server listens.
//! - **Exposure** ([`exposure`]): loopback addresses only without tokens; beyond loopback,
//!   HTTPS or `--insecure-http`. The files and the address are checked before the store is
//!   opened, so a refused start touches no store.

mod access;
mod api;
mod exposure;
mod health;
mod lanes;
mod listen;
mod metrics;
mod operations;
mod problem;
mod queues;
mod readers;
mod reply;
mod reread;
mod shared;
mod stall;
mod tls;
pub mod tokens;
mod ui;
mod waiters;
mod waiting;
mod watcher;
mod work;
mod writer;

pub use tls::TlsFiles;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::output::warn;
use crate::protocol::{LONGEST_POLL, MAX_HEAD};
use crate::signals::{ServerSignals, Told};
use crate::store::{self, Location, Locks, op};

pub use listen::Listen;
use listen::exposed;
use readers::Readers;
use reread::{Reread, Rereads};
use shared::Shared;
use waiters::Waiters;
use writer::Writer;

/// The most connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 16_384;

/// How long a client may take to send a request's headers, and a connection may stay idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a write to a client may make no progress (the client reads none of its answers,
/// its window stays shut) before its connection is closed: the header timeout's rule, for the
/// other direction.
const WRITE_TIMEOUT: Duration = HEADER_TIMEOUT;

/// How long a client may take to finish a TLS handshake: the header timeout's rule, applied
/// before there are headers to read.
const HANDSHAKE_TIMEOUT: Duration = HEADER_TIMEOUT;

/// The most bytes the HTTP layer reads of a request line and headers; past [`MAX_HEAD`]
/// of them distlock answers 414 or 431 itself, with a problem document, and past this the HTTP
/// layer does (with an empty body).
const HEAD_BUFFER: usize = 4 * MAX_HEAD;

/// The most headers the HTTP layer reads: as many as [`HEAD_BUFFER`] can hold, the shortest
/// header line being 4 bytes (`a:` and CRLF), so that a head is only ever refused by the HTTP
/// layer for its bytes, never for its count, and any head within the buffer, of long headers
/// or many short ones, reaches distlock's own 431 with its problem document. The HTTP layer
/// sets aside 64 bytes per header for each head it parses (1 MiB, not written to), and
/// reads no more than the buffer whatever the count.
const MAX_HEADERS: usize = HEAD_BUFFER / 4;

/// How `distlock serve` was asked to serve: the command line's flags as plain values.
#[derive(Debug)]
pub struct Spec {
    pub listen: Listen,
    /// `--tls-cert` and `--tls-key`: HTTPS with the chain and key in these PEM files.
    pub tls: Option<TlsFiles>,
    /// `--insecure-http`: plain HTTP beyond loopback, for a proxy in front that terminates TLS.
    pub insecure_http: bool,
    /// `--tokens`: callers show a token of this file.
    pub tokens: Option<std::path::PathBuf>,
    pub bounds: Bounds,
}

/// What one server holds at most, whatever its callers send.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// `--max-waiters`: requests waiting in a queue at once.
    pub waiters: usize,
    /// `--max-waiters-per-token`: one token's requests waiting at once.
    pub waiters_per_token: usize,
    /// `--store-connections`: the store's connections for reads.
    pub store_connections: usize,
}

/// Serves the HTTP API as `spec` says until SIGTERM or SIGINT.
///
/// # Errors
///
/// A usage error for an address the exposure rule refuses, or a tokens file or TLS files that
/// cannot be read or used (before the store is touched); a store error when the store cannot
/// be opened; a system error when the address cannot be listened on or a signal cannot be
/// caught.
pub fn run(location: Location, spec: Spec) -> Result<Exit> {
    let addresses = spec.listen.resolve().map_err(Error::Usage)?;
    exposed(
        &spec.listen,
        &addresses,
        spec.tls.is_some(),
        spec.insecure_http,
        spec.tokens.is_some(),
    )
    .map_err(Error::Usage)?;
    let tokens = match spec.tokens {
        Some(path) => Some(Arc::new(
            tokens::TokensFile::load(path)
                .map_err(|err| Error::Usage(format!("--tokens: {err:#}")))?,
        )),
        None => None,
    };
    let certificate = match spec.tls {
        Some(files) => Some(Arc::new(
            tls::Certificate::load(files).map_err(Error::Usage)?,
        )),
        None => None,
    };
    let acceptor = match &certificate {
        Some(certificate) => Some(tls::acceptor(Arc::clone(certificate)).map_err(Error::System)?),
        None => None,
    };
    // Everything the server reads from files, which SIGHUP rereads.
    let mut rereads: Vec<Arc<dyn Reread>> = Vec::new();
    if let Some(tokens) = &tokens {
        rereads.push(Arc::clone(tokens) as Arc<dyn Reread>);
    }
    if let Some(certificate) = certificate {
        rereads.push(certificate);
    }
    raise_open_files();
    // The store is opened (and made, for SQLite) before anything is served, so a store that
    // cannot be used is one error at start, not one per request.
    let mut first = store::open(&location, store::Access::Create).map_err(Error::Store)?;
    // The schema made (or upgraded) now, on PostgreSQL too, where the first operation does it:
    // the readers' connections never make one.
    let made = op::List {
        prefix: "\u{1}".to_owned(),
    };
    first.perform(made).map_err(Error::Store)?;
    let bounds = spec.bounds;
    let waiters = Arc::new(Waiters::new(bounds.waiters_per_token, bounds.waiters));
    let threads = |err: std::io::Error| {
        Error::System(anyhow::Error::new(err).context("cannot start the server's threads"))
    };
    let writer = Writer::start(first, Arc::clone(&waiters)).map_err(threads)?;
    watcher::start(location.clone(), Arc::clone(&waiters)).map_err(threads)?;
    let state = Arc::new(Shared {
        writer,
        readers: Arc::new(Readers::new(location.clone(), bounds.store_connections)),
        waiters,
        metrics: metrics::Metrics::of_store(&location),
        health: health::Health::default(),
        stopping: AtomicBool::new(false),
        tokens,
        store_names: location.names(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("serve")
        .enable_all()
        .build()
        .context("cannot start the server's threads")
        .map_err(Error::System)?;
    let front = Front {
        listen: addresses,
        tls: acceptor,
        rereads: Arc::new(Rereads::new(rereads)),
    };
    runtime.block_on(serve(state, front))?;
    // Blocking work still running (a wait the shutdown ended but not yet noticed) is not
    // waited for past this.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(Exit::Done)
}

/// Raises the soft limit on open files to the hard one (at most 65,536), so that the server
/// can hold its [`MAX_CONNECTIONS`] where the soft limit is lower (1,024 by default on Linux).
/// Best effort: what the system refuses leaves the limit as it was, and connections past it
/// wait to be accepted.
fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let wanted = hard.min(65_536);
        if soft < wanted {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, wanted, hard);
        }
    }
}

/// Where and how the server meets its clients.
struct Front {
    /// The addresses of `--listen`, each listened on.
    listen: Vec<SocketAddr>,
    /// HTTPS when set; plain HTTP otherwise.
    tls: Option<TlsAcceptor>,
    /// What SIGHUP rereads.
    rereads: Arc<Rereads>,
}

async fn serve(state: Arc<Shared>, front: Front) -> Result<()> {
    // Caught before anything is said on stderr, so a signal sent as soon as the server says
    // where it listens is answered, never the default action (which for SIGHUP is to die).
    let mut signals = ServerSignals::catch().map_err(Error::System)?;
    let (listeners, skipped) = bind_all(&front.listen).map_err(Error::System)?;
    let scheme = if front.tls.is_some() { "https" } else { "http" };
    // One line per address, the first one first: where the server listens.
    for listener in &listeners {
        if let Ok(bound) = listener.local_addr() {
            warn(format_args!("listening on {scheme}://{bound}"));
        }
    }
    for (address, why) in &skipped {
        warn(format_args!(
            "not listening on {address}: this system has no such address ({why})"
        ));
    }
    let mut next = 0;
    if let Some(tokens) = state.tokens() {
        let known = tokens.len();
        let plural = if known == 1 { "" } else { "s" };
        warn(format_args!("{known} token{plural} let callers in"));
    }
    front.rereads.warn_now();
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    // Told when the accepting stops, so that handshakes under way end at once instead of
    // holding the shutdown up for their timeout.
    let (stop, stop_told) = tokio::sync::watch::channel(());
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => permit,
            told = signals.next() => match told {
                Told::Stop => break,
                Told::Reread => { front.rereads.reread_soon(); continue; }
                Told::Ignored(name) => { warn(format_args!("ignoring {name}")); continue; }
            },
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = accept_any(&listeners, &mut next) => accepted,
            told = signals.next() => match told {
                Told::Stop => break,
                Told::Reread => { front.rereads.reread_soon(); continue; }
                Told::Ignored(name) => { warn(format_args!("ignoring {name}")); continue; }
            },
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors, or a connection reset before it was accepted: the
            // others are served on; try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        // A client that stops reading its answers is let go after WRITE_TIMEOUT (TLS
        // included: the bound is under it).
        let stream = stall::Bounded::new(stream, WRITE_TIMEOUT);
        let state = Arc::clone(&state);
        let watcher = graceful.watcher();
        let tls = front.tls.clone();
        let mut stop_told = stop_told.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(TokioIo::new(stream), state, watcher).await,
                Some(acceptor) => {
                    let handshake = tokio::select! {
                        done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => done,
                        _ = stop_told.changed() => return,
                    };
                    // A handshake that failed or took too long: the client is dropped.
                    if let Ok(Ok(stream)) = handshake {
                        serve_connection(TokioIo::new(stream), state, watcher).await;
                    }
                }
            }
        });
    }
    drop(listeners);
    state.stopping.store(true, Ordering::SeqCst);
    state.waiters.ring_all();
    let _ = stop.send(());
    // Waiting requests notice within a pause (250 ms) and answer; the others finish.
    let _ = tokio::time::timeout(LONGEST_POLL + Duration::from_secs(5), graceful.shutdown()).await;
    Ok(())
}

/// What [`bind_all`] bound, and the addresses it skipped with why.
type Bound = (
    Vec<tokio::net::TcpListener>,
    Vec<(SocketAddr, std::io::Error)>,
);

/// Binds every address in `addresses`, in order: port 0 takes a free port for the first and
/// the same port for the others, so that one port serves every address. An address this
/// system does not have (`::1` where IPv6 is off, though `localhost` names it) is skipped
/// while another is bound: the listeners, and the addresses skipped with why.
///
/// # Errors
///
/// An address that cannot be listened on for another reason (in use, not allowed), or none at
/// all bound.
fn bind_all(addresses: &[SocketAddr]) -> anyhow::Result<Bound> {
    let mut bound = Vec::new();
    let mut skipped = Vec::new();
    let mut port = None;
    for &given in addresses {
        let mut address = given;
        if let (Some(port), 0) = (port, address.port()) {
            address.set_port(port);
        }
        let listener = match std::net::TcpListener::bind(address) {
            Ok(listener) => listener,
            Err(err) if not_here(&err) => {
                skipped.push((address, err));
                continue;
            }
            Err(err) => return Err(err).with_context(|| format!("cannot listen on {address}")),
        };
        let listener = listener
            .set_nonblocking(true)
            .and_then(|()| {
                port = Some(listener.local_addr()?.port());
                tokio::net::TcpListener::from_std(listener)
            })
            .with_context(|| format!("cannot listen on {address}"))?;
        bound.push(listener);
    }
    if bound.is_empty() {
        if let Some((address, err)) = skipped.into_iter().next() {
            return Err(err).with_context(|| format!("cannot listen on {address}"));
        }
        anyhow::bail!("no address to listen on");
    }
    Ok((bound, skipped))
}

/// Whether binding failed for an address this system does not have, or a family it does not
/// speak.
fn not_here(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(code) if code == nix::libc::EADDRNOTAVAIL || code == nix::libc::EAFNOSUPPORT
    )
}

/// The next connection on any of `listeners`, taking them in turn from `next` so that none
/// is served before the others all the time.
async fn accept_any(
    listeners: &[tokio::net::TcpListener],
    next: &mut usize,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    std::future::poll_fn(|cx| {
        for turn in 0..listeners.len() {
            let at = (*next + turn) % listeners.len();
            if let std::task::Poll::Ready(accepted) = listeners[at].poll_accept(cx) {
                *next = (at + 1) % listeners.len();
                return std::task::Poll::Ready(accepted);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Serves HTTP/1.1 requests on one connection (plain, or after its TLS handshake) until the
/// client or the shutdown closes it.
async fn serve_connection<I>(io: I, state: Arc<Shared>, watcher: Watcher)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(HEAD_BUFFER)
        .max_headers(MAX_HEADERS)
        .serve_connection(
            io,
            service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, std::convert::Infallible>(api::handle(state, request).await) }
            }),
        );
    let _ = watcher.watch(connection).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_address_is_bound_on_one_port_and_a_missing_one_is_skipped() {
        let two: Vec<SocketAddr> = vec![
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.2:0".parse().unwrap(),
        ];
        let (bound, skipped) = bind_all(&two).unwrap();
        assert!(skipped.is_empty());
        let ports: Vec<u16> = bound
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        assert_eq!(ports.len(), 2);
        assert_ne!(ports[0], 0);
        assert_eq!(ports[0], ports[1], "one port for every address");
        // Both accept, taken in turn.
        let mut next = 0;
        for address in &two {
            let mut address = *address;
            address.set_port(ports[0]);
            let _client = std::net::TcpStream::connect(address).unwrap();
            let (stream, _) = accept_any(&bound, &mut next).await.unwrap();
            assert_eq!(stream.local_addr().unwrap(), address);
        }
        // 192.0.2.1 (documentation) is no address of this machine: skipped while another
        // is bound; alone, an error.
        let absent: SocketAddr = "192.0.2.1:0".parse().unwrap();
        let (bound, skipped) = bind_all(&[two[0], absent]).unwrap();
        assert_eq!((bound.len(), skipped.len()), (1, 1));
        assert_eq!(skipped[0].0.ip(), absent.ip());
        let alone = bind_all(&[absent]).expect_err("nothing bound");
        assert!(format!("{alone:#}").starts_with("cannot listen on 192.0.2.1"));
        // Taken: an error, not a skip.
        let taken = bound[0].local_addr().unwrap();
        assert!(bind_all(&[taken]).is_err());
    }
}
