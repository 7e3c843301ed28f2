//! The `simba` command-line tool (ADR 0007) against real stores: golden `status` output on a
//! SQLite file (volatile fields masked), `--json` parsed on PostgreSQL, MySQL, Redis,
//! ZooKeeper and etcd, `watch`, `check` passing and failing for the right reasons, bad input, and an
//! unreachable backend (exit code 2 within a bounded time, the password never printed).
//!
//! Tests that need a server read its URL with `simba_tests::server_url`; without it they
//! report SKIPPED (under `CI=true` they fail).

use std::time::{Duration, Instant};

use serde_json::Value;
use simba::backend::sqlite::SqliteBackend;
use simba::backend::{Acquire, Backend, SessionId};

/// Runs the tool in-process: `(exit code, stdout, stderr)`.
async fn simba(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["simba"];
    argv.extend_from_slice(args);
    let code = simba_cli::run(argv, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// Replaces the digits of every duration (`12.3s`, `4m05s`) with `#`, keeping widths, so the
/// table's alignment is still compared.
fn mask_durations(text: &str) -> String {
    let is_duration = |w: &str| {
        let Some(body) = w.strip_suffix('s') else { return false };
        (body.contains('.') && body.parse::<f64>().is_ok())
            || body.split_once('m').is_some_and(|(m, s)| m.parse::<u64>().is_ok() && s.parse::<u64>().is_ok())
    };
    text.lines()
        .map(|line| {
            let mut out = String::new();
            let mut word = String::new();
            for c in line.chars().chain(std::iter::once('\n')) {
                if c == ' ' || c == '\n' {
                    if is_duration(&word) {
                        word = word.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
                    }
                    out.push_str(&word);
                    word.clear();
                    if c == ' ' {
                        out.push(' ');
                    }
                } else {
                    word.push(c);
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A SQLite store with two sessions of known ids (inserted as a node would, on the
/// database's clock), a job lease and a three-partition group.
async fn sqlite_fixture(dir: &tempfile::TempDir) -> (String, SqliteBackend) {
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let b = SqliteBackend::connect(&url).await.expect("sqlite");
    for id in ["a".repeat(32), "b".repeat(32)] {
        sqlx::query(
            "INSERT INTO simba_session (id, expires_at, ttl_ms, created_at) VALUES \
             (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER) + 60000, 60000, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
        )
        .bind(id)
        .execute(b.pool())
        .await
        .expect("insert a session");
    }
    let (a, bb) = (SessionId::new("a".repeat(32)), SessionId::new("b".repeat(32)));
    for (s, lease) in [(&a, "report"), (&a, "billing.0"), (&a, "billing.1"), (&bb, "billing.2")] {
        assert_eq!(b.acquire(s, lease).await.expect("acquire"), Acquire::Won(1));
    }
    b.join_group(&a, "billing").await.expect("join");
    b.join_group(&bb, "billing").await.expect("join");
    (url, b)
}

const GOLDEN: &str = "\
backend: URL  (times on the backend's clock)

SESSIONS (2)
ID                                AGE   EXPIRES IN  LEASES
aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa  #.#s  ##.#s       3
bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb  #.#s  ##.#s       1

LEASES (4)
NAME       HOLDER                            TOKEN  HELD FOR
billing.0  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa  1      #.#s
billing.1  aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa  1      #.#s
billing.2  bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb  1      #.#s
report     aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa  1      #.#s

GROUPS (1)
GROUP    MEMBERS  PARTITIONS PER MEMBER  BALANCE
billing  2        aaaaaaaa=2 bbbbbbbb=1  balanced (1..2 per member)";

/// `simba status` prints the documented tables: sessions with age and time to expiry,
/// leases with holder, token and time held, groups with partitions per member and balance.
#[tokio::test]
async fn status_table_golden_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, _b) = sqlite_fixture(&dir).await;
    let (code, out, err) = simba(&["status", "--backend", &url]).await;
    assert_eq!(code, 0, "{err}");
    let shown = out.replacen(&url, "URL", 1);
    assert_eq!(mask_durations(shown.trim_end()), GOLDEN, "\n{out}");
}

/// `--json` carries the same facts, with times in milliseconds; `watch --count` refreshes.
#[tokio::test]
async fn status_json_and_watch_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, _b) = sqlite_fixture(&dir).await;
    let (code, out, err) = simba(&["status", "--json", "--backend", &url]).await;
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["sessions"].as_array().map(Vec::len), Some(2));
    let expires = v["sessions"][0]["expires_in_ms"].as_u64().expect("expires_in_ms");
    assert!((50_000..=60_000).contains(&expires), "{expires}");
    assert_eq!(v["leases"][3]["name"], "report");
    assert_eq!(v["leases"][3]["token"], 1);
    assert!(v["leases"][3]["held_for_ms"].as_u64().is_some_and(|ms| ms < 10_000));
    assert_eq!(v["groups"][0]["members"][0]["partitions"], 2);
    assert_eq!(v["groups"][0]["balanced"], true);
    let (code, out, err) = simba(&["watch", "--json", "--count", "2", "--interval", "100ms", "--backend", &url]).await;
    assert_eq!(code, 0, "{err}");
    let frames: Vec<Value> = out.lines().map(json).collect();
    assert_eq!(frames.len(), 2);
    assert!(frames.iter().all(|f| f["leases"].as_array().map(Vec::len) == Some(4)));
}

/// Each server backend: a session, a lease and a group membership made through the backend
/// show up in `status --json` with the right holder and token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_on_every_server() {
    use simba::backend::zookeeper::ZooKeeperBackend;
    use simba::backend::{etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, redis::RedisBackend};
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") {
        listed_in_json(PostgresBackend::connect(&url).await.expect("postgres"), &url).await;
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_MYSQL_URL") {
        listed_in_json(MySqlBackend::connect(&url).await.expect("mysql"), &url).await;
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") {
        listed_in_json(RedisBackend::connect(&url).await.expect("redis"), &url).await;
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") {
        listed_in_json(ZooKeeperBackend::connect(&url).await.expect("zookeeper"), &url).await;
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") {
        listed_in_json(EtcdBackend::connect(&url).await.expect("etcd"), &url).await;
    }
}

async fn listed_in_json<B: Backend>(b: B, url: &str) {
    let tag = format!("{:08x}", rand::random::<u32>());
    let (lease, group) = (format!("cli-{tag}.0"), format!("cli-{tag}"));
    let s = b.open_session(Duration::from_secs(20)).await.expect("open").id;
    let Acquire::Won(token) = b.acquire(&s, &lease).await.expect("acquire") else { panic!("lease held") };
    b.join_group(&s, &group).await.expect("join");
    let (code, out, err) = simba(&["status", "--json", "--backend", url]).await;
    assert_eq!(code, 0, "{url}: {err}");
    let v = json(&out);
    let sessions = v["sessions"].as_array().expect("sessions");
    let me = sessions.iter().find(|x| x["id"] == s.as_str()).unwrap_or_else(|| panic!("{url}: {s} not in {out}"));
    assert_eq!(me["leases"], 1, "{url}");
    if let Some(ms) = me["expires_in_ms"].as_u64() {
        assert!(ms <= 20_000, "{url}: {ms}");
    }
    let l = v["leases"].as_array().expect("leases").iter().find(|l| l["name"] == lease.as_str());
    let l = l.unwrap_or_else(|| panic!("{url}: {lease} not in {out}"));
    assert_eq!((l["session"].as_str(), l["token"].as_u64()), (Some(s.as_str()), Some(token)), "{url}");
    let g = v["groups"].as_array().expect("groups").iter().find(|g| g["name"] == group.as_str());
    let g = g.unwrap_or_else(|| panic!("{url}: {group} not in {out}"));
    assert_eq!(g["members"][0]["session"], s.as_str());
    assert_eq!(g["members"][0]["partitions"], 1, "{url}: partition `{lease}` counted for its holder");
    assert!(!v["backend"].as_str().unwrap_or_default().is_empty());
    // The table shows the same row; what the store cannot tell is `-` (Redis: age; ZooKeeper:
    // both times).
    let (code, table, err) = simba(&["status", "--backend", url]).await;
    assert_eq!(code, 0, "{url}: {err}");
    let row = table.lines().find(|l| l.starts_with(s.as_str())).unwrap_or_else(|| panic!("{url}: no row\n{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.len(), 4, "{url}: {row}");
    for (field, cell) in [("age_ms", cells[1]), ("expires_in_ms", cells[2])] {
        assert_eq!(me[field].is_null(), cell == "-", "{url}: {field} in {row}");
    }
    assert_eq!(cells[3], "1", "{url}: {row}");
    assert!(table.lines().any(|l| l.starts_with(&lease) && l.contains(s.as_str())), "{url}:\n{table}");
    b.close_session(&s).await.expect("close");
    let (_, out, _) = simba(&["status", "--json", "--backend", url]).await;
    assert!(!out.contains(s.as_str()), "{url}: closed session still listed");
}

/// `check` passes on a well-configured server, and fails (exit 1) naming the problem: an
/// evicting Redis, a ZooKeeper whose maxSessionTimeout is below lease_duration, an etcd
/// asked for a lease_duration that is not whole seconds, an invalid configuration (the
/// runtime's own message, with the line). On etcd it checks the cluster's health and says
/// that no clock check is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_and_fails_for_the_right_reasons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (url, _b) = sqlite_fixture(&dir).await;
    let (code, out, err) = simba(&["check", "--backend", &url]).await;
    assert_eq!(code, 0, "{out}{err}");
    for check in ["configuration", "connect", "schema", "clock", "session lifetime"] {
        assert!(out.lines().any(|l| l.starts_with("PASS") && l.contains(check)), "{check}:\n{out}");
    }
    let bad = dir.path().join("simba.toml");
    std::fs::write(&bad, "[session]\nleese_duration = \"10s\"\n").expect("write");
    let (code, out, _) = simba(&["check", "--json", "--config", bad.to_str().expect("utf-8")]).await;
    assert_eq!(code, 1, "{out}");
    let v = json(&out);
    assert_eq!(v["ok"], false);
    let detail = v["checks"][0]["detail"].as_str().expect("detail");
    assert!(detail.contains("line 2") && detail.contains("did you mean `lease_duration`"), "{detail}");

    if let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") {
        let (code, out, err) = simba(&["check", "--backend", &url]).await;
        assert_eq!(code, 0, "{out}{err}");
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") {
        let (code, out, err) = simba(&["check", "--backend", &url]).await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.lines().any(|l| l.starts_with("PASS") && l.contains("maxmemory-policy  noeviction")), "{out}");
        // B8: the test server has no replica (with one, wait_replicas=0 fails: replicated_redis).
        assert!(out.lines().any(|l| l.starts_with("PASS") && l.contains("no replica follows")), "{out}");
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_EVICTING_URL") {
        let (code, out, _) = simba(&["check", "--backend", &url]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.lines().any(|l| l.starts_with("FAIL") && l.contains("maxmemory-policy")), "{out}");
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_CAPPED_URL") {
        let (code, out, _) = simba(&["check", "--backend", &url]).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.lines().any(|l| l.starts_with("FAIL") && l.contains("maxSessionTimeout")), "{out}");
    }
    if let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") {
        let (code, out, err) = simba(&["check", "--backend", &url]).await;
        assert_eq!(code, 0, "{out}{err}");
        let line = |outcome: &str, check: &str| out.lines().find(|l| l.starts_with(outcome) && l.contains(check));
        let health = line("PASS", "etcd cluster health").unwrap_or_else(|| panic!("no cluster health:\n{out}"));
        assert!(health.contains("1 member, leader ") && health.contains("no alarms"), "{health}");
        let clock = line("SKIP", "clock").unwrap_or_else(|| panic!("no clock line:\n{out}"));
        assert!(clock.contains("not needed") && clock.contains("lease TTL"), "{clock}");
        assert!(line("PASS", "etcd lease TTL").is_some_and(|l| l.contains("granted 15s")), "{out}");
        let half = dir.path().join("half-seconds.toml");
        std::fs::write(&half, "[session]\nlease_duration = \"2500ms\"\n").expect("write");
        let (code, out, _) = simba(&["check", "--config", half.to_str().expect("utf-8"), "--backend", &url]).await;
        assert_eq!(code, 1, "{out}");
        let ttl = out.lines().find(|l| l.starts_with("FAIL") && l.contains("etcd lease TTL"));
        assert!(ttl.is_some_and(|l| l.contains("grants at most 2s") && l.contains("whole")), "{out}");
    }
}

