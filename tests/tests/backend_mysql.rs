//! MySQL / MariaDB backend behaviour beyond the conformance suite, on the private test server
//! (`scripts/backends.sh start`), in real time: tokens and rows, the exact keep-alive digest,
//! connection errors, the time zone check, a user without DDL rights, a manual takeover, a
//! renewal that waited for its row (S3), two pools racing, renewal cost on the wire (S1),
//! graceful handover time without release broadcast (K2), and a server killed and restarted,
//! then paused longer than the lease (section 9).
//!
//! The tests of this file run one at a time (`SERIAL`): one of them kills, restarts and
//! pauses the shared server, and the timing figures want a quiet machine.

#![allow(clippy::print_stderr)] // The figures (round trips per renewal, handover times) are printed for the report.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::mysql::MySqlBackend;
use simba::backend::{Acquire, Backend, BackendError, HeldDigest, KeepAlive, SessionId};
use simba::tck::conformance::unique;
use simba::{Election, RevokeReason, Simba, SimbaConfig, Term};
use sqlx::{AssertSqlSafe, MySqlPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, sleep, timeout};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TTL: Duration = Duration::from_millis(1500);

/// The URL in environment variable `$var`, or return from the test (a skip outside CI; a
/// failure under `CI=true`, see `server_url`).
macro_rules! url_or_skip {
    ($var:expr) => {
        match simba_tests::server_url($var) {
            Some(url) => url,
            None => return,
        }
    };
}

