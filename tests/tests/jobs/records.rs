//! No lost records (the engine's part of "the job history must never starve the leases", items
//! 2 and 4): every record of a job goes through one ordered writer that retries a write the
//! store refused until the store accepts it or its term is over, and gives a record up only
//! visibly; a slot whose claim got no answer is recorded `missed` once the store answers; a
//! timed-out attempt is recorded as what its body did; skipped slots are coalesced. On the
//! in-memory store behind a jobs store that fails on demand, under paused Tokio time (the
//! scheduler's wall clock follows Tokio's). Tests are named by item.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use simba::backend::memory::MemoryBackend;
use simba::backend::{BackendError, BackendResult, SessionId};
use simba::job::{JobPolicy, Schedule, ScheduledJob, WallClock};
use simba::job_store::{Claim, ClaimRequest, JobState, JobStore, Outcome, RunRecord, SharedJobStore, SlotKind};
use simba::runtime::RunningRuntime;
use simba::tck::FaultyBackend;
use simba::{Runtime, RuntimeConfig, Term};
use tokio::sync::broadcast;
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// Renewals every 500 ms, a 3 s lease.
const TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n";

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_780_000_000, 0).expect("valid")
}

/// How the jobs store misbehaves (the lease calls always go through).
#[derive(Default)]
struct Faults {
    /// The next this many `finish_run` and `append` calls fail.
    fail_writes: AtomicU32,
    /// Every call fails: the store is unreachable.
    down: AtomicBool,
    /// `claim_run` takes effect but its answer never comes.
    lose_claim_replies: AtomicBool,
}

struct FlakyJobs {
    inner: SharedJobStore,
    faults: Arc<Faults>,
}

impl FlakyJobs {
    fn down(&self) -> BackendResult<()> {
        if self.faults.down.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable { message: "connection refused".into(), source: None });
        }
        Ok(())
    }

    fn write(&self) -> BackendResult<()> {
        self.down()?;
        let refused = self.faults.fail_writes.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if refused.is_ok() {
            return Err(BackendError::Unavailable { message: "write refused".into(), source: None });
        }
        Ok(())
    }
}

impl JobStore for FlakyJobs {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        self.down()?;
        let claim = self.inner.claim_run(req).await;
        if self.faults.lose_claim_replies.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        claim
    }
    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        self.write()?;
        self.inner.finish_run(record).await
    }
    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        self.write()?;
        self.inner.append(record).await
    }
    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        self.down()?;
        self.inner.history(job, limit).await
    }
    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        self.down()?;
        self.inner.job(job).await
    }
    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        self.down()?;
        self.inner.jobs().await
    }
    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        self.inner.set_paused(job, paused).await
    }
    async fn trigger(
        &self,
        job: &str,
        ask: simba::job_store::Trigger<'_>,
    ) -> BackendResult<simba::job_store::Triggered> {
        self.inner.trigger_with(job, ask).await
    }
    async fn control_version(&self) -> BackendResult<u64> {
        self.down()?;
        self.inner.control_version().await
    }
    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe_control()
    }
    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        self.inner.publish_registry(session, registry).await
    }
    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        self.inner.registries().await
    }
    fn retention(&self) -> usize {
        self.inner.retention()
    }
    fn keeping(&self, records: usize) -> SharedJobStore {
        SharedJobStore::new(FlakyJobs { inner: self.inner.keeping(records), faults: Arc::clone(&self.faults) })
    }
    fn describe(&self) -> String {
        format!("flaky({})", self.inner.describe())
    }
}

async fn node(
    store: &MemoryBackend,
    faults: &Arc<Faults>,
    job: ScheduledJob,
    policy: Option<JobPolicy>,
) -> RunningRuntime {
    node_at(store, faults, job, policy, base()).await
}

/// [`node`] whose wall clock reads `wall` now (a node started later in a test).
async fn node_at(
    store: &MemoryBackend,
    faults: &Arc<Faults>,
    job: ScheduledJob,
    policy: Option<JobPolicy>,
    wall: DateTime<Utc>,
) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(TOML, "test.toml", Vec::new()).expect("config");
    let jobs = SharedJobStore::new(FlakyJobs { inner: SharedJobStore::new(store.jobs()), faults: Arc::clone(faults) });
    let (backend, _) = FaultyBackend::new(store.clone());
    let backend = backend.with_job_store_of(jobs);
    let mut b = Runtime::builder()
        .config(config)
        .without_registry()
        .backend(backend)
        .seed(1)
        .wall_clock(WallClock::follow_tokio_from(wall))
        .job(job);
    if let Some(p) = policy {
        b = b.policy(p);
    }
    let r = b.start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

