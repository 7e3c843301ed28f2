//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on PostgreSQL: every client
//! connects its own backend to the private test server.
//!
//! Needs `SIMBA_TEST_POSTGRES_URL` (set by `eval "$(bash scripts/backends.sh start)"`); without
//! it every test fails, saying what is missing.

use simba::backend::postgres::PostgresBackend;

async fn make() -> PostgresBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else {
        panic!("SIMBA_TEST_POSTGRES_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    match PostgresBackend::connect(&url).await {
        Ok(b) => b.with_job_store(),
        Err(e) => panic!("cannot connect to the PostgreSQL test server: {e}"),
    }
}

simba::jobs_suite!(make);
