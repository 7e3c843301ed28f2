//! Rule J10: jobs take the application's state as a typed parameter, given once to the
//! runtime; a job whose state was not given is refused at start, before anything starts; jobs
//! made at run time own their names and capture what they need. Paused time, in-memory store.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{JobContext, Schedule, ScheduledJob, job_future};
use simba::job_store::Outcome;
use simba::testing::TestKit;
use simba::{Runtime, RuntimeConfig, State, Term, simba_partitioned, simba_scheduled};
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;

/// What a service would hand its jobs: a pool, a client, an `Arc` of its own struct.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<String>>>);

impl Ledger {
    fn write(&self, line: String) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(line);
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[derive(Clone)]
struct Tenant(&'static str);

/// Every second: writes its slot and tenant into the ledger it was given.
#[simba_scheduled(cron = "* * * * * *")]
async fn state_ledger(
    term: &Term,
    ctx: &JobContext,
    State(ledger): State<Ledger>,
    State(tenant): State<Tenant>,
) -> Result<(), simba::Error> {
    term.ensure_valid(Duration::from_millis(100))?;
    ledger.write(format!("{} {} {}", tenant.0, ctx.slot().timestamp(), term.token()));
    Ok(())
}

/// Once per term per partition: notes which partition it holds in the ledger.
#[simba_partitioned(group = "state-parts", partitions = 3)]
async fn state_parts(term: &Term, partition: u32, State(ledger): State<Ledger>) {
    ledger.write(format!("partition {partition}"));
    term.cancelled().await;
}

/// J10: the runtime's state reaches every run of a scheduled job (beside its context) and
/// every partition worker, through the test kit as through the runtime.
#[tokio::test(start_paused = true)]
async fn j10_a_job_takes_the_applications_state() -> Result<(), simba::Error> {
    let ledger = Ledger::default();
    let kit = TestKit::builder()
        .only(["state_ledger", "state_parts"])
        .state(ledger.clone())
        .state(Tenant("4711"))
        .start()
        .await?;
    kit.advance_to_next_slot("state_ledger").await?;
    kit.advance_to_next_slot("state_ledger").await?;
    kit.advance(S(3)).await;
    let lines = ledger.lines();
    let runs: Vec<&String> = lines.iter().filter(|l| l.starts_with("4711 ")).collect();
    assert!(runs.len() >= 2, "the job ran with its state: {lines:?}");
    let mut parts: Vec<&String> = lines.iter().filter(|l| l.starts_with("partition ")).collect();
    parts.sort();
    assert_eq!(parts, ["partition 0", "partition 1", "partition 2"], "each worker got the ledger once: {lines:?}");
    let h = kit.history("state_ledger").await?;
    assert!(h.iter().all(|r| r.outcome == Outcome::Ran), "{h:?}");
    kit.shutdown().await;
    Ok(())
}

/// J10: a job that takes a state nobody gave is refused at start with its name, the type and
/// the fix, before anything connects: no lease is taken, nothing runs.
#[tokio::test(start_paused = true)]
async fn j10_a_missing_state_is_refused_at_start_and_nothing_starts() {
    let ledger = Ledger::default();
    let store = MemoryBackend::new();
    let registered = simba::job::SCHEDULED_JOBS.iter().find(|j| j.name == "state_ledger").expect("registered").clone();
    let start = Runtime::builder()
        .config(RuntimeConfig::default())
        .without_registry()
        .backend(store.clone())
        .job(registered)
        .state(ledger.clone())
        .start()
        .await;
    let e = start.expect_err("refused: no Tenant given").to_string();
    assert!(e.contains("job `state_ledger` takes `State<"), "{e}");
    assert!(e.contains("Tenant`"), "names the type: {e}");
    assert!(e.contains("Runtime::builder().state(value)"), "says how: {e}");
    sleep(S(3)).await;
    assert!(ledger.lines().is_empty(), "nothing ran");
    assert_eq!(store.holder("state_ledger"), None, "no lease was ever taken");
    // The test kit refuses the same way.
    let kit = TestKit::builder().only(["state_parts"]).start().await;
    let e = kit.err().expect("refused: no Ledger given").to_string();
    assert!(e.contains("job `state_parts` takes `State<") && e.contains("Ledger`"), "{e}");
    // One value per type: a type given twice is refused too.
    let twice = TestKit::builder().only(["state_parts"]).state(Ledger::default()).state(Ledger::default());
    let e = twice.start().await.err().expect("refused: two ledgers").to_string();
    assert!(e.contains("was given twice"), "{e}");
}

static TENANT_RUNS: AtomicU32 = AtomicU32::new(0);

/// J10 with J8: jobs made at run time own their names (one per tenant, no leak) and capture
/// their state in a closure; one that takes a state the runtime was not given is refused.
#[tokio::test(start_paused = true)]
async fn j10_jobs_made_at_run_time_own_their_names_and_capture() {
    let store = MemoryBackend::new();
    let rt = Runtime::builder()
        .config(RuntimeConfig::default())
        .without_registry()
        .backend(store.clone())
        .start()
        .await
        .expect("start");
    rt.simba().live().await.expect("live");
    let jobs = rt.jobs();
    for tenant in ["acme", "globex"] {
        let seen = Arc::new(AtomicU32::new(0));
        let job = ScheduledJob::from_closure(format!("report-{tenant}"), Schedule::fixed_rate(S(1)), move |term| {
            let seen = Arc::clone(&seen);
            job_future(async move {
                term.ensure_valid(Duration::from_millis(100))?;
                seen.fetch_add(1, Ordering::SeqCst);
                TENANT_RUNS.fetch_add(1, Ordering::SeqCst);
                Ok::<(), simba::Error>(())
            })
        })
        .with_lease(format!("reports.{tenant}"));
        jobs.add(job).expect("add");
    }
    sleep(S(3)).await;
    assert_eq!(jobs.names(), ["report-acme", "report-globex"]);
    assert!(TENANT_RUNS.load(Ordering::SeqCst) >= 4, "both ran: {}", TENANT_RUNS.load(Ordering::SeqCst));
    assert!(store.holder("reports.acme").is_some_and(|(h, _)| h.is_some()), "under its own lease");
    let needs_ledger =
        simba::job::SCHEDULED_JOBS.iter().find(|j| j.name == "state_ledger").expect("registered").clone();
    let e = jobs.add(needs_ledger).expect_err("no state given").to_string();
    assert!(e.contains("job `state_ledger` takes `State<"), "{e}");
    assert_eq!(jobs.names(), ["report-acme", "report-globex"], "nothing added");
    rt.shutdown().await;
}
