//! The dashboard inside a service (rules O1 to O3): its router nested under `/simba` in the
//! service's own axum app, on the service's port. Pages, assets, events and actions resolve
//! under the prefix; host names are allowed by name; the probes tell liveness from readiness.
//! Over real sockets, without a browser (`browser.rs` has the browser's view).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use simba::backend::memory::MemoryBackend;
use simba::dashboard::{ActionToken, Dashboard};
use simba::job::{Schedule, ScheduledJob};
use simba::tck::{Fault, FaultyBackend, Op};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep};

const CONFIG: &str = r#"
[session]
lease_duration = "1500ms"
renew_interval = "300ms"
retry_jitter = "100ms"
"#;

pub(crate) const TOKEN: &str = "0123456789abcdef0123";

fn tick(_: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Ok::<(), std::io::Error>(()) })
}

const TICK: ScheduledJob = ScheduledJob::new("tick", Schedule::FixedRate(Duration::from_millis(200)), &tick);

/// `(status, head, body)` of one request with this `Host`.
pub(crate) async fn request(addr: SocketAddr, method: &str, host: &str, path: &str) -> (u16, String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let raw = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    conn.write_all(raw.as_bytes()).await.expect("send");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf)).await.expect("in time").expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (code, head.to_owned(), body.to_owned())
}

/// The first `event: main` of an event stream, read within 5 s.
async fn first_event(addr: SocketAddr, host: &str, path: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n");
    conn.write_all(raw.as_bytes()).await.expect("send");
    let mut text = String::new();
    let mut chunk = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !text.contains("event: main") {
        let n =
            tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await.expect("an event in time").expect("read");
        assert!(n > 0, "the stream ended before an event: {text}");
        text.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    text
}

/// Every `href`, `src`, `action` and `data-events` value of a page that starts with `/` but
/// not with the mount prefix `/simba` (the `<base>`, the overview's link), which a page of a
/// dashboard nested elsewhere would get wrong.
fn absolute_links(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\"", "action=\"", "data-events=\""] {
        for (i, _) in html.match_indices(attr) {
            let value = &html[i + attr.len()..];
            let value = value.split('"').next().unwrap_or_default();
            if value.starts_with('/') && value != "/simba" && !value.starts_with("/simba/") {
                out.push(format!("{attr}{value}"));
            }
        }
    }
    out
}

async fn eventually(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "{what} not within {within:?}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// A service: its own route `/` and `/api/orders`, Simba's router under `/simba`.
async fn service(router: Router) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "orders service" }))
        .route("/api/orders", get(|| async { "[]" }))
        .nest("/simba", router);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A runtime on the in-memory store running `tick`, and a service on a free port with its
/// dashboard under `/simba`: actions on (token [`TOKEN`]), `simba.test` allowed.
pub(crate) async fn nested_service() -> (simba::runtime::RunningRuntime, SocketAddr) {
    let config = RuntimeConfig::from_toml_str(CONFIG, "test.toml", Vec::new()).expect("config");
    let running = Runtime::builder()
        .config(config)
        .without_registry()
        .backend(MemoryBackend::new())
        .job(TICK)
        .start()
        .await
        .expect("start");
    let token = ActionToken::new(TOKEN).expect("token");
    let router = running.dashboard().allowed_hosts(["simba.test"]).actions(token).router().expect("router");
    (running, service(router).await)
}

/// O2 and O3: under `/simba` on the service's port, every page, asset, event stream and
/// action answers under the prefix, no page names an absolute path, the service's own routes
/// still answer, an allowed host name is served and another one gets 421.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_the_router_serves_every_page_under_the_services_prefix() {
    let (running, addr) = nested_service().await;
    let ip = addr.to_string();

    assert_eq!(request(addr, "GET", &ip, "/").await.2, "orders service");
    assert_eq!(request(addr, "GET", "evil.test", "/api/orders").await.0, 200, "the service's routes are its own");
    for path in ["/simba", "/simba/leases", "/simba/groups", "/simba/jobs", "/simba/jobs/tick", "/simba/schedules"] {
        let (code, _, page) = request(addr, "GET", &ip, path).await;
        assert_eq!(code, 200, "{path}: {page}");
        assert!(page.contains("<base href=\"/simba/\">"), "{path}: {page}");
        assert_eq!(absolute_links(&page), Vec::<String>::new(), "{path} names absolute paths");
    }
    let (_, _, jobs) = request(addr, "GET", &ip, "/simba/jobs").await;
    assert!(jobs.contains("href=\"jobs/tick\""), "a job links relative to the base: {jobs}");
    assert!(jobs.contains("href=\"/simba\""), "the overview's link is the prefix itself: {jobs}");
    for asset in ["app.js", "app.css", "icon.svg"] {
        let (code, _, body) = request(addr, "GET", &ip, &format!("/simba/assets/{asset}")).await;
        assert_eq!(code, 200, "{asset}");
        assert!(!body.contains("\"/api") && !body.contains("url(/"), "{asset} names an absolute path");
    }
    let event = first_event(addr, &ip, "/simba/events/overview").await;
    assert!(event.contains("text/event-stream") && event.contains("data: "), "{event}");
    let (code, _, json) = request(addr, "GET", &ip, "/simba/api/jobs").await;
    assert_eq!(code, 200, "{json}");
    let (code, _, body) = request(addr, "POST", &ip, "/simba/api/jobs/tick/pause").await;
    assert_eq!(code, 401, "an action without the token is refused under the prefix too: {body}");

    // O3: the allowed name is served (an ingress's Host), another name is refused.
    let (code, _, page) = request(addr, "GET", "simba.test:8443", "/simba/jobs").await;
    assert_eq!(code, 200, "{page}");
    let (code, _, body) = request(addr, "GET", "evil.test", "/simba/jobs").await;
    assert_eq!(code, 421, "{body}");
    assert!(body.contains("allowed_hosts") && body.contains("evil.test"), "says how to allow it: {body}");
    let (code, _, _) = request(addr, "GET", "evil.test", "/simba/readyz").await;
    assert_eq!(code, 421, "the probes are behind the same host check");
    running.shutdown().await;
}

