//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on MySQL (MariaDB): every client
//! connects its own backend to the private test server.
//!
//! Needs `SIMBA_TEST_MYSQL_URL` (set by `eval "$(bash scripts/backends.sh start)"`); without
//! it every test fails, saying what is missing.

use simba::backend::mysql::MySqlBackend;

async fn make() -> MySqlBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_MYSQL_URL") else {
        panic!("SIMBA_TEST_MYSQL_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    match MySqlBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to the MySQL (MariaDB) test server: {e}"),
    }
}

simba::jobs_suite!(make);

/// Issue 12 ("every feature on all six backends"; ADR 0012, amendment "the SQL claim in one
/// round trip"): the store is on by default, and `without_job_store` switches it off.
#[tokio::test]
async fn jobs_store_is_on_by_default() {
    use simba::backend::Backend;
    let backend = make().await;
    assert!(backend.job_store().is_some(), "MySQL: no jobs store by default");
    assert!(backend.without_job_store().job_store().is_none(), "MySQL: without_job_store left it on");
}