async fn history(store: &MemoryBackend, job: &str) -> Vec<RunRecord> {
    let mut h = store.jobs().history(job, 1000).await.map_err(|e| e.to_string()).expect("history");
    h.reverse();
    h
}

fn every_second(name: &'static str, run: fn(Term) -> simba::job::JobFuture) -> ScheduledJob {
    ScheduledJob::from_closure(name, Schedule::cron("* * * * * *"), run)
}

/// Log lines written while a test runs (the test's runtime is single-threaded, so a
/// thread-local subscriber sees every task's events).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_warnings() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let w = logs.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || w.clone())
        .finish();
    (logs, tracing::subscriber::set_default(sub))
}

static ALWAYS_FAILS: AtomicU32 = AtomicU32::new(0);

fn always_fails(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let n = ALWAYS_FAILS.fetch_add(1, Ordering::SeqCst);
        Err::<(), _>(std::io::Error::other(format!("attempt {} failed", n + 1)))
    })
}

/// Item 2 (no lost records): the store refuses the first three record writes. Each attempt's
/// end record is retried in order until the store takes it, so the slot's last record names
/// the last attempt (`failed`, attempt 3 of 3), never an earlier state; today's one-shot
/// writes left the slot `running`, attempt 1.
#[tokio::test(start_paused = true)]
async fn item2_end_records_are_retried_in_order_until_accepted() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_order", Schedule::cron("0 0 0 1 1 *"), &always_fails);
    let policy = JobPolicy { name: "r_order", retry: 2, backoff: Some(MS(100)), timeout: None };
    let a = node(&store, &faults, job, Some(policy)).await;
    faults.fail_writes.store(3, Ordering::SeqCst);
    simba::admin::Jobs::for_backend(&store)
        .expect("store")
        .with_registered(["r_order"])
        .trigger("r_order")
        .await
        .expect("trigger");
    sleep(S(3)).await;
    assert_eq!(faults.fail_writes.load(Ordering::SeqCst), 0, "the store refused three writes");
    let h = history(&store, "r_order").await;
    a.shutdown().await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!((h[0].outcome, h[0].attempt, h[0].attempts), (Outcome::Failed, 3, 3), "{h:?}");
    assert_eq!(h[0].error.as_deref(), Some("attempt 3 failed"), "{h:?}");
}

static PANICS: AtomicU32 = AtomicU32::new(0);

/// Panics at its first, third and fourth attempts; the second returns `Ok`.
fn panics(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let n = PANICS.fetch_add(1, Ordering::SeqCst) + 1;
        if n != 2 {
            panic!("boom {n}");
        }
        Ok::<(), std::io::Error>(())
    })
}

/// R8: a body that panics is a failed attempt, retried as any failure is; the record names
/// the panic's message, and the node goes on running the job's next slots. Before, the panic
/// unwound through the runner and the slot was recorded `cancelled`, as if its term had
/// ended.
#[tokio::test(start_paused = true)]
async fn r8_a_panicking_body_is_a_failed_attempt_and_retried() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_panics", Schedule::cron("0 0 0 1 1 *"), &panics);
    let policy = JobPolicy { name: "r_panics", retry: 1, backoff: Some(MS(100)), timeout: None };
    let a = node(&store, &faults, job, Some(policy)).await;
    let jobs = simba::admin::Jobs::for_backend(&store).expect("store").with_registered(["r_panics"]);
    jobs.trigger("r_panics").await.expect("trigger");
    sleep(S(3)).await;
    jobs.trigger("r_panics").await.expect("trigger");
    sleep(S(3)).await;
    let h = history(&store, "r_panics").await;
    a.shutdown().await;
    let seen: Vec<_> = h.iter().map(|r| (r.outcome, r.attempt, r.error.clone())).collect();
    assert_eq!(
        seen,
        [(Outcome::Ran, 2, None), (Outcome::Failed, 2, Some("the job panicked: boom 4".to_owned())),],
        "the first run panicked then ran; the second panicked twice: {h:?}"
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 4);
}

static GIVEN_UP_RUNS: AtomicU32 = AtomicU32::new(0);

