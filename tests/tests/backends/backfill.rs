//! Backfill (rules J15, J16, A16) end to end on real stores, on real time: a node runs a job on a
//! one-second cron, stops, a second node takes it after a gap (its slots recorded `missed`),
//! and a backfill of the whole range asked through the store's request log runs exactly the
//! missed slots, once each, and none of those that ran.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use simba::backend::Backend;
use simba::job::{JobContext, Schedule, ScheduledJob};
use simba::job_store::{Outcome, RunRecord, SharedJobStore, SlotKind, Trigger};
use simba::runtime::RunningRuntime;
use simba::tck::conformance::unique;
use simba::{Runtime, RuntimeConfig, Term};
use simba_core::backfill::BackfillPlan;
use simba_tests::url_or_skip;
use tokio::time::sleep;

const TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n";

/// Each run: (job, slot, kind).
static RUNS: Mutex<Vec<(String, i64, SlotKind)>> = Mutex::new(Vec::new());

fn quick(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let ctx = JobContext::current().expect("a run has its context");
        let run = (term.name().to_owned(), ctx.slot().timestamp_millis(), ctx.kind());
        RUNS.lock().unwrap_or_else(PoisonError::into_inner).push(run);
    })
}

async fn node<B: Backend + Clone>(backend: &B, job: &ScheduledJob) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(TOML, "test.toml", Vec::new()).expect("config");
    let r = Runtime::builder().config(config).without_registry().backend(backend.clone()).job(job.clone()).start();
    let r = r.await.expect("start");
    r.simba().live().await.expect("live");
    r
}

/// How long a step of the scenario may take on a loaded machine (the test lane runs under
/// `nice` beside the fault lane): polled, so a quiet machine takes what it takes.
const WITHIN: Duration = Duration::from_secs(30);

/// `job`'s history once `done` holds of it, read every 100 ms; panics after [`WITHIN`] with
/// the last history read.
async fn history_once(
    store: &SharedJobStore,
    job: &str,
    what: &str,
    done: impl Fn(&[RunRecord]) -> bool,
) -> Vec<RunRecord> {
    let start = std::time::Instant::now();
    loop {
        let h = store.history(job, 100).await.expect("history");
        if done(&h) {
            return h;
        }
        assert!(start.elapsed() < WITHIN, "{what}: not within {WITHIN:?}: {h:?}");
        sleep(Duration::from_millis(100)).await;
    }
}

/// The sorted slots of `h`'s scheduled records whose outcome is one of `outcomes`.
fn scheduled(h: &[RunRecord], outcomes: &[Outcome]) -> Vec<i64> {
    let mut v: Vec<i64> = h
        .iter()
        .filter(|r| r.kind == SlotKind::Scheduled && outcomes.contains(&r.outcome))
        .map(|r| r.slot_ms)
        .collect();
    v.sort_unstable();
    v
}

/// Once the second node ran two slots after the gap: the slots that ran, and those recorded
/// `missed` from the first that ran on (a slot missed before any node held the job is outside
/// the backfill's range).
async fn the_gap(store: &SharedJobStore, job: &str) -> (Vec<i64>, Vec<i64>) {
    let split = |h: &[RunRecord]| {
        let ran = scheduled(h, &[Outcome::Ran, Outcome::Running]);
        let first = ran.first().copied().unwrap_or(i64::MAX);
        let missed: Vec<i64> = scheduled(h, &[Outcome::Missed]).into_iter().filter(|s| *s > first).collect();
        (missed, ran)
    };
    let ran_after_gap = |h: &[RunRecord]| {
        let (missed, ran) = split(h);
        missed.last().is_some_and(|m| ran.iter().filter(|s| *s > m).count() >= 2)
    };
    let h = history_once(store, job, "two runs after a gap", ran_after_gap).await;
    let (missed, ran) = split(&h);
    assert!(missed.len() >= 2, "a gap between runs: {h:?}");
    (missed, ran)
}

/// `job`'s history once the run of request `key` (the backfill's own record) ended `ran`.
async fn backfill_done(store: &SharedJobStore, job: &str, key: &str) -> Vec<RunRecord> {
    let ended = |h: &[RunRecord]| h.iter().any(|r| r.request_key.as_deref() == Some(key) && r.outcome == Outcome::Ran);
    history_once(store, job, "the backfill's record", ended).await
}

