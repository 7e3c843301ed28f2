//! PostgreSQL backend behaviour beyond the conformance suite, on the private test server
//! (`scripts/backends.sh start`), in real time: the server suite of the test kit
//! (`simba::tck::servers`) with every hook (rows written and locked by hand, the server
//! killed, restarted and paused), then what is PostgreSQL's own: a database that does not
//! exist, a user without DDL rights, the release listener's lifetime, and renewal cost on the
//! wire (S1).
//!
//! The tests of this file run one at a time (`SERIAL`): some kill, restart and pause the
//! shared server, and the timing figures want a quiet machine.

#![allow(clippy::print_stderr)] // The figures (round trips per renewal, handover times) are printed for the report.

use std::time::Duration;

use simba::backend::postgres::PostgresBackend;
use simba::backend::{Backend, BackendError, HeldDigest, KeepAlive};
use simba::tck::conformance::unique;
use simba::tck::servers::{self as suite, ServerHooks, open, won};
use simba_tests::servers::{self, MessageParser, Paused, Server, Wire, exec, rand_u64};
use simba_tests::url_or_skip;
use sqlx::PgPool;
use tokio::time::timeout;

use crate::SERIAL;

async fn connect(url: &str) -> PostgresBackend {
    servers::connected(url, PostgresBackend::connect(url).await)
}

/// A plain sqlx pool on `url`, for statements the backend would never run.
async fn admin(url: &str) -> PgPool {
    PgPool::connect(url).await.expect("connect an admin pool")
}

/// `url` with its database replaced by `database` and its user by `user`.
fn url_for(url: &str, user: &str, database: &str) -> String {
    servers::url_for("postgres", url, user, database)
}

/// The lease row: holder and token.
async fn lease_row(pool: &PgPool, name: &str) -> (Option<String>, i64) {
    sqlx::query_as("SELECT session_id, token FROM simba_lease WHERE name = $1")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("read the lease row")
}

