//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on ZooKeeper, against the private
//! server of `scripts/backends.sh` (`SIMBA_TEST_ZK_URL`). Every client opens its own backend.
//!
//! Without the server every test fails, saying what to start: a skipped backend test must
//! not look like a passing one.

use simba::backend::zookeeper::ZooKeeperBackend;

async fn make() -> ZooKeeperBackend {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else {
        panic!(
            "SIMBA_TEST_ZK_URL is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"`"
        );
    };
    match ZooKeeperBackend::connect(&url).await {
        Ok(b) => b,
        Err(e) => panic!("cannot connect to the ZooKeeper test server at {url}: {e}"),
    }
}

simba::jobs_suite!(make);

/// Issue 12 item 1 (the cost of history): a claim through the jobs store takes the two round
/// trips of `claim_slot` (reads sent together, then one `multi`); it sends more requests in
/// the first batch (the job's control node and record list): 5 requests against 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_run_requests_next_to_claim_slot() {
    use simba::backend::{Acquire, Backend};
    use simba::job_store::{Claim, ClaimRequest, SlotKind};
    let b = make().await;
    let store = b.job_store().expect("ZooKeeper has a jobs store");
    let s = b.open_session(std::time::Duration::from_secs(6)).await.expect("open a session").id;
    let lease = simba::tck::conformance::unique("rt");
    let Acquire::Won(t) = b.acquire(&s, &lease).await.expect("acquire") else { panic!("the lease is fresh") };
    let job = simba::tck::conformance::unique("rtjob");
    store.job(&job).await.expect("warm up: the jobs directories are created once");
    let before = b.requests_sent();
    assert!(b.claim_slot(&s, &lease, t, 1).await.expect("claim_slot"));
    let slot_requests = b.requests_sent() - before;
    let before = b.requests_sent();
    let req = ClaimRequest {
        session: &s,
        lease: &lease,
        token: t,
        job: &job,
        slot_ms: 2,
        kind: SlotKind::Scheduled,
        node: "n",
        started_ms: 2,
        attempts: 1,
    };
    assert!(matches!(store.claim_run(req).await.expect("claim_run"), Claim::Claimed(_)));
    let run_requests = b.requests_sent() - before;
    assert_eq!(slot_requests, 3);
    assert_eq!(run_requests, 5, "lease stat + slot node + control node + record list, then one multi");
    b.close_session(&s).await.expect("close");
}