fn env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("{var} is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"`"),
    }
}

async fn connect(url: &str) -> MySqlBackend {
    match MySqlBackend::connect(url).await {
        Ok(b) => b,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// A plain sqlx pool on `url`, for statements the backend would never run.
async fn admin(url: &str) -> MySqlPool {
    MySqlPool::connect(url).await.expect("connect an admin pool")
}

/// Runs `sql` (one or more statements, no parameters) on `pool`.
async fn exec(pool: &MySqlPool, sql: String) {
    if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(pool).await {
        panic!("{sql}: {e}");
    }
}

/// `url` with its database replaced by `database` and its user by `user`.
fn url_for(url: &str, user: &str, database: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    let host = host.split_once('/').map_or(host, |(h, _)| h);
    format!("mysql://{user}@{host}/{database}")
}

/// Lease 1.5 s, renewal every 400 ms: a fault shows within a second or two.
fn config() -> SimbaConfig {
    SimbaConfig::builder()
        .lease_duration(TTL)
        .renew_interval(Duration::from_millis(400))
        .retry_jitter(Duration::from_millis(100))
        .build()
        .expect("test config")
}

async fn open(b: &MySqlBackend) -> SessionId {
    b.open_session(TTL).await.expect("open_session").id
}

async fn won(b: &MySqlBackend, s: &SessionId, name: &str) -> u64 {
    match b.acquire(s, name).await.expect("acquire") {
        Acquire::Won(t) => t,
        other => panic!("expected to win `{name}`, got {other:?}"),
    }
}

async fn wait_leader(e: &Election, within: Duration) -> Term {
    let start = Instant::now();
    loop {
        if let Some(t) = e.term() {
            return t;
        }
        assert!(start.elapsed() < within, "`{}` had no leader within {within:?}", e.name());
        sleep(Duration::from_millis(1)).await;
    }
}

fn client(b: MySqlBackend) -> Simba {
    Simba::new(b, config()).expect("client")
}

/// The lease row: holder and token.
async fn lease_row(pool: &MySqlPool, name: &str) -> (Option<String>, i64) {
    sqlx::query_as("SELECT session_id, token FROM simba_lease WHERE name = ?")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("read the lease row")
}

/// T3: `+1` per term, across releases, closes and new sessions; the row survives all of
/// them (only `session_id` is cleared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_by_one_per_term_and_never_reset() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let name = unique("t3");
    let s = open(&b).await;
    let first = won(&b, &s, &name).await;
    assert_eq!(first, 1);
    assert!(b.release(&s, &name, first).await.expect("release"));
    assert_eq!(lease_row(b.pool(), &name).await, (None, 1));
    assert_eq!(won(&b, &s, &name).await, 2);
    b.close_session(&s).await.expect("close");
    assert_eq!(lease_row(b.pool(), &name).await, (None, 2));
    let s2 = open(&b).await;
    assert_eq!(won(&b, &s2, &name).await, 3);
    assert_eq!(lease_row(b.pool(), &name).await, (Some(s2.as_str().to_owned()), 3));
    // A second backend (another node) continues the same sequence.
    let other = connect(&url).await;
    b.close_session(&s2).await.expect("close");
    let s3 = open(&other).await;
    assert_eq!(won(&other, &s3, &name).await, 4);
    other.close_session(&s3).await.expect("close");
    assert_eq!(lease_row(b.pool(), &name).await, (None, 4));
}

/// S1: the digest's wrapping sum is exact for tokens far above 2^32 (MySQL sums in `DECIMAL`;
/// the backend compares the wrapping sum on the server, from the sums of 32-bit halves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_is_exact_for_huge_tokens() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = open(&b).await;
    let big = i64::MAX - 1;
    let names = [unique("big"), unique("big"), unique("big")];
    for n in &names {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES (?, ?, ?)")
            .bind(n)
            .bind(s.as_str())
            .bind(big)
            .execute(b.pool())
            .await
            .expect("insert a lease row");
    }
    let t = big as u64;
    let all: Vec<(String, u64)> = names.iter().map(|n| (n.clone(), t)).collect();
    let digest = HeldDigest::of(&all);
    assert!(digest.token_sum < t, "the test needs a sum that wraps");
    let alive = |r| matches!(r, KeepAlive::Alive { digest_matches: true, .. });
    assert!(alive(b.keep_alive(&s, digest).await.expect("keep_alive")));
    let mut off = HeldDigest::of(&all[..2]);
    off.add(t - 1);
    assert!(!alive(b.keep_alive(&s, off).await.expect("keep_alive")));
    assert!(b.release(&s, &names[0], t).await.expect("release"));
    assert!(alive(b.keep_alive(&s, HeldDigest::of(&all[1..])).await.expect("keep_alive")));
    b.close_session(&s).await.expect("close");
}

/// Connection errors are prompt, name the server without its password, and say what is
/// wrong; URLs with missing parts are configuration errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_unreachable_servers_fail_clearly() {
    let start = Instant::now();
    let err = MySqlBackend::connect("mysql://alice:s3cret@127.0.0.1:1/simba").await.expect_err("port 1");
    let msg = err.to_string();
    eprintln!("refused: {msg}");
    assert!(start.elapsed() < Duration::from_secs(6), "took {:?}", start.elapsed());
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(msg.contains("mysql://alice@127.0.0.1:1/simba") && !msg.contains("s3cret"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "the cause is missing: {msg}");

    // A server that accepts the connection and never answers: bounded by the connect timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let start = Instant::now();
    let err = MySqlBackend::connect(&format!("mariadb://root@127.0.0.1:{port}/simba")).await.expect_err("silent");
    let took = start.elapsed();
    eprintln!("silent server, after {took:?}: {err}");
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(7), "took {took:?}");
    assert!(err.to_string().contains(&format!("mysql://root@127.0.0.1:{port}/simba")), "{err}");
    drop(silent);

    for (url, expected) in [
        ("postgres://u@127.0.0.1/simba", "unsupported URL"),
        ("127.0.0.1:3306/simba", "unsupported URL"),
        ("mysql://alice:s3cret@127.0.0.1:3306", "names no database"),
        ("mysql://alice:s3cret@127.0.0.1:3306/", "names no database"),
        ("mysql:///simba", "names no host"),
        ("mysql://alice:s3cret@127.0.0.1:notaport/simba", "invalid MySQL URL"),
    ] {
        let err = MySqlBackend::connect(url).await.expect_err(url);
        let msg = err.to_string();
        assert!(matches!(err, BackendError::Misconfigured(_)), "{url}: {err:?}");
        assert!(msg.contains(expected) && !msg.contains("s3cret"), "{url}: {msg}");
    }

    // A database that does not exist, or a user that does not, is a configuration error.
    let Some(url) = simba_tests::server_url("SIMBA_TEST_MYSQL_URL") else { return };
    for (bad, expected) in [
        (url_for(&url, "root", "simba_no_such_database"), "simba_no_such_database"),
        (url_for(&url, "nobody_here", "simba"), "nobody_here"),
    ] {
        let err = MySqlBackend::connect(&bad).await.expect_err(&bad);
        assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
        assert!(err.to_string().contains(expected), "{err}");
    }
}

/// B2: a pool whose connections keep the server's time zone (`SYSTEM`, possibly with daylight
/// saving time) is refused: the clock would go back an hour once a year. sqlx's default
/// (`+00:00`, what `connect` uses) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_pool_needs_a_fixed_offset_time_zone() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let options: sqlx::mysql::MySqlConnectOptions = url.parse().expect("parse the URL");
    let system = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone().timezone(Some("SYSTEM".to_owned())))
        .await
        .expect("connect");
    let err = MySqlBackend::from_pool(system).await.expect_err("time zone SYSTEM");
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    assert!(err.to_string().contains("time zone") && err.to_string().contains("SYSTEM"), "{err}");
    let utc = sqlx::mysql::MySqlPoolOptions::new().max_connections(1).connect_with(options).await.expect("connect");
    let b = MySqlBackend::from_pool(utc).await.expect("sqlx's default time zone");
    let s = open(&b).await;
    b.close_session(&s).await.expect("close");
}

/// B3: a user that may not create tables gets an error that prints the schema; once an
/// administrator ran it, the same user connects and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_without_ddl_rights_gets_the_schema_to_run() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let root = admin(&url).await;
    let id = format!("{:016x}", rand_u64());
    let (database, user) = (format!("simba_noddl_db_{id}"), format!("simba_noddl_{id}"));
    exec(&root, format!("CREATE DATABASE {database}")).await;
    exec(&root, format!("CREATE USER '{user}'@'%'")).await;
    exec(&root, format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {database}.* TO '{user}'@'%'")).await;

    let restricted = url_for(&url, &user, &database);
    let err = MySqlBackend::connect(&restricted).await.expect_err("the user may not create tables");
    let msg = err.to_string();
    eprintln!("user without DDL rights:\n{msg}");
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    for expected in ["CREATE TABLE IF NOT EXISTS simba_session", "simba_lease", "simba_member", "GRANT", &user] {
        assert!(msg.contains(expected), "missing {expected:?} in: {msg}");
    }

    let db_admin = admin(&url_for(&url, "root", &database)).await;
    exec(&db_admin, MySqlBackend::schema()).await;
    let b = connect(&restricted).await;
    let s = open(&b).await;
    assert_eq!(won(&b, &s, "job").await, 1);
    assert!(matches!(b.keep_alive(&s, HeldDigest::of(&[("job".to_owned(), 1)])).await, Ok(KeepAlive::Alive { .. })));
    b.close_session(&s).await.expect("close");
    drop(b);
    db_admin.close().await;
    exec(&root, format!("DROP DATABASE {database}")).await;
    exec(&root, format!("DROP USER '{user}'@'%'")).await;
}

fn rand_u64() -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&Instant::now(), &mut h);
    std::hash::Hash::hash(&std::process::id(), &mut h);
    std::hash::Hasher::finish(&h)
}

/// T6: someone overwrites the lease row's holder (a manual takeover); the next keep-alive's
/// digest no longer matches, `owned` no longer lists the lease, and the term ends with
/// `TakenOver`. The intruder has no session row, so the election wins the lease back with
/// the next token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_takeover_ends_the_term_with_taken_over() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let c = client(b.clone());
    let name = unique("takeover");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    sqlx::query("UPDATE simba_lease SET session_id = 'someone-else' WHERE name = ?")
        .bind(&name)
        .execute(b.pool())
        .await
        .expect("take the lease over by hand");
    let taken = Instant::now();
    let reason = timeout(Duration::from_secs(2), t1.revoked()).await.expect("the term must end within 2 s");
    assert_eq!(reason, RevokeReason::TakenOver);
    // Seen at the next renewal (every 400 ms).
    assert!(taken.elapsed() < Duration::from_millis(900), "noticed after {:?}", taken.elapsed());
    let t2 = wait_leader(&e, Duration::from_secs(3)).await;
    assert_eq!(t2.token(), t1.token() + 1);
    e.stop().await.expect("stop");
    c.close().await;
}

/// S3 under lock waits: a renewal that waits for its session row (held here by a transaction
/// that leaves the session 200 ms to live) re-checks the expiry once it gets the row, with
/// the clock of that moment. With `NOW(3)` (fixed when the statement started) it would renew
/// a session that expired while it waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_that_waited_for_its_row_rechecks_expiry() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = b.open_session(Duration::from_secs(60)).await.expect("open").id;
    let root = admin(&url).await;
    let mut tx = root.begin().await.expect("begin");
    sqlx::query(
        "UPDATE simba_session SET expires_at = CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED) + 200 WHERE id = ?",
    )
    .bind(s.as_str())
    .execute(&mut *tx)
    .await
    .expect("lock the session row");
    let renewal = tokio::spawn({
        let (b, s) = (b.clone(), s.clone());
        async move { b.keep_alive(&s, HeldDigest::default()).await }
    });
    sleep(Duration::from_millis(600)).await;
    assert!(!renewal.is_finished(), "the renewal did not wait for the row");
    tx.commit().await.expect("commit");
    let answer = timeout(Duration::from_secs(3), renewal).await.expect("the renewal ends").expect("task");
    assert_eq!(answer.expect("keep_alive"), KeepAlive::Expired, "a session that expired during the wait came back");
    assert_eq!(b.keep_alive(&s, HeldDigest::default()).await.expect("keep_alive"), KeepAlive::Expired);
    assert_eq!(b.acquire(&s, &unique("s3")).await.expect("acquire"), Acquire::Expired);
}

/// Two pools (two nodes) race 100 times each for one lease: never two holders at once, and
/// the tokens of all terms are exactly the next integers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_never_both_win() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    const ATTEMPTS: usize = 100;
    let name = unique("race");
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let b = connect(&url).await;
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
                        // Hold it a moment, so that the other pool tries while it is taken.
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
    eprintln!("two pools x {ATTEMPTS} attempts on MySQL: {} terms, {held} attempts found it held", tokens.len());
    assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    tokens.sort_unstable();
    assert_eq!(tokens, (1..=tokens.len() as u64).collect::<Vec<_>>());
}

// ---- S1 on the wire -------------------------------------------------------------------------

/// What crossed a [`Wire`] proxy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Traffic {
    /// Requests answered: how often a client started sending after the server had spoken.
    round_trips: u64,
    bytes_up: u64,
    bytes_down: u64,
    /// Client commands (packets with sequence number 0) by name.
    commands: BTreeMap<&'static str, u64>,
}

/// A loopback TCP proxy in front of the server that counts round trips, bytes and MySQL
/// client commands, over every connection the backend opens.
struct Wire {
    port: u16,
    traffic: Arc<Mutex<Traffic>>,
    task: tokio::task::JoinHandle<()>,
}

impl Wire {
    async fn start(upstream: String) -> Wire {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let t = traffic.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { return };
                tokio::spawn(pipe(client, server, t.clone()));
            }
        });
        Wire { port, traffic, task }
    }

    fn take(&self) -> Traffic {
        std::mem::take(&mut *self.traffic.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(client: TcpStream, server: TcpStream, traffic: Arc<Mutex<Traffic>>) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Whether the server spoke last on this connection.
    let server_spoke = Arc::new(Mutex::new(true));
    let (t, spoke) = (traffic.clone(), server_spoke.clone());
    let up = async move {
        let mut parser = CommandParser::default();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = client_rx.read(&mut buf).await {
            if n == 0 {
                break;
            }
            {
                let mut t = t.lock().unwrap_or_else(PoisonError::into_inner);
                let mut spoke = spoke.lock().unwrap_or_else(PoisonError::into_inner);
                if *spoke {
                    t.round_trips += 1;
                    *spoke = false;
                }
                t.bytes_up += n as u64;
                for c in parser.feed(&buf[..n]) {
                    *t.commands.entry(c).or_default() += 1;
                }
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = server_rx.read(&mut buf).await {
            if n == 0 {
                break;
            }
            {
                let mut t = traffic.lock().unwrap_or_else(PoisonError::into_inner);
                t.bytes_down += n as u64;
                *server_spoke.lock().unwrap_or_else(PoisonError::into_inner) = true;
            }
            if client_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(up, down);
}

/// Splits the client's byte stream into MySQL packets (3-byte length, sequence number,
/// payload). A packet with sequence number 0 starts a command; its first byte names it.
#[derive(Default)]
struct CommandParser {
    buf: Vec<u8>,
}

impl CommandParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<&'static str> {
        self.buf.extend_from_slice(bytes);
        let mut commands = Vec::new();
        while self.buf.len() >= 4 {
            let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], 0]) as usize;
            if self.buf.len() < 4 + len {
                break;
            }
            if self.buf[3] == 0 && len > 0 {
                commands.push(match self.buf[4] {
                    0x01 => "COM_QUIT",
                    0x03 => "COM_QUERY",
                    0x0e => "COM_PING",
                    0x16 => "COM_STMT_PREPARE",
                    0x17 => "COM_STMT_EXECUTE",
                    0x19 => "COM_STMT_CLOSE",
                    0x1f => "COM_RESET_CONNECTION",
                    _ => "other",
                });
            }
            self.buf.drain(..4 + len);
        }
        commands
    }
}

/// Round trips, bytes and commands per renewal of a session holding `held` leases, over `n`
/// renewals through `wire`.
async fn renewal_traffic(b: &MySqlBackend, wire: &Wire, held: usize, n: u64) -> Traffic {
    let prefix = unique("s1");
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

/// S1: a renewal costs the same on the wire whether the session holds 1 lease or 500: the
/// same round trips, the same commands (one `COM_QUERY` carrying the renewal `UPDATE` and one
/// `SELECT`), the same bytes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_cost_does_not_grow_with_leases() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let (user, host) = rest.split_once('@').unwrap_or(("root", rest));
    let (upstream, database) = host.split_once('/').unwrap_or((host, "simba"));
    let wire = Wire::start(upstream.to_owned()).await;
    // One pooled connection: with more, sqlx sometimes opens another while the last one is
    // being pinged on its way back to the pool, and its start-up would land in the figures
    // (whatever the number of leases).
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&format!("mysql://{user}@127.0.0.1:{}/{database}", wire.port))
        .await
        .expect("connect through the proxy");
    let b = MySqlBackend::from_pool(pool).await.expect("backend on the pool");
    const N: u64 = 20;
    let one = renewal_traffic(&b, &wire, 1, N).await;
    let many = renewal_traffic(&b, &wire, 500, N).await;
    let per = |t: &Traffic| {
        format!(
            "{:.1} round trips, {:.1} bytes up, {:.1} bytes down, commands {:?}",
            t.round_trips as f64 / N as f64,
            t.bytes_up as f64 / N as f64,
            t.bytes_down as f64 / N as f64,
            t.commands.iter().map(|(k, v)| (*k, *v as f64 / N as f64)).collect::<BTreeMap<_, _>>(),
        )
    };
    eprintln!(
        "S1 on MySQL, per renewal over {N} renewals (COM_PING: sqlx checks a connection when it goes back \
         to the pool, in the background):\n  1 lease:    {}\n  500 leases: {}",
        per(&one),
        per(&many)
    );
    assert_eq!(one, many, "a renewal's traffic depends on the number of leases");
    assert_eq!(one.commands.get("COM_QUERY"), Some(&N), "one batch per renewal");
    assert_eq!(one.commands.get("COM_STMT_EXECUTE"), None, "no other statement per renewal");
}

/// K2 and section 9 (leader stops gracefully): MySQL cannot broadcast the release, so the
/// candidate takes over at its next periodic attempt, within `renew_interval / 2 +
/// retry_jitter` of the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_at_the_next_attempt() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let clients = [client(connect(&url).await), client(connect(&url).await)];
    let name = unique("handover");
    let mut leader = clients[0].election(name.clone());
    leader.start(()).expect("start");
    let mut last = wait_leader(&leader, Duration::from_secs(5)).await;
    let mut samples = Vec::new();
    for i in 1..=20 {
        let candidate = clients[i % 2].election(name.clone());
        candidate.start(()).expect("start candidate");
        // The candidate's first attempt finds the lease held; its next one comes 200 to
        // 300 ms later.
        sleep(Duration::from_millis(150)).await;
        assert!(candidate.term().is_none(), "two leaders");
        let t0 = Instant::now();
        leader.stop().await.expect("stop");
        let term = wait_leader(&candidate, Duration::from_secs(2)).await;
        assert!(term.token() > last.token());
        samples.push(term.started_at().saturating_duration_since(t0));
        last = term;
        leader = candidate;
    }
    leader.stop().await.expect("stop");
    for c in &clients {
        c.close().await;
    }
    samples.sort();
    let median = samples[samples.len() / 2];
    let renew = config().renew_interval();
    eprintln!(
        "graceful handover on MySQL, stop() -> other node's term start, over {} handovers: median {median:?}, \
         min {:?}, max {:?} (renewal interval {renew:?})",
        samples.len(),
        samples[0],
        samples[samples.len() - 1]
    );
    let bound = renew / 2 + config().retry_jitter() + Duration::from_millis(50);
    assert!(samples[samples.len() - 1] < bound, "a handover took longer than the next attempt ({bound:?})");
    assert!(median < renew, "median handover {median:?} is not under the renewal interval {renew:?}");
}

