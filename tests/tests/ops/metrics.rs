//! Metrics and health (ADR 0007, rules O1, O4, O7, O8): the runtime serves `/metrics` and the
//! probes `/livez`, `/readyz` and `/healthz` when `[metrics] listen` is set; the first test
//! scrapes them over HTTP after a scripted sequence (elect, step down, a lock, a failed
//! renewal, an expired session) and checks each series' value; the second holds the endpoint
//! with slow and idle clients.
//!
//! The Prometheus recorder is global to the process: each test names its own jobs and leases.

use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{PartitionedJob, Schedule, ScheduledJob};
use simba::tck::{Fault, FaultyBackend, Op};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep};

const MS: fn(u64) -> Duration = Duration::from_millis;

const CONFIG: &str = r#"
[session]
lease_duration = "1500ms"
renew_interval = "300ms"
retry_jitter = "100ms"

[metrics]
listen = "127.0.0.1:0"
"#;

fn tick(_: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Ok::<(), std::io::Error>(()) })
}

fn flaky(_: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Err::<(), _>(std::io::Error::other("always fails")) })
}

fn worker(term: Term, _partition: u32) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        term.cancelled().await;
        Ok::<(), std::io::Error>(())
    })
}

const TICK: ScheduledJob = ScheduledJob::new("tick", Schedule::FixedRate(Duration::from_millis(100)), &tick);
const FLAKY: ScheduledJob = ScheduledJob::new("flaky", Schedule::FixedRate(Duration::from_millis(100)), &flaky);
fn parts() -> PartitionedJob {
    PartitionedJob::new("parts", 3, &worker).with_group("grp")
}

/// `(status code, body)` of `GET path`.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect to the metrics endpoint");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.expect("read");
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (code, body.to_owned())
}

/// The value of the series `name{labels...}` (labels may be a subset) in a Prometheus text.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, v) = line.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').map_or((series, ""), |(n, r)| (n, r));
        let all = labels.iter().all(|(k, val)| rest.contains(&format!("{k}=\"{val}\"")));
        (n == name && all).then(|| v.parse().ok()).flatten()
    })
}

