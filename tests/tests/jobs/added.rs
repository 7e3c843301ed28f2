//! Jobs added and removed while the runtime runs (issue 12 item 7), per node, on paused time
//! against a shared in-memory store.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{PartitionedJob, Schedule, ScheduledJob};
use simba::runtime::RunningRuntime;
use simba::{Runtime, RuntimeConfig, Term};
use tokio::time::sleep;

const MS: fn(u64) -> Duration = Duration::from_millis;
const S: fn(u64) -> Duration = Duration::from_secs;

async fn node(store: &MemoryBackend, seed: u64, toml: &str) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(toml, "test.toml", Vec::new()).expect("config");
    let r = Runtime::builder().config(config).without_registry().backend(store.clone()).seed(seed).start().await;
    let r = r.expect("start");
    r.simba().live().await.expect("live");
    r
}

static TICKS: AtomicU32 = AtomicU32::new(0);

fn tick(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        TICKS.fetch_add(1, Ordering::SeqCst);
    })
}

const TICK: ScheduledJob = ScheduledJob::new("added_tick", Schedule::FixedRate(Duration::from_millis(100)), &tick);

static PARTS: AtomicU32 = AtomicU32::new(0);

fn part(term: Term, _partition: u32) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        PARTS.fetch_add(1, Ordering::SeqCst);
        term.cancelled().await;
        PARTS.fetch_sub(1, Ordering::SeqCst);
    })
}

const PARTED: PartitionedJob = PartitionedJob::new("added_parts", 4, &part);

/// Item 7: a scheduled job added to a running node runs there; removed, it stops at once and
/// its lease is released (handed over, H1); the node's other jobs are untouched.
#[tokio::test(start_paused = true)]
async fn item7_a_job_added_at_run_time_runs_and_stops_when_removed() {
    let store = MemoryBackend::new();
    let a = node(&store, 1, "").await;
    let jobs = a.jobs();
    assert!(jobs.names().is_empty());
    sleep(S(1)).await;
    assert_eq!(TICKS.load(Ordering::SeqCst), 0, "nothing runs before the job is added");
    jobs.add(TICK).expect("add");
    assert_eq!(jobs.names(), vec!["added_tick".to_owned()]);
    sleep(S(1)).await;
    let ran = TICKS.load(Ordering::SeqCst);
    assert!(ran >= 5, "the added job runs every 100 ms once its term starts: {ran} runs in 1 s");
    assert!(store.holder("added_tick").is_some_and(|(h, _)| h.is_some()), "this node holds its lease");
    jobs.remove("added_tick").await.expect("remove");
    assert_eq!(store.holder("added_tick").map(|(h, _)| h), Some(None), "removing hands the lease over");
    let after = TICKS.load(Ordering::SeqCst);
    sleep(S(1)).await;
    assert_eq!(TICKS.load(Ordering::SeqCst), after, "a removed job runs no more");
    assert!(jobs.names().is_empty());
    // Added again, it runs again, under a new term.
    jobs.add(TICK).expect("add again");
    sleep(S(1)).await;
    assert!(TICKS.load(Ordering::SeqCst) > after, "re-added, it runs again");
    a.shutdown().await;
    assert_eq!(store.holder("added_tick").map(|(h, _)| h), Some(None), "shutdown hands added jobs over too");
}

fn idle(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async {})
}

fn idle_part(term: Term, _partition: u32) -> simba::job::JobFuture {
    simba::job::job_future(async move { term.cancelled().await })
}

/// The jobs of the refusal test: their own run functions, so that the counters of the other
/// tests (which run at the same time on other threads) see only their own jobs.
const IDLE: ScheduledJob = ScheduledJob::new("added_tick", Schedule::FixedRate(Duration::from_millis(100)), &idle);

/// [`IDLE`] under another name and lease.
fn idle_as(name: &'static str, lease: &'static str) -> ScheduledJob {
    ScheduledJob::new(name, IDLE.schedule, &idle).with_lease(lease)
}

