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
        Ok(b) => b.with_job_store(),
        Err(e) => panic!("cannot connect to the MySQL (MariaDB) test server: {e}"),
    }
}

simba::jobs_suite!(make);