/// The server suite's hooks: rows written, read and locked by hand (with a pool of its own,
/// as an operator's session would be), the server killed and restarted by `backends.sh`, and
/// paused with every process that serves a connection.
async fn hooks() -> ServerHooks<PostgresBackend> {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else {
        panic!("SIMBA_TEST_POSTGRES_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    let server = Server::from_env("postgres", "SIMBA_TEST_POSTGRES_PIDFILE");
    // Lazy: it connects at its first statement, so a pool made before a restart still works.
    let root = PgPool::connect_lazy(&url).expect("an admin pool");
    let (u, u2) = (url.clone(), url.clone());
    let (r1, r2, r3, s1, s2) = (root.clone(), root.clone(), root.clone(), server.clone(), server.clone());
    ServerHooks::new("PostgreSQL", move || {
        let url = u.clone();
        async move { connect(&url).await }
    })
    .tokens_count_terms()
    .recovers_within(Duration::from_secs(20))
    .take_over(move |_, name| {
        let root = r1.clone();
        async move {
            sqlx::query("UPDATE simba_lease SET session_id = 'someone-else' WHERE name = $1")
                .bind(name)
                .execute(&root)
                .await
                .expect("take the lease over by hand");
        }
    })
    // A transaction that leaves the session 200 ms to live holds its row until the commit.
    // With `now()` (frozen when the statement started) a renewal that waited for the row would
    // renew a session that expired while it waited.
    .lock_session(move |_, s| {
        let root = r2.clone();
        async move {
            let mut tx = root.begin().await.expect("begin");
            sqlx::query(
                "UPDATE simba_session SET expires_at = (extract(epoch from clock_timestamp()) * 1000)::bigint + 200 \
                 WHERE id = $1",
            )
            .bind(s.as_str())
            .execute(&mut *tx)
            .await
            .expect("lock the session row");
            move || async move { tx.commit().await.expect("commit") }
        }
    })
    // PostgreSQL sums `bigint` as `numeric`; the backend sums 32-bit halves and recombines them
    // like `HeldDigest`.
    .hold_lease(move |b: PostgresBackend, s, name, token| async move {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES ($1, $2, $3)")
            .bind(name)
            .bind(s.as_str())
            .bind(token)
            .execute(b.pool())
            .await
            .expect("insert a lease row");
    })
    .lease_record(move |_, name| {
        let root = r3.clone();
        async move { lease_row(&root, &name).await }
    })
    .kill_and_restart(
        move || {
            let server = s1.clone();
            async move { server.kill() }
        },
        move || {
            let server = s2.clone();
            async move { server.restart() }
        },
    )
    // The release listener of the backend that lived through the restart reconnected by
    // itself: it hears a release made by another node.
    .after_restart(move |b: PostgresBackend, _, _| {
        let url = u2.clone();
        async move {
            let mut rx = b.subscribe_releases().expect("PostgreSQL broadcasts releases");
            let other = connect(&url).await;
            let s = open(&other).await;
            suite::releases_are_heard(&mut rx, &other, &s, Duration::from_secs(10)).await;
            other.close_session(&s).await.expect("close");
        }
    })
    .pause(move || {
        let server = server.clone();
        async move { Paused::stop(server_processes(&server.pid())) }
    })
    .connect_url(async |url: String| PostgresBackend::connect(&url).await)
    .refused("postgres://alice:s3cret@127.0.0.1:1/simba", "postgres://alice@127.0.0.1:1/simba")
    // Bounded by the connect timeout.
    .silent(|port| (format!("postgres://postgres@127.0.0.1:{port}/simba"), format!("127.0.0.1:{port}")))
    .misconfigured(&[
        ("mysql://u@127.0.0.1/simba", "unsupported URL"),
        ("127.0.0.1:5432/simba", "unsupported URL"),
        ("postgres://alice:s3cret@127.0.0.1:5432", "names no database"),
        ("postgres://alice:s3cret@127.0.0.1:5432/", "names no database"),
        ("postgres:///simba", "names no host"),
        ("postgres://alice:s3cret@127.0.0.1:notaport/simba", "invalid PostgreSQL URL"),
    ])
}

simba::server_suite!(
    hooks,
    [take_over, lock_session, hold_lease, lease_record, kill_and_restart, pause, refused, silent, misconfigured]
);

/// A database that does not exist is a configuration error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_database_is_a_configuration_error() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    // Serial: it needs the server, which another test kills and restarts.
    let _serial = SERIAL.lock().await;
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
    for expected in
        ["CREATE TABLE IF NOT EXISTS simba_session", "simba_lease", "simba_lease_floor", "simba_member", "GRANT", &user]
    {
        assert!(msg.contains(expected), "missing {expected:?} in: {msg}");
    }

    exec(&db_admin, PostgresBackend::schema()).await;
    exec(
        &db_admin,
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON simba_session, simba_lease, simba_lease_floor, simba_member TO {user}"
        ),
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
            let heard = timeout(Duration::from_secs(2), suite::recv_name(rx, expected)).await;
            assert!(heard.is_ok(), "the release of {expected} was not heard");
        }
    }
    drop(b);
    drop(clone);
    let end = timeout(Duration::from_secs(2), suite::closed(&mut rx)).await;
    assert!(end.is_ok(), "the listener outlived the backend");
}

/// The listening connections (`LISTEN` was their last statement) of this server.
async fn listener_pids(root: &PgPool) -> Vec<i32> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' ORDER BY pid")
        .fetch_all(root)
        .await
        .expect("read pg_stat_activity")
}

/// The next name `rx` hears within `within` that `wanted` accepts.
async fn heard(
    rx: &mut tokio::sync::broadcast::Receiver<String>,
    within: Duration,
    wanted: impl Fn(&str) -> bool,
) -> Option<String> {
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Ok(name)) if wanted(&name) => return Some(name),
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) | Err(_) => return None,
        }
    }
}

