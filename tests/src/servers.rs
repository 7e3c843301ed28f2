//! The test harness's side of the server suite ([`simba::tck::servers`]): what this project's
//! tests on the private servers of `scripts/backends.sh` need and a backend's contract does
//! not. The backend-generic scenarios and their hooks live in the test kit, where a backend
//! author can run them; what stays here is tied to this harness: the URLs and PID files that
//! `backends.sh` exports ([`url_or_skip!`](crate::url_or_skip), [`required_env`], [`Server`]),
//! process control with `kill` ([`Paused`], which the entries' `pause` hooks return), SQL
//! helpers for tests that make databases and users ([`exec`], [`url_for`], also used by the
//! jobs and fault suites), and [`Wire`], a loopback proxy that counts what a renewal costs on
//! the wire (a measurement of one backend's protocol, with a parser per protocol, not a rule
//! every store can be held to in the same figures).
//!
//! [`Wire`] stands beside [`crate::proxy::FaultProxy`] rather than on it: the fault proxy
//! neither shows the bytes it forwards nor tells one direction from the other, and counting
//! needs both.

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::{Backend, HeldDigest, KeepAlive};
use simba::tck::servers::won;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// The URL in environment variable `$var`, or return from the test: a skip outside CI, a
/// failure under `CI=true` (see [`server_url`](crate::server_url)).
#[macro_export]
macro_rules! url_or_skip {
    ($var:expr) => {
        match $crate::server_url($var) {
            Some(url) => url,
            None => return,
        }
    };
}

/// Environment variable `var`, set by `scripts/backends.sh start`; panics when it is not.
pub fn required_env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{var} is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"`"),
    }
}

/// The backend `connect(url)` gave, or a panic naming `url`.
pub fn connected<B, E: Display>(url: &str, connect: Result<B, E>) -> B {
    match connect {
        Ok(b) => b,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// A number that differs from run to run, for names of databases and users.
pub fn rand_u64() -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&Instant::now(), &mut h);
    std::hash::Hash::hash(&std::process::id(), &mut h);
    std::hash::Hasher::finish(&h)
}

/// `url` as `scheme://user@host/database`: its scheme, user and database replaced, its
/// host and port kept.
pub fn url_for(scheme: &str, url: &str, user: &str, database: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    let host = host.split_once('/').map_or(host, |(h, _)| h);
    format!("{scheme}://{user}@{host}/{database}")
}

/// Runs `sql` (one or more statements, no parameters) on `pool`.
pub async fn exec<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, sql: String)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(pool).await {
        panic!("{sql}: {e}");
    }
}

// ---- the server dies, comes back, and hangs -------------------------------------------------

/// One server of `scripts/backends.sh`, to kill, restart and pause.
#[derive(Clone)]
pub struct Server {
    name: &'static str,
    pidfile: String,
    script: String,
}

impl Server {
    /// The server `backends.sh` calls `name`, its PID file named by environment variable
    /// `pidfile_var`; panics if that or `SIMBA_BACKENDS_SCRIPT` is not set.
    pub fn from_env(name: &'static str, pidfile_var: &str) -> Server {
        Server { name, pidfile: required_env(pidfile_var), script: required_env("SIMBA_BACKENDS_SCRIPT") }
    }

    /// The server's PID, from its PID file.
    pub fn pid(&self) -> String {
        match std::fs::read_to_string(&self.pidfile) {
            Ok(pid) => pid.trim().to_owned(),
            Err(e) => panic!("read the PID file of {} ({}): {e}", self.name, self.pidfile),
        }
    }

    /// Kills the server with SIGKILL.
    pub fn kill(&self) {
        signal("-9", &self.pid());
    }

    /// Starts the server again (`backends.sh restart`), on its data directory.
    pub fn restart(&self) {
        let out =
            Command::new("bash").arg(&self.script).args(["restart", self.name]).output().expect("run backends.sh");
        assert!(out.status.success(), "restart {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
    }
}

/// Sends `sig` (`-STOP`, `-9`, ...) to process `pid`; panics if `kill` fails.
fn signal(sig: &str, pid: &str) {
    let ok = Command::new("kill").args([sig, pid]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

/// Paused processes, sent SIGCONT on drop, so that a failed assertion never leaves a shared
/// server paused.
pub struct Paused(Vec<String>);

impl Paused {
    /// Pauses every process of `pids` (SIGSTOP).
    pub fn stop(pids: Vec<String>) -> Paused {
        let paused = Paused(pids);
        for pid in &paused.0 {
            signal("-STOP", pid);
        }
        paused
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-CONT", pid]).status();
        }
    }
}

// ---- S1 on the wire -------------------------------------------------------------------------

/// Splits a client's byte stream into the messages of a wire protocol and names them.
pub trait MessageParser: Default + Send + 'static {
    /// What a message is called (a command name, a message type byte, ...).
    type Kind: Ord + Debug + Clone + Send + 'static;

    /// Takes the next bytes the client sent; returns the kinds of the messages they complete.
    fn feed(&mut self, bytes: &[u8]) -> Vec<Self::Kind>;
}

/// What crossed a [`Wire`] proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic<K: Ord> {
    /// Requests answered: how often a client started sending after the server had spoken.
    pub round_trips: u64,
    /// Bytes from the clients to the server.
    pub bytes_up: u64,
    /// Bytes from the server to the clients.
    pub bytes_down: u64,
    /// Client messages by kind.
    pub messages: BTreeMap<K, u64>,
}