/// The scenario on `backend`.
async fn backfill_runs_only_the_missed_slots<B: Backend + Clone>(backend: B) {
    let name = unique("bf");
    let job = ScheduledJob::from_closure(name.clone(), Schedule::cron("* * * * * *"), quick);
    let store = backend.job_store().expect("a jobs store");
    let a = node(&backend, &job).await;
    sleep(Duration::from_millis(2_600)).await;
    a.shutdown().await;
    sleep(Duration::from_secs(3)).await;
    let b = node(&backend, &job).await;
    let (missed, ran) = the_gap(&store, &name).await;
    let (from, to) = (ran[0], chrono::Utc::now().timestamp_millis());
    let slots = u64::try_from((to - from) / 1000 + 1).expect("positive");
    let plan = BackfillPlan::new(from, to, 20.0, slots).expect("a plan");
    let key = plan.key("rs1");
    let asked = store.trigger_with(&name, Trigger::new(&key, to)).await.expect("request");
    assert!(matches!(asked, simba::job_store::Triggered::Requested(_)), "{asked:?}");
    backfill_done(&store, &name, &key).await;
    b.shutdown().await;

    let h = store.history(&name, 100).await.expect("history");
    let mut backfilled: Vec<i64> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill && r.outcome == Outcome::Ran).map(|r| r.slot_ms).collect();
    backfilled.sort_unstable();
    assert_eq!(backfilled, missed, "exactly the missed slots, once each: {h:?}");
    let own = h.iter().find(|r| r.request_key.as_deref() == Some(key.as_str()));
    assert_eq!(
        own.map(|r| (r.kind, r.outcome)),
        Some((SlotKind::Manual, Outcome::Ran)),
        "the backfill's record: {h:?}"
    );
    let mut runs: BTreeMap<(i64, SlotKind), usize> = BTreeMap::new();
    for (_, slot, kind) in RUNS.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|r| r.0 == name) {
        *runs.entry((*slot, *kind)).or_default() += 1;
    }
    assert!(runs.values().all(|n| *n == 1), "no slot ran twice: {runs:?}");
    for s in &ran {
        assert!(!runs.contains_key(&(*s, SlotKind::Backfill)), "slot {s} ran and was backfilled: {runs:?}");
    }
}

/// J15 and J16 on PostgreSQL: the backfill's claims go through the transaction, the routines
/// stay those of version 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j16_backfill_runs_only_the_missed_slots_on_postgres() {
    let url = url_or_skip!("SIMBA_TEST_POSTGRES_URL");
    let backend = simba::backend::postgres::PostgresBackend::connect(&url).await.expect("connect");
    backfill_runs_only_the_missed_slots(backend).await;
}

/// J15 and J16 on a SQLite file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j16_backfill_runs_only_the_missed_slots_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let backend = simba::backend::sqlite::SqliteBackend::connect(&url).await.expect("connect");
    backfill_runs_only_the_missed_slots(backend).await;
}

/// A16 on a SQLite file, on real time: a schedule on a one-second cron runs, its node stops,
/// a second node takes its partition after a gap (its slots recorded `missed`), and a backfill
/// of the whole range asked through `Schedules::backfill` runs exactly the missed slots, once
/// each, through the partition worker's walk and the store's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a16_schedule_backfill_runs_only_the_missed_slots_on_sqlite() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let backend = simba::backend::sqlite::SqliteBackend::connect(&url).await.expect("connect");
    let handler = || {
        simba::job::Handler::from_closure("bf", |term: Term, _payload: Arc<str>| {
            simba::job::job_future(async move {
                let ctx = JobContext::current().expect("a run has its context");
                let run = (term.name().to_owned(), ctx.slot().timestamp_millis(), ctx.kind());
                RUNS.lock().unwrap_or_else(PoisonError::into_inner).push(run);
                Ok::<(), simba::BoxError>(())
            })
        })
    };
    let toml = format!("{TOML}\n[schedules]\npartitions = 2\n");
    let start = || async {
        let config = RuntimeConfig::from_toml_str(&toml, "test.toml", Vec::new()).expect("config");
        let b = Runtime::builder().config(config).without_registry().backend(backend.clone()).handler(handler());
        let r = b.start().await.expect("start");
        r.simba().live().await.expect("live");
        r
    };
    let a = start().await;
    let spec = simba::schedule_store::ScheduleSpec::cron("* * * * * *", "UTC");
    let id = "bf-sqlite";
    let schedule = simba::schedule_store::Schedule::new(id, "bf", spec);
    a.schedules().expect("schedules").create(schedule, "test").await.expect("create");
    sleep(Duration::from_millis(2_600)).await;
    a.shutdown().await;
    sleep(Duration::from_secs(3)).await;
    let b = start().await;
    let store = backend.job_store().expect("a jobs store");
    let job = format!("schedule/{id}");
    let (missed, ran) = the_gap(&store, &job).await;
    let from = chrono::DateTime::from_timestamp_millis(ran[0]).expect("an instant");
    let ask = simba::admin::BackfillAsk::new(from, chrono::Utc::now(), 20.0).by("test");
    let done = b.schedules().expect("schedules").backfill(id, &ask).await.expect("backfill");
    let key = done.requested.map(|r| r.key).unwrap_or_default();
    backfill_done(&store, &job, &key).await;
    b.shutdown().await;

    let h = store.history(&job, 100).await.expect("history");
    let mut backfilled: Vec<i64> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill && r.outcome == Outcome::Ran).map(|r| r.slot_ms).collect();
    backfilled.sort_unstable();
    assert_eq!(backfilled, missed, "exactly the missed slots, once each: {h:?}");
    let own = h.iter().find(|r| r.request_key.as_deref() == Some(key.as_str()));
    assert_eq!(own.map(|r| (r.kind, r.outcome)), Some((SlotKind::Manual, Outcome::Ran)), "{h:?}");
    let mut runs: BTreeMap<(i64, SlotKind), usize> = BTreeMap::new();
    for (_, slot, kind) in
        RUNS.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|r| r.0.starts_with("simba.schedules"))
    {
        *runs.entry((*slot, *kind)).or_default() += 1;
    }
    assert_eq!(runs.keys().filter(|(_, k)| *k == SlotKind::Backfill).count(), missed.len(), "{runs:?}");
    assert!(runs.values().all(|n| *n == 1), "no slot ran twice: {runs:?}");
    for s in &ran {
        assert!(!runs.contains_key(&(*s, SlotKind::Backfill)), "slot {s} ran and was backfilled: {runs:?}");
    }
}
