//! The conformance suite (B4) on PostgreSQL: every test connects its own backend (pool and
//! release listener) to the private test server, as separate nodes would.
//!
//! Needs `SIMBA_TEST_POSTGRES_URL` (set by `eval "$(bash scripts/backends.sh start)"`); without
//! it every test fails, saying what is missing.

use simba::backend::postgres::PostgresBackend;

async fn make() -> PostgresBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else {
        panic!("SIMBA_TEST_POSTGRES_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    match PostgresBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to the PostgreSQL test server: {e}"),
    }
}

simba::conformance_suite!(
    make,
    simba::tck::conformance::Capabilities::NONE.with_release_broadcast().with_kept_lease_records()
);

/// Issue 12 item 6: the namespace concern on this backend.
mod namespaces {
    /// A connection with its jobs store on.
    async fn make() -> super::PostgresBackend {
        super::make().await.with_job_store()
    }

    simba::namespace_suite!(make);
}