impl<K: Ord> Default for Traffic<K> {
    fn default() -> Self {
        Traffic { round_trips: 0, bytes_up: 0, bytes_down: 0, messages: BTreeMap::new() }
    }
}

impl<K: Ord + Debug> Traffic<K> {
    /// The figures divided by `n` (the number of renewals), in words.
    pub fn per(&self, n: u64) -> String {
        let n = n as f64;
        format!(
            "{:.1} round trips, {:.1} bytes up, {:.1} bytes down, messages {:?}",
            self.round_trips as f64 / n,
            self.bytes_up as f64 / n,
            self.bytes_down as f64 / n,
            self.messages.iter().map(|(k, v)| (k, *v as f64 / n)).collect::<BTreeMap<_, _>>(),
        )
    }
}

/// A loopback TCP proxy in front of a server that counts round trips, bytes and client
/// messages (as `P` parses them), over every connection made through it. Dropping it stops
/// accepting connections.
pub struct Wire<P: MessageParser> {
    port: u16,
    traffic: Arc<Mutex<Traffic<P::Kind>>>,
    task: JoinHandle<()>,
}

impl<P: MessageParser> Wire<P> {
    /// Listens on a free loopback port and forwards every connection to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: String) -> Wire<P> {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let t = traffic.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { return };
                tokio::spawn(pipe::<P>(client, server, t.clone()));
            }
        });
        Wire { port, traffic, task }
    }

    /// The loopback port clients should connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What crossed since the last call (or the start).
    pub fn take(&self) -> Traffic<P::Kind> {
        std::mem::take(&mut *self.traffic.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl<P: MessageParser> Drop for Wire<P> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards one connection both ways, counting into `traffic`.
async fn pipe<P: MessageParser>(client: TcpStream, server: TcpStream, traffic: Arc<Mutex<Traffic<P::Kind>>>) {
    let (client_rx, client_tx) = client.into_split();
    let (server_rx, server_tx) = server.into_split();
    let lock = || traffic.lock().unwrap_or_else(PoisonError::into_inner);
    // Whether the server spoke last on this connection.
    let server_spoke = AtomicBool::new(true);
    let mut parser = P::default();
    let up = relay(client_rx, server_tx, |bytes| {
        let mut t = lock();
        if server_spoke.swap(false, Ordering::SeqCst) {
            t.round_trips += 1;
        }
        t.bytes_up += bytes.len() as u64;
        for m in parser.feed(bytes) {
            *t.messages.entry(m).or_default() += 1;
        }
    });
    let down = relay(server_rx, client_tx, |bytes| {
        let mut t = lock();
        t.bytes_down += bytes.len() as u64;
        server_spoke.store(true, Ordering::SeqCst);
    });
    tokio::join!(up, down);
}

/// Copies `from` to `to` until either ends, showing every chunk to `seen` before it is sent.
async fn relay(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut seen: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        seen(&buf[..n]);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

/// S1: round trips, bytes and messages per renewal of a session holding `held` leases
/// (named `{prefix}-{i}`), over `n` renewals of `b` through `wire`.
pub async fn renewal_traffic<P: MessageParser>(
    b: &impl Backend,
    wire: &Wire<P>,
    prefix: &str,
    held: usize,
    n: u64,
) -> Traffic<P::Kind> {
    let s = b.open_session(Duration::from_secs(120)).await.expect("open").id;
    let mut leases = Vec::new();
    for i in 0..held {
        let name = format!("{prefix}-{i}");
        leases.push((name.clone(), won(b, &s, &name).await));
    }
    let digest = HeldDigest::of(&leases);
    // Warm up: the connection is open (and the statement prepared).
    for _ in 0..3 {
        assert!(matches!(b.keep_alive(&s, digest).await, Ok(KeepAlive::Alive { digest_matches: true, .. })));
    }
    sleep(Duration::from_millis(300)).await;
    wire.take();
    for _ in 0..n {
        let r = b.keep_alive(&s, digest).await.expect("keep_alive");
        assert!(matches!(r, KeepAlive::Alive { digest_matches: true, .. }), "{r:?}");
    }
    // sqlx pings a connection when it goes back to the pool, in the background.
    sleep(Duration::from_millis(300)).await;
    let traffic = wire.take();
    b.close_session(&s).await.expect("close");
    traffic
}
