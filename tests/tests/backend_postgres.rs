//! PostgreSQL backend behaviour beyond the conformance suite, on the private test server
//! (`scripts/backends.sh start`), in real time: tokens and rows, the exact keep-alive digest,
//! connection errors, a user without DDL rights, a manual takeover, a renewal that waited for
//! its row (S3), two pools racing, the release listener's lifetime, renewal cost on the wire
//! (S1), graceful handover time (K2), and a server killed and restarted, then paused longer
//! than the lease (section 9).
//!
//! The tests of this file run one at a time (`SERIAL`): one of them kills, restarts and
//! pauses the shared server, and the timing figures want a quiet machine.

#![allow(clippy::print_stderr)] // The figures (round trips per renewal, handover times) are printed for the report.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::postgres::PostgresBackend;
use simba::backend::{Acquire, Backend, BackendError, HeldDigest, KeepAlive, SessionId};
use simba::tck::conformance::unique;
use simba::{Election, RevokeReason, Simba, SimbaConfig, Term};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
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

async fn connect(url: &str) -> PostgresBackend {
    match PostgresBackend::connect(url).await {
        Ok(b) => b,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// A plain sqlx pool on `url`, for statements the backend would never run.
async fn admin(url: &str) -> PgPool {
    PgPool::connect(url).await.expect("connect an admin pool")
}

/// Runs `sql` (one or more statements, no parameters) on `pool`.
async fn exec(pool: &PgPool, sql: String) {
    if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(pool).await {
        panic!("{sql}: {e}");
    }
}

/// `url` with its database replaced by `database` and its user by `user`.
fn url_for(url: &str, user: &str, database: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split_once('@').map_or(rest, |(_, h)| h);
    let host = host.split_once('/').map_or(host, |(h, _)| h);
    format!("postgres://{user}@{host}/{database}")
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

async fn open(b: &PostgresBackend) -> SessionId {
    b.open_session(TTL).await.expect("open_session").id
}

async fn won(b: &PostgresBackend, s: &SessionId, name: &str) -> u64 {
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

fn client(b: PostgresBackend) -> Simba {
    Simba::new(b, config()).expect("client")
}

/// The lease row: holder and token.
async fn lease_row(pool: &PgPool, name: &str) -> (Option<String>, i64) {
    sqlx::query_as("SELECT session_id, token FROM simba_lease WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("read the lease row")
}

/// T3: `+1` per term, across releases, closes and new sessions; the row survives all of
/// them (only `session_id` is cleared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_by_one_per_term_and_never_reset() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
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

/// S1: the digest's wrapping sum is exact for tokens far above 2^32 (PostgreSQL sums `bigint`
/// as `numeric`; the backend sums 32-bit halves and recombines them like `HeldDigest`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_is_exact_for_huge_tokens() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = open(&b).await;
    let big = i64::MAX - 1;
    let names = [unique("big"), unique("big"), unique("big")];
    for n in &names {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES ($1, $2, $3)")
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
    let err = PostgresBackend::connect("postgres://alice:s3cret@127.0.0.1:1/simba").await.expect_err("port 1");
    let msg = err.to_string();
    eprintln!("refused: {msg}");
    assert!(start.elapsed() < Duration::from_secs(6), "took {:?}", start.elapsed());
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(msg.contains("postgres://alice@127.0.0.1:1/simba") && !msg.contains("s3cret"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "the cause is missing: {msg}");

    // A server that accepts the connection and never answers: bounded by the connect timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let start = Instant::now();
    let err = PostgresBackend::connect(&format!("postgres://postgres@127.0.0.1:{port}/simba"))
        .await
        .expect_err("a silent server");
    let took = start.elapsed();
    eprintln!("silent server, after {took:?}: {err}");
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(7), "took {took:?}");
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    drop(silent);

    for (url, expected) in [
        ("mysql://u@127.0.0.1/simba", "unsupported URL"),
        ("127.0.0.1:5432/simba", "unsupported URL"),
        ("postgres://alice:s3cret@127.0.0.1:5432", "names no database"),
        ("postgres://alice:s3cret@127.0.0.1:5432/", "names no database"),
        ("postgres:///simba", "names no host"),
        ("postgres://alice:s3cret@127.0.0.1:notaport/simba", "invalid PostgreSQL URL"),
    ] {
        let err = PostgresBackend::connect(url).await.expect_err(url);
        let msg = err.to_string();
        assert!(matches!(err, BackendError::Misconfigured(_)), "{url}: {err:?}");
        assert!(msg.contains(expected) && !msg.contains("s3cret"), "{url}: {msg}");
    }

    // A database that does not exist is a configuration error naming it.
    let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    let missing = url_for(&url, "postgres", "simba_no_such_database");
    let err = PostgresBackend::connect(&missing).await.expect_err("no such database");
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    assert!(err.to_string().contains("simba_no_such_database"), "{err}");
}

/// B3: a user that may not create tables gets an error that prints the schema; once an
/// administrator ran it (and granted DML), the same user connects and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_without_ddl_rights_gets_the_schema_to_run() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let root = admin(&url).await;
    let id = format!("{:016x}", rand_u64());
    let (database, user) = (format!("simba_noddl_db_{id}"), format!("simba_noddl_{id}"));
    exec(&root, format!("CREATE DATABASE {database}")).await;
    exec(&root, format!("CREATE ROLE {user} LOGIN")).await;
    let db_admin = admin(&url_for(&url, "postgres", &database)).await;
    // PostgreSQL 15 no longer lets every user create in `public`; say it anyway for older ones.
    exec(&db_admin, format!("REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO {user}"))
        .await;

    let restricted = url_for(&url, &user, &database);
    let err = PostgresBackend::connect(&restricted).await.expect_err("the user may not create tables");
    let msg = err.to_string();
    eprintln!("user without DDL rights:\n{msg}");
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    for expected in ["CREATE TABLE IF NOT EXISTS simba_session", "simba_lease", "simba_member", "GRANT", &user] {
        assert!(msg.contains(expected), "missing {expected:?} in: {msg}");
    }

    exec(&db_admin, PostgresBackend::schema()).await;
    exec(
        &db_admin,
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON simba_session, simba_lease, simba_member TO {user}"),
    )
    .await;
    let b = connect(&restricted).await;
    let s = open(&b).await;
    assert_eq!(won(&b, &s, "job").await, 1);
    assert!(matches!(b.keep_alive(&s, HeldDigest::of(&[("job".to_owned(), 1)])).await, Ok(KeepAlive::Alive { .. })));
    b.close_session(&s).await.expect("close");
    drop(b);
    db_admin.close().await;
    exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
    exec(&root, format!("DROP ROLE {user}")).await;
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
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let c = client(b.clone());
    let name = unique("takeover");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    sqlx::query("UPDATE simba_lease SET session_id = 'someone-else' WHERE name = $1")
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
/// the clock of that moment. With `now()` (frozen when the statement started) it would renew
/// a session that expired while it waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_that_waited_for_its_row_rechecks_expiry() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = b.open_session(Duration::from_secs(60)).await.expect("open").id;
    let root = admin(&url).await;
    let mut tx = root.begin().await.expect("begin");
    sqlx::query("UPDATE simba_session SET expires_at = (extract(epoch from clock_timestamp()) * 1000)::bigint + 200 WHERE id = $1")
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
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
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
    eprintln!("two pools x {ATTEMPTS} attempts on PostgreSQL: {} terms, {held} attempts found it held", tokens.len());
    assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    tokens.sort_unstable();
    assert_eq!(tokens, (1..=tokens.len() as u64).collect::<Vec<_>>());
}

/// K2: releases are heard by every clone's subscription, and the listener task ends when the
/// backend's last clone is dropped: its receivers see the channel close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_listener_ends_with_the_backend() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let clone = b.clone();
    let mut rx = b.subscribe_releases().expect("PostgreSQL broadcasts releases");
    let mut rx2 = clone.subscribe_releases().expect("PostgreSQL broadcasts releases");
    let (name, closed) = (unique("k2"), unique("k2-close"));
    let s = open(&b).await;
    let t = won(&b, &s, &name).await;
    won(&b, &s, &closed).await;
    assert!(b.release(&s, &name, t).await.expect("release"));
    b.close_session(&s).await.expect("close");
    for rx in [&mut rx, &mut rx2] {
        for expected in [&name, &closed] {
            let heard = timeout(Duration::from_secs(2), recv_name(rx, expected)).await;
            assert!(heard.is_ok(), "the release of {expected} was not heard");
        }
    }
    drop(b);
    drop(clone);
    let end = timeout(Duration::from_secs(2), async {
        loop {
            if let Err(broadcast::error::RecvError::Closed) = rx.recv().await {
                return;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the listener outlived the backend");
}

async fn recv_name(rx: &mut broadcast::Receiver<String>, name: &str) {
    loop {
        match rx.recv().await {
            Ok(n) if n == name => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => panic!("subscription closed"),
        }
    }
}

// ---- S1 on the wire -------------------------------------------------------------------------

/// What crossed a [`Wire`] proxy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Traffic {
    /// Requests answered: how often a client started sending after the server had spoken.
    round_trips: u64,
    bytes_up: u64,
    bytes_down: u64,
    /// Frontend messages by type (`E` Execute, `Q` simple Query, `S` Sync, `B` Bind, ...).
    messages: BTreeMap<char, u64>,
}

/// A loopback TCP proxy in front of the server that counts round trips, bytes and PostgreSQL
/// frontend messages, over every connection the backend opens.
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
        let mut parser = FrontendParser::default();
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
                for m in parser.feed(&buf[..n]) {
                    *t.messages.entry(m).or_default() += 1;
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

/// Splits the client's byte stream into PostgreSQL frontend messages: untyped start-up
/// packets (length, then a code) until the start-up message proper, then typed messages
/// (one type byte, then a length that counts itself).
#[derive(Default)]
struct FrontendParser {
    buf: Vec<u8>,
    started: bool,
}

impl FrontendParser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<char> {
        self.buf.extend_from_slice(bytes);
        let mut types = Vec::new();
        loop {
            let (header, kind) = if self.started { (5, self.buf.first().copied()) } else { (4, None) };
            if self.buf.len() < header {
                break;
            }
            let at = header - 4;
            let len = u32::from_be_bytes([self.buf[at], self.buf[at + 1], self.buf[at + 2], self.buf[at + 3]]) as usize;
            let total = at + len;
            if self.buf.len() < total {
                break;
            }
            match kind {
                Some(k) => types.push(k as char),
                None => {
                    let code = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
                    // SSLRequest and GSSENCRequest are followed by another start-up packet.
                    self.started = !matches!(code, 80_877_103 | 80_877_104);
                }
            }
            self.buf.drain(..total);
        }
        types
    }
}

/// Round trips, bytes and messages per renewal of a session holding `held` leases, over `n`
/// renewals through `wire`.
async fn renewal_traffic(b: &PostgresBackend, wire: &Wire, held: usize, n: u64) -> Traffic {
    let s = b.open_session(Duration::from_secs(120)).await.expect("open").id;
    let mut leases = Vec::new();
    for i in 0..held {
        let name = format!("s1-{i}");
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
/// same round trips, the same frontend messages (one Execute: one statement), the same bytes
/// both ways. Measured on a database of its own, so no other test's traffic or
/// notification crosses the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_cost_does_not_grow_with_leases() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let root = admin(&url).await;
    let database = format!("simba_s1_{:016x}", rand_u64());
    exec(&root, format!("CREATE DATABASE {database}")).await;
    let upstream = url.split_once('@').map_or("", |(_, h)| h).split('/').next().unwrap_or("").to_owned();
    let wire = Wire::start(upstream).await;
    // One pooled connection: with more, sqlx sometimes opens another while the last one is
    // being pinged on its way back to the pool, and its start-up and statement preparation
    // would land in the figures (whatever the number of leases).
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&format!("postgres://postgres@127.0.0.1:{}/{database}", wire.port))
        .await
        .expect("connect through the proxy");
    let b = PostgresBackend::from_pool(pool).await.expect("backend on the pool");
    const N: u64 = 20;
    let one = renewal_traffic(&b, &wire, 1, N).await;
    let many = renewal_traffic(&b, &wire, 500, N).await;
    let per = |t: &Traffic| {
        format!(
            "{:.1} round trips, {:.1} statements (Execute), {:.1} bytes up, {:.1} bytes down, messages {:?}",
            t.round_trips as f64 / N as f64,
            t.messages.get(&'E').copied().unwrap_or(0) as f64 / N as f64,
            t.bytes_up as f64 / N as f64,
            t.bytes_down as f64 / N as f64,
            t.messages.iter().map(|(k, v)| (*k, *v as f64 / N as f64)).collect::<BTreeMap<_, _>>(),
        )
    };
    eprintln!(
        "S1 on PostgreSQL, per renewal over {N} renewals (the second Sync: sqlx checks a connection when it goes \
         back to the pool, in the background):\n  1 lease:    {}\n  500 leases: {}",
        per(&one),
        per(&many)
    );
    assert_eq!(one, many, "a renewal's traffic depends on the number of leases");
    assert_eq!(one.messages.get(&'E'), Some(&N), "one statement per renewal");
    assert_eq!(one.messages.get(&'Q'), None, "no simple query (BEGIN/COMMIT) per renewal");
    drop(b);
    drop(wire);
    exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
}

/// K2 and section 9 (leader stops gracefully): the release is notified and the candidate
/// takes over at once, long before its next periodic attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_is_immediate() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
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
        // The candidate's first attempt finds the lease held; it now waits for a release
        // or for its next attempt, 200 to 300 ms later.
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
        "graceful handover on PostgreSQL, stop() -> other node's term start, over {} handovers: median {median:?}, \
         min {:?}, max {:?} (renewal interval {renew:?})",
        samples.len(),
        samples[0],
        samples[samples.len() - 1]
    );
    assert!(median < renew / 8, "median handover {median:?} is not well under the renewal interval {renew:?}");
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

/// The postmaster and its children (one backend process per connection, plus the
/// background workers): pausing the postmaster alone would not pause open connections.
fn server_processes(postmaster: &str) -> Vec<String> {
    let mut pids = vec![postmaster.to_owned()];
    let Ok(dir) = std::fs::read_dir("/proc") else { return pids };
    for entry in dir.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

/// Section 9, in one function because each step disturbs the shared server:
///
/// 1. The server is killed (kill -9) and stays down until the term has ended
///    (`DeadlinePassed`; `SessionExpired` if a renewal got through first), then restarts:
///    a new session wins a new term, no token went backwards (the rows survived), and the
///    release listener reconnected by itself.
/// 2. The server (postmaster and every child) is paused with SIGSTOP longer than the lease:
///    the term ends with `DeadlinePassed` at the local deadline, nothing is leader while it
///    is paused, and after SIGCONT a new session wins a new term with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_restarted_then_paused_server() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let pidfile = env("SIMBA_TEST_POSTGRES_PIDFILE");
    let script = env("SIMBA_BACKENDS_SCRIPT");
    let _serial = SERIAL.lock().await;
    let pid = || std::fs::read_to_string(&pidfile).expect("read the PostgreSQL PID file").trim().to_owned();
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
    let out = Command::new("bash").arg(&script).args(["restart", "postgres"]).output().expect("run backends.sh");
    assert!(out.status.success(), "restart postgres: {}", String::from_utf8_lossy(&out.stderr));
    let t2 = wait_leader(&e, Duration::from_secs(20)).await;
    assert_ne!(t2.session_id(), t1.session_id(), "an expired session came back");
    assert!(t2.token() > t1.token(), "token went from {} to {}", t1.token(), t2.token());
    // The rows survived the crash (write-ahead log): the lease row holds the new term.
    let (holder, token) = lease_row(&admin(&url).await, &name).await;
    assert_eq!((holder.as_deref(), token), (Some(t2.session_id().as_str()), t2.token() as i64));
    eprintln!(
        "killed and restarted server: term ended with {reason:?}; token went from {} to {}",
        t1.token(),
        t2.token()
    );

    // The release listener of the backend that lived through the restart reconnected by
    // itself: it hears a release made by another node.
    let mut rx = b.subscribe_releases().expect("PostgreSQL broadcasts releases");
    let other = connect(&url).await;
    let s = open(&other).await;
    let heard = timeout(Duration::from_secs(10), async {
        loop {
            let probe = unique("after-restart");
            let t = won(&other, &s, &probe).await;
            assert!(other.release(&s, &probe, t).await.expect("release"));
            if timeout(Duration::from_millis(300), recv_name(&mut rx, &probe)).await.is_ok() {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "releases are not broadcast after the restart");
    other.close_session(&s).await.expect("close");

    // 2. Paused longer than the lease.
    {
        let paused = server_processes(&pid());
        let _resume = Resume(paused.clone());
        for p in &paused {
            signal("-STOP", p);
        }
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
        eprintln!(
            "paused server ({} processes): term ended {late:?} after its local deadline ({early:?} before)",
            paused.len()
        );
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
