//! `distlock serve`: the HTTP lock API over the store that `--db` names, with the same engine,
//! so every rule of the command line holds through it. Over PostgreSQL the server keeps no
//! state of its own (any number of servers may serve one database); over SQLite it is one
//! node beside the command line's own users of the file.
//!
//! - **HTTP/1.1 with hyper** on a small tokio runtime (two threads). The store's work runs on
//!   tokio's blocking threads, each operation on a store taken from a pool of open ones
//!   ([`Stores`]), never on the async threads.
//! - **Limits:** headers must arrive within 10 s (a client that trickles them is dropped) and
//!   fit in 16 KiB (past 64 KiB the HTTP layer itself refuses them, with no problem document); a body holds at most 64 KiB; at most [`MAX_CONNECTIONS`] connections are
//!   served at once, and a connection that stays idle between requests is closed by the same
//!   header timeout.
//! - **Waiting** is the command line's own wait ([`crate::wait::serve`]), with the store's
//!   wake-ups, for at most 30 s per request; the place in the queue is kept for the client's
//!   next request (see [`api`]).
//! - **Shutdown:** SIGTERM or SIGINT stop the accepting, answer the waiting requests at once
//!   (busy, their places kept), let the requests in flight finish, and exit 0.
//! - **Exposure:** it listens on loopback addresses only, as there are no tokens to tell the
//!   clients apart.

mod access;
mod api;
mod input;
mod metrics;
mod operations;
mod problem;
pub mod tokens;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::output::warn;
use crate::store::{self, Location, LockStore};

/// The most connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 4096;

/// How long a client may take to send a request's headers, and a connection may stay idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes the HTTP layer reads of a request line and headers; past [`api::MAX_HEAD`]
/// of them distlock answers 414 or 431 itself, with a problem document, and past this the HTTP
/// layer does (with an empty body).
const HEAD_BUFFER: usize = 4 * api::MAX_HEAD;

/// The most headers the HTTP layer reads: enough that 16 KiB of short ones reach distlock's
/// own 431.
const MAX_HEADERS: usize = 1024;

/// The most open stores kept for reuse.
const IDLE_STORES: usize = 32;

/// What every request shares.
pub struct State {
    stores: Stores,
    metrics: metrics::Metrics,
    /// Requests waiting in a queue now.
    waiting: AtomicUsize,
    /// Set at SIGTERM or SIGINT: waits end at once.
    stopping: AtomicBool,
    /// The tokens of `--tokens`, replaced whole when the file is reread; `None`: no tokens.
    tokens: Option<RwLock<Arc<tokens::Tokens>>>,
}

impl State {
    /// The tokens as they are now.
    fn tokens(&self) -> Option<Arc<tokens::Tokens>> {
        let tokens = self.tokens.as_ref()?;
        Some(match tokens.read() {
            Ok(now) => Arc::clone(&now),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        })
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
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < IDLE_STORES {
                    idle.push(store);
                }
            }
        }
        done
    }
}

/// Serves the HTTP API on `listen` until SIGTERM or SIGINT.
///
/// # Errors
///
/// A usage error for an address beyond loopback; a store error when the store cannot be
/// opened; a system error when the address cannot be listened on.
pub fn run(location: Location, listen: SocketAddr, tokens: Option<&Path>) -> Result<Exit> {
    let tokens = tokens
        .map(|path| {
            tokens::Tokens::load(path)
                .map(|tokens| RwLock::new(Arc::new(tokens)))
                .map_err(|err| Error::Usage(format!("--tokens: {err:#}")))
        })
        .transpose()?;
    if tokens.is_none() && !listen.ip().is_loopback() {
        return Err(Error::Usage(format!(
            "--listen {listen}: without tokens the server listens on loopback addresses only \
             (127.0.0.1, ::1)"
        )));
    }
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
    runtime.block_on(serve(state, listen))?;
    // Blocking work still running (a wait the shutdown ended but not yet noticed) is not
    // waited for past this.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(Exit::Done)
}

async fn serve(state: Arc<State>, listen: SocketAddr) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
        .map_err(Error::System)?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("cannot listen on {listen}"))
        .map_err(Error::System)?;
    warn(format_args!("listening on http://{bound}"));
    if let Some(tokens) = state.tokens() {
        warn(format_args!("{} tokens let callers in", tokens.len()));
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot catch SIGTERM")
        .map_err(Error::System)?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("cannot catch SIGINT")
        .map_err(Error::System)?;
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => permit,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors, or a connection reset before it was accepted: the
            // others are served on; try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        let connection =
            http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(HEAD_BUFFER)
                .max_headers(MAX_HEADERS)
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |request| {
                        let state = Arc::clone(&state);
                        async move {
                            Ok::<_, std::convert::Infallible>(api::handle(state, request).await)
                        }
                    }),
                );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    state.stopping.store(true, Ordering::SeqCst);
    // Waiting requests notice within a pause (250 ms) and answer; the others finish.
    let _ = tokio::time::timeout(
        api::LONGEST_POLL + Duration::from_secs(5),
        graceful.shutdown(),
    )
    .await;
    Ok(())
}