fn given_up(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        GIVEN_UP_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok::<(), std::io::Error>(())
    })
}

/// Item 2 (a record that could not be written is visible): the store takes the claim but no
/// record write. While the term lasts the end record is retried; once the term ended and the
/// grace after it ran out, it is given up with a warning that names the job, the slot, the
/// outcome, the attempt and the last error.
#[tokio::test(start_paused = true)]
async fn item2_a_record_given_up_is_logged_with_its_slot() {
    let (logs, _guard) = capture_warnings();
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_lost", Schedule::cron("0 0 0 1 1 *"), &given_up);
    let a = node(&store, &faults, job, None).await;
    faults.fail_writes.store(u32::MAX, Ordering::SeqCst);
    simba::admin::Jobs::for_backend(&store)
        .expect("store")
        .with_registered(["r_lost"])
        .trigger("r_lost")
        .await
        .expect("trigger");
    sleep(S(2)).await;
    assert_eq!(GIVEN_UP_RUNS.load(Ordering::SeqCst), 1);
    let h = history(&store, "r_lost").await;
    assert_eq!(h.len(), 1, "{h:?}");
    let slot_ms = h[0].slot_ms;
    assert!(!logs.text().contains("gave up"), "not while the term lasts: {}", logs.text());
    a.shutdown().await;
    // The grace after the term's end is 30 s.
    sleep(S(40)).await;
    let text = logs.text();
    let line = text.lines().find(|l| l.contains("gave up")).unwrap_or_else(|| panic!("no warning: {text}"));
    for field in ["job=r_lost", &format!("slot_ms={slot_ms}"), "outcome=ran", "attempt=1", "write refused"] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
    assert_eq!(history(&store, "r_lost").await[0].outcome, Outcome::Running, "the store took no write");
}

static TICKS: AtomicU32 = AtomicU32::new(0);

fn tick(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        TICKS.fetch_add(1, Ordering::SeqCst);
        Ok::<(), std::io::Error>(())
    })
}

/// Item 2 (a slot that could not be claimed is recorded): the jobs store is unreachable for
/// 3.5 s while the lease stays held (the term survives the outage). The slots whose claim
/// failed are recorded `missed`, with the store's error, once it answers again; every slot of
/// the window has exactly one record.
#[tokio::test(start_paused = true)]
async fn item2_slots_not_claimed_in_an_outage_are_recorded_missed() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let a = node(&store, &faults, every_second("r_outage", tick), None).await;
    sleep(MS(2_500)).await;
    faults.down.store(true, Ordering::SeqCst);
    sleep(MS(3_500)).await;
    faults.down.store(false, Ordering::SeqCst);
    sleep(MS(2_800)).await;
    let h = history(&store, "r_outage").await;
    a.shutdown().await;
    let missed: Vec<&RunRecord> = h.iter().filter(|r| r.outcome == Outcome::Missed).collect();
    assert_eq!(missed.len(), 3, "{h:?}");
    for r in &missed {
        let e = r.error.as_deref().unwrap_or("");
        assert!(e.starts_with("the store did not answer") && e.contains("connection refused"), "{r:?}");
        assert_eq!(r.kind, SlotKind::Scheduled);
    }
    let slots: Vec<i64> = h.iter().map(|r| r.slot_ms).collect();
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], 1_000, "one record per slot, none missing: {h:?}");
    }
    assert!(h.iter().all(|r| matches!(r.outcome, Outcome::Ran | Outcome::Missed)), "{h:?}");
}

/// Item 2: a claim that took effect in the store but whose answer never came (the claim's
/// call timed out) leaves a `running` record of a slot that did not run; once the store
/// answers it says `missed` with the reason.
#[tokio::test(start_paused = true)]
async fn item2_a_claim_whose_answer_was_lost_is_recorded_missed() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let a = node(&store, &faults, every_second("r_lost_reply", tick), None).await;
    sleep(MS(1_500)).await;
    faults.lose_claim_replies.store(true, Ordering::SeqCst);
    sleep(MS(1_000)).await;
    faults.lose_claim_replies.store(false, Ordering::SeqCst);
    sleep(MS(1_900)).await;
    let h = history(&store, "r_lost_reply").await;
    a.shutdown().await;
    assert!(h.iter().all(|r| r.outcome != Outcome::Running), "a slot left running: {h:?}");
    let missed: Vec<&RunRecord> = h.iter().filter(|r| r.outcome == Outcome::Missed).collect();
    assert_eq!(missed.len(), 1, "{h:?}");
    assert!(missed[0].error.as_deref().unwrap_or("").starts_with("the store did not answer"), "{h:?}");
}