/// O2: a prefix without a leading `/` is refused when the router is built, with the fix; a
/// prefix a proxy shows instead of the nesting one becomes the pages' base; nothing to show
/// is an error too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_a_mount_prefix_without_a_slash_is_refused() {
    let e = Dashboard::builder().backend(MemoryBackend::new(), "memory:").mount_prefix("simba").router();
    let e = e.expect_err("no leading slash").to_string();
    assert!(e.contains("start it with `/`") && e.contains("\"/simba\""), "{e}");
    let e = Dashboard::builder().router().expect_err("no source").to_string();
    assert!(e.contains("running.dashboard()"), "{e}");
    let e = Dashboard::builder().backend(MemoryBackend::new(), "memory:").allowed_hosts(["https://x.test"]).router();
    assert!(e.expect_err("a URL is no host").to_string().contains("without scheme"));

    let router = Dashboard::builder()
        .backend(MemoryBackend::new(), "memory:")
        .mount_prefix("/ops/simba/")
        .router()
        .expect("router");
    let addr = service(router).await;
    let (code, _, page) = request(addr, "GET", &addr.to_string(), "/simba/leases").await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<base href=\"/ops/simba/\">"), "{page}");
    // Without a session, readiness is the backend's last read.
    let (code, _, body) = request(addr, "GET", &addr.to_string(), "/simba/readyz").await;
    assert_eq!((code, body.trim()), (200, "ready: the backend answers"));
}

/// O1: while the store fails the session's renewals, `/readyz` (and `/healthz`) answer 503
/// with the reason but `/livez` stays 200, so that a store blip takes pods out of rotation
/// without restarting them; a probe path that does not exist names the probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o1_a_store_blip_is_not_ready_but_alive() {
    let (faulty, faults) = FaultyBackend::new(MemoryBackend::new());
    let config = RuntimeConfig::from_toml_str(CONFIG, "test.toml", Vec::new()).expect("config");
    let running = Runtime::builder().config(config).without_registry().backend(faulty).start().await.expect("start");
    running.simba().live().await.expect("live");
    let addr = service(running.dashboard().router().expect("router")).await;
    let ip = addr.to_string();
    let probe = async |path: &str| {
        let (code, _, body) = request(addr, "GET", &ip, path).await;
        (code, body.trim().to_owned())
    };
    assert_eq!(probe("/simba/livez").await, (200, "alive".to_owned()));
    assert_eq!(probe("/simba/readyz").await, (200, "live".to_owned()));
    assert_eq!(probe("/simba/healthz").await, (200, "live".to_owned()));

    faults.set(Op::KeepAlive, Fault::Fail);
    eventually("not ready while renewals fail", Duration::from_secs(3), async || probe("/simba/readyz").await.0 == 503)
        .await;
    let (code, body) = probe("/simba/healthz").await;
    assert_eq!(code, 503, "/healthz is /readyz");
    assert!(body.starts_with("not ready: ") && body.contains("renewal failed"), "{body}");
    assert_eq!(probe("/simba/livez").await, (200, "alive".to_owned()), "a store blip restarts nothing");
    faults.clear();
    eventually("ready again", Duration::from_secs(5), async || probe("/simba/readyz").await.0 == 200).await;

    let (code, body) = probe("/simba/ready").await;
    assert_eq!(code, 404);
    assert!(["/livez", "/readyz", "/healthz"].iter().all(|p| body.contains(p)), "{body}");
    running.shutdown().await;
    let (code, body) = probe("/simba/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("closed"), "{body}");
    assert_eq!(probe("/simba/livez").await.0, 200);
}

/// O3: `[dashboard] allowed_hosts` from the file, or comma-separated from the environment; a
/// name that is not a plain host name is refused with its key.
#[test]
fn o3_allowed_hosts_come_from_the_file_or_the_environment() {
    let file = "[dashboard]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = [\"Simba.Example.com\"]\n";
    let c = RuntimeConfig::from_toml_str(file, "simba.toml", Vec::new()).expect("the file");
    assert_eq!(c.dashboard.expect("on").allowed_hosts, ["simba.example.com"]);
    let env = vec![
        ("SIMBA_DASHBOARD__LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("SIMBA_DASHBOARD__ALLOWED_HOSTS".to_owned(), "a.example.com,b.example.com".to_owned()),
    ];
    let c = RuntimeConfig::from_toml_str("", "the environment", env).expect("the environment");
    assert_eq!(c.dashboard.expect("on").allowed_hosts, ["a.example.com", "b.example.com"]);
    let bad = "[dashboard]\nlisten = \"127.0.0.1:0\"\nallowed_hosts = [\"*.example.com\"]\n";
    let e = RuntimeConfig::from_toml_str(bad, "simba.toml", Vec::new()).expect_err("a wildcard").to_string();
    assert!(e.contains("allowed_hosts") && e.contains("wildcards"), "{e}");
}
