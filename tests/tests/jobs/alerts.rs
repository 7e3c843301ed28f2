//! Alerts (rule R12) on the runtime, on paused Tokio time against the in-memory store:
//! the application's hook hears of a run that failed after its last attempt, a slot missed and
//! a run that started late, each once per slot, from the node whose record took effect (a
//! schedule's slot without its handler, recorded `missed`, stands for the missed slots); a hook
//! that panics stops nothing.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use simba::backend::memory::MemoryBackend;
use simba::job::{
    Alert, AlertKind, Handler, JobPolicy, Overlap, Policies, Schedule, ScheduledJob, WallClock, job_future,
};
use simba::job_store::{JobStore, Outcome, RunRecord};
use simba::runtime::{RunningRuntime, RuntimeBuilder};
use simba::schedule_store::{Schedule as Stored, ScheduleSpec};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::time::sleep;

const MS: fn(u64) -> Duration = Duration::from_millis;
const TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n\n[schedules]\npartitions = 2\n";

type Heard = Arc<Mutex<Vec<Alert>>>;

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_780_000_000, 0).expect("valid")
}

fn builder(store: &MemoryBackend, seed: u64, heard: &Heard) -> RuntimeBuilder {
    let config = RuntimeConfig::from_toml_str(TOML, "test.toml", Vec::new()).expect("config");
    let heard = Arc::clone(heard);
    Runtime::builder()
        .config(config)
        .without_registry()
        .backend(store.clone())
        .seed(seed)
        .wall_clock(WallClock::follow_tokio_from(base()))
        .on_alert(move |a| heard.lock().unwrap_or_else(PoisonError::into_inner).push(a.clone()))
}

async fn started(b: RuntimeBuilder) -> RunningRuntime {
    let r = b.start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

async fn history(store: &MemoryBackend, job: &str) -> Vec<RunRecord> {
    let mut h = store.jobs().history(job, 1000).await.map_err(|e| e.to_string()).expect("history");
    h.reverse();
    h
}

fn heard_of(heard: &Heard, job: &str) -> Vec<Alert> {
    heard.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|a| a.job == job).cloned().collect()
}

fn always_fails(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { Err::<(), _>(std::io::Error::other("the ledger said no")) })
}

fn slow(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async { sleep(MS(1_500)).await })
}

/// A run that fails its two attempts raises ONE `failed` alert for its slot (none for the
/// retried attempt), with the record's error, node and token; every `failed` record has its
/// alert and no slot has two.
#[tokio::test(start_paused = true)]
async fn alerts_a_failed_run_is_one_alert_after_its_last_attempt() {
    let store = MemoryBackend::new();
    let heard = Heard::default();
    let job = ScheduledJob::new("al_fail", Schedule::cron("*/2 * * * * *"), &always_fails);
    let policy = JobPolicy { name: "al_fail", retry: 1, backoff: Some(MS(100)), timeout: None };
    let a = started(builder(&store, 1, &heard).job(job).policy(policy)).await;
    sleep(MS(7_000)).await;
    a.shutdown().await;
    let h = history(&store, "al_fail").await;
    let failed: Vec<&RunRecord> = h.iter().filter(|r| r.outcome == Outcome::Failed).collect();
    assert!(failed.len() >= 3, "{h:?}");
    let alerts = heard_of(&heard, "al_fail");
    assert_eq!(alerts.len(), failed.len(), "one alert per failed slot: {alerts:?}");
    for (alert, rec) in alerts.iter().zip(&failed) {
        assert_eq!((alert.kind, alert.outcome), (AlertKind::Failed, Outcome::Failed));
        assert_eq!(alert.slot.timestamp_millis(), rec.slot_ms);
        assert_eq!((alert.node.as_str(), alert.token), (rec.node.as_str(), rec.token));
        assert!(alert.reason.as_deref().is_some_and(|e| e.contains("the ledger said no")), "{alert:?}");
        assert_eq!(rec.attempt, 2, "after its last attempt: {rec:?}");
    }
}

/// A handler this node has (so that it runs the schedules' partitions).
fn present() -> Handler {
    Handler::from_closure("present", |_t: Term, _p: Arc<str>| job_future(async { Ok::<(), simba::BoxError>(()) }))
}

/// The schedules' API of a node that has the handler `absent` (the new code, in a rolling
/// deploy): the nodes under test run the old code, without it.
fn deploy_api(store: &MemoryBackend) -> simba::admin::Schedules {
    simba::admin::Schedules::for_backend(store).expect("api").with_partitions(2).expect("2").with_handlers(["absent"])
}