/// R3: a run-now claim that took its request in the store but whose answer never came
/// leaves a `running` manual record of a run that never started; once the store answers, the
/// node finds it (its session, token and start) and finishes it `missed`, saying the request
/// was taken and must be triggered again. Nothing is left running, nothing ran.
#[tokio::test(start_paused = true)]
async fn r3_a_run_now_claim_whose_answer_was_lost_is_recorded_missed() {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    fn counted(_term: Term) -> simba::job::JobFuture {
        simba::job::job_future(async move {
            RUNS.fetch_add(1, Ordering::SeqCst);
            Ok::<(), std::io::Error>(())
        })
    }
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_lost_manual", Schedule::cron("0 0 0 1 1 *"), &counted);
    let a = node(&store, &faults, job, None).await;
    sleep(MS(500)).await;
    faults.lose_claim_replies.store(true, Ordering::SeqCst);
    let jobs = simba::admin::Jobs::for_backend(&store).expect("store").with_registered(["r_lost_manual"]);
    jobs.trigger_keyed("r_lost_manual", Some("lost-1")).await.expect("trigger");
    sleep(MS(1_000)).await;
    faults.lose_claim_replies.store(false, Ordering::SeqCst);
    sleep(MS(2_000)).await;
    let h = history(&store, "r_lost_manual").await;
    a.shutdown().await;
    assert_eq!(RUNS.load(Ordering::SeqCst), 0, "nothing ran");
    let [r] = h.as_slice() else { panic!("one record: {h:?}") };
    assert_eq!((r.kind, r.outcome, r.request_key.as_deref()), (SlotKind::Manual, Outcome::Missed, Some("lost-1")));
    let e = r.error.as_deref().unwrap_or("");
    assert!(e.contains("it took the request") && e.contains("trigger it again"), "{r:?}");
    let state = store.jobs().job("r_lost_manual").await.expect("job").expect("known");
    assert_eq!(state.trigger_pending_ms, None, "the request was taken");
}

/// Counts `simba_job_claims_total` of one job by its `result` label (the test's own
/// recorder); a claim of another job fails the test.
pub(crate) struct Claims(&'static str, Mutex<BTreeMap<String, Arc<AtomicU64>>>);

impl Claims {
    /// Counts the claims of `job` (its metric label).
    pub(crate) fn of(job: &'static str) -> Self {
        Claims(job, Mutex::default())
    }

    pub(crate) fn counts(&self) -> BTreeMap<String, u64> {
        let all = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter().map(|(k, v)| (k.clone(), v.load(Ordering::SeqCst))).collect()
    }
}

impl metrics::Recorder for Claims {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() != simba::metrics::names::JOB_CLAIMS {
            return metrics::Counter::noop();
        }
        let label = |n: &str| key.labels().find(|l| l.key() == n).map(|l| l.value().to_owned());
        assert_eq!(label("job").as_deref(), Some(self.0), "{key:?}");
        let result = label("result").unwrap_or_else(|| panic!("no result label: {key:?}"));
        let mut all = self.1.lock().unwrap_or_else(PoisonError::into_inner);
        metrics::Counter::from_arc(Arc::clone(all.entry(result).or_default()))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// R2: every claim is counted in `simba_job_claims_total{job, result}` by how the store
/// answered: claimed, paused, failed (the store refused the call), timed out (the answer never
/// came); one count per slot of the window, none twice. Slots at 1 s..9 s: 1 and 2 claimed,
/// 3 and 4 refused (the store is down from 2.5 s to 4.5 s), 5's answer lost (to 5.5 s), 6 and 7
/// claimed, 8 and 9 paused (from 7.2 s); the node stops at 9.2 s.
#[tokio::test(start_paused = true)]
async fn r2_every_claim_is_counted_by_its_answer() {
    let recorder = Claims::of("r_claims");
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let a = node(&store, &faults, every_second("r_claims", tick), None).await;
    sleep(MS(2_500)).await;
    faults.down.store(true, Ordering::SeqCst);
    sleep(MS(2_000)).await;
    faults.down.store(false, Ordering::SeqCst);
    faults.lose_claim_replies.store(true, Ordering::SeqCst);
    sleep(MS(1_000)).await;
    faults.lose_claim_replies.store(false, Ordering::SeqCst);
    sleep(MS(1_700)).await;
    let was_paused = store.jobs().set_paused("r_claims", true).await.map_err(|e| e.to_string()).expect("pause");
    assert!(!was_paused);
    sleep(MS(2_000)).await;
    a.shutdown().await;
    let counts = recorder.counts();
    let want: BTreeMap<String, u64> =
        [("claimed", 4), ("failed", 2), ("timed_out", 1), ("paused", 2)].map(|(k, n)| (k.to_owned(), n)).into();
    assert_eq!(counts, want);
}

static LATE_RUNS: AtomicU32 = AtomicU32::new(0);

/// Returns `Ok` 300 ms after its 400 ms timeout, ignoring the cancellation signal.
fn late_ok(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        LATE_RUNS.fetch_add(1, Ordering::SeqCst);
        sleep(MS(700)).await;
        Ok::<(), std::io::Error>(())
    })
}

