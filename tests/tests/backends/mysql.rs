//! MySQL / MariaDB backend behaviour beyond the conformance suite, on the private test server
//! (`scripts/backends.sh start`), in real time: tokens and rows, the exact keep-alive digest,
//! connection errors, the time zone check, a user without DDL rights, a manual takeover, a
//! renewal that waited for its row (S3), two pools racing, renewal cost on the wire (S1),
//! graceful handover time with the release watch (K2), and a server killed and restarted,
//! then paused longer than the lease (section 9).
//!
//! The tests of this file run one at a time (`SERIAL`): one of them kills, restarts and
//! pauses the shared server, and the timing figures want a quiet machine.

#![allow(clippy::print_stderr)] // The figures (round trips per renewal, handover times) are printed for the report.

use std::time::Duration;

use simba::backend::mysql::MySqlBackend;
use simba::backend::{Backend, BackendError, HeldDigest, KeepAlive};
use simba::tck::conformance::unique;
use simba_tests::servers::{self, MessageParser, Server, Wire, client, config, exec, open, rand_u64, wait_leader, won};
use simba_tests::url_or_skip;
use sqlx::MySqlPool;

use crate::SERIAL;

async fn connect(url: &str) -> MySqlBackend {
    servers::connected(url, MySqlBackend::connect(url).await)
}

/// A plain sqlx pool on `url`, for statements the backend would never run.
async fn admin(url: &str) -> MySqlPool {
    MySqlPool::connect(url).await.expect("connect an admin pool")
}

/// `url` with its database replaced by `database` and its user by `user`.
fn url_for(url: &str, user: &str, database: &str) -> String {
    servers::url_for("mysql", url, user, database)
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
    servers::tokens_grow_by_one_per_term(
        &b,
        async || connect(&url).await,
        async |name: &str| lease_row(b.pool(), name).await,
    )
    .await;
}

/// S1: the digest's wrapping sum is exact for tokens far above 2^32 (MySQL sums in `DECIMAL`;
/// the backend compares the wrapping sum on the server, from the sums of 32-bit halves).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_is_exact_for_huge_tokens() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = open(&b).await;
    let hold = async |name: &str, token: i64| {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES (?, ?, ?)")
            .bind(name)
            .bind(s.as_str())
            .bind(token)
            .execute(b.pool())
            .await
            .expect("insert a lease row");
    };
    servers::digest_is_exact(&b, &s, hold, false).await;
}

/// Connection errors are prompt, name the server without its password, and say what is
/// wrong; URLs with missing parts are configuration errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_unreachable_servers_fail_clearly() {
    let refused = MySqlBackend::connect("mysql://alice:s3cret@127.0.0.1:1/simba");
    servers::refused_promptly(refused, "mysql://alice@127.0.0.1:1/simba").await;

    // A server that accepts the connection and never answers: bounded by the connect timeout.
    servers::silent_server_times_out(
        async |port| MySqlBackend::connect(&format!("mariadb://root@127.0.0.1:{port}/simba")).await,
        |port| format!("mysql://root@127.0.0.1:{port}/simba"),
    )
    .await;

    let cases = [
        ("postgres://u@127.0.0.1/simba", "unsupported URL"),
        ("127.0.0.1:3306/simba", "unsupported URL"),
        ("mysql://alice:s3cret@127.0.0.1:3306", "names no database"),
        ("mysql://alice:s3cret@127.0.0.1:3306/", "names no database"),
        ("mysql:///simba", "names no host"),
        ("mysql://alice:s3cret@127.0.0.1:notaport/simba", "invalid MySQL URL"),
    ];
    servers::misconfigured(MySqlBackend::connect, &cases).await;

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

/// Runs `script` with the `mariadb` (or `mysql`) command-line client as the URL's user.
fn run_client_script(url: &str, database: &str, script: &str) {
    use std::io::Write;
    let rest = url.trim_start_matches("mysql://");
    let (user, hostport) = rest.split_once('@').expect("user@host in the URL");
    let hostport = hostport.split('/').next().unwrap_or(hostport);
    let (host, port) = hostport.split_once(':').unwrap_or((hostport, "3306"));
    let client =
        if std::process::Command::new("mariadb").arg("--version").output().is_ok() { "mariadb" } else { "mysql" };
    let mut child = std::process::Command::new(client)
        .args(["-h", host, "-P", port, "-u", user, "--skip-ssl", database])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {client}: {e}"));
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write the script");
    let status = child.wait().expect("wait for the client");
    assert!(status.success(), "{client} failed on the schema script:\n{script}");
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
    exec(&root, format!("GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON {database}.* TO '{user}'@'%'")).await;

    let restricted = url_for(&url, &user, &database);
    let err = MySqlBackend::connect(&restricted).await.expect_err("the user may not create tables");
    let msg = err.to_string();
    eprintln!("user without DDL rights:\n{msg}");
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    for expected in ["CREATE TABLE IF NOT EXISTS simba_session", "simba_lease", "simba_member", "GRANT", &user] {
        assert!(msg.contains(expected), "missing {expected:?} in: {msg}");
    }

    let db_admin = admin(&url_for(&url, "root", &database)).await;
    // The script is for the command-line client (it changes the DELIMITER around the
    // procedure): run it as an administrator would.
    run_client_script(&url, &database, &MySqlBackend::schema());
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

/// T6: someone overwrites the lease row's holder (a manual takeover); the next keep-alive's
/// digest no longer matches, `owned` no longer lists the lease, and the term ends with
/// `TakenOver`. The intruder has no session row, so the election wins the lease back with
/// the next token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_takeover_ends_the_term_with_taken_over() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    servers::manual_takeover_ends_the_term(client(b.clone()), async |name: &str| {
        sqlx::query("UPDATE simba_lease SET session_id = 'someone-else' WHERE name = ?")
            .bind(name)
            .execute(b.pool())
            .await
            .expect("take the lease over by hand");
    })
    .await;
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
    servers::renewal_waits_then_finds_it_expired(&b, &s, async move { tx.commit().await.expect("commit") }).await;
}

