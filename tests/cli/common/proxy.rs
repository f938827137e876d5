//! A TCP proxy in front of a real PostgreSQL server, as a fault injector between distlock and
//! the server. It forwards bytes both ways until told to play a fault:
//!
//! | call | the fault |
//! | --- | --- |
//! | [`Proxy::black_hole`] | a partition: connections stay open, new ones are accepted, every byte either way is swallowed |
//! | [`Proxy::delay`] | a slow network: each chunk is held back before it is passed on |
//! | [`Proxy::cut`] | a dropped connection: every open connection is closed, new ones go through |
//! | [`Proxy::cut_next_after`] | a drop mid-statement: the next connection is closed once its client has sent N bytes |
//! | [`Proxy::kill`] | a dead server: every connection is closed, new ones are refused |
//! | [`Proxy::restore`] | the network heals: forwarding again, without delay, on the same address |
//!
//! It also tells which connections are its own on the server ([`Proxy::upstream_ports`] are
//! `pg_stat_activity.client_port`), what each client sent ([`Proxy::client_chunks`]), and which
//! connections are still open ([`Proxy::open`]).
//! Dropping it closes everything and joins all its threads.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::pg_url::PgUrl;
use super::store::Db;

/// How often an idle pump looks at the proxy's mode.
const TICK: Duration = Duration::from_millis(20);
/// How often the acceptor looks for a new connection.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Bytes go through, each chunk after `delay`.
    Forward {
        delay: Duration,
    },
    BlackHole,
    /// Connections closed, the listener too.
    Dead,
}

/// What every thread of the proxy reads.
struct Shared {
    mode: Mutex<Mode>,
    /// `None` while the proxy is dead.
    listener: Mutex<Option<TcpListener>>,
    /// Client bytes the next accepted connection may send before it is closed.
    cut_next: Mutex<Option<usize>>,
    /// Every connection accepted so far, in order.
    conns: Mutex<Vec<Arc<Conn>>>,
    /// Set when the proxy is dropped.
    shutdown: AtomicBool,
}

/// One proxied connection.
struct Conn {
    /// Set to close both sides.
    cut: AtomicBool,
    /// Client bytes this connection may still send before it is closed.
    budget: Mutex<Option<usize>>,
    /// The first byte and the size of each chunk the client sent, in order.
    client_chunks: Mutex<Vec<(u8, usize)>>,
    /// The proxy's local port towards the server.
    upstream_port: u16,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// A proxy in front of the PostgreSQL server of `db` (a PostgreSQL store), and `db`'s URL
    /// through it.
    pub fn in_front_of(db: &Db) -> (Proxy, String) {
        let url = PgUrl::parse(db.pg_url());
        let upstream = url
            .server
            .to_socket_addrs()
            .expect("the test server's address")
            .next()
            .expect("an address");
        let proxy = Proxy::start(upstream);
        let via_proxy = url.with_server(&proxy.addr.to_string()).to_string();
        (proxy, via_proxy)
    }

    /// A proxy on a free port of 127.0.0.1, forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        Proxy::start_on("127.0.0.1", upstream)
    }

    /// The same, listening on the address `ip` (on Linux, every 127.x.y.z reaches this host).
    pub fn start_on(ip: &str, upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((ip, 0)).expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Forward {
                delay: Duration::ZERO,
            }),
            listener: Mutex::new(Some(listener)),
            cut_next: Mutex::new(None),
            conns: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
        });
        let threads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (shared, threads) = (Arc::clone(&shared), Arc::clone(&threads));
            thread::spawn(move || accept(upstream, &shared, &threads))
        };
        locked(&threads).push(acceptor);
        Proxy {
            addr,
            shared,
            threads,
        }
    }

    /// A partition (or a hung server): connections stay open, nothing gets through either way.
    pub fn black_hole(&self) {
        *locked(&self.shared.mode) = Mode::BlackHole;
    }

    /// A dead server: every connection is closed, new ones are refused from now on.
    pub fn kill(&self) {
        *locked(&self.shared.mode) = Mode::Dead;
        locked(&self.shared.listener).take();
    }

    /// A slow network: from now on each chunk, either way, is passed on `delay` after it came;
    /// after [`Proxy::kill`], new connections are taken on the same address again.
    pub fn delay(&self, delay: Duration) {
        let mut listener = locked(&self.shared.listener);
        if listener.is_none() {
            let bound = TcpListener::bind(self.addr).expect("bind the proxy's address again");
            bound.set_nonblocking(true).expect("non-blocking listener");
            *listener = Some(bound);
        }
        *locked(&self.shared.mode) = Mode::Forward { delay };
    }

    /// The network heals: forwarding again, without delay (and listening again after
    /// [`Proxy::kill`]).
    pub fn restore(&self) {
        self.delay(Duration::ZERO);
    }

    /// Dropped connections: every connection open now is closed, both sides; new ones go
    /// through.
    pub fn cut(&self) {
        for conn in locked(&self.shared.conns).iter() {
            conn.cut.store(true, Ordering::SeqCst);
        }
    }

    /// The next connection accepted is closed, both sides, once its client has sent `bytes`
    /// (the first `bytes` are passed on); connections after it go through.
    pub fn cut_next_after(&self, bytes: usize) {
        *locked(&self.shared.cut_next) = Some(bytes);
    }

    /// The local ports of the proxy's open connections to the server: what the server shows
    /// as their `client_port`.
    pub fn upstream_ports(&self) -> Vec<i32> {
        locked(&self.shared.conns)
            .iter()
            .filter(|conn| !conn.cut.load(Ordering::SeqCst))
            .map(|conn| i32::from(conn.upstream_port))
            .collect()
    }

    /// For each connection accepted so far, in order, the first byte and the size of each
    /// chunk its client sent. On loopback, a client that waits for each answer before it writes
    /// again sends one chunk per write: the startup message, then each batch of messages (a
    /// PostgreSQL message starts with its type, `Q` for a query, `X` for goodbye).
    pub fn client_chunks(&self) -> Vec<Vec<(u8, usize)>> {
        locked(&self.shared.conns)
            .iter()
            .map(|conn| locked(&conn.client_chunks).clone())
            .collect()
    }
}

