//! What the tests on the private servers of `scripts/backends.sh` share (`backend_mysql`,
//! `backend_postgres`, `backend_redis`, `backend_zookeeper`): a short real-time
//! configuration and the usual waits, control of a server process (kill -9, restart, pause
//! with a guard that always resumes it), the scenarios every server runs alike (a manual
//! takeover, two nodes racing, a renewal waiting for its row, the exact digest, graceful
//! handovers, a server killed or paused past the lease), and [`Wire`], a loopback proxy that
//! counts what a renewal costs on the wire.
//!
//! [`Wire`] stands beside [`crate::proxy::FaultProxy`] rather than on it: the fault proxy
//! neither shows the bytes it forwards nor tells one direction from the other, and counting
//! needs both.

#![allow(clippy::print_stderr)] // The figures (handover times, traffic per renewal) are printed for the report.

use std::collections::BTreeMap;
use std::fmt::{Debug, Display};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::{Acquire, Backend, BackendError, BackendResult, HeldDigest, KeepAlive, SessionId};
use simba::tck::conformance::unique;
use simba::{Election, RevokeReason, Simba, SimbaConfig, Term};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

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

/// The lease of [`config`]: 1.5 s.
pub const TTL: Duration = Duration::from_millis(1500);

/// Lease 1.5 s ([`TTL`]), renewal every 400 ms, retry jitter 100 ms: a fault shows within a
/// second or two, and the lease is above the ZooKeeper test server's `minSessionTimeout`
/// (400 ms).
pub fn config() -> SimbaConfig {
    SimbaConfig::builder()
        .lease_duration(TTL)
        .renew_interval(Duration::from_millis(400))
        .retry_jitter(Duration::from_millis(100))
        .build()
        .expect("test config")
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

/// A client on `backend` with [`config`].
pub fn client(backend: impl Backend) -> Simba {
    Simba::new(backend, config()).expect("client")
}

/// A new session of [`TTL`].
pub async fn open(b: &impl Backend) -> SessionId {
    b.open_session(TTL).await.expect("open_session").id
}

/// Acquires `name` for `s`, which must win it; returns the token.
pub async fn won(b: &impl Backend, s: &SessionId, name: &str) -> u64 {
    match b.acquire(s, name).await.expect("acquire") {
        Acquire::Won(t) => t,
        other => panic!("expected to win `{name}`, got {other:?}"),
    }
}

/// The term of `e` as soon as it has one (polled every millisecond); panics after `within`.
pub async fn wait_leader(e: &Election, within: Duration) -> Term {
    let start = Instant::now();
    loop {
        if let Some(t) = e.term() {
            return t;
        }
        assert!(start.elapsed() < within, "`{}` had no leader within {within:?}", e.name());
        sleep(Duration::from_millis(1)).await;
    }
}

/// The next term of `e` (within `within`) after `previous` ended: a new session and a
/// higher token.
async fn next_term(e: &Election, previous: &Term, within: Duration) -> Term {
    let t = wait_leader(e, within).await;
    assert_ne!(t.session_id(), previous.session_id(), "an expired session came back");
    assert!(t.token() > previous.token(), "token went from {} to {}", previous.token(), t.token());
    t
}

/// A number that differs from run to run, for names of databases and users.
pub fn rand_u64() -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&Instant::now(), &mut h);
    std::hash::Hash::hash(&std::process::id(), &mut h);
    std::hash::Hasher::finish(&h)
}

/// The median of `samples` (the upper one of an even number).
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort();
    v[v.len() / 2]
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

/// Waits until `rx` hears the release of `name` (panics if the channel closes).
pub async fn recv_name(rx: &mut broadcast::Receiver<String>, name: &str) {
    loop {
        match rx.recv().await {
            Ok(n) if n == name => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => panic!("subscription closed"),
        }
    }
}

/// Waits until `rx`'s channel closes.
pub async fn closed(rx: &mut broadcast::Receiver<String>) {
    while !matches!(rx.recv().await, Err(broadcast::error::RecvError::Closed)) {}
}

