//! The job registry: what `#[simba_scheduled]` and `#[simba_partitioned]` generate, and what a
//! user can write by hand (the macros are sugar).
//!
//! Registration happens at link time ([`linkme`]): every [`ScheduledJob`] and
//! [`PartitionedJob`] placed in [`SCHEDULED_JOBS`] / [`PARTITIONED_JOBS`] by any crate linked
//! into the binary is found by [`crate::run`]. A crate the binary never references is not
//! linked: write `use my_jobs as _;` in the binary to make sure it is.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::policy::Policies;
use super::state::StateNeed;
use crate::{BoxError, Term};

/// The future a job run returns.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'static>>;

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

    /// The first cron instant after `after` (from its whole second: a slot is a whole second),
    /// in the schedule's time zone. `None` for a fixed rate, whose ticks follow each node's
    /// monotonic clock and have no wall-clock instant, and for an expression or time zone this
    /// build cannot read.
    pub fn next_fire(&self, after: std::time::SystemTime) -> Option<std::time::SystemTime> {
        use chrono::{DateTime, Utc};
        let Schedule::Cron { expr, time_zone } = self else { return None };
        let cron = super::parse_cron(expr).ok()?;
        let tz = super::parse_time_zone(time_zone.as_deref().unwrap_or("UTC")).ok()?;
        let next = simba_core::slots::next_slot(&cron, tz, DateTime::<Utc>::from(after))?;
        Some(std::time::SystemTime::from(next))
    }

    /// The cron schedule's time zone name (`None`: UTC, or a fixed rate).
    pub fn time_zone(&self) -> Option<&str> {
        match self {
            Schedule::Cron { time_zone, .. } => time_zone.as_deref(),
            Schedule::FixedRate(_) => None,
        }
    }
}

/// What to do with cron slots that passed while no node held the job's term: `Skip` (the
/// default) or `RunOnce`. One type for code-defined jobs, `simba.toml` and schedules stored as
/// data (`simba::schedule_store::Misfire` is the same type), defined in the rules crate the
/// macros share.
pub use simba_rules::misfire::Policy as Misfire;

/// A job's body as the runtime calls it: a function (what the macros register, `const`) or a
/// shared closure (a job added at runtime that captures what it needs).
pub struct JobFn<F: ?Sized + 'static>(Body<F>);

impl<F: ?Sized> Clone for JobFn<F> {
    fn clone(&self) -> Self {
        JobFn(self.0.clone())
    }
}

impl<F: ?Sized> JobFn<F> {
    /// A body that is a function or a non-capturing closure in a `const` or `static`.
    pub(super) const fn from_static_body(f: &'static F) -> Self {
        JobFn(Body::Static(f))
    }

    /// A body that is a shared closure.
    pub(super) fn from_shared_body(f: Arc<F>) -> Self {
        JobFn(Body::Shared(f))
    }
}

enum Body<F: ?Sized + 'static> {
    Static(&'static F),
    Shared(Arc<F>),
}

impl<F: ?Sized> Clone for Body<F> {
    fn clone(&self) -> Self {
        match self {
            Body::Static(f) => Body::Static(f),
            Body::Shared(f) => Body::Shared(Arc::clone(f)),
        }
    }
}

/// A scheduled job's body: called once per run with the term it runs under.
pub type ScheduledRun = JobFn<dyn Fn(Term) -> JobFuture + Send + Sync>;

/// A partitioned job's body: called with the partition's term and index.
pub type PartitionRun = JobFn<dyn Fn(Term, u32) -> JobFuture + Send + Sync>;

impl<F: ?Sized> std::ops::Deref for JobFn<F> {
    type Target = F;

    fn deref(&self) -> &F {
        match &self.0 {
            Body::Static(f) => f,
            Body::Shared(f) => f,
        }
    }
}

impl<F: ?Sized> fmt::Debug for JobFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Body::Static(_) => "JobFn(fn)",
            Body::Shared(_) => "JobFn(closure)",
        })
    }
}

impl ScheduledRun {
    /// The body `f`, a function or a non-capturing closure in a `const` or `static`.
    pub const fn from_static(f: &'static (dyn Fn(Term) -> JobFuture + Send + Sync)) -> Self {
        JobFn(Body::Static(f))
    }

