//! The alert webhook (rule R13): a runtime on SQLite whose `simba.toml` has `[alerts] webhook`
//! POSTs each alert to a real HTTP receiver on loopback (axum), one JSON object per alert with
//! one `Idempotency-Key` per slot and kind; 503 is tried again with the same key, 400 is not.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use simba::job::{JobPolicy, Schedule, ScheduledJob};
use simba::job_store::{Outcome, RunRecord};
use simba::{Runtime, RuntimeConfig, Term};

/// One POST the receiver got: its headers of interest and its JSON body.
#[derive(Debug, Clone)]
struct Post {
    key: String,
    content_type: String,
    body: serde_json::Value,
}

/// What the receiver answers: `fail_first` requests get `status`, the rest 200.
#[derive(Clone)]
struct Receiver {
    posts: Arc<Mutex<Vec<Post>>>,
    status: StatusCode,
    fail_first: usize,
}

impl Receiver {
    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Serves `r` on a loopback port; its URL.
async fn serve(r: Receiver) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().route(
        "/hooks/T0KEN",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let r = r.clone();
            async move {
                let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                let post = Post {
                    key: header("idempotency-key"),
                    content_type: header("content-type"),
                    body: serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
                };
                let mut posts = r.posts.lock().unwrap_or_else(PoisonError::into_inner);
                posts.push(post);
                if posts.len() <= r.fail_first { r.status } else { StatusCode::OK }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hooks/T0KEN")
}

fn always_fails(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Err::<(), _>(std::io::Error::other("the ledger said no")) })
}

/// A runtime on the SQLite file in `dir` running `job` (failing every second, no retry), its
/// alerts POSTed to `url`; stopped after `run_for`. The job's history, oldest first.
async fn run_failing(dir: &tempfile::TempDir, job: &'static str, url: &str, run_for: Duration) -> Vec<RunRecord> {
    run_failing_with(dir, job, url, ("", false), run_for).await
}

/// [`run_failing`], with `more` added to the file's `[alerts]`, and an application hook that
/// panics after counting when `panics`.
async fn run_failing_with(
    dir: &tempfile::TempDir,
    job: &'static str,
    url: &str,
    (more, panics): (&str, bool),
    run_for: Duration,
) -> Vec<RunRecord> {
    let db = dir.path().join("simba.db");
    let toml = format!(
        "[backend]\nurl = \"sqlite://{}\"\n\n[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n\n\
         [alerts]\nwebhook = \"{url}\"\nwebhook_timeout = \"2s\"\n{more}",
        db.display()
    );
    let config = RuntimeConfig::from_toml_str(&toml, "simba.toml", Vec::new()).expect("config");
    let heard = Arc::new(Mutex::new(0usize));
    let h = Arc::clone(&heard);
    let running = Runtime::builder()
        .config(config)
        .without_registry()
        .job(ScheduledJob::new(job, Schedule::cron("* * * * * *"), &always_fails))
        .policy(JobPolicy { name: job, retry: 0, backoff: None, timeout: None })
        .on_alert(move |_| {
            *h.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            assert!(!panics, "the application's hook panics");
        })
        .start()
        .await
        .expect("start");
    tokio::time::sleep(run_for).await;
    let store = running.simba().job_store().expect("a jobs store");
    running.shutdown().await;
    let mut h = store.history(job, 100).await.expect("history");
    h.reverse();
    let failed = h.iter().filter(|r| r.outcome == Outcome::Failed).count();
    assert_eq!(*heard.lock().unwrap_or_else(PoisonError::into_inner), failed, "the application's own hook too");
    h
}

/// Waits until `r` got `n` POSTs (the webhook delivers after the records, on its own task).
async fn wait_for(r: &Receiver, n: usize) -> Vec<Post> {
    wait_until(|| r.posts().len() >= n).await;
    r.posts()
}

/// Waits (at most 10 s) until `done` holds.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// R13: every `failed` record is one POST (the application's hook still hears it too), whose
/// JSON names the slot, the node, the token and the error, with one key per slot and kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_each_alert_is_one_post_with_its_slot_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = Receiver { posts: Arc::default(), status: StatusCode::OK, fail_first: 0 };
    let url = serve(r.clone()).await;
    let h = run_failing(&dir, "wh_fail", &url, Duration::from_millis(3_500)).await;
    let failed: Vec<&RunRecord> = h.iter().filter(|rec| rec.outcome == Outcome::Failed).collect();
    assert!(failed.len() >= 2, "{h:?}");
    let posts = wait_for(&r, failed.len()).await;
    assert_eq!(posts.len(), failed.len(), "one POST per failed slot: {posts:?}");
    for (post, rec) in posts.iter().zip(&failed) {
        let b = &post.body;
        assert_eq!(post.content_type, "application/json");
        assert_eq!(post.key, format!("wh_fail/{}/failed", rec.slot_ms));
        assert_eq!(
            (b["kind"].as_str(), b["job"].as_str(), b["outcome"].as_str()),
            (Some("failed"), Some("wh_fail"), Some("failed"))
        );
        assert_eq!(b["slot_ms"].as_i64(), Some(rec.slot_ms));
        assert_eq!((b["node"].as_str(), b["token"].as_u64()), (Some(rec.node.as_str()), Some(rec.token)));
        assert!(b["reason"].as_str().is_some_and(|e| e.contains("the ledger said no")), "{b}");
    }
}