// ---- section 9: the server dies, comes back, and hangs --------------------------------------

/// Sends SIGCONT on drop to every paused process, so that a failed assertion never leaves
/// the shared server paused.
struct Resume(Vec<String>);

impl Drop for Resume {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-CONT", pid]).status();
        }
    }
}

fn signal(sig: &str, pid: &str) {
    let ok = Command::new("kill").args([sig, pid]).status().is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

/// Section 9, in one function because each step disturbs the shared server:
///
/// 1. The server is killed (kill -9) and stays down until the term has ended
///    (`DeadlinePassed`; `SessionExpired` if a renewal got through first), then restarts:
///    a new session wins a new term and no token went backwards (InnoDB's redo log kept the
///    rows).
/// 2. The server is paused with SIGSTOP longer than the lease: the term ends with
///    `DeadlinePassed` at the local deadline, nothing is leader while it is paused, and after
///    SIGCONT a new session wins a new term with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_restarted_then_paused_server() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let pidfile = env("SIMBA_TEST_MYSQL_PIDFILE");
    let script = env("SIMBA_BACKENDS_SCRIPT");
    let _serial = SERIAL.lock().await;
    let pid = || std::fs::read_to_string(&pidfile).expect("read the MariaDB PID file").trim().to_owned();
    let b = connect(&url).await;
    let c = client(b.clone());
    let name = unique("fault");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;

    // 1. Killed, restarted once the term has ended.
    signal("-9", &pid());
    let reason = timeout(TTL * 3, t1.revoked()).await.expect("the term must end while the server is down");
    assert!(matches!(reason, RevokeReason::DeadlinePassed | RevokeReason::SessionExpired), "{reason:?}");
    let out = Command::new("bash").arg(&script).args(["restart", "mysql"]).output().expect("run backends.sh");
    assert!(out.status.success(), "restart mysql: {}", String::from_utf8_lossy(&out.stderr));
    let t2 = wait_leader(&e, Duration::from_secs(20)).await;
    assert_ne!(t2.session_id(), t1.session_id(), "an expired session came back");
    assert!(t2.token() > t1.token(), "token went from {} to {}", t1.token(), t2.token());
    // The rows survived the crash: the lease row holds the new term.
    let (holder, token) = lease_row(&admin(&url).await, &name).await;
    assert_eq!((holder.as_deref(), token), (Some(t2.session_id().as_str()), t2.token() as i64));
    eprintln!(
        "killed and restarted server: term ended with {reason:?}; token went from {} to {}",
        t1.token(),
        t2.token()
    );

    // 2. Paused longer than the lease.
    {
        let paused = pid();
        let _resume = Resume(vec![paused.clone()]);
        signal("-STOP", &paused);
        let stopped_at = Instant::now();
        // A reply already on its way may still land; after that nothing extends the deadline.
        sleep(Duration::from_millis(50)).await;
        assert!(t2.is_valid(), "the term ended within 50 ms of the pause");
        let deadline = Instant::now() + t2.remaining();
        let reason = timeout(TTL * 2, t2.revoked()).await.expect("the term must end while the server is paused");
        let ended = Instant::now();
        assert_eq!(reason, RevokeReason::DeadlinePassed);
        assert!(!t2.is_valid() && t2.remaining().is_zero());
        let late = ended.saturating_duration_since(deadline);
        let early = deadline.saturating_duration_since(ended);
        eprintln!("paused server: term ended {late:?} after its local deadline ({early:?} before)");
        assert!(early < Duration::from_millis(5), "ended {early:?} before the local deadline");
        assert!(late < Duration::from_millis(100), "ended {late:?} after the local deadline");
        while stopped_at.elapsed() < TTL + Duration::from_secs(1) {
            assert!(e.term().is_none(), "a leader while the server is paused");
            sleep(Duration::from_millis(50)).await;
        }
    }
    let t3 = wait_leader(&e, Duration::from_secs(20)).await;
    assert_ne!(t3.session_id(), t2.session_id(), "an expired session came back");
    assert!(t3.token() > t2.token(), "token went from {} to {}", t2.token(), t3.token());
    eprintln!("paused server: token went from {} to {} after SIGCONT", t2.token(), t3.token());
    e.stop().await.expect("stop");
    c.close().await;
}
