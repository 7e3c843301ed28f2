//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on etcd, against the private
//! server of `scripts/backends.sh` (`SIMBA_TEST_ETCD_URL`). Every client opens its own backend.
//!
//! Without the server every test fails, saying what to start: a skipped backend test must
//! not look like a passing one.

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

simba::jobs_suite!(make);
