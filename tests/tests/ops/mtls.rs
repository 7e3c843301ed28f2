//! Mutual TLS enforced, and server certificates a client must refuse (issue 16, item 8),
//! against the private servers of `scripts/backends.sh`:
//!
//! - PostgreSQL (`hostssl ... clientcert=verify-full` for the user `simba`), MariaDB (the user
//!   `simba_x509` is `REQUIRE X509`), Redis (`redis-mtls`: `tls-auth-clients yes`) and ZooKeeper
//!   (`zk-mtls`: `ssl.clientAuth=need`) each require a client certificate: with the test
//!   client certificate the node takes and releases a lock, without it the connect error says
//!   a client certificate is required and names the server.
//! - A server presenting an expired certificate (`redis-expired`) and one presenting a
//!   certificate for another host name (`redis-wronghost`, `other.invalid`), both signed by the
//!   trusted CA, are refused with an error saying so.

#![allow(clippy::unwrap_used, clippy::print_stderr)]

use simba::runtime::redact;
use simba::tck::conformance::unique;
use simba::{Error, Simba, SimbaConfig};
use simba_tests::server_url;

fn everything(e: &Error) -> String {
    simba_tests::error_chain(e)
}

async fn works(url: &str) {
    // As an application does before connecting over TLS: the Redis and ZooKeeper drivers read
    // the process's rustls provider, and simba installs none (tests/tests/tls_provider/).
    simba::backend::install_tls_provider();
    let simba = Simba::connect(url, SimbaConfig::default()).await.unwrap_or_else(|e| panic!("{}: {e:#?}", redact(url)));
    let guard = simba.lock(unique("mtls")).acquire().await.unwrap();
    assert!(guard.term().is_valid());
    guard.release().await.unwrap();
    simba.close().await;
}

async fn fails(url: &str) -> String {
    simba::backend::install_tls_provider();
    match Simba::connect(url, SimbaConfig::default()).await {
        Ok(s) => {
            // Some servers refuse only at the first request: a lock must fail then.
            let r = s.lock(unique("mtls")).try_acquire(std::time::Duration::from_secs(2)).await;
            s.close().await;
            match r {
                Err(e) => everything(&e),
                Ok(Some(_)) => panic!("{} connected and worked but should not have", redact(url)),
                Ok(None) => format!("{}: no lock within 2 s and no error", redact(url)),
            }
        }
        Err(e) => everything(&e),
    }
}

fn client_cert(cert: &str, key: &str) -> String {
    let dir = std::env::var("SIMBA_TEST_TLS_DIR").unwrap();
    format!("&{cert}={dir}/client.pem&{key}={dir}/client.key")
}

/// With the client certificate: works. Without: the error says one is required and names the
/// server, and (`hints`: where simba words the error, not the server) the URL parameters to
/// give.
async fn mtls_suite(var: &str, cert: &str, key: &str, hints: bool) {
    let Some(url) = server_url(var) else { return };
    works(&format!("{url}{}", client_cert(cert, key))).await;
    // A handshake refusal can arrive before or after the first request (TLS 1.3): the same
    // message every time.
    for _ in 0..5 {
        let e = fails(&url).await;
        assert!(e.contains("client certificate") && e.contains("require"), "{var} without a certificate: {e}");
        if hints {
            assert!(e.contains(cert) && e.contains(key), "{var}: names the URL parameters to give: {e}");
        }
        assert!(e.contains("127.0.0.1"), "{var}: names the server: {e}");
    }
    eprintln!("{var}, no client certificate: {}", fails(&url).await.replace('\n', " | "));
}

/// PostgreSQL: `hostssl all simba ... clientcert=verify-full` (the certificate's common name
/// is the user).
#[tokio::test(flavor = "multi_thread")]
async fn postgres_requires_a_client_certificate() {
    // PostgreSQL's own words: "connection requires a valid client certificate".
    mtls_suite("SIMBA_TEST_POSTGRES_MTLS_URL", "sslcert", "sslkey", false).await;
}

/// MariaDB: a user created `REQUIRE X509`.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_requires_a_client_certificate() {
    mtls_suite("SIMBA_TEST_MYSQL_MTLS_URL", "ssl-cert", "ssl-key", true).await;
}

/// Redis: `tls-auth-clients yes`.
#[tokio::test(flavor = "multi_thread")]
async fn redis_requires_a_client_certificate() {
    mtls_suite("SIMBA_TEST_REDIS_MTLS_URL", "cert_file", "key_file", true).await;
}

/// ZooKeeper: `zookeeper.ssl.clientAuth=need` on the Netty secure port.
#[tokio::test(flavor = "multi_thread")]
async fn zookeeper_requires_a_client_certificate() {
    mtls_suite("SIMBA_TEST_ZK_MTLS_URL", "cert_file", "key_file", true).await;
}

/// A server certificate signed by the trusted CA but expired in 2020: refused, saying it
/// expired.
#[tokio::test(flavor = "multi_thread")]
async fn expired_server_certificate_is_refused() {
    let Some(url) = server_url("SIMBA_TEST_REDIS_EXPIRED_URL") else { return };
    let e = fails(&url).await;
    eprintln!("expired server certificate: {}", e.replace('\n', " | "));
    assert!(e.to_lowercase().contains("expired"), "{e}");
    assert!(e.contains("127.0.0.1"), "names the server: {e}");
}

/// A server certificate signed by the trusted CA for `other.invalid` only, presented at
/// 127.0.0.1: refused, saying the certificate is not for that host.
#[tokio::test(flavor = "multi_thread")]
async fn server_certificate_for_another_host_is_refused() {
    let Some(url) = server_url("SIMBA_TEST_REDIS_WRONGHOST_URL") else { return };
    let e = fails(&url).await;
    eprintln!("server certificate for another host: {}", e.replace('\n', " | "));
    let l = e.to_lowercase();
    assert!(l.contains("not valid for") || l.contains("name"), "{e}");
    assert!(e.contains("127.0.0.1"), "names the server: {e}");
}