/// Run now at once on PostgreSQL: a trigger made through one backend's jobs store reaches
/// another backend instance's `subscribe_control()` by `NOTIFY` (the delivery times are
/// printed: trigger call to receipt). When that instance's listening connection is killed
/// (`pg_terminate_backend`), a trigger made meanwhile is not lost: the listener, once it
/// listens again, sends an empty name (read the control version again), the store then shows
/// the request pending, and the next trigger is delivered by `NOTIFY` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_changes_reach_other_instances_and_survive_a_killed_listener() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let root = admin(&url).await;
    let a = connect(&url).await;
    let before = listener_pids(&root).await;
    let b = connect(&url).await;
    let (store_a, store_b) = (a.job_store().expect("jobs store"), b.job_store().expect("jobs store"));
    let mut rx = store_b.subscribe_control().expect("PostgreSQL broadcasts control changes");
    let own: Vec<i32> = listener_pids(&root).await.into_iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(own.len(), 1, "the second backend's listener among {own:?}");

    let mut took = Vec::new();
    for _ in 0..20 {
        let job = unique("run-now");
        let at = std::time::Instant::now();
        store_a.trigger(&job, "backend-test-1", 1_780_000_000_000).await.expect("trigger");
        let got = heard(&mut rx, Duration::from_secs(5), |n| n == job).await;
        assert_eq!(got.as_deref(), Some(job.as_str()), "the trigger of {job} did not reach the other instance");
        took.push(at.elapsed());
    }
    took.sort();
    eprintln!(
        "PostgreSQL trigger -> other instance's subscribe_control: p50 {:?}, max {:?} (20 triggers)",
        took[took.len() / 2],
        took[took.len() - 1]
    );

    exec(&root, format!("SELECT pg_terminate_backend({})", own[0])).await;
    let missed = unique("while-away");
    store_a.trigger(&missed, "backend-test-2", 1_780_000_000_000).await.expect("trigger while the listener is away");
    // Its NOTIFY may or may not have reached the dying connection; the wake must come anyway.
    let wake = heard(&mut rx, Duration::from_secs(10), str::is_empty).await;
    assert!(wake.is_some(), "no wake after the listener's connection was killed");
    let state = store_b.job(&missed).await.expect("read the job").expect("the job is known");
    assert!(state.trigger_pending_ms.is_some(), "the trigger made while the listener was away is not pending");
    let after = unique("after");
    store_a.trigger(&after, "backend-test-3", 1_780_000_000_000).await.expect("trigger");
    let got = heard(&mut rx, Duration::from_secs(5), |n| n == after).await;
    assert_eq!(got.as_deref(), Some(after.as_str()), "delivery did not resume after the listener reconnected");
    let now: Vec<i32> = listener_pids(&root).await.into_iter().filter(|p| !before.contains(p)).collect();
    assert!(now.len() == 1 && now[0] != own[0], "the listener did not reconnect: {now:?}, killed {}", own[0]);
}

// ---- S1 on the wire -------------------------------------------------------------------------

/// Splits the client's byte stream into PostgreSQL frontend messages: untyped start-up
/// packets (length, then a code) until the start-up message proper, then typed messages
/// (one type byte, then a length that counts itself).
#[derive(Default)]
struct FrontendParser {
    buf: Vec<u8>,
    started: bool,
}

impl MessageParser for FrontendParser {
    type Kind = char;

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

/// S1: a renewal costs the same on the wire whether the session holds 1 lease or 500: the
/// same round trips, the same frontend messages (one Execute: one statement), the same bytes
/// both ways. Measured on a database of its own, so no other test's traffic or
/// notification crosses the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_cost_does_not_grow_with_leases() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let Proxied { root, database, wire, backend: b } = Proxied::start(&url, "simba_s1").await;
    const N: u64 = 20;
    let one = servers::renewal_traffic(&b, &wire, "s1", 1, N).await;
    let many = servers::renewal_traffic(&b, &wire, "s1", 500, N).await;
    eprintln!(
        "S1 on PostgreSQL, per renewal over {N} renewals (renewals use a connection of their own, outside the \
         pool, so no ping follows them):\n  1 lease:    {}\n  500 leases: {}",
        one.per(N),
        many.per(N)
    );
    assert_eq!(one, many, "a renewal's traffic depends on the number of leases");
    assert_eq!(one.messages.get(&'E'), Some(&N), "one statement per renewal");
    assert_eq!(one.messages.get(&'Q'), None, "no simple query (BEGIN/COMMIT) per renewal");
    assert_eq!(one.messages.get(&'S'), Some(&N), "one Sync per renewal: no pool ping after it (one round trip)");
    drop(b);
    drop(wire);
    exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
}