    /// The body `f`, a closure that may capture (an `Arc` of the application's state).
    pub fn from_closure(f: impl Fn(Term) -> JobFuture + Send + Sync + 'static) -> Self {
        JobFn(Body::Shared(Arc::new(f)))
    }
}

impl PartitionRun {
    /// The worker `f`, a function or a non-capturing closure in a `const` or `static`.
    pub const fn from_static(f: &'static (dyn Fn(Term, u32) -> JobFuture + Send + Sync)) -> Self {
        JobFn(Body::Static(f))
    }

    /// The worker `f`, a closure that may capture.
    pub fn from_closure(f: impl Fn(Term, u32) -> JobFuture + Send + Sync + 'static) -> Self {
        JobFn(Body::Shared(Arc::new(f)))
    }
}

/// A job that runs on a schedule on whichever node holds its lease (rule J5). Built with
/// [`ScheduledJob::new`] (a function, in a `static` too: what the macros generate) or
/// [`ScheduledJob::from_closure`] (owned names and a capturing closure, for jobs added at
/// runtime), then `with_*`; its fields are read-only outside the crate in all but name
/// (the struct will grow, so it is `#[non_exhaustive]`).
///
/// ```
/// use std::time::Duration;
/// use simba::Term;
/// use simba::job::{JobFuture, Misfire, Schedule, ScheduledJob, job_future};
///
/// fn report(term: Term) -> JobFuture {
///     job_future(async move { term.ensure_valid(Duration::from_millis(100)) })
/// }
///
/// static REPORT: ScheduledJob =
///     ScheduledJob::new("report", Schedule::cron("0 */5 * * * *"), &report).with_misfire(Misfire::RunOnce);
///
/// // At runtime: an owned name and a closure that captures the tenant.
/// let tenant = String::from("4711");
/// let job = ScheduledJob::from_closure(format!("report-{tenant}"), Schedule::fixed_rate(Duration::from_secs(60)), move |term| {
///     let tenant = tenant.clone();
///     job_future(async move {
///         term.ensure_valid(Duration::from_millis(100))?;
///         let _ = tenant;
///         Ok::<(), simba::Error>(())
///     })
/// })
/// .with_lease("reports");
/// assert_eq!((&*REPORT.lease, &*job.lease), ("report", "reports"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduledJob {
    /// The job's name, unique in the binary (the function's name for the macro); config
    /// overrides refer to it (J7).
    pub name: Cow<'static, str>,
    /// The lease guarding it (default: the name).
    pub lease: Cow<'static, str>,
    /// When it runs.
    pub schedule: Schedule,
    /// Missed slots.
    pub misfire: Misfire,
    /// Overlap, catch-up window, jitter and bounds (J11-J14).
    pub policies: Policies,
    /// One run.
    pub run: ScheduledRun,
    /// The application's state it takes ([`State<T>`](crate::State) parameters): the runtime
    /// refuses to start when one was not given.
    pub needs: &'static [StateNeed],
}

impl ScheduledJob {
    /// A job named `name` (its lease too) running `run` on `schedule`, skipping missed
    /// slots; `const`, so it can be a `static` registry entry.
    pub const fn new(
        name: &'static str,
        schedule: Schedule,
        run: &'static (dyn Fn(Term) -> JobFuture + Send + Sync),
    ) -> Self {
        ScheduledJob {
            name: Cow::Borrowed(name),
            lease: Cow::Borrowed(name),
            schedule,
            misfire: Misfire::Skip,
            policies: Policies::new(),
            run: ScheduledRun::from_static(run),
            needs: &[],
        }
    }

    /// A job with an owned name (its lease too) running the closure `run`, for jobs made at
    /// runtime ([`JobsHandle::add`](crate::runtime::JobsHandle::add)).
    pub fn from_closure(
        name: impl Into<Cow<'static, str>>,
        schedule: Schedule,
        run: impl Fn(Term) -> JobFuture + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        ScheduledJob {
            lease: name.clone(),
            name,
            schedule,
            misfire: Misfire::Skip,
            policies: Policies::new(),
            run: ScheduledRun::from_closure(run),
            needs: &[],
        }
    }