impl Proxy {
    /// For each connection accepted so far, in order, whether it is still open: neither its
    /// client nor the proxy has closed it.
    pub fn open(&self) -> Vec<bool> {
        locked(&self.shared.conns)
            .iter()
            .map(|conn| !conn.cut.load(Ordering::SeqCst))
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        loop {
            let threads = std::mem::take(&mut *locked(&self.threads));
            if threads.is_empty() {
                break;
            }
            for thread in threads {
                let _ = thread.join();
            }
        }
    }
}

/// The acceptor: takes connections while the proxy has a listener.
fn accept(upstream: SocketAddr, shared: &Arc<Shared>, threads: &Arc<Mutex<Vec<JoinHandle<()>>>>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        let accepted = locked(&shared.listener)
            .as_ref()
            .and_then(|listener| listener.accept().ok());
        match accepted {
            Some((client, _)) => {
                let pumps = connect(client, upstream, shared);
                let mut threads = locked(threads);
                threads.retain(|thread| !thread.is_finished());
                threads.extend(pumps);
            }
            None => thread::sleep(ACCEPT_POLL),
        }
    }
}

/// Connects `client` to the server and starts one pump per direction.
fn connect(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        return Vec::new();
    };
    let ready = [&client, &server].map(|s| {
        s.set_nonblocking(false).is_ok()
            && s.set_nodelay(true).is_ok()
            && s.set_read_timeout(Some(TICK)).is_ok()
            && s.set_write_timeout(Some(Duration::from_secs(2))).is_ok()
    });
    let Ok(local) = server.local_addr() else {
        return Vec::new();
    };
    if ready.contains(&false) {
        return Vec::new();
    }
    let conn = Arc::new(Conn {
        cut: AtomicBool::new(false),
        budget: Mutex::new(locked(&shared.cut_next).take()),
        client_chunks: Mutex::new(Vec::new()),
        upstream_port: local.port(),
    });
    {
        let mut conns = locked(&shared.conns);
        conns.push(Arc::clone(&conn));
    }
    let mut pumps = Vec::new();
    for (from, to, from_client) in [(&client, &server, true), (&server, &client, false)] {
        let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
            conn.cut.store(true, Ordering::SeqCst);
            continue;
        };
        let (shared, conn) = (Arc::clone(shared), Arc::clone(&conn));
        pumps.push(thread::spawn(move || {
            pump(from, to, &shared, &conn, from_client);
        }));
    }
    pumps
}

/// Copies bytes from `from` to `to` as the proxy's mode says, and closes both ends when the
/// proxy is dead or dropped, when the connection is cut, or when either end closes.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, conn: &Conn, from_client: bool) {
    let mut buf = [0u8; 16 * 1024];
    let ended = || {
        shared.shutdown.load(Ordering::SeqCst)
            || conn.cut.load(Ordering::SeqCst)
            || *locked(&shared.mode) == Mode::Dead
    };
    while !ended() {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        if from_client {
            locked(&conn.client_chunks).push((buf[0], n));
        }
        if let Mode::Forward { delay } = *locked(&shared.mode) {
            thread::sleep(delay);
        }
        if ended() {
            break;
        }
        // The mode may have changed during the delay: a chunk held back is swallowed by a
        // black hole that opened meanwhile.
        if !matches!(*locked(&shared.mode), Mode::Forward { .. }) {
            continue;
        }
        let (pass, cut_after) = if from_client {
            let mut budget = locked(&conn.budget);
            match *budget {
                Some(left) if n >= left => (left, true),
                Some(left) => {
                    *budget = Some(left - n);
                    (n, false)
                }
                None => (n, false),
            }
        } else {
            (n, false)
        };
        if to.write_all(&buf[..pass]).is_err() {
            break;
        }
        if cut_after {
            break;
        }
    }
    conn.cut.store(true, Ordering::SeqCst);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
