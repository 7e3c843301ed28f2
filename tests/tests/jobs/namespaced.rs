//! The runtime in a namespace (issue 12 item 6): `[backend] namespace` reaches the backend,
//! so two applications with the same job on one store both run it, each with its own lease
//! and history, and the default namespace sees neither. On paused time against a shared
//! in-memory store.

use std::time::Duration;

use simba::backend::Backend;
use simba::backend::memory::MemoryBackend;
use simba::backend::namespace::{Namespace, Namespaced};
use simba::job::{Schedule, ScheduledJob};
use simba::runtime::RunningRuntime;
use simba::{Runtime, RuntimeConfig, Term};

fn tick(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async {})
}

const TICK: ScheduledJob = ScheduledJob::new("ns_tick", Schedule::FixedRate(Duration::from_millis(100)), &tick);

async fn node(store: &MemoryBackend, namespace: &str) -> RunningRuntime {
    let toml = format!("[backend]\nnamespace = \"{namespace}\"\n");
    let config = RuntimeConfig::from_toml_str(&toml, "test.toml", Vec::new()).expect("config");
    let r = Runtime::builder().config(config).without_registry().backend(store.clone()).job(TICK).start().await;
    let r = r.expect("start");
    r.simba().live().await.expect("live");
    r
}

fn ns(name: &str) -> Namespace {
    Namespace::new(name).expect("a valid namespace")
}

/// Issue 12 item 6: the same job in two namespaces runs in both at once, under leases
/// `a~ns_tick` and `b~ns_tick` in the store, with separate histories; the default
/// namespace lists no job of theirs.
#[tokio::test(start_paused = true)]
async fn issue12_6_the_same_job_runs_in_two_namespaces() {
    let store = MemoryBackend::new();
    let a = node(&store, "app-a").await;
    let b = node(&store, "app-b").await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let snap = store.inspect().await.expect("inspect");
    let held: Vec<&str> = snap.leases.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(held, vec!["app-a~ns_tick", "app-b~ns_tick"], "both namespaces hold their own lease");
    for name in ["app-a", "app-b"] {
        let store = Namespaced::new(store.clone(), ns(name)).job_store().expect("a jobs store");
        let runs = store.history("ns_tick", 100).await.expect("history");
        assert!(runs.len() >= 10, "{name} ran {} times in 2 s at 100 ms", runs.len());
        assert!(runs.iter().all(|r| r.job == "ns_tick"), "records are read back under the job's own name");
    }
    let plain = Namespaced::default_view(store.clone()).job_store().expect("a jobs store");
    assert!(plain.jobs().await.expect("jobs").is_empty(), "the default namespace lists namespaced jobs");
    a.shutdown().await;
    b.shutdown().await;
}
