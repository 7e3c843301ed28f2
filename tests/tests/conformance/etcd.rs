//! The conformance suite (B4) on etcd, against the private server of `scripts/backends.sh`
//! (`SIMBA_TEST_ETCD_URL`). Every test opens its own backend; one simba session is one etcd
//! lease.
//!
//! Without the server every test fails, saying what to start: the suite macro needs a
//! backend, and a skipped backend test must not look like a passing one. (Under `CI=true`
//! `server_url` itself fails.)

use simba::backend::etcd::EtcdBackend;

async fn make() -> EtcdBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") else {
        panic!(
            "SIMBA_TEST_ETCD_URL is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"`"
        );
    };
    match EtcdBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to the etcd test server at {url}: {e}"),
    }
}

simba::conformance_suite!(make, simba::tck::conformance::Capabilities::NONE.with_release_broadcast());

/// Issue 12 item 6: the namespace concern on this backend.
mod namespaces {
    use super::*;

    simba::namespace_suite!(make);
}