/// Two nodes, both with the hook, both without a schedule's handler: each slot is recorded
/// `missed` by the node holding the schedule's partition, and alerted once, by that node, also
/// across a handover (the holder shuts down and the other takes the partition).
#[tokio::test(start_paused = true)]
async fn alerts_missed_slots_are_alerted_once_by_the_node_that_recorded_them() {
    let store = MemoryBackend::new();
    let heard = Heard::default();
    let a = started(builder(&store, 1, &heard).handler(present()).node_name("n-a")).await;
    let b = started(builder(&store, 2, &heard).handler(present()).node_name("n-b")).await;
    let s = Stored::new("nobody", "absent", ScheduleSpec::fixed_rate(Duration::from_secs(1)));
    deploy_api(&store).create(s, "deploy").await.expect("create");
    sleep(MS(3_500)).await;
    let h = history(&store, "schedule/nobody").await;
    let holder = h.last().map(|r| r.node.clone()).expect("a record");
    let (first, other) = if holder == "n-a" { (a, b) } else { (b, a) };
    first.shutdown().await;
    sleep(MS(4_000)).await;
    other.shutdown().await;
    let h = history(&store, "schedule/nobody").await;
    let missed: Vec<(i64, String)> =
        h.iter().filter(|r| r.outcome == Outcome::Missed).map(|r| (r.slot_ms, r.node.clone())).collect();
    assert_eq!(missed.len(), h.len(), "every slot missed: {h:?}");
    let nodes: std::collections::BTreeSet<&str> = missed.iter().map(|m| m.1.as_str()).collect();
    assert_eq!(nodes.len(), 2, "both nodes held the partition in turn: {missed:?}");
    let alerts = heard_of(&heard, "schedule/nobody");
    let alerted: Vec<(i64, String)> = alerts.iter().map(|a| (a.slot.timestamp_millis(), a.node.clone())).collect();
    assert_eq!(alerted, missed, "one alert per missed slot, by the node that recorded it");
    for al in &alerts {
        assert_eq!(al.kind, AlertKind::Missed);
        assert!(al.reason.as_deref().is_some_and(|r| r.starts_with("no_handler: handler `absent`")), "{al:?}");
    }
}

/// With `alert_late_after(400ms)`: runs of 1.5 s every second under `buffer_one` start later
/// and later (slot 1 when slot 0 ends at 1.5 s: 500 ms late; slot 2 when slot 1 ends at 3 s:
/// 1 s late); each start past the threshold is one `late` alert for its slot, with its lateness.
#[tokio::test(start_paused = true)]
async fn alerts_a_run_that_starts_past_the_threshold_is_late() {
    let store = MemoryBackend::new();
    let heard = Heard::default();
    let job = ScheduledJob::new("al_late", Schedule::cron("* * * * * *"), &slow)
        .with_policies(Policies::new().with_overlap(Overlap::BufferOne));
    let a = started(builder(&store, 1, &heard).job(job).alert_late_after(MS(400))).await;
    sleep(MS(6_000)).await;
    a.shutdown().await;
    let alerts = heard_of(&heard, "al_late");
    assert!(!alerts.is_empty(), "buffered slots start late");
    let lateness: Vec<Duration> = alerts.iter().filter_map(|a| a.lateness).take(2).collect();
    assert_eq!(lateness, [MS(500), MS(1_000)], "slot 1 starts when slot 0 ends (1.5 s), slot 2 when slot 1 ends (3 s)");
    let mut seen = std::collections::BTreeSet::new();
    for al in &alerts {
        assert_eq!((al.kind, al.outcome), (AlertKind::Late, Outcome::Running), "{al:?}");
        let late = al.lateness.expect("a late alert says how late");
        assert!(late > MS(400), "{al:?}");
        assert!(seen.insert(al.slot), "once per slot: {alerts:?}");
    }
}

/// A hook that panics is caught: the records and the next alerts go on.
#[tokio::test(start_paused = true)]
async fn alerts_a_panicking_hook_stops_nothing() {
    let store = MemoryBackend::new();
    let heard = Heard::default();
    let panics = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (h2, p2) = (Arc::clone(&heard), Arc::clone(&panics));
    let b = builder(&store, 1, &heard).handler(present()).on_alert(move |a| {
        if p2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("the first alert's hook fails");
        }
        h2.lock().unwrap_or_else(PoisonError::into_inner).push(a.clone());
    });
    let a = started(b).await;
    let s = Stored::new("nobody", "absent", ScheduleSpec::fixed_rate(Duration::from_secs(1)));
    deploy_api(&store).create(s, "deploy").await.expect("create");
    sleep(MS(4_500)).await;
    a.shutdown().await;
    let h = history(&store, "schedule/nobody").await;
    let missed = h.iter().filter(|r| r.outcome == Outcome::Missed).count();
    assert!(missed >= 3 && missed == h.len(), "every slot recorded, the first too: {h:?}");
    let alerts = heard_of(&heard, "schedule/nobody");
    assert_eq!(alerts.len(), missed - 1, "every alert but the one whose hook panicked: {alerts:?}");
}