/// Two pools (two nodes) race 100 times each for one lease: never two holders at once, and
/// the tokens of all terms are exactly the next integers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_never_both_win() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    servers::two_nodes_never_both_win([connect(&url).await, connect(&url).await], "MySQL").await;
}

// ---- S1 on the wire -------------------------------------------------------------------------

/// Splits the client's byte stream into MySQL packets (3-byte length, sequence number,
/// payload). A packet with sequence number 0 starts a command; its first byte names it.
#[derive(Default)]
struct CommandParser {
    buf: Vec<u8>,
}

impl MessageParser for CommandParser {
    type Kind = &'static str;

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
    let wire = Wire::<CommandParser>::start(upstream.to_owned()).await;
    // One pooled connection: with more, sqlx sometimes opens another while the last one is
    // being pinged on its way back to the pool, and its start-up would land in the figures
    // (whatever the number of leases).
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        // Plain text: the proxy reads the protocol (the server also offers TLS).
        .connect(&format!("mysql://{user}@127.0.0.1:{}/{database}?ssl-mode=DISABLED", wire.port()))
        .await
        .expect("connect through the proxy");
    let b = MySqlBackend::from_pool(pool).await.expect("backend on the pool");
    const N: u64 = 20;
    let one = servers::renewal_traffic(&b, &wire, &unique("s1"), 1, N).await;
    let many = servers::renewal_traffic(&b, &wire, &unique("s1"), 500, N).await;
    eprintln!(
        "S1 on MySQL, per renewal over {N} renewals (COM_PING: sqlx checks a connection when it goes back \
         to the pool, in the background):\n  1 lease:    {}\n  500 leases: {}",
        one.per(N),
        many.per(N)
    );
    assert_eq!(one, many, "a renewal's traffic depends on the number of leases");
    assert_eq!(one.messages.get("COM_QUERY"), Some(&N), "one batch per renewal");
    assert_eq!(one.messages.get("COM_STMT_EXECUTE"), None, "no other statement per renewal");
}

/// K2 and section 9 (leader stops gracefully), issue 15 P4: MySQL cannot broadcast the
/// release, but the candidate's node watches the rows it waits for (a read every 10 ms while
/// it waits), so it takes over long before its next periodic attempt
/// (`renew_interval / 2 + retry_jitter`, 200 to 300 ms here), every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_is_immediate() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let samples =
        servers::graceful_handovers([client(connect(&url).await), client(connect(&url).await)], "MySQL").await;
    let (median, renew) = (servers::median(&samples), config().renew_interval());
    assert!(median < renew / 8, "median handover {median:?} is not well under the renewal interval {renew:?}");
    let next_attempt = renew / 2;
    assert!(samples[samples.len() - 1] < next_attempt, "a handover waited for the next attempt ({next_attempt:?})");
}

// ---- section 9: the server dies, comes back, and hangs --------------------------------------

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
    let server = Server::from_env("mysql", "SIMBA_TEST_MYSQL_PIDFILE");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let c = client(b.clone());
    let name = unique("fault");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;

    // 1. Killed, restarted once the term has ended.
    let t2 = servers::kill_then_restart(&server, &t1, &e).await;
    // The rows survived the crash: the lease row holds the new term.
    let (holder, token) = lease_row(&admin(&url).await, &name).await;
    assert_eq!((holder.as_deref(), token), (Some(t2.session_id().as_str()), t2.token() as i64));

    // 2. Paused longer than the lease.
    servers::pause_past_the_lease(vec![server.pid()], &t2, &e, Duration::from_secs(20)).await;
    e.stop().await;
    c.close().await;
}

/// Issue 15 P2, ADR 0002's hazards of the one-statement fast path (a released row is taken
/// by one `UPDATE`): the token it returns is the row's, +1 per term; a caller whose session
/// expired or was closed never takes the free row; and a held row still goes to the
/// procedure's answer (`Held`, or `Won` with the same token for the holder's retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_path_takes_only_free_rows_for_live_callers() {
    use simba::backend::Acquire;
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let name = unique("fast");
    let a = open(&b).await;
    let t1 = won(&b, &a, &name).await;
    assert!(b.release(&a, &name, t1).await.expect("release"));
    // The row is free now: the fast path takes it, with the next token.
    let t2 = won(&b, &a, &name).await;
    assert_eq!(t2, t1 + 1);
    assert_eq!(lease_row(b.pool(), &name).await, (Some(a.as_str().to_owned()), t2 as i64));
    // Held: another session is refused; the holder's retry gets the same term.
    let other = open(&b).await;
    assert_eq!(b.acquire(&other, &name).await.expect("acquire"), Acquire::Held);
    assert_eq!(b.acquire(&a, &name).await.expect("acquire"), Acquire::Won(t2));
    assert!(b.release(&a, &name, t2).await.expect("release"));
    // A closed caller never takes the free row, and the row is left as it was.
    b.close_session(&other).await.expect("close");
    assert_eq!(b.acquire(&other, &name).await.expect("acquire"), Acquire::Expired);
    // An expired caller neither.
    let short = b.open_session(Duration::from_millis(300)).await.expect("open").id;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(b.acquire(&short, &name).await.expect("acquire"), Acquire::Expired);
    assert_eq!(lease_row(b.pool(), &name).await, (None, t2 as i64));
    b.close_session(&a).await.expect("close");
}