/// A database of its own (so no other test's traffic or notification crosses the proxy), a
/// counting proxy in front of the server, and a backend on a pool of one connection through it.
struct Proxied {
    /// An admin pool on the test database, to drop the database at the end.
    root: PgPool,
    database: String,
    wire: Wire<FrontendParser>,
    backend: PostgresBackend,
}

impl Proxied {
    async fn start(url: &str, prefix: &str) -> Proxied {
        let root = admin(url).await;
        let database = format!("{prefix}_{:016x}", rand_u64());
        exec(&root, format!("CREATE DATABASE {database}")).await;
        let upstream = url.split_once('@').map_or("", |(_, h)| h).split('/').next().unwrap_or("").to_owned();
        let wire = Wire::<FrontendParser>::start(upstream).await;
        // One pooled connection: with more, sqlx sometimes opens another while the last one is
        // being pinged on its way back to the pool, and its start-up and statement preparation
        // would land in the figures.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            // Plain text: the proxy reads the protocol (the server also offers TLS).
            .connect(&format!("postgres://postgres@127.0.0.1:{}/{database}?sslmode=disable", wire.port()))
            .await
            .expect("connect through the proxy");
        let backend = PostgresBackend::from_pool(pool).await.expect("backend on the pool");
        Proxied { root, database, wire, backend }
    }
}

/// S1 for opening a session: one simple query (no Parse, so no round trip to prepare it on a
/// connection that has not), which also collects sessions dead for longer than the grace
/// period: their leases' holder is cleared with the token kept (T3), their memberships and rows
/// are deleted. Over a slow link a session must open within `renew_interval`, and a prepared
/// statement on a fresh connection took two round trips per statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_is_one_simple_query_and_collects_dead_sessions() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let Proxied { root, database, wire, backend: b } = Proxied::start(&url, "simba_open").await;
    let db = admin(&url_for(&url, "postgres", &database)).await;

    let dead = open(&b).await;
    let token = won(&b, &dead, "job").await;
    assert_eq!(b.join_group(&dead, "group").await.expect("join"), simba::backend::Join::Joined);
    // Dead for two minutes: longer than the grace period (one minute).
    sqlx::query("UPDATE simba_session SET expires_at = expires_at - ttl_ms - 120000 WHERE id = $1")
        .bind(dead.as_str())
        .execute(&db)
        .await
        .expect("age the session by hand");

    tokio::time::sleep(Duration::from_millis(300)).await;
    wire.take();
    let live = b.open_session(Duration::from_secs(120)).await.expect("open").id;
    // sqlx pings a connection (one `Sync`) when it goes back to the pool, which the open's task
    // does after it handed the answer over: that ping lands in the window or not depending on
    // which task runs first. Wait for it, so that it is always counted, and count it apart.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let traffic = wire.take();
    eprintln!("opening a session on PostgreSQL: {}", traffic.per(1));
    assert_eq!(traffic.messages.get(&'Q'), Some(&1), "one simple query: {traffic:?}");
    assert_eq!(traffic.messages.get(&'P'), None, "nothing prepared: {traffic:?}");
    assert_eq!(traffic.messages.get(&'E'), None, "no extended-protocol statement: {traffic:?}");
    let release_pings = traffic.messages.get(&'S').copied().unwrap_or(0);
    assert!(release_pings <= 1, "at most the pool's ping on release: {traffic:?}");
    assert_eq!(traffic.round_trips, 1 + release_pings, "the open is one round trip: {traffic:?}");

    let count = |sql: &'static str| {
        let (db, dead) = (db.clone(), dead.clone());
        async move { sqlx::query_scalar::<_, i64>(sql).bind(dead.as_str()).fetch_one(&db).await.expect("count") }
    };
    assert_eq!(count("SELECT count(*) FROM simba_session WHERE id = $1").await, 0, "the dead session is collected");
    assert_eq!(count("SELECT count(*) FROM simba_member WHERE session_id = $1").await, 0, "its membership too");
    assert_eq!(lease_row(&db, "job").await, (None, i64::try_from(token).expect("a small token")), "T3: token kept");
    assert_eq!(won(&b, &live, "job").await, token + 1);
    drop(b);
    db.close().await;
    drop(wire);
    exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
}