/// Item 2 (a timed-out attempt is recorded as what its body did): a body that completes `Ok`
/// within the grace after its timeout signal is recorded `ran`, with text saying it finished
/// after its timeout, and is not retried.
#[tokio::test(start_paused = true)]
async fn item2_a_body_that_completes_ok_in_the_grace_is_ran_and_not_retried() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_late", Schedule::cron("0 0 0 1 1 *"), &late_ok);
    let policy = JobPolicy { name: "r_late", retry: 2, backoff: Some(MS(100)), timeout: Some(MS(400)) };
    let a = node(&store, &faults, job, Some(policy)).await;
    simba::admin::Jobs::for_backend(&store)
        .expect("store")
        .with_registered(["r_late"])
        .trigger("r_late")
        .await
        .expect("trigger");
    sleep(S(4)).await;
    let h = history(&store, "r_late").await;
    a.shutdown().await;
    assert_eq!(LATE_RUNS.load(Ordering::SeqCst), 1, "an attempt that completed is never retried: {h:?}");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!((h[0].outcome, h[0].attempt), (Outcome::Ran, 1), "{h:?}");
    let e = h[0].error.as_deref().unwrap_or("");
    assert!(e.contains("after its timeout of 400ms"), "{h:?}");
}

static TIED_RUNS: AtomicU32 = AtomicU32::new(0);

/// Completes exactly when its 400 ms timeout fires.
fn tied(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        TIED_RUNS.fetch_add(1, Ordering::SeqCst);
        sleep(MS(400)).await;
        Ok::<(), std::io::Error>(())
    })
}

/// Item 2: a body whose completion and timer are ready together (a process stopped past the
/// timeout and continued) is polled first and wins: every slot is `ran`, none retried.
#[tokio::test(start_paused = true)]
async fn item2_a_body_ready_with_its_timer_wins() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let policy = JobPolicy { name: "r_tied", retry: 2, backoff: Some(MS(100)), timeout: Some(MS(400)) };
    let a = node(&store, &faults, every_second("r_tied", tied), Some(policy)).await;
    sleep(MS(20_500)).await;
    let h = history(&store, "r_tied").await;
    a.shutdown().await;
    assert!(h.len() >= 19, "{h:?}");
    assert!(h.iter().all(|r| r.outcome == Outcome::Ran && r.attempt == 1 && r.error.is_none()), "{h:?}");
    assert_eq!(TIED_RUNS.load(Ordering::SeqCst) as usize, h.len());
}

static SLOW_RUNS: AtomicU32 = AtomicU32::new(0);

/// Outlasts nine periods of its 100 ms job.
fn slow(_term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
        sleep(MS(950)).await;
        Ok::<(), std::io::Error>(())
    })
}