    /// Guarded by the lease `lease` instead of its name.
    pub fn with_lease(mut self, lease: impl Into<Cow<'static, str>>) -> Self {
        self.lease = lease.into();
        self
    }

    /// Handles missed slots with `misfire`.
    pub const fn with_misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// Takes the application's state types `needs` (the runtime checks them at start).
    pub const fn with_needs(mut self, needs: &'static [StateNeed]) -> Self {
        self.needs = needs;
        self
    }

    /// Follows `policies` (overlap, catch-up window, jitter, bounds: J11-J14).
    pub const fn with_policies(mut self, policies: Policies) -> Self {
        self.policies = policies;
        self
    }
}

/// A group of `partitions` partitions spread over the live nodes (rules J2, J6). Partition
/// `i` is guarded by lease `{group}.{i}`. Built like [`ScheduledJob`]: [`PartitionedJob::new`]
/// or [`PartitionedJob::from_closure`], then `with_*`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionedJob {
    /// The job's name, unique in the binary (the function's name for the macro).
    pub name: Cow<'static, str>,
    /// The group name; partition leases are `{group}.{i}`.
    pub group: Cow<'static, str>,
    /// How many partitions (at least 1).
    pub partitions: u32,
    /// `None`: the worker runs once per term and should loop until its term is cancelled.
    /// `Some`: the worker runs on this schedule while the node holds the partition.
    pub schedule: Option<Schedule>,
    /// Missed slots, when scheduled.
    pub misfire: Misfire,
    /// Overlap, catch-up window, jitter and bounds of each partition's slots, when scheduled.
    pub policies: Policies,
    /// The worker.
    pub run: PartitionRun,
    /// The application's state it takes ([`State<T>`](crate::State) parameters).
    pub needs: &'static [StateNeed],
}

impl PartitionedJob {
    /// A group named `name` (its group name too) of `partitions` partitions whose worker
    /// `run` runs once per term (see [`with_schedule`](PartitionedJob::with_schedule));
    /// `const`, so it can be a `static` registry entry.
    pub const fn new(
        name: &'static str,
        partitions: u32,
        run: &'static (dyn Fn(Term, u32) -> JobFuture + Send + Sync),
    ) -> Self {
        PartitionedJob {
            name: Cow::Borrowed(name),
            group: Cow::Borrowed(name),
            partitions,
            schedule: None,
            misfire: Misfire::Skip,
            policies: Policies::new(),
            run: PartitionRun::from_static(run),
            needs: &[],
        }
    }

    /// A group with an owned name running the closure `run`, for groups made at runtime.
    pub fn from_closure(
        name: impl Into<Cow<'static, str>>,
        partitions: u32,
        run: impl Fn(Term, u32) -> JobFuture + Send + Sync + 'static,
    ) -> Self {
        let name = name.into();
        PartitionedJob {
            group: name.clone(),
            name,
            partitions,
            schedule: None,
            misfire: Misfire::Skip,
            policies: Policies::new(),
            run: PartitionRun::from_closure(run),
            needs: &[],
        }
    }

    /// Its partitions' leases are `{group}.{i}` instead of `{name}.{i}`.
    pub fn with_group(mut self, group: impl Into<Cow<'static, str>>) -> Self {
        self.group = group.into();
        self
    }

    /// The worker runs on `schedule` while the node holds the partition (instead of once
    /// per term).
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = Some(schedule);
        self
    }

    /// Handles missed slots with `misfire`, when scheduled.
    pub const fn with_misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// Takes the application's state types `needs` (the runtime checks them at start).
    pub const fn with_needs(mut self, needs: &'static [StateNeed]) -> Self {
        self.needs = needs;
        self
    }

    /// Follows `policies` (overlap, catch-up window, jitter, bounds: J11-J14).
    pub const fn with_policies(mut self, policies: Policies) -> Self {
        self.policies = policies;
        self
    }
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
/// let job = ScheduledJob::new("report", Schedule::cron("0 */5 * * * *"), &report);
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
