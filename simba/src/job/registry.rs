//! The job registry: what `#[simba_scheduled]` and `#[simba_partitioned]` generate, and what a
//! user can write by hand (the macros are sugar).
//!
//! Registration happens at link time ([`linkme`]): every [`ScheduledJob`] and
//! [`PartitionedJob`] placed in [`SCHEDULED_JOBS`] / [`PARTITIONED_JOBS`] by any crate linked
//! into the binary is found by [`crate::run`]. A crate the binary never references is not
//! linked: write `use my_jobs as _;` in the binary to make sure it is.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::{BoxError, Term};

/// The future a job run returns.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'static>>;

/// Runs one scheduled job once, with the term it runs under.
pub type ScheduledFn = fn(Term) -> JobFuture;

/// Runs one partition's worker, with the partition's term and index.
pub type PartitionFn = fn(Term, u32) -> JobFuture;

/// When a job runs: the one schedule type of the crate (ADR 0003). The macros build it in
/// their `static` registry entries (borrowed text, with [`Schedule::cron`] and friends, which
/// are `const`); `simba.toml`'s `[jobs.NAME] cron` / `fixed_rate` build it from the file
/// (owned text); the scheduler, the dashboard, the CLI and the published registry read it.
///
/// ```
/// use std::time::Duration;
/// use simba::job::Schedule;
///
/// const NIGHTLY: Schedule = Schedule::cron_in("0 0 2 * * *", "Europe/Berlin");
/// let from_a_file = Schedule::Cron { expr: String::from("0 0 2 * * *").into(), time_zone: Some("Europe/Berlin".into()) };
/// assert_eq!(NIGHTLY, from_a_file);
/// assert_eq!(Schedule::fixed_rate(Duration::from_secs(5)), Schedule::FixedRate(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// A 6-field cron expression with seconds (`"0 */5 * * * *"`), in `time_zone` (an IANA
    /// name such as `"Europe/Berlin"`; UTC when `None`).
    Cron {
        /// The expression.
        expr: Cow<'static, str>,
        /// The time zone.
        time_zone: Option<Cow<'static, str>>,
    },
    /// Every `period`, measured on the monotonic clock.
    FixedRate(Duration),
}

impl Schedule {
    /// A cron schedule in UTC, in a `const` or `static` (what the macros generate).
    pub const fn cron(expr: &'static str) -> Schedule {
        Schedule::Cron { expr: Cow::Borrowed(expr), time_zone: None }
    }

    /// A cron schedule in the IANA time zone `time_zone`, in a `const` or `static`.
    pub const fn cron_in(expr: &'static str, time_zone: &'static str) -> Schedule {
        Schedule::Cron { expr: Cow::Borrowed(expr), time_zone: Some(Cow::Borrowed(time_zone)) }
    }

    /// Every `period`, measured on the monotonic clock.
    pub const fn fixed_rate(period: Duration) -> Schedule {
        Schedule::FixedRate(period)
    }

    /// The cron expression, for a cron schedule.
    pub fn cron_expr(&self) -> Option<&str> {
        match self {
            Schedule::Cron { expr, .. } => Some(expr),
            Schedule::FixedRate(_) => None,
        }
    }

    /// The cron schedule's time zone name (`None`: UTC, or a fixed rate).
    pub fn time_zone(&self) -> Option<&str> {
        match self {
            Schedule::Cron { time_zone, .. } => time_zone.as_deref(),
            Schedule::FixedRate(_) => None,
        }
    }
}

/// What to do with cron slots that passed while no node held the job's term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Misfire {
    /// Skip them; run the next slot on time (the default).
    #[default]
    Skip,
    /// Run once, at once, for the missed slots together, then continue on time.
    RunOnce,
}

/// A job that runs on a schedule on whichever node holds its lease (rule J5). `Clone`, not
/// `Copy` (its [`Schedule`] may own its text): the registry's entries are cheap to clone.
#[derive(Debug, Clone)]
pub struct ScheduledJob {
    /// The job's name, unique in the binary (the function's name for the macro); config
    /// overrides refer to it (J7).
    pub name: &'static str,
    /// The lease guarding it (default: the name).
    pub lease: &'static str,
    /// When it runs.
    pub schedule: Schedule,
    /// Missed slots.
    pub misfire: Misfire,
    /// One run.
    pub run: ScheduledFn,
}