async fn eventually(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        sleep(MS(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_healthz_after_elect_step_down_and_expire() {
    let store = MemoryBackend::new();
    let (faulty, faults) = FaultyBackend::new(store.clone());
    let config = RuntimeConfig::from_toml_str(CONFIG, "test.toml", Vec::new()).expect("config");
    let running = Runtime::builder()
        .config(config)
        .without_registry()
        .backend(faulty)
        .job(TICK)
        .job(FLAKY)
        .partitioned(parts())
        .start()
        .await
        .expect("start");
    let addr = running.metrics_addr().expect("[metrics] listen starts the endpoint");
    let simba = running.simba().clone();
    let first = simba.live().await.expect("live");

    // Elected: both jobs run, every partition is held, the session is live.
    eventually("three partitions and a few runs", Duration::from_secs(5), async || {
        let m = get(addr, "/metrics").await.1;
        value(&m, "simba_partitions_held", &[("group", "grp")]) == Some(3.0)
            && value(&m, "simba_job_runs_total", &[("job", "tick")]).is_some_and(|v| v >= 3.0)
    })
    .await;
    let (code, body) = get(addr, "/healthz").await;
    assert_eq!((code, body.trim()), (200, "live"));
    let m = get(addr, "/metrics").await.1;
    assert_eq!(value(&m, "simba_session_state", &[("state", "live")]), Some(1.0), "{m}");
    assert_eq!(value(&m, "simba_session_state", &[("state", "suspended")]), Some(0.0), "{m}");
    // Rule O4: the runtime's jobs and partitions by name and kind.
    assert_eq!(value(&m, "simba_terms_gained_total", &[("kind", "job"), ("lease", "tick")]), Some(1.0), "{m}");
    assert_eq!(value(&m, "simba_terms_gained_total", &[("kind", "partition"), ("lease", "grp.2")]), Some(1.0), "{m}");
    // Rule O7.
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(value(&m, "simba_build_info", &version), Some(1.0), "{m}");
    let runs = value(&m, "simba_job_runs_total", &[("job", "flaky")]).expect("flaky runs");
    let failures = value(&m, "simba_job_failures_total", &[("job", "flaky")]).expect("flaky failures");
    assert!(runs >= 1.0 && (runs - failures).abs() <= 1.0, "runs {runs}, failures {failures}");
    assert_eq!(value(&m, "simba_job_failures_total", &[("job", "tick")]), None, "tick never failed");
    assert!(value(&m, "simba_job_duration_seconds_count", &[("job", "tick")]).is_some_and(|v| v >= 3.0), "{m}");
    assert!(value(&m, "simba_job_lateness_seconds_bucket", &[("job", "tick"), ("le", "+Inf")]).is_some(), "{m}");
    assert!(value(&m, "simba_renewal_duration_seconds_count", &[]).is_some_and(|v| v >= 1.0), "{m}");
    // The holder's next slot of a scheduled job (every 100 ms): within a second of now; none
    // for a partition (the group's slots).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let next = value(&m, "simba_job_next_slot_timestamp_seconds", &[("job", "tick")]).expect("tick's next slot");
    assert!((next - now).abs() < 1.0, "next slot {next}, now {now}");
    assert_eq!(value(&m, "simba_job_next_slot_timestamp_seconds", &[("job", "grp")]), None, "{m}");

    // Step down: an election of the same client loses its term with reason stepped_down.
    let manual = simba.election("manual");
    manual.start(()).expect("start");
    eventually("leader of `manual`", Duration::from_secs(3), async || manual.term().is_some()).await;
    manual.step_down(Duration::from_secs(60)).await.expect("step down");
    eventually("stepped_down counted", Duration::from_secs(3), async || {
        let m = get(addr, "/metrics").await.1;
        value(&m, "simba_terms_lost_total", &[("kind", "election"), ("reason", "stepped_down")]) == Some(1.0)
    })
    .await;
    // Rule O4: elections and locks are counted by kind, never by name (a lock per order would
    // add a series per order).
    for order in ["order-81723", "order-81724"] {
        simba.lock(order).acquire().await.expect("lock").release().await.expect("release");
    }
    let m = get(addr, "/metrics").await.1;
    assert!(!m.contains("manual") && !m.contains("order-8172"), "no election or lock name: {m}");
    assert_eq!(value(&m, "simba_terms_gained_total", &[("kind", "lock")]), Some(2.0), "{m}");
    assert_eq!(value(&m, "simba_terms_lost_total", &[("kind", "lock"), ("reason", "stopped")]), Some(2.0), "{m}");

    // Renewals fail: suspended, /healthz answers 503, failures are counted.
    faults.set(Op::KeepAlive, Fault::Fail);
    eventually("503 while suspended", Duration::from_secs(3), async || get(addr, "/healthz").await.0 == 503).await;
    // Rule O1: not ready (and /healthz is /readyz), but alive: a store blip restarts nothing.
    let (code, body) = get(addr, "/readyz").await;
    assert!(code == 503 && body.starts_with("not ready: suspended"), "{code} {body}");
    assert_eq!(get(addr, "/livez").await, (200, "alive\n".to_owned()));
    let m = get(addr, "/metrics").await.1;
    assert_eq!(value(&m, "simba_session_state", &[("state", "suspended")]), Some(1.0), "{m}");
    assert!(value(&m, "simba_renewal_failures_total", &[]).is_some_and(|v| v >= 1.0), "{m}");
    faults.clear();
    eventually("200 again", Duration::from_secs(3), async || get(addr, "/healthz").await.0 == 200).await;

    // The store expires the session: every term is lost with session_expired, then won again
    // in a new session.
    store.expire_session(&first);
    eventually("terms regained in a new session", Duration::from_secs(5), async || {
        let m = get(addr, "/metrics").await.1;
        value(&m, "simba_terms_gained_total", &[("lease", "tick")]) == Some(2.0)
            && value(&m, "simba_partitions_held", &[("group", "grp")]) == Some(3.0)
    })
    .await;
    let m = get(addr, "/metrics").await.1;
    assert_ne!(simba.session_id(), Some(first));
    assert_eq!(value(&m, "simba_terms_lost_total", &[("lease", "tick"), ("reason", "session_expired")]), Some(1.0));
    assert_eq!(value(&m, "simba_terms_lost_total", &[("lease", "grp.0"), ("reason", "session_expired")]), Some(1.0));
    assert_eq!(value(&m, "simba_session_state", &[("state", "live")]), Some(1.0));
    let (code, _) = get(addr, "/healthz").await;
    assert_eq!(code, 200);
    let (code, body) = get(addr, "/nope").await;
    assert_eq!(code, 404);
    assert!(["/livez", "/readyz", "/healthz", "/metrics"].iter().all(|p| body.contains(p)), "names the paths: {body}");
    assert_eq!(get(addr, "/readyz").await, (200, "live\n".to_owned()));

    running.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the endpoint stops with the runtime");
}

/// How long until the endpoint closes `read` (EOF or reset), and what it sent before.
async fn closed_after(mut read: impl tokio::io::AsyncRead + Unpin) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match read.read(&mut buf).await {
            Ok(0) | Err(_) => return (start.elapsed(), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Rule O8: a client that sends one byte a second is cut off at the endpoint's deadline, not
/// after its whole request; more idle connections than the cap close the oldest of them and
/// a normal scrape still answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o8_slow_and_idle_clients_neither_hold_the_endpoint_nor_stop_a_scrape() {
    let simba = simba::Simba::new(MemoryBackend::new(), simba::SimbaConfig::default()).expect("client");
    let server = simba::metrics::serve("127.0.0.1:0".parse().expect("addr"), &simba).await.expect("serve");
    let addr = server.local_addr();
    let deadline = simba::metrics::REQUEST_DEADLINE;

    // One byte a second of a request that would take a minute to send.
    let (read, mut write) = tokio::net::TcpStream::connect(addr).await.expect("connect").into_split();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: test\r\nX-Pad: {}\r\n\r\n", "x".repeat(40));
    let dribble = tokio::spawn(async move {
        for b in request.bytes() {
            if write.write_all(&[b]).await.is_err() {
                return;
            }
            sleep(Duration::from_secs(1)).await;
        }
    });
    let (after, sent) = closed_after(read).await;
    dribble.abort();
    assert!(
        after >= deadline - Duration::from_secs(1) && after < deadline + Duration::from_secs(2),
        "cut off after {after:?}"
    );
    assert!(!String::from_utf8_lossy(&sent).contains("200 OK"), "never answered: {}", String::from_utf8_lossy(&sent));

    // More idle connections than the cap: the oldest are closed, and a scrape answers at once.
    let cap = simba::metrics::MAX_CONNECTIONS;
    let mut idle = Vec::new();
    for _ in 0..cap + 8 {
        idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    sleep(MS(200)).await;
    let started = Instant::now();
    let (code, body) = get(addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "a scrape past the idle ones took {:?}", started.elapsed());
    let mut closed = 0;
    for conn in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(MS(20), conn.read(&mut byte)).await {
            closed += 1;
        }
    }
    // The first nine: eight over the cap, then one more for the scrape.
    assert!((9..=10).contains(&closed), "{closed} of {} idle connections closed", idle.len());

    server.stop().await;
    simba.close().await;
}