/// Item 4 (skipped slots coalesced): a 100 ms fixed-rate job whose run lasts 950 ms writes
/// one `skipped_running` record per run of consecutive skipped slots, named after the first,
/// saying how many slots it stands for, instead of one record per 100 ms.
#[tokio::test(start_paused = true)]
async fn item4_skipped_slots_are_one_record_per_run() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_skip", Schedule::FixedRate(MS(100)), &slow);
    let a = node(&store, &faults, job, None).await;
    sleep(MS(5_050)).await;
    let h = history(&store, "r_skip").await;
    a.shutdown().await;
    let ran = h.iter().filter(|r| r.outcome == Outcome::Ran).count();
    let skipped: Vec<&RunRecord> = h.iter().filter(|r| r.outcome == Outcome::SkippedRunning).collect();
    assert!(ran >= 4, "{h:?}");
    assert!(skipped.len() <= ran + 1, "one record per run of skipped slots: {} for {ran} runs: {h:?}", skipped.len());
    let first = skipped.first().unwrap_or_else(|| panic!("no skipped record: {h:?}"));
    let e = first.error.as_deref().unwrap_or("");
    assert!(e.starts_with("9 slots skipped through "), "{first:?}");
    assert!(e.contains("was still in flight"), "{first:?}");
}

static AT_STOP_RUNS: AtomicU32 = AtomicU32::new(0);

/// Runs until its term is handed over, then returns `Ok`.
fn runs_until_stopped(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        AT_STOP_RUNS.fetch_add(1, Ordering::SeqCst);
        term.cancelled().await;
        Ok::<(), std::io::Error>(())
    })
}

/// Item 2 (no lost records) at a graceful stop: the run that the stop ends writes its end
/// record while the store refuses writes for a while; the stop waits for the record writer
/// before it closes the session, so the record lands (`ran`, ended), not the `running` the
/// claim wrote. Without the wait the end record died with the runtime.
#[tokio::test(start_paused = true)]
async fn item2_a_graceful_stop_waits_for_the_last_records() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let job = ScheduledJob::new("r_stop", Schedule::cron("0 0 0 1 1 *"), &runs_until_stopped);
    let a = node(&store, &faults, job, None).await;
    simba::admin::Jobs::for_backend(&store)
        .expect("store")
        .with_registered(["r_stop"])
        .trigger("r_stop")
        .await
        .expect("trigger");
    sleep(S(1)).await;
    assert_eq!(AT_STOP_RUNS.load(Ordering::SeqCst), 1, "the requested run started");
    assert_eq!(history(&store, "r_stop").await.last().map(|r| r.outcome), Some(Outcome::Running));
    faults.fail_writes.store(4, Ordering::SeqCst);
    a.shutdown().await;
    assert_eq!(faults.fail_writes.load(Ordering::SeqCst), 0, "the store refused four writes");
    let h = history(&store, "r_stop").await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].outcome, Outcome::Ran, "the end record reached the store before the stop returned: {h:?}");
    assert!(h[0].ended_ms.is_some(), "{h:?}");
}

/// Item 2 (a failover's slots are recorded even when the store is unreachable at the new
/// term's start): node A runs a per-second job and stops; nobody holds the term for 3 s; node
/// B takes it over while the jobs store does not answer, and the store comes back 2 s later.
/// B keeps asking for the job's last slot until the store answers, then records the slots of
/// the failover `missed`, so every second of the window has exactly one record. Before, B gave
/// up on the gap for the whole term when that first read failed, and the failover's slots had
/// no record at all (seen on ZooKeeper after a server restart).
#[tokio::test(start_paused = true)]
async fn item2_a_gap_is_recorded_when_the_store_answers_after_the_term_started() {
    let store = MemoryBackend::new();
    let faults = Arc::new(Faults::default());
    let t0 = tokio::time::Instant::now();
    let a = node(&store, &faults, every_second("r_gap", tick), None).await;
    sleep(MS(4_500)).await;
    a.shutdown().await;
    sleep(MS(3_000)).await;
    faults.down.store(true, Ordering::SeqCst);
    let wall = base() + chrono::Duration::from_std(t0.elapsed()).expect("elapsed");
    let b = node_at(&store, &faults, every_second("r_gap", tick), None, wall).await;
    sleep(MS(2_000)).await;
    faults.down.store(false, Ordering::SeqCst);
    sleep(MS(3_000)).await;
    let h = history(&store, "r_gap").await;
    b.shutdown().await;
    let slots: Vec<i64> = h.iter().map(|r| r.slot_ms).collect();
    assert!(slots.len() >= 10, "{h:?}");
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], 1_000, "one record per slot, none missing: {h:?}");
    }
    let missed = h.iter().filter(|r| r.outcome == Outcome::Missed).count();
    assert!(missed >= 4, "the failover's slots and those of the outage are missed: {h:?}");
    assert!(h.iter().all(|r| matches!(r.outcome, Outcome::Ran | Outcome::Missed)), "{h:?}");
}