/// Item 7: bad additions are refused with nothing started: a name already running, a lease
/// in use, a disabled job, an invalid lease name; removing an unknown job names the nearest.
#[tokio::test(start_paused = true)]
async fn item7_bad_additions_and_removals_are_refused() {
    let store = MemoryBackend::new();
    let disabled = idle_as("disabled_one", "disabled_one");
    // `[jobs.NAME]` must name a job the node knows at start (a typo is an error), so the
    // disabled job is registered, and stays disabled when added at run time.
    let config = RuntimeConfig::from_toml_str("[jobs.disabled_one]\nenabled = false\n", "test.toml", Vec::new());
    let builder = Runtime::builder().config(config.expect("config")).without_registry().backend(store.clone());
    let a = builder.job(disabled.clone()).start().await.expect("start");
    let jobs = a.jobs();
    assert!(jobs.names().is_empty(), "the disabled job does not run");
    let same_lease = idle_as("other_name", "added_tick");
    let bad_name = idle_as("bad_lease", "no spaces allowed");
    jobs.add(IDLE).expect("add");
    let e = jobs.add(IDLE).expect_err("the same name twice");
    assert!(e.to_string().contains("already runs on this node"), "{e}");
    let e = jobs.add(same_lease).expect_err("the same lease twice");
    assert!(e.to_string().contains("already uses lease `added_tick`"), "{e}");
    let e = jobs.add(bad_name).expect_err("an invalid lease name");
    assert!(matches!(e, simba::Error::InvalidName { .. }), "{e}");
    let e = jobs.add(disabled).expect_err("a disabled job");
    assert!(e.to_string().contains("enabled = false"), "{e}");
    let grouped = PartitionedJob::new("clash", 4, &idle_part).with_group("added_tick_group");
    jobs.add_partitioned(grouped).expect("a group");
    let clash = idle_as("clash_lease", "added_tick_group.2");
    let e = jobs.add(clash).expect_err("a partition's lease");
    assert!(e.to_string().contains("already uses lease `added_tick_group.2`"), "{e}");
    assert_eq!(jobs.names(), vec!["added_tick".to_owned(), "clash".to_owned()], "only the good ones run");
    let e = jobs.remove("added_tik").await.expect_err("an unknown job");
    assert!(e.to_string().contains("did you mean `added_tick`?"), "{e}");
    a.shutdown().await;
}

/// Item 7: a partitioned job added to two running nodes spreads its partitions over both;
/// removed from one, the other takes every partition; removed from both, nothing runs.
#[tokio::test(start_paused = true)]
async fn item7_a_partitioned_job_added_and_removed_per_node() {
    let store = MemoryBackend::new();
    let a = node(&store, 1, "").await;
    let b = node(&store, 2, "").await;
    a.jobs().add_partitioned(PARTED).expect("add on a");
    sleep(S(3)).await;
    assert_eq!(PARTS.load(Ordering::SeqCst), 4, "a alone runs the 4 partitions");
    b.jobs().add_partitioned(PARTED).expect("add on b");
    sleep(S(6)).await;
    let on = |r: &RunningRuntime| {
        let id = r.simba().session_id().expect("session").to_string();
        (0..4)
            .filter(|i| {
                store.holder(&format!("added_parts.{i}")).is_some_and(|(h, _)| h.is_some_and(|h| h.as_str() == id))
            })
            .count()
    };
    assert_eq!((on(&a), on(&b)), (2, 2), "added on both nodes, the group is balanced");
    a.jobs().remove("added_parts").await.expect("remove on a");
    sleep(S(3)).await;
    assert_eq!((on(&a), on(&b)), (0, 4), "b takes every partition once a removed the job");
    assert_eq!(PARTS.load(Ordering::SeqCst), 4);
    b.jobs().remove("added_parts").await.expect("remove on b");
    sleep(MS(100)).await;
    assert_eq!(PARTS.load(Ordering::SeqCst), 0, "removed everywhere, no worker runs");
    a.shutdown().await;
    b.shutdown().await;
}
