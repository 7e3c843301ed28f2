//! simba leaves the process's rustls crypto provider to the application (issue 34 item 5,
//! `simba/src/backend/tls_provider.rs`). Its own test binary, with one test: the provider is
//! process-wide, so no other test may install one first.
//!
//! Against the TLS servers of `scripts/backends.sh`: etcd (`etcd-tls`, client certificate),
//! Redis (`redis-mtls`, client certificate) and ZooKeeper (`zk-tls`, and `zk-mtls` with a
//! client certificate).

#![allow(clippy::print_stderr)] // What was skipped is printed for the report.

use simba::runtime::redact;
use simba::tck::conformance::unique;
use simba::{Simba, SimbaConfig};
use simba_tests::server_url;

/// The client certificate parameters of the test servers' CA.
fn client_cert() -> String {
    let dir = std::env::var("SIMBA_TEST_TLS_DIR").expect("SIMBA_TEST_TLS_DIR is set with the servers");
    format!("&cert_file={dir}/client.pem&key_file={dir}/client.key")
}

/// The TLS servers, as (name, URL): those whose variables are set.
fn servers() -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(u) = server_url("SIMBA_TEST_ETCD_TLS_URL") {
        out.push(("etcd-tls", u));
    }
    if let Some(u) = server_url("SIMBA_TEST_REDIS_MTLS_URL") {
        out.push(("redis-mtls", format!("{u}{}", client_cert())));
    }
    if let Some(u) = server_url("SIMBA_TEST_ZK_TLS_URL") {
        out.push(("zk-tls", u));
    }
    if let Some(u) = server_url("SIMBA_TEST_ZK_MTLS_URL") {
        out.push(("zk-mtls", format!("{u}{}", client_cert())));
    }
    out
}

/// Connects to `url`, takes and gives back a lock, and closes: the TLS connection works.
async fn works(name: &str, url: &str) {
    let simba = Simba::connect(url, SimbaConfig::default())
        .await
        .unwrap_or_else(|e| panic!("{name} ({}): {e:#?}", redact(url)));
    let guard = simba.lock(unique("provider")).acquire().await.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(guard.term().is_valid(), "{name}");
    guard.release().await.unwrap_or_else(|e| panic!("{name}: {e}"));
    simba.close().await;
}

fn process_provider_installed() -> bool {
    rustls::crypto::CryptoProvider::get_default().is_some()
}

/// Before the application chooses: etcd connects over TLS (tonic uses ring for that
/// connection alone), and Redis and ZooKeeper, whose drivers read the process's provider,
/// refuse with the error naming the line to add; none installs a provider. Then the
/// application installs its own, aws-lc-rs (not simba's ring), and that works; and every TLS
/// server connects with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_chooses_the_rustls_provider() {
    assert!(!process_provider_installed(), "this binary's one test starts with no provider");
    let servers = servers();
    for (name, url) in &servers {
        if name.starts_with("etcd") {
            works(name, url).await;
        } else {
            let e = Simba::connect(url, SimbaConfig::default()).await.err();
            let e = e
                .map(|e| simba_tests::error_chain(&e))
                .unwrap_or_else(|| panic!("{name} connected without a provider"));
            assert!(e.contains("install_tls_provider()") && e.contains("127.0.0.1"), "{name}: {e}");
            eprintln!("{name} without a provider: {}", e.replace('\n', " | "));
        }
        assert!(!process_provider_installed(), "simba installed a provider while connecting to {name}");
    }
    // The application's own choice, after simba connected over TLS: accepted.
    let installed = rustls::crypto::aws_lc_rs::default_provider().install_default();
    assert!(installed.is_ok(), "the application's install_default failed: a provider was installed before it");
    for (name, url) in &servers {
        works(name, url).await;
    }
    assert!(!simba::backend::install_tls_provider(), "the application's provider stays");
    eprintln!(
        "TLS servers connected before and after the application's provider: {servers:?}",
        servers = servers.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
}