/// A group of `partitions` partitions spread over the live nodes (rules J2, J6). Partition
/// `i` is guarded by lease `{group}.{i}`.
#[derive(Debug, Clone)]
pub struct PartitionedJob {
    /// The job's name, unique in the binary (the function's name for the macro).
    pub name: &'static str,
    /// The group name; partition leases are `{group}.{i}`.
    pub group: &'static str,
    /// How many partitions (at least 1).
    pub partitions: u32,
    /// `None`: the worker runs once per term and should loop until its term is cancelled.
    /// `Some`: the worker runs on this schedule while the node holds the partition.
    pub schedule: Option<Schedule>,
    /// Missed slots, when scheduled.
    pub misfire: Misfire,
    /// The worker.
    pub run: PartitionFn,
}

/// The retry and timeout options of a job (`retry`, `backoff`, `timeout` on the macros),
/// registered apart from the job so that jobs written by hand keep their
/// shape. `[jobs.NAME]` keys in `simba.toml` override them.
#[derive(Debug, Clone, Copy)]
pub struct JobPolicy {
    /// The job's name.
    pub name: &'static str,
    /// How many times a failed run is retried while its term stays valid (0: never).
    pub retry: u32,
    /// The first wait before a retry (doubling, capped, jittered).
    pub backoff: Option<Duration>,
    /// A run that outlives this is signalled (its context's cancellation) and given a grace of
    /// one second: a run that still returns `Ok` within the grace is recorded `ran`, with a
    /// note that it finished after its timeout, and is not retried; one that fails or does
    /// not return is recorded `timed_out`. A run that is ready when its timer fires (the
    /// process was paused past the timeout) counts as finished in time.
    pub timeout: Option<Duration>,
}

/// The options of every job that sets `retry`, `backoff` or `timeout` on its macro.
#[linkme::distributed_slice]
pub static JOB_POLICIES: [JobPolicy];

/// Every scheduled job linked into the binary.
#[linkme::distributed_slice]
pub static SCHEDULED_JOBS: [ScheduledJob];

/// Every partitioned job linked into the binary.
#[linkme::distributed_slice]
pub static PARTITIONED_JOBS: [PartitionedJob];

/// Boxes one run of a job written by hand (a [`ScheduledJob`]'s `run`, a
/// [`PartitionedJob`]'s worker) as a [`JobFuture`], converting its outcome: `()` or
/// `Result<T, E>` with `E` convertible into [`BoxError`]. The macros generate the same call.
///
/// ```
/// use simba::Term;
/// use simba::job::{JobFuture, Misfire, Schedule, ScheduledJob, job_future};
///
/// fn report(term: Term) -> JobFuture {
///     job_future(async move {
///         term.ensure_valid(std::time::Duration::from_millis(100))?;
///         Ok::<(), simba::Error>(())
///     })
/// }
///
/// let job = ScheduledJob {
///     name: "report",
///     lease: "report",
///     schedule: Schedule::cron("0 */5 * * * *"),
///     misfire: Misfire::Skip,
///     run: report,
/// };
/// # let _ = job;
/// ```
pub fn job_future<F, O>(f: F) -> JobFuture
where
    F: std::future::Future<Output = O> + Send + 'static,
    O: JobOutcome,
{
    Box::pin(async move { f.await.into_job_result() })
}

/// What a job function may return: `()` or `Result<T, E>` with `E` convertible into
/// [`BoxError`] (`anyhow::Error`, `std::io::Error`, `simba::Error`, ...).
pub trait JobOutcome {
    /// The outcome as a result.
    fn into_job_result(self) -> Result<(), BoxError>;
}

impl JobOutcome for () {
    fn into_job_result(self) -> Result<(), BoxError> {
        Ok(())
    }
}

impl<T, E: Into<BoxError>> JobOutcome for Result<T, E> {
    fn into_job_result(self) -> Result<(), BoxError> {
        self.map(|_| ()).map_err(Into::into)
    }
}
