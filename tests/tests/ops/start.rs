//! The runtime's start against a server it cannot reach yet (`[backend] start_timeout`), on
//! each server backend: the server is real, and the fault proxy in front of it resets every
//! connection until the test restores the link.

use std::time::Duration;

use simba::backend::BackendError;
use simba::{Error, Runtime, RuntimeConfig};
use simba_tests::proxy::{FaultProxy, Mode, host_port};
use simba_tests::server_url;
use tokio::time::Instant;

/// The runtime's configuration for `url` through `proxy`, with this `start_timeout`.
fn config(url: &str, proxy: &FaultProxy, start_timeout: &str) -> RuntimeConfig {
    let through = url.replace(&host_port(url).to_string(), &proxy.addr().to_string());
    let text = format!(
        "[backend]\nurl = \"{through}\"\nstart_timeout = \"{start_timeout}\"\n\n\
         [session]\nlease_duration = \"3s\"\nrenew_interval = \"1s\"\n"
    );
    RuntimeConfig::from_toml_str(&text, "test.toml", Vec::new()).expect("config")
}

/// The error of a start with `config` that must fail, and how long it took to fail.
async fn start_err(config: RuntimeConfig, what: &str) -> (Error, Duration) {
    let started = Instant::now();
    let e = Runtime::builder()
        .config(config)
        .without_registry()
        .start()
        .await
        .err()
        .unwrap_or_else(|| panic!("{what}: it started"));
    (e, started.elapsed())
}

/// A start while the link is cut waits for it: it has not returned when the link comes back
/// after `CUT`, then starts, and its session goes live. With the link cut to the end and a 1 s
/// `start_timeout`, it fails with the backend's unavailable error, at the timeout.
#[allow(clippy::print_stderr)] // The figures are printed for the report.
async fn start_suite(var: &str) {
    const CUT: Duration = Duration::from_millis(1500);
    let Some(url) = server_url(var) else { return };
    let proxy = FaultProxy::start(host_port(&url)).await.expect("proxy");
    proxy.set(Mode::Cut);
    let started = Instant::now();
    let start = tokio::spawn(Runtime::builder().config(config(&url, &proxy, "60s")).without_registry().start());
    tokio::time::sleep(CUT).await;
    assert!(!start.is_finished(), "[{var}] the start returned while the link was cut: {:?}", start.await);
    proxy.restore();
    let running = tokio::time::timeout(Duration::from_secs(20), start)
        .await
        .unwrap_or_else(|_| panic!("[{var}] no start within 20 s of the link's return"))
        .expect("the start task")
        .unwrap_or_else(|e| panic!("[{var}] the start failed after the link came back: {e}"));
    tokio::time::timeout(Duration::from_secs(10), running.simba().live())
        .await
        .unwrap_or_else(|_| panic!("[{var}] no live session within 10 s"))
        .expect("live");
    let waited = started.elapsed();
    running.shutdown().await;
    assert!(waited >= CUT, "[{var}] {waited:?}");

    let proxy = FaultProxy::start(host_port(&url)).await.expect("proxy");
    proxy.set(Mode::Cut);
    let (e, took) = start_err(config(&url, &proxy, "1s"), &format!("[{var}] a start through a cut link")).await;
    assert!(
        matches!(e, Error::Backend { source: BackendError::Unavailable { .. }, .. }),
        "[{var}] not the unavailable error: {e:?}"
    );
    // The timeout, plus at most one try in flight when it ran out (a try's own connect
    // timeout bounds it).
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(12), "[{var}] gave up after {took:?}");
    eprintln!("{var}: waited for the cut link ({waited:?}); gave up after {took:?} at a 1 s start_timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn start_waits_for_postgres() {
    start_suite("SIMBA_TEST_POSTGRES_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn start_waits_for_mysql() {
    start_suite("SIMBA_TEST_MYSQL_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn start_waits_for_redis() {
    start_suite("SIMBA_TEST_REDIS_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn start_waits_for_zookeeper() {
    start_suite("SIMBA_TEST_ZK_URL").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn start_waits_for_etcd() {
    start_suite("SIMBA_TEST_ETCD_URL").await;
}

/// A wrong password is not worth waiting for: the start fails at once, although
/// `start_timeout` is a minute.
#[tokio::test(flavor = "multi_thread")]
async fn start_fails_at_once_on_a_wrong_password() {
    let Some(url) = server_url("SIMBA_TEST_POSTGRES_AUTH_URL") else { return };
    let proxy = FaultProxy::start(host_port(&url)).await.expect("proxy");
    let (head, tail) = url.split_once("://").expect("scheme");
    let (user, host) = tail.split_once('@').expect("credentials");
    let wrong = format!("{head}://{}:wrong-password@{host}", user.split(':').next().unwrap_or(user));
    let (e, took) = start_err(config(&wrong, &proxy, "60s"), "a start with a wrong password").await;
    assert!(matches!(e, Error::Backend { source: BackendError::Misconfigured(_), .. }), "{e:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}