// ---- section 9: what the `pause` hook stops -----------------------------------------------------

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

/// Transactions cancelled at every point of their round trips, as a claim's call timeout
/// cancels them on a loaded machine (run-now claims are a transaction on every dialect): no
/// pooled connection is left inside a transaction. sqlx 0.9 leaves one when a `BEGIN` in
/// flight is cancelled, and its pool hands that connection out again: the multi-process
/// schedules test saw a node's every statement fail with "current transaction is aborted"
/// for seconds. Counted on the server: sessions of the test's database still `idle in
/// transaction` a second after a cancelled claim, while nothing uses the pool. The cancelling
/// timeouts sweep from 0 to twice the time an answered claim takes on this machine now (a
/// moving average), so that claims are cancelled at every point however loaded it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_transactions_leave_no_pooled_connection_inside_one() {
    use simba::job_store::{ClaimRequest, SlotKind};
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let _serial = SERIAL.lock().await;
    let root = admin(&url).await;
    let database = format!("simba_cancel_{:016x}", rand_u64());
    exec(&root, format!("CREATE DATABASE {database}")).await;
    let user = url.split_once("://").and_then(|(_, r)| r.split_once('@')).map_or("postgres", |(u, _)| u);
    let b = connect(&url_for(&url, user, &database)).await;
    let store = b.job_store().expect("a jobs store");
    let s = open(&b).await;
    let lease = unique("cancel");
    let token = won(&b, &s, &lease).await;
    let job = unique("job");
    let stuck_now = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(&database)
        .fetch_one(&root)
        .await
        .expect("read pg_stat_activity");
        n
    };
    let (mut cancelled, mut answered, mut stuck) = (0, 0, 0);
    // What an answered claim takes, averaged over the last few; the first ones are not cancelled.
    let mut typical: Option<Duration> = None;
    for i in 0..400u64 {
        store.trigger(&job, &format!("k{i}"), 1_780_000_000_000 + i as i64).await.expect("trigger");
        let req = ClaimRequest {
            session: &s,
            lease: &lease,
            token,
            job: &job,
            slot_ms: 0,
            kind: SlotKind::Manual,
            node: "cancel-test",
            started_ms: 1,
            attempts: 1,
        };
        let limit = typical.map_or(Duration::from_secs(30), |t| t * 2 * u32::try_from(i % 60).unwrap_or(0) / 60);
        let began = std::time::Instant::now();
        match timeout(limit, store.claim_run(req)).await {
            Ok(_) => {
                answered += 1;
                let took = began.elapsed();
                typical = Some(typical.map_or(took, |t| (t * 7 + took) / 8));
            }
            Err(_) => {
                cancelled += 1;
                // Before the pool lends the connection again. A transaction that sqlx knows
                // of is rolled back as its connection goes back to the pool, within
                // milliseconds (longer on a loaded machine): waited out. One it lost track of
                // stays open until the connection is used again: still there after a second.
                tokio::time::sleep(Duration::from_millis(3)).await;
                let settled = std::time::Instant::now() + Duration::from_secs(1);
                let mut left = stuck_now().await;
                while left > 0 && std::time::Instant::now() < settled {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    left = stuck_now().await;
                }
                stuck += left;
            }
        }
    }
    eprintln!(
        "postgres: {cancelled} claims cancelled, {answered} answered; sessions seen left in a transaction: {stuck}"
    );
    assert!(cancelled > 50 && answered > 50, "cancelled at many points: {cancelled} cancelled, {answered} answered");
    assert_eq!(stuck, 0, "pooled connections left inside a transaction");
    for _ in 0..40 {
        store.job(&job).await.expect("every pooled connection answers");
        store.history(&job, 5).await.expect("every pooled connection answers");
    }
    b.close_session(&s).await.expect("close");
    drop(b);
    exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
}
