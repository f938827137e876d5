//! `distlock serve`: the HTTP lock API over the store that `--db` names, with the same engine,
//! so every rule of the command line holds through it. Over PostgreSQL the server keeps no
//! state of its own (any number of servers may serve one database); over SQLite it is one
//! node beside the command line's own users of the file.
//!
//! - **HTTP/1.1 with hyper** on a small tokio runtime (two threads), plain or over TLS
//!   ([`tls`], with `--tls-cert` and `--tls-key`). The store's work runs on tokio's blocking
//!   threads, each operation on a store taken from a pool of open ones ([`Stores`]), never on
//!   the async threads.
//! - **Limits:** headers must arrive within 10 s (a client that trickles them is dropped) and
//!   fit in 16 KiB (past 64 KiB the HTTP layer itself refuses them, with no problem document);
//!   a body holds at most 64 KiB; at most [`MAX_CONNECTIONS`] connections are served at once,
//!   and a connection that stays idle between requests is closed by the same header timeout.
//!   A TLS handshake has the same 10 s, and runs in the connection's own task: a client that
//!   connects and says nothing holds one connection's place for 10 s and never delays the
//!   accepting of others.
//! - **Waiting** is the command line's own wait ([`crate::wait::serve`]), with the store's
//!   wake-ups, for at most 30 s per request; the place in the queue is kept for the client's
//!   next request (see [`api`]).
//! - **Signals:** SIGTERM or SIGINT stop the accepting, answer the waiting requests at once
//!   (busy, their places kept), let the requests in flight finish, and exit 0. SIGHUP rereads
//!   what the server reads from files ([`reread`]: the TLS certificate and key), and never
//!   stops the server. All three are caught before the first line on stderr says where the
//!   server listens.
//! - **Exposure** ([`exposure`]): loopback addresses only without tokens; beyond loopback,
//!   HTTPS or `--insecure-http`. The files and the address are checked before the store is
//!   opened, so a refused start touches no store.

mod access;
mod api;
mod exposure;
mod input;
mod metrics;
mod operations;
mod problem;
mod reread;
mod tls;
pub mod tokens;

pub use api::{API as API_HEADER, GRANT as GRANT_HEADER, WAITED as WAITED_HEADER};
pub use tls::TlsFiles;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::signal::unix::{SignalKind, signal};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::output::warn;
use crate::store::{self, Location, LockStore};

use exposure::exposure;
use reread::{Reread, Rereads};

/// The most connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 4096;

/// How long a client may take to send a request's headers, and a connection may stay idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to finish a TLS handshake: the header timeout's rule, applied
/// before there are headers to read.
const HANDSHAKE_TIMEOUT: Duration = HEADER_TIMEOUT;

/// The most bytes the HTTP layer reads of a request line and headers; past [`api::MAX_HEAD`]
/// of them distlock answers 414 or 431 itself, with a problem document, and past this the HTTP
/// layer does (with an empty body).
const HEAD_BUFFER: usize = 4 * api::MAX_HEAD;

/// The most headers the HTTP layer reads: enough that 16 KiB of short ones reach distlock's
/// own 431.
const MAX_HEADERS: usize = 1024;

/// The most open stores kept for reuse: enough for 64 clients at once, so that a busy
/// server does not open and close PostgreSQL sessions all the time.
const IDLE_STORES: usize = 64;

/// What every request shares.
pub struct State {
    stores: Stores,
    metrics: metrics::Metrics,
    /// Requests waiting in a queue now.
    waiting: AtomicUsize,
    /// Set at SIGTERM or SIGINT: waits end at once.
    stopping: AtomicBool,
    /// The tokens of `--tokens`, replaced whole when SIGHUP rereads the file; `None`: no
    /// tokens.
    tokens: Option<Arc<tokens::TokensFile>>,
}

impl State {
    /// The tokens as they are now.
    fn tokens(&self) -> Option<Arc<tokens::Tokens>> {
        self.tokens.as_ref().map(|file| file.now())
    }
}

/// Open stores, each used by one request at a time and put back after it.
struct Stores {
    location: Location,
    idle: Mutex<Vec<Box<dyn LockStore>>>,
}