/// R13: an application hook that panics (caught and logged by the runtime) does not cost the
/// webhook its alert: the webhook's queue hears each alert before the application's hook runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_an_application_hook_that_panics_does_not_cost_the_webhook_its_alert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = Receiver { posts: Arc::default(), status: StatusCode::OK, fail_first: 0 };
    let url = serve(r.clone()).await;
    let h = run_failing_with(&dir, "wh_panic", &url, ("", true), Duration::from_millis(2_500)).await;
    let failed: Vec<String> = h
        .iter()
        .filter(|rec| rec.outcome == Outcome::Failed)
        .map(|rec| format!("wh_panic/{}/failed", rec.slot_ms))
        .collect();
    assert!(failed.len() >= 2, "{h:?}");
    let keys: Vec<String> = wait_for(&r, failed.len()).await.into_iter().map(|p| p.key).collect();
    assert_eq!(keys, failed, "every alert POSTed although the application's hook panicked on each");
}

/// R13: a receiver that answers 503 gets the same alert again, with the same key, until it
/// takes it; one that answers 400 gets each alert once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_a_503_is_tried_again_with_the_same_key_and_a_400_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = Receiver { posts: Arc::default(), status: StatusCode::SERVICE_UNAVAILABLE, fail_first: 2 };
    let url = serve(r.clone()).await;
    let h = run_failing(&dir, "wh_busy", &url, Duration::from_millis(1_500)).await;
    let failed = h.iter().filter(|rec| rec.outcome == Outcome::Failed).count();
    assert!(failed >= 1, "{h:?}");
    // Two 503s, 1 s then 2 s apart, then 200: the first alert took three tries.
    let posts = wait_for(&r, failed + 2).await;
    assert_eq!(posts.len(), failed + 2, "{posts:?}");
    assert!(
        posts[0].key == posts[1].key && posts[1].key == posts[2].key,
        "one key for the tries of one alert: {posts:?}"
    );
    let keys: std::collections::BTreeSet<&str> = posts.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys.len(), failed, "each alert taken once: {posts:?}");

    let dir = tempfile::tempdir().expect("tempdir");
    let r = Receiver { posts: Arc::default(), status: StatusCode::BAD_REQUEST, fail_first: usize::MAX };
    let url = serve(r.clone()).await;
    let h = run_failing(&dir, "wh_refused", &url, Duration::from_millis(2_500)).await;
    let failed = h.iter().filter(|rec| rec.outcome == Outcome::Failed).count();
    assert!(failed >= 2, "{h:?}");
    let posts = wait_for(&r, failed).await;
    // Nothing more comes: a refused alert is not tried again (its retry would be 1 s later).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let keys: Vec<&str> = posts.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(r.posts().len(), failed, "one POST per alert: {keys:?}");
}

/// An https receiver on loopback with the test CA's server certificate (`server.pem`, for
/// 127.0.0.1): the bodies of the requests it read, and how many handshakes failed.
#[derive(Clone, Default)]
struct TlsReceiver {
    bodies: Arc<Mutex<Vec<String>>>,
    failed_handshakes: Arc<std::sync::atomic::AtomicUsize>,
}

/// Serves `r` with the certificates of `tls_dir`; its URL.
async fn serve_tls(r: TlsReceiver, tls_dir: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(format!("{tls_dir}/server.pem"))
        .expect("server.pem")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(format!("{tls_dir}/server.key")).expect("server.key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, r) = (acceptor.clone(), r.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    r.failed_handshakes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    return;
                };
                // One HTTP/1.1 request: its head, then as many body bytes as it announces.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let body = loop {
                    let Ok(n @ 1..) = tls.read(&mut chunk).await else { return };
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else { continue };
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= length {
                        break body.to_owned();
                    }
                };
                r.bodies.lock().unwrap_or_else(PoisonError::into_inner).push(body);
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    format!("https://127.0.0.1:{}/hooks/T0KEN", addr.port())
}

/// R13 over https: with `webhook_ca_file` naming the CA that signed the receiver's certificate
/// each alert arrives over TLS; with the Mozilla roots alone (the default) the receiver's
/// certificate is refused: every try fails its handshake and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_https_receivers_are_verified_against_the_ca_file_or_the_mozilla_roots() {
    // The test CA and its server certificate, which `scripts/backends.sh start` makes.
    let Some(tls_dir) = simba_tests::server_url("SIMBA_TEST_TLS_DIR") else { return };
    let trusted = TlsReceiver::default();
    let url = serve_tls(trusted.clone(), &tls_dir).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = format!("webhook_ca_file = \"{tls_dir}/ca.pem\"\n");
    let h = run_failing_with(&dir, "wh_tls", &url, (&ca, false), Duration::from_millis(2_500)).await;
    let failed = h.iter().filter(|rec| rec.outcome == Outcome::Failed).count();
    assert!(failed >= 2, "{h:?}");
    wait_until(|| trusted.bodies.lock().unwrap_or_else(PoisonError::into_inner).len() >= failed).await;
    let bodies = trusted.bodies.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(bodies.len(), failed, "each alert over TLS: {bodies:?}");
    assert!(bodies.iter().all(|b| b.contains("\"job\":\"wh_tls\"")), "{bodies:?}");

    let untrusted = TlsReceiver::default();
    let url = serve_tls(untrusted.clone(), &tls_dir).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = run_failing_with(&dir, "wh_untrusted", &url, ("", false), Duration::from_millis(1_500)).await;
    assert!(h.iter().any(|rec| rec.outcome == Outcome::Failed), "{h:?}");
    // The first try at once, the second 1 s later: both refused in the handshake.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let refused = untrusted.failed_handshakes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(refused >= 2, "the client refused the certificate on each try: {refused}");
    assert!(untrusted.bodies.lock().unwrap_or_else(PoisonError::into_inner).is_empty(), "nothing sent");
}
