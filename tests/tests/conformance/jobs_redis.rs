//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on Redis, against the private
//! server of `scripts/backends.sh` (`SIMBA_TEST_REDIS_URL`). Every client opens its own backend.
//!
//! Without the server every test fails, saying what to start: a skipped backend test must
//! not look like a passing one.

use simba::backend::redis::RedisBackend;

async fn make() -> RedisBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") else {
        panic!(
            "SIMBA_TEST_REDIS_URL is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"`"
        );
    };
    match RedisBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to the Redis test server at {url}: {e}"),
    }
}

simba::jobs_suite!(make);
