//! The registry check (issue 12 item 5): every node publishes its jobs and their effective
//! settings with its session; a node compares what the live nodes published, logs a difference
//! once, and shows it in `RunningRuntime::registry_report`; `simba::admin::Jobs::registry`
//! gives the same report to a service. Paused time, one shared in-memory store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use simba::admin::Jobs;
use simba::backend::memory::MemoryBackend;
use simba::job::{PartitionedJob, Schedule, ScheduledJob};
use simba::runtime::{REGISTRY_CHECK_PERIOD, RunningRuntime};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Renewals every second; a node compares registries every `REGISTRY_CHECK_PERIOD`.
const SESSION: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"1s\"\n";

fn noop(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async {})
}

fn worker(term: Term, _partition: u32) -> simba::job::JobFuture {
    simba::job::job_future(async move { term.cancelled().await })
}

const REPORT: ScheduledJob = ScheduledJob::new("reg_report", Schedule::cron("0 * * * * *"), &noop);

const SWEEP: PartitionedJob = PartitionedJob::new("reg_sweep", 2, &worker);

const EXTRA: ScheduledJob = ScheduledJob::new("reg_extra", Schedule::FixedRate(Duration::from_secs(5)), &noop);

async fn node(store: &MemoryBackend, name: &str, seed: u64, toml: &str) -> RunningRuntime {
    node_with(store, name, seed, toml, &[]).await
}

async fn node_with(store: &MemoryBackend, name: &str, seed: u64, toml: &str, more: &[ScheduledJob]) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(&format!("{SESSION}{toml}"), "test.toml", Vec::new()).expect("config");
    let mut builder = Runtime::builder().config(config).without_registry().job(REPORT).partitioned(SWEEP);
    for j in more {
        builder = builder.job(j.clone());
    }
    let r = builder.node_name(name).backend(store.clone()).seed(seed).start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn lines(&self, containing: &str) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().expect("capture")).into_owned();
        text.lines().filter(|l| l.contains(containing)).map(str::to_owned).collect()
    }
}

/// Item 5: two nodes with the same jobs agree; a third whose `simba.toml` changes a schedule
/// and the retry count is named in the report of every node with the nodes on each side, and
/// logged as ONE warning per node however many checks follow; once it leaves, the nodes agree
/// again (its registry went with its session) and say so.
#[tokio::test(start_paused = true)]
async fn item5_a_differing_node_is_reported_and_warned_once() {
    let out = Capture::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let store = MemoryBackend::new();
    let a = node(&store, "node-a", 1, "").await;
    let b = node(&store, "node-b", 2, "").await;
    let every = REGISTRY_CHECK_PERIOD;
    sleep(every + S(1)).await;
    let report = a.registry_report().expect("node a compared the registries");
    assert_eq!(report.nodes.len(), 2, "{report:?}");
    assert!(report.agrees(), "same jobs, same settings: {:?}", report.differences);
    assert_eq!(report.nodes[0].digest, report.nodes[1].digest);
    assert!(out.lines("do not run the same jobs").is_empty());

    let c = node_with(&store, "node-c", 3, "[jobs.reg_report]\ncron = \"30 * * * * *\"\nretry = 2\n", &[EXTRA]).await;
    // Every node sees the difference at its next check; c at once after it published.
    sleep(every + S(1)).await;
    let want = vec![
        "job `reg_extra` runs on node-c but not on node-a, node-b".to_owned(),
        "job `reg_report` schedule: `0 * * * * *` on node-a, node-b; `30 * * * * *` on node-c".to_owned(),
        "job `reg_report` retry: `0` on node-a, node-b; `2` on node-c".to_owned(),
    ];
    for (name, n) in [("a", &a), ("b", &b), ("c", &c)] {
        let r = n.registry_report().expect("compared");
        assert_eq!(r.differences, want, "node {name}");
    }
    // The library API gives the same report (a service's own admin endpoint).
    let jobs = Jobs::for_backend(&store).expect("store");
    assert_eq!(jobs.registry().await.expect("registry").differences, want);
    // Three more checks: still one warning per node.
    sleep(every * 3).await;
    let warnings = out.lines("do not run the same jobs");
    assert_eq!(warnings.len(), 3, "one warning per node, not one per check: {warnings:#?}");
    assert!(warnings.iter().all(|w| w.contains("WARN") && w.contains(&want[1])), "{warnings:#?}");

    // Removing the extra job at run time changes what c publishes at once, and the warning is
    // renewed once with the new difference.
    c.jobs().remove("reg_extra").await.expect("remove");
    sleep(every + S(1)).await;
    let r = a.registry_report().expect("compared");
    assert_eq!(r.differences, want[1..].to_vec());
    assert_eq!(out.lines("do not run the same jobs").len(), 6, "the changed difference is told once more per node");

    c.shutdown().await;
    sleep(every + S(1)).await;
    let r = a.registry_report().expect("compared");
    assert!(r.agrees() && r.nodes.len() == 2, "c's registry went with its session: {r:?}");
    assert_eq!(out.lines("registries agree again").len(), 2, "a and b say so once each");
    a.shutdown().await;
    b.shutdown().await;
}

/// Item 5: a node publishes again with a new session (its registry lives with the session, so
/// a session that expired took it along): after an outage longer than the lease, the other
/// node's report lists it again.
#[tokio::test(start_paused = true)]
async fn item5_a_new_session_publishes_again() {
    let store = MemoryBackend::new();
    let a = node(&store, "node-a", 1, "").await;
    let first = a.simba().session_id().expect("session");
    let jobs = Jobs::for_backend(&store).expect("store");
    sleep(S(1)).await;
    let r = jobs.registry().await.expect("registry");
    assert_eq!(r.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), vec!["node-a"]);
    assert_eq!(r.nodes[0].session, first.as_str());
    assert_eq!(r.nodes[0].jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), vec!["reg_report", "reg_sweep"]);
    // The store forgets the session (as an expiry would); the node opens another.
    store.expire_session(&first);
    assert!(jobs.registry().await.expect("registry").nodes.is_empty(), "the registry went with the session");
    sleep(S(10)).await;
    let second = a.simba().session_id().expect("a new session");
    assert_ne!(first, second);
    let r = jobs.registry().await.expect("registry");
    assert_eq!(r.nodes.len(), 1);
    assert_eq!(r.nodes[0].session, second.as_str(), "published again with the new session");
    a.shutdown().await;
}
