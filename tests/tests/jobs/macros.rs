//! What `#[simba_scheduled]` and `#[simba_partitioned]` register (rules J1, J2): the entries
//! that land in `simba::job::SCHEDULED_JOBS` and `PARTITIONED_JOBS`, with their defaults.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{
    Misfire, PARTITIONED_JOBS, PartitionRun, PartitionedJob, SCHEDULED_JOBS, Schedule, ScheduledJob, ScheduledRun,
};
use simba::{Simba, Term, simba_partitioned, simba_scheduled};

#[simba_scheduled(cron = "0 */5 * * * *")]
async fn macros_cron_defaults(_term: &Term) {}

#[simba_scheduled(cron = "0 30 2 * * *", time_zone = "Europe/Berlin", lease = "macros.nightly", misfire = "run_once")]
async fn macros_cron_everything(term: &Term) -> anyhow::Result<()> {
    term.ensure_valid(Duration::from_secs(1))?;
    Ok(())
}

/// The token of the term the last run of `macros_fixed_rate` got.
static FIXED_RATE_TOKEN: AtomicU64 = AtomicU64::new(0);

#[simba_scheduled(fixed_rate = "1m 250ms")]
async fn macros_fixed_rate(term: &Term) -> Result<u32, std::io::Error> {
    FIXED_RATE_TOKEN.store(term.token(), Ordering::SeqCst);
    Ok(1)
}

#[simba_scheduled(fixed_rate = "1s")]
async fn macros_failing(_term: &Term) -> anyhow::Result<()> {
    anyhow::bail!("macros_failing always fails")
}

/// The partition the last run of `macros_partitioned` got, plus one.
static LAST_PARTITION: AtomicU32 = AtomicU32::new(0);

#[simba_partitioned(group = "macros-billing", partitions = 16)]
async fn macros_partitioned(_term: &Term, partition: u32) {
    LAST_PARTITION.store(partition + 1, Ordering::SeqCst);
}

#[simba_partitioned(group = "macros-sync", partitions = 3, fixed_rate = "10s", misfire = "run_once")]
async fn macros_partitioned_scheduled(_term: &Term, _partition: u32) -> anyhow::Result<()> {
    Ok(())
}

/// The attempt the last run of `macros_retry_context` saw.
static CONTEXT_ATTEMPT: AtomicU32 = AtomicU32::new(0);

#[simba_scheduled(fixed_rate = "10s", retry = 3, backoff = "250ms", timeout = "30s")]
async fn macros_retry_context(_term: &Term, ctx: &simba::job::JobContext) -> anyhow::Result<()> {
    CONTEXT_ATTEMPT.store(ctx.attempt(), Ordering::SeqCst);
    Ok(())
}

mod nested {
    pub(crate) mod deeper {
        use simba::{Term, simba_scheduled};

        /// A job in a nested module registers like any other.
        #[simba_scheduled(cron = "@hourly")]
        pub(crate) async fn macros_nested(_term: &Term) {}
    }
}

fn scheduled(name: &str) -> &'static ScheduledJob {
    let mut found = SCHEDULED_JOBS.iter().filter(|j| j.name == name);
    let job = found.next().unwrap_or_else(|| panic!("scheduled job {name} is not registered"));
    assert!(found.next().is_none(), "scheduled job {name} is registered twice");
    job
}

fn partitioned(name: &str) -> &'static PartitionedJob {
    let mut found = PARTITIONED_JOBS.iter().filter(|j| j.name == name);
    let job = found.next().unwrap_or_else(|| panic!("partitioned job {name} is not registered"));
    assert!(found.next().is_none(), "partitioned job {name} is registered twice");
    job
}

/// J1: the lease defaults to the function's name, the time zone to UTC (`None`), misfire to skip.
#[test]
fn j1_cron_job_with_defaults() {
    let job = scheduled("macros_cron_defaults");
    assert_eq!(job.lease, "macros_cron_defaults");
    assert_eq!(job.schedule, Schedule::cron("0 */5 * * * *"));
    assert_eq!(job.misfire, Misfire::Skip);
    let _run: &ScheduledRun = &job.run;
}

/// J1: every option lands in the entry.
#[test]
fn j1_cron_job_with_every_option() {
    let job = scheduled("macros_cron_everything");
    assert_eq!(job.lease, "macros.nightly");
    assert_eq!(job.schedule, Schedule::cron_in("0 30 2 * * *", "Europe/Berlin"));
    assert_eq!(job.misfire, Misfire::RunOnce);
}

/// J1: a fixed rate keeps its sub-second part.
#[test]
fn j1_fixed_rate_job() {
    let job = scheduled("macros_fixed_rate");
    assert_eq!(job.lease, "macros_fixed_rate");
    assert_eq!(job.schedule, Schedule::FixedRate(Duration::from_millis(60_250)));
    assert_eq!(job.misfire, Misfire::Skip);
}