/// Bad input: clap's errors with a suggestion and the usage, exit code 2; `--help` exits 0.
#[tokio::test]
async fn bad_input_gets_clap_errors() {
    let (code, _, err) = simba(&["stauts"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand 'stauts'") && err.contains("status"), "{err}");
    let (code, _, err) = simba(&["status", "--bakend", "x"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("unexpected argument '--bakend'") && err.contains("--backend"), "{err}");
    let (code, _, err) = simba(&["watch", "--interval", "soon"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'soon'"), "{err}");
    let (code, out, _) = simba(&["--help"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("status") && out.contains("watch") && out.contains("check"), "{out}");
    let (code, _, err) = simba(&["status", "--backend", "ftp://x"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("unsupported backend URL scheme `ftp`"), "{err}");
}

/// An unreachable backend: exit code 3 (`simba_cli::EXIT_UNREACHABLE`) within the timeout, naming the URL (without its
/// password) and the cause. A server that accepts connections but never answers is the slow
/// case; a closed port the fast one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_backend_exits_3_in_bounded_time() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let _hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            open.push(c); // accepted, never answered
        }
    });
    for url in [
        format!("postgres://simba:hunter2@127.0.0.1:{port}/simba"),
        format!("redis://:hunter2@127.0.0.1:{port}"),
        format!("mysql://root:hunter2@127.0.0.1:{port}/simba"),
        format!("zk://127.0.0.1:{port}"),
        format!("etcd://simba:hunter2@127.0.0.1:{port}"),
    ] {
        let start = Instant::now();
        let (code, out, err) = simba(&["status", "--timeout", "1s", "--backend", &url]).await;
        let took = start.elapsed();
        assert_eq!(code, simba_cli::EXIT_UNREACHABLE, "{url}: {out}{err}");
        assert!(took < Duration::from_secs(3), "{url}: took {took:?}");
        assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("cannot reach the backend"), "{err}");
        assert!(!err.contains("hunter2") && !out.contains("hunter2"), "password printed: {err}");
    }
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("postgres://simba:hunter2@127.0.0.1:{closed}/simba");
    let (code, _, err) = simba(&["check", "--timeout", "1s", "--backend", &url]).await;
    assert_eq!(code, simba_cli::EXIT_UNREACHABLE, "{err}");
    for cmd in ["namespaces", "jobs", "history nightly", "pause nightly"] {
        let mut argv: Vec<&str> = cmd.split(' ').collect();
        argv.extend(["--timeout", "1s", "--backend", &url]);
        let (code, _, err) = simba(&argv).await;
        assert_eq!(code, simba_cli::EXIT_UNREACHABLE, "{cmd}: {err}");
    }
    let (code, _, err) = simba(&["status", "--backend", "sqlite:///nonexistent/dir/simba.db"]).await;
    assert_eq!(code, simba_cli::EXIT_UNREACHABLE);
    assert!(err.contains("no database file"), "{err}");
}