impl Stores {
    /// Runs `work` on a store of the pool (a new one if none is free). A store whose work
    /// failed is not put back: its connection may be what failed.
    fn with<T>(
        &self,
        work: impl FnOnce(&mut dyn LockStore) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let mut store = match pooled {
            Some(store) => store,
            None => store::open(&self.location)?,
        };
        let done = work(store.as_mut());
        if done.is_ok() {
            // What `run` does while its command runs, a server does after each operation: a
            // SQLite store's WAL is checkpointed and started over once it is long, else it
            // would grow for as long as the server serves.
            store.tidy();
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < IDLE_STORES {
                    idle.push(store);
                }
            }
        }
        done
    }
}

/// How `distlock serve` was asked to serve: the command line's flags as plain values.
#[derive(Debug)]
pub struct Spec {
    pub listen: SocketAddr,
    /// `--tls-cert` and `--tls-key`: HTTPS with the chain and key in these PEM files.
    pub tls: Option<TlsFiles>,
    /// `--insecure-http`: plain HTTP beyond loopback, for a proxy in front that terminates TLS.
    pub insecure_http: bool,
    /// `--tokens`: callers show a token of this file.
    pub tokens: Option<std::path::PathBuf>,
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
    exposure(
        spec.listen,
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
    let first = store::open(&location).map_err(Error::Store)?;
    let state = Arc::new(State {
        stores: Stores {
            location,
            idle: Mutex::new(vec![first]),
        },
        metrics: metrics::Metrics::default(),
        waiting: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        tokens,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("serve")
        .enable_all()
        .build()
        .context("cannot start the server's threads")
        .map_err(Error::System)?;
    let front = Front {
        listen: spec.listen,
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
    listen: SocketAddr,
    /// HTTPS when set; plain HTTP otherwise.
    tls: Option<TlsAcceptor>,
    /// What SIGHUP rereads.
    rereads: Arc<Rereads>,
}

/// What a signal tells the server to do.
enum Told {
    Stop,
    Reread,
}

/// The signals the server answers, caught from start to exit.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn catch() -> Result<Signals> {
        let catch = |kind: SignalKind, name: &str| {
            signal(kind)
                .with_context(|| format!("cannot catch {name}"))
                .map_err(Error::System)
        };
        Ok(Signals {
            terminate: catch(SignalKind::terminate(), "SIGTERM")?,
            interrupt: catch(SignalKind::interrupt(), "SIGINT")?,
            hangup: catch(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal's meaning. Cancel-safe: a signal that arrives while this is dropped is
    /// kept for the next call.
    async fn next(&mut self) -> Told {
        tokio::select! {
            _ = self.terminate.recv() => Told::Stop,
            _ = self.interrupt.recv() => Told::Stop,
            // `None` only once the runtime is going away: then this arm is left out.
            Some(()) = self.hangup.recv() => Told::Reread,
        }
    }
}

async fn serve(state: Arc<State>, front: Front) -> Result<()> {
    // Caught before anything is said on stderr, so a signal sent as soon as the server says
    // where it listens is answered, never the default action (which for SIGHUP is to die).
    let mut signals = Signals::catch()?;
    let listen = front.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
        .map_err(Error::System)?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot listen on {listen}"))
        .map_err(Error::System)?;
    let scheme = if front.tls.is_some() { "https" } else { "http" };
    warn(format_args!("listening on {scheme}://{bound}"));
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
            },
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            told = signals.next() => match told {
                Told::Stop => break,
                Told::Reread => { front.rereads.reread_soon(); continue; }
            },
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors, or a connection reset before it was accepted: the
            // others are served on; try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
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
    drop(listener);
    state.stopping.store(true, Ordering::SeqCst);
    let _ = stop.send(());
    // Waiting requests notice within a pause (250 ms) and answer; the others finish.
    let _ = tokio::time::timeout(
        api::LONGEST_POLL + Duration::from_secs(5),
        graceful.shutdown(),
    )
    .await;
    Ok(())
}

/// Serves HTTP/1.1 requests on one connection (plain, or after its TLS handshake) until the
/// client or the shutdown closes it.
async fn serve_connection<I>(io: I, state: Arc<State>, watcher: Watcher)
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