/// Releases a new lease of session `s` on `b`, again and again, until `rx` hears one; fails
/// if none is heard within `within` (after a restart: the release subscription must have
/// reconnected by itself).
pub async fn releases_are_heard(
    rx: &mut broadcast::Receiver<String>,
    b: &impl Backend,
    s: &SessionId,
    within: Duration,
) {
    let heard = timeout(within, async {
        loop {
            let probe = unique("after-restart");
            let t = won(b, s, &probe).await;
            assert!(b.release(s, &probe, t).await.expect("release"));
            if timeout(Duration::from_millis(300), recv_name(rx, &probe)).await.is_ok() {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "releases are not broadcast after the restart");
}

// ---- scenarios every server runs ------------------------------------------------------------

/// A connection to a port where nothing listens (`connect`) fails within 6 s as
/// unavailable, with an error that shows the server as `shown` (without the password
/// `s3cret` of the URL) and says the connection was refused.
pub async fn refused_promptly<B>(connect: impl Future<Output = BackendResult<B>>, shown: &str) {
    let start = Instant::now();
    let Err(err) = connect.await else { panic!("connected to {shown}, where nothing listens") };
    let msg = err.to_string();
    eprintln!("refused: {msg}");
    assert!(start.elapsed() < Duration::from_secs(6), "took {:?}", start.elapsed());
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(msg.contains(shown) && !msg.contains("s3cret"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "the cause is missing: {msg}");
}

/// A server that accepts connections and never answers, on a free loopback port: `connect`
/// to that port fails after the connect timeout (4 to 7 s), with an error that contains
/// `shown(port)`.
pub async fn silent_server_times_out<B>(
    connect: impl AsyncFnOnce(u16) -> BackendResult<B>,
    shown: impl FnOnce(u16) -> String,
) {
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let start = Instant::now();
    let Err(err) = connect(port).await else { panic!("connected to a silent server") };
    let took = start.elapsed();
    eprintln!("silent server, after {took:?}: {err}");
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(7), "took {took:?}");
    assert!(err.to_string().contains(&shown(port)), "{err}");
    drop(silent);
}

/// `connect` refuses each URL of `cases` as misconfigured, with an error that contains the
/// text given with it and not the password `s3cret`.
pub async fn misconfigured<B>(connect: impl AsyncFn(&str) -> BackendResult<B>, cases: &[(&str, &str)]) {
    for &(url, expected) in cases {
        let Err(err) = connect(url).await else { panic!("{url}: connected") };
        let msg = err.to_string();
        assert!(matches!(err, BackendError::Misconfigured(_)), "{url}: {err:?}");
        assert!(msg.contains(expected) && !msg.contains("s3cret"), "{url}: {msg}");
    }
}

/// T6: a client wins a lease; then `take_over(name)` overwrites its holder by hand (a
/// manual takeover). The term ends with `TakenOver` at the next renewal (every 400 ms), and
/// as the intruder has no session, the election wins the lease back with the next token.
pub async fn manual_takeover_ends_the_term(c: Simba, take_over: impl AsyncFnOnce(&str)) {
    let name = unique("takeover");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    take_over(&name).await;
    let taken = Instant::now();
    let reason = timeout(Duration::from_secs(2), t1.revoked()).await.expect("the term must end within 2 s");
    assert_eq!(reason, RevokeReason::TakenOver);
    // Seen at the next renewal (every 400 ms).
    assert!(taken.elapsed() < Duration::from_millis(900), "noticed after {:?}", taken.elapsed());
    let t2 = wait_leader(&e, Duration::from_secs(3)).await;
    assert_eq!(t2.token(), t1.token() + 1);
    e.stop().await;
    c.close().await;
}

/// Two nodes (one backend each) race 100 times each for one lease: never two holders at
/// once, and the tokens of all terms are exactly the next integers. `server` names the
/// server in the figures printed.
pub async fn two_nodes_never_both_win<B: Backend>(nodes: [B; 2], server: &str) {
    const ATTEMPTS: usize = 100;
    let name = unique("race");
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for b in nodes {
        let s = b.open_session(Duration::from_secs(60)).await.expect("open").id;
        let (holders, overlaps, start, name) = (holders.clone(), overlaps.clone(), start.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let (mut tokens, mut held) = (Vec::new(), 0);
            for _ in 0..ATTEMPTS {
                match b.acquire(&s, &name).await.expect("acquire") {
                    Acquire::Won(token) => {
                        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        // Hold it a moment, so that the other node tries while it is taken.
                        sleep(Duration::from_micros(500)).await;
                        holders.fetch_sub(1, Ordering::SeqCst);
                        assert!(b.release(&s, &name, token).await.expect("release"));
                        tokens.push(token);
                    }
                    Acquire::Held => held += 1,
                    Acquire::Expired => panic!("session expired"),
                }
                sleep(Duration::from_micros(300)).await;
            }
            b.close_session(&s).await.expect("close");
            (tokens, held)
        }));
    }
    let (mut tokens, mut held) = (Vec::new(), 0);
    for t in tasks {
        let (won, lost) = t.await.expect("task");
        tokens.extend(won);
        held += lost;
    }
    eprintln!("two pools x {ATTEMPTS} attempts on {server}: {} terms, {held} attempts found it held", tokens.len());
    assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    tokens.sort_unstable();
    assert_eq!(tokens, (1..=tokens.len() as u64).collect::<Vec<_>>());
}

/// S3 under lock waits: the session row of `s` is locked (by a transaction that leaves the
/// session 200 ms to live) until `unlock` runs. A renewal started meanwhile waits for the
/// row, and once it gets it, finds the session expired.
pub async fn renewal_waits_then_finds_it_expired<B: Backend + Clone>(
    b: &B,
    s: &SessionId,
    unlock: impl Future<Output = ()>,
) {
    let renewal = tokio::spawn({
        let (b, s) = (b.clone(), s.clone());
        async move { b.keep_alive(&s, HeldDigest::default()).await }
    });
    sleep(Duration::from_millis(600)).await;
    assert!(!renewal.is_finished(), "the renewal did not wait for the row");
    unlock.await;
    let answer = timeout(Duration::from_secs(3), renewal).await.expect("the renewal ends").expect("task");
    assert_eq!(answer.expect("keep_alive"), KeepAlive::Expired, "a session that expired during the wait came back");
    assert_eq!(b.keep_alive(s, HeldDigest::default()).await.expect("keep_alive"), KeepAlive::Expired);
    assert_eq!(b.acquire(s, &unique("s3")).await.expect("acquire"), Acquire::Expired);
}

/// S1: the digest's wrapping sum is exact for tokens far above 2^32. `hold(name, token)`
/// writes by hand that session `s` holds lease `name` with `token`; three leases of token
/// `i64::MAX - 1` make a sum that wraps. The keep-alive digest matches exactly that (not a
/// token one unit off), and after a release, the rest; then the session is closed. With
/// `check_owned`, `owned` still lists every lease after those keep-alives.
pub async fn digest_is_exact(b: &impl Backend, s: &SessionId, hold: impl AsyncFn(&str, i64), check_owned: bool) {
    let big = i64::MAX - 1;
    let names = [unique("big"), unique("big"), unique("big")];
    for n in &names {
        hold(n, big).await;
    }
    let t = big as u64;
    let all: Vec<(String, u64)> = names.iter().map(|n| (n.clone(), t)).collect();
    let digest = HeldDigest::of(&all);
    assert!(digest.token_sum < t, "the test needs a sum that wraps");
    let alive = |r| matches!(r, KeepAlive::Alive { digest_matches: true, .. });
    assert!(alive(b.keep_alive(s, digest).await.expect("keep_alive")));
    // One unit off in one token must not match.
    let mut off = HeldDigest::of(&all[..2]);
    off.add(t - 1);
    assert!(!alive(b.keep_alive(s, off).await.expect("keep_alive")));
    if check_owned {
        let mut owned = b.owned(s).await.expect("owned");
        owned.sort();
        let mut expected = all.clone();
        expected.sort();
        assert_eq!(owned, expected);
    }
    assert!(b.release(s, &names[0], t).await.expect("release"));
    assert!(alive(b.keep_alive(s, HeldDigest::of(&all[1..])).await.expect("keep_alive")));
    b.close_session(s).await.expect("close");
}

/// T3 on a SQL server: `+1` per term, across releases, closes and new sessions, and on
/// another node (`connect_other`); the lease row, read by `lease_row(name)` as holder and
/// token, survives all of them (only the holder is cleared).
pub async fn tokens_grow_by_one_per_term<B: Backend>(
    b: &B,
    connect_other: impl AsyncFnOnce() -> B,
    lease_row: impl AsyncFn(&str) -> (Option<String>, i64),
) {
    let name = unique("t3");
    let s = open(b).await;
    let first = won(b, &s, &name).await;
    assert_eq!(first, 1);
    assert!(b.release(&s, &name, first).await.expect("release"));
    assert_eq!(lease_row(&name).await, (None, 1));
    assert_eq!(won(b, &s, &name).await, 2);
    b.close_session(&s).await.expect("close");
    assert_eq!(lease_row(&name).await, (None, 2));
    let s2 = open(b).await;
    assert_eq!(won(b, &s2, &name).await, 3);
    assert_eq!(lease_row(&name).await, (Some(s2.as_str().to_owned()), 3));
    // A second backend (another node) continues the same sequence.
    let other = connect_other().await;
    b.close_session(&s2).await.expect("close");
    let s3 = open(&other).await;
    assert_eq!(won(&other, &s3, &name).await, 4);
    other.close_session(&s3).await.expect("close");
    assert_eq!(lease_row(&name).await, (None, 4));
}

/// K2: 20 graceful handovers of one lease between the two clients: each time a candidate
/// waits on the lease, the leader stops, and the time from `stop()` to the start of the
/// candidate's term is a sample. Prints the figures (`server` names the server), closes the
/// clients, and returns the samples, sorted.
pub async fn graceful_handovers(clients: [Simba; 2], server: &str) -> Vec<Duration> {
    let name = unique("handover");
    let mut leader = clients[0].election(name.clone());
    leader.start(()).expect("start");
    let mut last = wait_leader(&leader, Duration::from_secs(5)).await;
    let mut samples = Vec::new();
    for i in 1..=20 {
        let candidate = clients[i % 2].election(name.clone());
        candidate.start(()).expect("start candidate");
        // The candidate's first attempt finds the lease held; it now waits for a release (on
        // servers that broadcast them) or for its next attempt, 200 to 300 ms later.
        sleep(Duration::from_millis(150)).await;
        assert!(candidate.term().is_none(), "two leaders");
        let t0 = Instant::now();
        leader.stop().await;
        let term = wait_leader(&candidate, Duration::from_secs(2)).await;
        assert!(term.token() > last.token());
        samples.push(term.started_at().saturating_duration_since(t0));
        last = term;
        leader = candidate;
    }
    leader.stop().await;
    for c in &clients {
        c.close().await;
    }
    samples.sort();
    eprintln!(
        "graceful handover on {server}, stop() -> other node's term start, over {} handovers: median {:?}, \
         min {:?}, max {:?} (renewal interval {:?})",
        samples.len(),
        median(&samples),
        samples[0],
        samples[samples.len() - 1],
        config().renew_interval()
    );
    samples
}

// ---- the server dies, comes back, and hangs -------------------------------------------------

/// One server of `scripts/backends.sh`, to kill, restart and pause.
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

/// Section 9: kills `server` (kill -9) while `term` (of `e`) runs. The term ends while the
/// server is down (`DeadlinePassed`; `SessionExpired` if a renewal got through first); then
/// the server restarts, and a new session wins a new term with a higher token, which is
/// returned.
pub async fn kill_then_restart(server: &Server, term: &Term, e: &Election) -> Term {
    server.kill();
    let reason = timeout(TTL * 3, term.revoked()).await.expect("the term must end while the server is down");
    assert!(matches!(reason, RevokeReason::DeadlinePassed | RevokeReason::SessionExpired), "{reason:?}");
    server.restart();
    let next = next_term(e, term, Duration::from_secs(20)).await;
    eprintln!(
        "killed and restarted server: term ended with {reason:?}; token went from {} to {}",
        term.token(),
        next.token()
    );
    next
}

/// Section 9: pauses the server's processes `pids` (SIGSTOP) longer than the lease while
/// `term` (of `e`) runs. Renewals time out, the term ends with `DeadlinePassed` at its local
/// deadline (not later), and nothing is leader while the server is paused, kept so well past
/// the lease that the session expires on the server's clock too. After SIGCONT a new session
/// wins a new term (within `back_within`) with a higher token, which is returned.
pub async fn pause_past_the_lease(pids: Vec<String>, term: &Term, e: &Election, back_within: Duration) -> Term {
    {
        let paused = Paused::stop(pids);
        let stopped_at = Instant::now();
        // A reply already on its way may still land; after that nothing extends the deadline.
        sleep(Duration::from_millis(50)).await;
        assert!(term.is_valid(), "the term ended within 50 ms of the pause");
        let deadline = Instant::now() + term.remaining();
        let reason = timeout(TTL * 2, term.revoked()).await.expect("the term must end while the server is paused");
        let ended = Instant::now();
        assert_eq!(reason, RevokeReason::DeadlinePassed);
        assert!(!term.is_valid() && term.remaining().is_zero());
        let late = ended.saturating_duration_since(deadline);
        let early = deadline.saturating_duration_since(ended);
        let processes = if paused.0.len() > 1 { format!(" ({} processes)", paused.0.len()) } else { String::new() };
        eprintln!("paused server{processes}: term ended {late:?} after its local deadline ({early:?} before)");
        assert!(early < Duration::from_millis(5), "ended {early:?} before the local deadline");
        assert!(late < Duration::from_millis(100), "ended {late:?} after the local deadline");
        while stopped_at.elapsed() < TTL + Duration::from_secs(1) {
            assert!(e.term().is_none(), "a leader while the server is paused");
            sleep(Duration::from_millis(50)).await;
        }
    }
    let next = next_term(e, term, back_within).await;
    eprintln!("paused server: token went from {} to {} after SIGCONT", term.token(), next.token());
    next
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