/// J1: the module a job lives in does not matter; the name is the bare function name.
#[test]
fn j1_job_in_nested_module() {
    let job = scheduled("macros_nested");
    assert_eq!(job.lease, "macros_nested");
    assert_eq!(job.schedule, Schedule::cron("@hourly"));
    // The function itself is kept as written and stays callable.
    let _ = nested::deeper::macros_nested;
}

/// J2: a partitioned job without a schedule: its worker runs once per term.
#[test]
fn j2_partitioned_job_without_schedule() {
    let job = partitioned("macros_partitioned");
    assert_eq!(job.group, "macros-billing");
    assert_eq!(job.partitions, 16);
    assert_eq!(job.schedule, None);
    assert_eq!(job.misfire, Misfire::Skip);
    let _run: &PartitionRun = &job.run;
}

/// J2: a partitioned job with a per-partition schedule.
#[test]
fn j2_partitioned_job_with_schedule() {
    let job = partitioned("macros_partitioned_scheduled");
    assert_eq!(job.group, "macros-sync");
    assert_eq!(job.partitions, 3);
    assert_eq!(job.schedule, Some(Schedule::FixedRate(Duration::from_secs(10))));
    assert_eq!(job.misfire, Misfire::RunOnce);
}

/// The macros register each job exactly once, and nothing else in this binary registers jobs
/// under these names' prefix.
#[test]
fn every_macro_job_is_registered_once() {
    let mut scheduled: Vec<&str> =
        SCHEDULED_JOBS.iter().map(|j| &*j.name).filter(|n| n.starts_with("macros_")).collect();
    scheduled.sort_unstable();
    assert_eq!(
        scheduled,
        [
            "macros_cron_defaults",
            "macros_cron_everything",
            "macros_failing",
            "macros_fixed_rate",
            "macros_nested",
            "macros_retry_context"
        ]
    );
    let mut partitioned: Vec<&str> =
        PARTITIONED_JOBS.iter().map(|j| &*j.name).filter(|n| n.starts_with("macros_")).collect();
    partitioned.sort_unstable();
    assert_eq!(partitioned, ["macros_partitioned", "macros_partitioned_scheduled"]);
}

/// A term from a real client on the in-memory backend.
async fn term(client: &Simba, lease: &str) -> (simba::LockGuard, Term) {
    let guard = client.lock(lease).acquire().await.expect("acquire");
    let term = guard.term().clone();
    (guard, term)
}

/// The registered `run` pointer calls the function with the term it is given and turns its
/// outcome (`()`, `Ok`, `Err`) into the job's result.
#[tokio::test(start_paused = true)]
async fn registered_run_calls_the_function() {
    let client = Simba::new(MemoryBackend::new(), simba_tests::config()).expect("client");

    let (_guard, t) = term(&client, "macros_fixed_rate").await;
    let token = t.token();
    (scheduled("macros_fixed_rate").run)(t).await.expect("Ok(1) is a success");
    assert_eq!(FIXED_RATE_TOKEN.load(Ordering::SeqCst), token, "the job got the term it was run with");

    let (_guard, t) = term(&client, "macros_failing").await;
    let err = (scheduled("macros_failing").run)(t).await.expect_err("an Err is a failure");
    assert_eq!(err.to_string(), "macros_failing always fails");

    let (_guard, t) = term(&client, "macros-billing.7").await;
    (partitioned("macros_partitioned").run)(t, 7).await.expect("() is a success");
    assert_eq!(LAST_PARTITION.load(Ordering::SeqCst), 8, "the worker got its partition");

    client.close().await;
}

/// Issue 12 items 3 and 9: `retry`, `backoff` and `timeout` register a `JobPolicy`; a job
/// taking `&JobContext` gets the run's context (a manual one when called by hand).
#[tokio::test]
async fn item3_item9_macro_retry_timeout_and_context() {
    let p = simba::job::JOB_POLICIES.iter().find(|p| p.name == "macros_retry_context").expect("policy registered");
    assert_eq!((p.retry, p.backoff, p.timeout), (3, Some(Duration::from_millis(250)), Some(Duration::from_secs(30))));
    assert!(!simba::job::JOB_POLICIES.iter().any(|p| p.name == "macros_cron_defaults"), "no options, no policy");
    let client = Simba::new(MemoryBackend::new(), simba::SimbaConfig::default()).expect("client");
    let (guard, term) = term(&client, "macros_retry_context").await;
    (scheduled("macros_retry_context").run)(term).await.expect("run");
    assert_eq!(CONTEXT_ATTEMPT.load(Ordering::SeqCst), 1);
    drop(guard);
    client.close().await;
}
