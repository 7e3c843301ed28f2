//! The conformance suite (B4) on Redis: every test connects its own backend (its own
//! connection and release subscription, as separate processes would) to the private test
//! server `SIMBA_TEST_REDIS_URL` (`scripts/backends.sh start`). The suite uses unique lease
//! and group names, so it shares the server with other tests.

use simba::backend::redis::RedisBackend;

async fn connect(url: String) -> RedisBackend {
    match RedisBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("connect to the Redis test server: {e}"),
    }
}

/// Expands, inside each test the suite generates, to a closure that connects to the test
/// server, or returns from the test when `SIMBA_TEST_REDIS_URL` is unset outside CI (a
/// skip; `server_url` says so on stderr). Under `CI=true` a missing variable fails the test.
/// A macro rather than a function because only code expanded in the test's body can return
/// from it.
macro_rules! redis_or_skip {
    () => {{
        let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") else { return };
        move || connect(url)
    }};
}

simba::conformance_suite!(
    redis_or_skip!(),
    simba::tck::conformance::Capabilities::NONE.with_release_broadcast().with_kept_lease_records()
);

/// Issue 12 item 6: the namespace concern on this backend.
mod namespaces {
    use super::*;

    simba::namespace_suite!(redis_or_skip!());
}
