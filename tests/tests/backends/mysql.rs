//! MySQL / MariaDB backend behaviour beyond the conformance suite, on the private test server
//! (`scripts/backends.sh start`), in real time: the server suite of the test kit
//! (`simba::tck::servers`) with every hook (rows written and locked by hand, the server
//! killed, restarted and paused; its graceful handovers are immediate through the release
//! watch, K2), then what is MySQL's own: a database or user that does not exist, the time
//! zone check, a user without DDL rights, renewal cost on the wire (S1), and the
//! one-statement fast path.
//!
//! The tests of this file run one at a time (`SERIAL`): some kill, restart and pause the
//! shared server, and the timing figures want a quiet machine.

#![allow(clippy::print_stderr)] // The figures (round trips per renewal, handover times) are printed for the report.

use std::time::Duration;

use simba::backend::mysql::MySqlBackend;
use simba::backend::{Backend, BackendError, HeldDigest, KeepAlive};
use simba::tck::conformance::unique;
use simba::tck::servers::{ServerHooks, open, won};
use simba_tests::servers::{self, MessageParser, Paused, Server, Wire, exec, rand_u64};
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

/// The server suite's hooks: rows written, read and locked by hand (with a pool of its own,
/// as an operator's session would be), the server killed, restarted and paused by its PID.
async fn hooks() -> ServerHooks<MySqlBackend> {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_MYSQL_URL") else {
        panic!("SIMBA_TEST_MYSQL_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    let server = Server::from_env("mysql", "SIMBA_TEST_MYSQL_PIDFILE");
    // Lazy: it connects at its first statement, so a pool made before a restart still works.
    let root = MySqlPool::connect_lazy(&url).expect("an admin pool");
    let (u, r1, r2, r3, s1, s2) =
        (url.clone(), root.clone(), root.clone(), root.clone(), server.clone(), server.clone());
    ServerHooks::new("MySQL", move || {
        let url = u.clone();
        async move { connect(&url).await }
    })
    .tokens_count_terms()
    .recovers_within(Duration::from_secs(20))
    .take_over(move |_, name| {
        let root = r1.clone();
        async move {
            sqlx::query("UPDATE simba_lease SET session_id = 'someone-else' WHERE name = ?")
                .bind(name)
                .execute(&root)
                .await
                .expect("take the lease over by hand");
        }
    })
    // A transaction that leaves the session 200 ms to live holds its row until the commit.
    // With `NOW(3)` (fixed when the statement started) a renewal that waited for the row would
    // renew a session that expired while it waited.
    .lock_session(move |_, s| {
        let root = r2.clone();
        async move {
            let mut tx = root.begin().await.expect("begin");
            sqlx::query(
                "UPDATE simba_session SET expires_at = CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED) + 200 \
                 WHERE id = ?",
            )
            .bind(s.as_str())
            .execute(&mut *tx)
            .await
            .expect("lock the session row");
            move || async move { tx.commit().await.expect("commit") }
        }
    })
    // MySQL sums in `DECIMAL`; the backend compares the wrapping sum on the server, from the
    // sums of 32-bit halves.
    .hold_lease(move |b: MySqlBackend, s, name, token| async move {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES (?, ?, ?)")
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
    .pause(move || {
        let server = server.clone();
        async move { Paused::stop(vec![server.pid()]) }
    })
    .connect_url(async |url: String| MySqlBackend::connect(&url).await)
    .refused("mysql://alice:s3cret@127.0.0.1:1/simba", "mysql://alice@127.0.0.1:1/simba")
    // Bounded by the connect timeout.
    .silent(|port| (format!("mariadb://root@127.0.0.1:{port}/simba"), format!("mysql://root@127.0.0.1:{port}/simba")))
    .misconfigured(&[
        ("postgres://u@127.0.0.1/simba", "unsupported URL"),
        ("127.0.0.1:3306/simba", "unsupported URL"),
        ("mysql://alice:s3cret@127.0.0.1:3306", "names no database"),
        ("mysql://alice:s3cret@127.0.0.1:3306/", "names no database"),
        ("mysql:///simba", "names no host"),
        ("mysql://alice:s3cret@127.0.0.1:notaport/simba", "invalid MySQL URL"),
    ])
}

simba::server_suite!(
    hooks,
    [take_over, lock_session, hold_lease, lease_record, kill_and_restart, pause, refused, silent, misconfigured]
);

/// A database that does not exist, or a user that does not, is a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_database_or_user_is_a_configuration_error() {
    let url = url_or_skip!("SIMBA_TEST_MYSQL_URL");
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
