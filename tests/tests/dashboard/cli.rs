//! Turning the dashboard on (issue 14, item 1): `[dashboard]` in `simba.toml` for the runtime,
//! `simba dashboard --listen` for the tool; nothing listens unless asked, a bare port is
//! refused, and actions need a token.

use std::net::SocketAddr;
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::{Error, Runtime, RuntimeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn cli(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = simba_cli::run(args.iter().copied(), &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// `(status, body)` of one request.
async fn http(addr: SocketAddr, method: &str, path: &str, headers: &str) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let raw =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n");
    conn.write_all(raw.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    conn.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

#[tokio::test]
async fn the_tool_refuses_a_bare_port_and_needs_an_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("simba.db");
    drop(simba::backend::sqlite::SqliteBackend::connect(&format!("sqlite://{}", db.display())).await.expect("db"));
    let url = format!("sqlite://{}", db.display());
    let config = dir.path().join("none.toml");
    std::fs::write(&config, "").expect("config");
    let c = config.to_str().expect("utf-8 path");
    let (code, _, err) = cli(&["simba", "-c", c, "dashboard", "--backend", &url, "--listen", "9465"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bare port") && err.contains("127.0.0.1:9465"), "{err}");
    let (code, _, err) = cli(&["simba", "-c", c, "dashboard", "--backend", &url, "--listen", "localhost:9465"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a host name"), "{err}");
    let (code, _, err) = cli(&["simba", "-c", c, "dashboard", "--backend", &url]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--listen 127.0.0.1:9465"), "{err}");
}

#[test]
fn the_configuration_refuses_a_bare_port() {
    let e = RuntimeConfig::from_toml_str("[dashboard]\nlisten = \"9465\"\n", "simba.toml", Vec::new())
        .expect_err("bare port");
    let Error::InvalidConfig(c) = &e else { panic!("not a configuration error: {e:?}") };
    assert_eq!(
        (c.file(), c.line(), c.key(), c.env_var()),
        (Some("simba.toml"), Some(2), Some("dashboard.listen"), None)
    );
    assert!(c.reason().contains("bare port") && !c.reason().contains("[dashboard] listen"), "{c:?}");
    let e = e.to_string();
    assert!(e.contains("simba.toml: line 2, [dashboard] listen: ") && e.contains("bare port"), "{e}");
    let e = RuntimeConfig::from_toml_str("", "simba.toml", vec![("SIMBA_DASHBOARD__LISTEN".into(), "9465".into())])
        .expect_err("bare port from the environment");
    let Error::InvalidConfig(c) = &e else { panic!("not a configuration error: {e:?}") };
    assert_eq!((c.line(), c.key(), c.env_var()), (None, Some("dashboard.listen"), Some("SIMBA_DASHBOARD__LISTEN")));
    let e = e.to_string();
    assert!(
        e.contains("environment variable SIMBA_DASHBOARD__LISTEN, [dashboard] listen: ") && e.contains("bare port"),
        "{e}"
    );
    let e = RuntimeConfig::from_toml_str(
        "[dashboard]\nlisten = \"127.0.0.1:1\"\nactions = true\n",
        "simba.toml",
        Vec::new(),
    )
    .expect_err("actions without a token");
    let Error::InvalidConfig(c) = &e else { panic!("not a configuration error: {e:?}") };
    assert_eq!((c.line(), c.key()), (Some(3), Some("dashboard.actions")));
    let e = e.to_string();
    assert!(e.contains("line 3, [dashboard] actions: ") && e.contains("token_file"), "{e}");
    let e = RuntimeConfig::from_toml_str("[dashboard]\nlisen = \"127.0.0.1:1\"\n", "simba.toml", Vec::new())
        .expect_err("typo")
        .to_string();
    assert!(e.contains("did you mean `listen`"), "{e}");
}

/// The runtime serves nothing without `[dashboard]`; with it, the pages, its own session
/// labelled, and (with `actions = true`) the action routes behind the token, reaching the
/// jobs store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_serves_only_when_configured() {
    let config = RuntimeConfig::from_toml_str("", "simba.toml", Vec::new()).expect("config");
    let running = Runtime::builder().config(config).backend(MemoryBackend::new()).without_registry().start().await;
    let running = running.expect("start");
    assert_eq!(running.dashboard_addr(), None, "nothing listens unless configured");
    running.shutdown().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("dashboard.token");
    std::fs::write(&token_file, "5f0c1e8a9b7d6c4e3a2b1f0e\n").expect("token");
    let text =
        format!("[dashboard]\nlisten = \"127.0.0.1:0\"\nactions = true\ntoken_file = \"{}\"\n", token_file.display());
    let config = RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).expect("config");
    let running = Runtime::builder().config(config).backend(MemoryBackend::new()).without_registry().start().await;
    let running = running.expect("start");
    let addr = running.dashboard_addr().expect("listening");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http(addr, "GET", "/api/state", "").await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let sessions = v["cluster"]["sessions"].as_array().cloned().unwrap_or_default();
        if let (Some(s), Some(own)) = (sessions.first(), running.simba().snapshot().session) {
            assert_eq!(s["id"], own.as_str());
            assert_eq!(s["this_node"], true, "the runtime labels its own session");
            assert!(s["node"].as_str().is_some_and(|n| n.contains(&format!("pid {}", std::process::id()))), "{s}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session on the page: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = http(addr, "POST", "/api/jobs/report/pause", "").await;
    assert_eq!(code, 401, "{body}");
    let (code, body) =
        http(addr, "POST", "/api/jobs/report/pause", "Authorization: Bearer 5f0c1e8a9b7d6c4e3a2b1f0e\r\n").await;
    assert_eq!(code, 404, "authorised, then the jobs store's control: no such job: {body}");
    assert!(body.contains("unknown job `report`"), "{body}");
    running.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the dashboard stops with the runtime");
}

fn tick(_: simba::Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Ok::<(), std::io::Error>(()) })
}

/// Rule O11: a run record reads the same in `simba history --json` and in the dashboard's
/// `/api/jobs`: one library type (`RunRecordJson`) prints both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o11_the_tool_and_the_dashboard_print_a_run_record_alike() {
    use simba::job::{Schedule, ScheduledJob};
    const TICK: ScheduledJob = ScheduledJob::new("tick", Schedule::FixedRate(Duration::from_millis(200)), &tick);
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let toml = format!("[backend]\nurl = \"{url}\"\n[dashboard]\nlisten = \"127.0.0.1:0\"\n");
    let config = RuntimeConfig::from_toml_str(&toml, "simba.toml", Vec::new()).expect("config");
    let running = Runtime::builder().config(config).without_registry().job(TICK).start().await.expect("start");
    let addr = running.dashboard_addr().expect("[dashboard] listen");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    running.jobs().remove("tick").await.expect("stop the job: no record changes after this");

    let (code, out, err) = cli(&["simba", "--backend", &url, "history", "tick", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let history: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let records = history["records"].as_array().expect("records");
    assert!(records.len() >= 2, "{out}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http(addr, "GET", "/api/jobs", "").await;
        assert_eq!(code, 200, "{body}");
        let api: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let shown = api["jobs"].as_array().and_then(|j| j.iter().find(|j| j["job"] == "tick")).map(|j| &j["records"]);
        let alike = shown.and_then(|s| s.as_array()).is_some_and(|shown| {
            records.iter().filter(|r| r["outcome"] == "ran").all(|r| shown.iter().any(|s| s == r))
        });
        if alike {
            let ran = records.iter().find(|r| r["outcome"] == "ran").expect("a run that ended");
            for key in ["slot", "slot_ms", "started", "started_ms", "ended", "ended_ms", "token", "session", "node"] {
                assert!(!ran[key].is_null(), "{key} in {ran}");
            }
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the records differ: {out} vs {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    running.shutdown().await;
}
