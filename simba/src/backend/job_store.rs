//! The jobs store's trait and types; public as `simba::job_store` (see there).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use simba_core::claim::{Answer, Ask, SeenRecord, SlotHistory};
pub use simba_core::claim::{
    MAX_PENDING_PAYLOADS, MAX_PENDING_REQUESTS, MAX_REQUEST_KEY_BYTES, REMEMBERED_REQUESTS, Refusal, Request, Trigger,
    Triggered, valid_request_key,
};
use tokio::sync::broadcast;

use crate::backend::{BackendError, BackendResult, SessionId};

/// How many records per job a store keeps unless told otherwise.
pub const DEFAULT_RETENTION: usize = 100;

/// The longest error text a record keeps, in bytes; longer text is cut at a character
/// boundary by [`truncate_error`].
pub const MAX_ERROR_BYTES: usize = 1024;

/// The largest registry a session may publish, in bytes
/// ([`JobStore::publish_registry`]): well under ZooKeeper's and etcd's request limits.
pub const MAX_REGISTRY_BYTES: usize = 256 * 1024;

/// A boxed future, as the erased store returns them (the one erasure point).
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What became of a slot. Serialized as its snake_case name ([`Outcome::as_str`]:
/// `"skipped_running"`), as stores persist it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Claimed and running now (or its node died before it could say how it ended).
    Running,
    /// Ran and returned `Ok`.
    Ran,
    /// Ran and returned an error (the record keeps its text, truncated).
    Failed,
    /// Outlived its `timeout` and was cancelled.
    TimedOut,
    /// Its term was lost mid-run (the record's error names the revoke reason).
    Cancelled,
    /// Attempt `attempt` of `attempts` failed; another attempt follows after the backoff.
    Retried,
    /// The slot came while the previous run was still in flight.
    SkippedRunning,
    /// No node held the term at the slot (found when a term starts and sees the gap).
    Missed,
    /// The misfire policy ran it once for slots missed while no node held the term.
    CaughtUp,
    /// The run chose not to start because its term is ending (`term.ensure_valid(..)?`).
    Declined,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 10] = [
        Outcome::Running,
        Outcome::Ran,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Cancelled,
        Outcome::Retried,
        Outcome::SkippedRunning,
        Outcome::Missed,
        Outcome::CaughtUp,
        Outcome::Declined,
    ];

    /// The snake_case name stores persist and tools print (`skipped_running`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Ran => "ran",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::Retried => "retried",
            Outcome::SkippedRunning => "skipped_running",
            Outcome::Missed => "missed",
            Outcome::CaughtUp => "caught_up",
            Outcome::Declined => "declined",
        }
    }

    /// Whether the slot is over (everything but `running` and `retried`).
    pub fn is_final(self) -> bool {
        !matches!(self, Outcome::Running | Outcome::Retried)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s).ok_or_else(|| {
            let all: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
            format!("unknown run outcome `{s}`; expected one of {}", all.join(", "))
        })
    }
}

/// Why a slot exists. Serialized as its snake_case name ([`SlotKind::as_str`]: `"caught_up"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SlotKind {
    /// A cron instant or a fixed-rate tick.
    Scheduled,
    /// A run-now request (`simba trigger`); the slot instant is the trigger's time.
    Manual,
    /// The misfire policy's run for slots missed while no node held the term.
    CaughtUp,
    /// A past slot run again by a backfill (rule J15): at most once, only where no record
    /// says the slot ran; the slot instant is the past slot's.
    Backfill,
}

impl SlotKind {
    /// Every kind, in declaration order (the order of records of one slot).
    pub const ALL: [SlotKind; 4] = [SlotKind::Scheduled, SlotKind::Manual, SlotKind::CaughtUp, SlotKind::Backfill];

    /// The snake_case name stores persist (`caught_up`).
    pub fn as_str(self) -> &'static str {
        match self {
            SlotKind::Scheduled => "scheduled",
            SlotKind::Manual => "manual",
            SlotKind::CaughtUp => "caught_up",
            SlotKind::Backfill => simba_core::claim::BACKFILL_KIND,
        }
    }
}

impl fmt::Display for SlotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SlotKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        SlotKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown slot kind `{s}`; expected scheduled, manual, caught_up or backfill"))
    }
}

/// One slot of one job. A record is identified by `(job, kind, slot_ms)`. It will grow
/// (`#[non_exhaustive]`): a store outside this crate starts from [`RunRecord::not_run`] or
/// [`ClaimRequest::running_record`] and sets fields.
///
/// Serialized (serde) with its field names as they are here, which are stable: `job`,
/// `slot_ms`, `kind`, `outcome`, `attempt`, `attempts`, `session`, `node`, `token`,
/// `started_ms`, `ended_ms`, `error`, `request_key` (times in unix milliseconds, absent values
/// `null`); a field added later adds a name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// The job name (`g/i` for partition `i` of partitioned job `g`).
    pub job: String,
    /// The slot's instant in unix milliseconds: the scheduled instant; for a manual slot the
    /// trigger's time.
    pub slot_ms: i64,
    /// Why the slot exists.
    pub kind: SlotKind,
    /// What became of it.
    pub outcome: Outcome,
    /// The attempt this record describes, from 1 (0 for slots that never ran).
    pub attempt: u32,
    /// How many attempts the job allows (1 without retries).
    pub attempts: u32,
    /// The session that claimed or recorded the slot (empty when none did).
    pub session: String,
    /// The node name of that session's process.
    pub node: String,
    /// The fencing token of the term that claimed it (0 when none did).
    pub token: u64,
    /// When the run started, unix milliseconds.
    pub started_ms: Option<i64>,
    /// When it ended, unix milliseconds.
    pub ended_ms: Option<i64>,
    /// The error text or revoke reason, at most [`MAX_ERROR_BYTES`].
    pub error: Option<String>,
    /// For a manual slot, the key of the run-now request it answers ([`JobStore::trigger`]);
    /// `None` for other slots and for a request made by an older build.
    pub request_key: Option<String>,
    /// For a manual run of a schedule stored as data, the payload its run-now request gave
    /// instead of the schedule's (rule A15). Set on the record a claim answers and not kept
    /// in history: a record read back has `None`.
    #[serde(skip)]
    pub payload_override: Option<Arc<str>>,
}

impl RunRecord {
    /// A record for a slot that did not run (`missed`, `skipped_running`).
    pub fn not_run(job: impl Into<String>, slot_ms: i64, outcome: Outcome) -> Self {
        RunRecord {
            job: job.into(),
            slot_ms,
            kind: SlotKind::Scheduled,
            outcome,
            attempt: 0,
            attempts: 0,
            session: String::new(),
            node: String::new(),
            token: 0,
            started_ms: None,
            ended_ms: None,
            error: None,
            request_key: None,
            payload_override: None,
        }
    }
}

/// A run record as every JSON output shows it (`simba history --json`, `simba jobs --json`,
/// the dashboard's `/api/jobs`), one type for all of them: the fields of [`RunRecord`]'s
/// serialization, and its instants again in RFC 3339 for people (`slot`, `started`, `ended`,
/// [`rfc3339_ms`]).
///
/// ```
/// use simba::job_store::{Outcome, RunRecord, RunRecordJson};
///
/// let r = RunRecord::not_run("report", 1_700_000_000_000, Outcome::Missed);
/// let json = serde_json::to_value(RunRecordJson::from(&r)).expect("strings and numbers");
/// assert_eq!(json["slot_ms"], 1_700_000_000_000i64);
/// assert_eq!(json["slot"], "2023-11-14T22:13:20.000Z");
/// assert_eq!(json["outcome"], "missed");
/// ```
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RunRecordJson<'a> {
    /// The record's own fields.
    #[serde(flatten)]
    pub record: &'a RunRecord,
    /// `slot_ms` in RFC 3339.
    pub slot: Option<String>,
    /// `started_ms` in RFC 3339.
    pub started: Option<String>,
    /// `ended_ms` in RFC 3339.
    pub ended: Option<String>,
}

impl<'a> From<&'a RunRecord> for RunRecordJson<'a> {
    fn from(record: &'a RunRecord) -> Self {
        RunRecordJson {
            record,
            slot: rfc3339_ms(Some(record.slot_ms)),
            started: rfc3339_ms(record.started_ms),
            ended: rfc3339_ms(record.ended_ms),
        }
    }
}

/// An instant in unix milliseconds as the JSON outputs print instants: RFC 3339, UTC,
/// milliseconds (`2023-11-14T22:13:20.000Z`); `None` (or out of range) stays `None`.
pub fn rfc3339_ms(ms: Option<i64>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// `text` cut to at most [`MAX_ERROR_BYTES`] bytes at a character boundary.
pub fn truncate_error(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// What [`JobStore::claim_run`] is asked to claim.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The claiming session.
    pub session: &'a SessionId,
    /// The lease that guards the job (`report`, `billing.3`).
    pub lease: &'a str,
    /// The fencing token of the session's term on `lease`.
    pub token: u64,
    /// The job name (`report`, `billing/3`).
    pub job: &'a str,
    /// The slot instant (ignored for [`SlotKind::Manual`]: the store uses the trigger's time).
    pub slot_ms: i64,
    /// Why the slot exists.
    pub kind: SlotKind,
    /// The node name written into the record.
    pub node: &'a str,
    /// When the run starts, unix milliseconds.
    pub started_ms: i64,
    /// How many attempts the job allows.
    pub attempts: u32,
}

impl ClaimRequest<'_> {
    /// What this claim asks the core's claim rule ([`simba_core::claim::decide`]) for.
    /// A schedule's slot (its job name `schedule/<id>`) asks for
    /// [`Ask::ScheduleSlot`]: the schedule's own ledger only, since its partition's lease
    /// carries many schedules (rule A5).
    pub(crate) fn ask(&self) -> Ask {
        let schedule = simba_core::schedules::is_schedule_job(self.job);
        match self.kind {
            SlotKind::Scheduled | SlotKind::CaughtUp if schedule => Ask::ScheduleSlot(self.slot_ms),
            SlotKind::Scheduled | SlotKind::CaughtUp => Ask::Slot(self.slot_ms),
            SlotKind::Manual => Ask::RunNow,
            SlotKind::Backfill if schedule => Ask::ScheduleBackfill(self.slot_ms),
            SlotKind::Backfill => Ask::Backfill(self.slot_ms),
        }
    }

    /// Whether this is the claim of a schedule's scheduled or caught-up slot (rule A5).
    pub(crate) fn is_schedule_slot(&self) -> bool {
        matches!(self.kind, SlotKind::Scheduled | SlotKind::CaughtUp)
            && simba_core::schedules::is_schedule_job(self.job)
    }

    /// Whether this is a backfill's claim (rule J15), which reads the job's history
    /// ([`slot_history`]) and writes no control row.
    pub(crate) fn is_backfill(&self) -> bool {
        self.kind == SlotKind::Backfill
    }

    /// The answer to this claim when the claim rule answered `answer`: a claimed one carries
    /// the `running` record at its slot ([`running_record`](Self::running_record)), naming
    /// the run-now `request` it answers.
    pub(crate) fn claim_of(&self, answer: Answer, request: Option<&Request>) -> Claim {
        match answer {
            Answer::AlreadyClaimed => Claim::AlreadyClaimed,
            Answer::Paused => Claim::Paused,
            Answer::Refused(why) => Claim::Refused(why),
            Answer::Claimed { slot_ms } => {
                let mut record = self.running_record(slot_ms);
                record.request_key = request.map(|r| r.key.clone());
                record.payload_override = request.and_then(|r| r.payload.as_deref()).map(Arc::from);
                Claim::Claimed(record)
            }
        }
    }

    /// The `running` record a successful claim of this request writes for slot `slot_ms`
    /// (for a manual slot, the trigger's instant): attempt 1, started now, not ended.
    pub fn running_record(&self, slot_ms: i64) -> RunRecord {
        RunRecord {
            job: self.job.to_owned(),
            slot_ms,
            kind: self.kind,
            outcome: Outcome::Running,
            attempt: 1,
            attempts: self.attempts.max(1),
            session: self.session.as_str().to_owned(),
            node: self.node.to_owned(),
            token: self.token,
            started_ms: Some(self.started_ms),
            ended_ms: None,
            error: None,
            request_key: None,
            payload_override: None,
        }
    }
}

/// The answer to a claim (it grows with the kinds of claims: `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The slot is this term's: the `running` record as written (for a manual slot, with the
    /// trigger's instant as `slot_ms`).
    Claimed(RunRecord),
    /// Another claim already took this slot or a later one (scheduled, caught up), or no run
    /// request is pending (manual).
    AlreadyClaimed,
    /// `session` does not hold `lease` with `token` (any more).
    NotHolder,
    /// The job (or its group) is paused; nothing runs and nothing is recorded.
    Paused,
    /// A backfill's claim (rule J15) may not run this slot, for this reason; nothing is
    /// written.
    Refused(Refusal),
}

/// What a backfill's claim reads of a job's history ([`SlotHistory`]), from the job's
/// records of the slot and its oldest record kept: the one mapping of records onto the core's
/// view, for every store that reads records as [`RunRecord`]s.
pub(crate) fn slot_history<'a>(
    at_slot: impl IntoIterator<Item = &'a RunRecord>,
    oldest: Option<&RunRecord>,
) -> SlotHistory {
    SlotHistory {
        at_slot: at_slot
            .into_iter()
            .map(|r| SeenRecord::new(r.kind.as_str(), r.outcome.as_str(), r.started_ms))
            .collect(),
        oldest: oldest.map(|r| (r.slot_ms, r.kind.as_str().to_owned())),
    }
}

/// What the store knows about one job name. It will grow (`#[non_exhaustive]`): a store
/// outside this crate starts from [`JobState::new`] and sets fields.
///
/// Serialized (serde) with its stable field names: `job`, `paused`, `last_slot_ms`, `last` (a
/// [`RunRecord`] or `null`), `trigger_pending_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct JobState {
    /// The job name.
    pub job: String,
    /// Whether this name itself is paused (a partition is also paused when its group is).
    pub paused: bool,
    /// The latest scheduled or caught-up slot claimed, unix milliseconds (including slots
    /// consumed while paused).
    pub last_slot_ms: Option<i64>,
    /// The newest record.
    pub last: Option<RunRecord>,
    /// The slot of the newest run-now request of this name not yet taken by a holder, unix
    /// milliseconds.
    pub trigger_pending_ms: Option<i64>,
}

impl JobState {
    /// The state of `job` with nothing known yet: not paused, no slot, no record, no request.
    pub fn new(job: impl Into<String>) -> Self {
        JobState { job: job.into(), ..JobState::default() }
    }
}

/// Where history and job control live, in the shape of [`Backend`](crate::backend::Backend):
/// methods return `impl Future + Send` (write them as `async fn`), and the one type-erased
/// form is [`SharedJobStore`]. Every method is one logical round trip
/// to the store, atomic there, and may be dropped at any point (the store stays consistent
/// whether or not it took effect). A store never sleeps and never retries (as B1).
///
/// # Contract (each rule is a function of `simba::tck::jobs`)
///
/// * Records are identified by `(job, kind, slot_ms)`; at most one exists per identity.
/// * The store keeps at most [`retention`](JobStore::retention) records per job: after any
///   finish ([`finish_run`](JobStore::finish_run), whether or not it matched) or append that
///   inserted, it drops the job's oldest records (by `slot_ms`, then kind) past that bound. A
///   claim may leave the job one record over the bound until its run's finish (stores may also
///   trim there): the claim is what a lease's renewal may wait behind, and its record is always
///   followed by its end record. Control rows and the last claimed slot are never dropped.
/// * Pause, trigger and the last claimed slot survive reconnects and restarts of clients.
/// * A partition job name `g/i` is paused when `g/i` or `g` is paused.
pub trait JobStore: Send + Sync + 'static {
    /// Claims a slot for a run, in ONE round trip, in this order:
    ///
    /// 1. `NotHolder` unless `req.session` holds `req.lease` with `req.token` now (the same
    ///    fence as [`Backend::claim_slot`](crate::backend::Backend::claim_slot)).
    /// 2. Scheduled and caught-up slots: `AlreadyClaimed` unless `req.slot_ms` is after the
    ///    job's last claimed slot (monotonic: a slot runs at most once across the cluster,
    ///    whatever the nodes' clocks say). Manual: `AlreadyClaimed` unless a run-now request
    ///    is pending for `req.job` (or, for `g/i`, one for `g` that this partition has not
    ///    taken yet).
    /// 3. `Paused` when the job or its group is paused; a scheduled slot is still consumed
    ///    (it becomes the last claimed slot, so it is not reported missed later) and a manual
    ///    request stays pending.
    ///    A backfill's slot ([`SlotKind::Backfill`], rule J15): `Refused` unless it is at or
    ///    before the job's last claimed slot, no record of it (but a manual one) says it ran
    ///    (none, `missed` or `skipped_running`; a `backfill` record always counts), and it is
    ///    not older than the job's oldest record kept; the store reads those records in the
    ///    same atomic step.
    /// 4. Otherwise records the slot as claimed (a backfill writes no control row and leaves
    ///    the last claimed slot alone) (scheduled: the last claimed slot; manual:
    ///    the oldest pending request is taken: the job's own before its group's, a group's by
    ///    this partition only), writes the `running` record (attempt 1; for a manual slot with
    ///    the request's key) and answers `Claimed` with it. Each request is its own run.
    ///
    /// Steps 2 to 4 are the core's claim rule, [`simba_core::claim::decide`]: a store calls it
    /// on the rows it read, or (SQL routines, Redis) writes the same steps in its own language.
    fn claim_run(&self, req: ClaimRequest<'_>) -> impl Future<Output = BackendResult<Claim>> + Send;

    /// Overwrites the record of `(record.job, record.kind, record.slot_ms)` with `record` if
    /// that record exists and was claimed with `record.token`; returns whether it did. Not
    /// fenced by the lease: a run that ended after its term still tells how it ended.
    fn finish_run(&self, record: &RunRecord) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Inserts a record of a slot that was not claimed (`missed`, `skipped_running`) unless
    /// a record with its identity exists; returns whether it inserted. Idempotent.
    fn append(&self, record: &RunRecord) -> impl Future<Output = BackendResult<bool>> + Send;

    /// The newest `limit` records of `job`, newest first (by `slot_ms`, then kind).
    fn history(&self, job: &str, limit: usize) -> impl Future<Output = BackendResult<Vec<RunRecord>>> + Send;

    /// What the store knows about `job`; `None` when it has no record, control row or claimed
    /// slot for it.
    fn job(&self, job: &str) -> impl Future<Output = BackendResult<Option<JobState>>> + Send;

    /// Every job name the store knows (with a record, a control row or a claimed slot),
    /// ordered by name.
    fn jobs(&self) -> impl Future<Output = BackendResult<Vec<JobState>>> + Send;

    /// The names starting with `prefix` that have a run-now request of their own pending
    /// ([`ControlRow::pending`](simba_core::claim::ControlRow::pending)), ordered by name: what
    /// the holder of the schedules' partitions reads after each control move (rule A15). The
    /// default reads [`jobs`](Self::jobs); a store that can read only the control rows under a
    /// prefix, or only those with a request pending, does so: [`jobs`](Self::jobs) reads every
    /// job of the store with its newest record, which at 100,000 schedules took minutes on
    /// etcd and starved its claims.
    fn pending_requests(&self, prefix: &str) -> impl Future<Output = BackendResult<Vec<String>>> + Send {
        async move {
            let jobs = self.jobs().await?;
            Ok(jobs
                .into_iter()
                .filter(|j| j.trigger_pending_ms.is_some() && j.job.starts_with(prefix))
                .map(|j| j.job)
                .collect())
        }
    }

    /// Pauses (`true`) or resumes (`false`) `job` cluster-wide; returns whether it was paused
    /// before. Bumps the control version and broadcasts `job` where the store can.
    fn set_paused(&self, job: &str, paused: bool) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Requests one run of `job` now, at `ask.at_ms` (unix milliseconds), named by `ask.key`
    /// (a [`valid_request_key`]; [`SharedJobStore::trigger_with`] refuses others), in one
    /// atomic step: the core's request rule, [`simba_core::claim::request`] (rules R3, A15).
    ///
    /// * `key` known for `job` (one of its newest [`REMEMBERED_REQUESTS`], pending or taken):
    ///   [`Triggered::Known`] with that request; nothing changes (a retry never runs twice).
    /// * [`MAX_PENDING_REQUESTS`] requests of `job` wait, or [`MAX_PENDING_PAYLOADS`] with a
    ///   payload for a request with one: [`Triggered::Full`]; nothing changes.
    /// * Otherwise [`Triggered::Requested`]: a new request, its id strictly increasing per
    ///   job, its slot after the previous request's (even within one millisecond), with
    ///   `ask.payload` kept while it is pending. Each request is its own run. Bumps the
    ///   control version and broadcasts `job` where it can.
    fn trigger(&self, job: &str, ask: Trigger<'_>) -> impl Future<Output = BackendResult<Triggered>> + Send;

    /// A number that changes whenever any job's pause state or pending request changes.
    fn control_version(&self) -> impl Future<Output = BackendResult<u64>> + Send;

    /// Names of jobs whose control changed, where the store can broadcast; `None` where it
    /// cannot (nodes then rely on polling [`control_version`](JobStore::control_version)).
    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// Publishes `registry` (what the node of `session` runs: see
    /// [`NodeRegistry`](crate::job::NodeRegistry); opaque text to the store, at most
    /// [`MAX_REGISTRY_BYTES`]) for `session`, replacing what that session published before.
    /// The entry lives exactly as long as the session: once the session is closed or expired,
    /// [`registries`](JobStore::registries) no longer answers it and the store drops it (at
    /// once where the store ties it to the session, ZooKeeper and etcd; at the next publish
    /// elsewhere). Returns `false`, storing nothing, when `session` is not live.
    fn publish_registry(&self, session: &SessionId, registry: &str)
    -> impl Future<Output = BackendResult<bool>> + Send;

    /// What every live session published with
    /// [`publish_registry`](JobStore::publish_registry), ordered by session id.
    fn registries(&self) -> impl Future<Output = BackendResult<Vec<(SessionId, String)>>> + Send;

    /// How many records per job this store keeps.
    fn retention(&self) -> usize;

    /// The same store keeping at most `records` records per job (at least 1) from its next
    /// write on (`[history] retention` in `simba.toml`). Reads and control are unchanged; a
    /// lower bound than the records already stored drops the oldest at the job's next finish
    /// or append.
    /// Where nodes are configured differently, each write trims to its writer's bound.
    fn keeping(&self, records: usize) -> SharedJobStore;

    /// A short description for logs and errors (no secrets).
    fn describe(&self) -> String;
}

/// [`JobStore`] with its futures boxed: the one erasure point, behind [`SharedJobStore`].
trait DynJobStore: Send + Sync + 'static {
    fn claim_run<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, BackendResult<Claim>>;
    fn finish_run<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>>;
    fn append<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>>;
    fn history<'a>(&'a self, job: &'a str, limit: usize) -> BoxFuture<'a, BackendResult<Vec<RunRecord>>>;
    fn job<'a>(&'a self, job: &'a str) -> BoxFuture<'a, BackendResult<Option<JobState>>>;
    fn jobs(&self) -> BoxFuture<'_, BackendResult<Vec<JobState>>>;
    fn pending_requests<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, BackendResult<Vec<String>>>;
    fn set_paused<'a>(&'a self, job: &'a str, paused: bool) -> BoxFuture<'a, BackendResult<bool>>;
    fn trigger<'a>(&'a self, job: &'a str, ask: Trigger<'a>) -> BoxFuture<'a, BackendResult<Triggered>>;
    fn control_version(&self) -> BoxFuture<'_, BackendResult<u64>>;
    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>>;
    fn publish_registry<'a>(&'a self, session: &'a SessionId, registry: &'a str) -> BoxFuture<'a, BackendResult<bool>>;
    fn registries(&self) -> BoxFuture<'_, BackendResult<Vec<(SessionId, String)>>>;
    fn retention(&self) -> usize;
    fn keeping(&self, records: usize) -> SharedJobStore;
    fn describe(&self) -> String;
}

impl<J: JobStore> DynJobStore for J {
    fn claim_run<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, BackendResult<Claim>> {
        Box::pin(JobStore::claim_run(self, req))
    }
    fn finish_run<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(JobStore::finish_run(self, record))
    }
    fn append<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(JobStore::append(self, record))
    }
    fn history<'a>(&'a self, job: &'a str, limit: usize) -> BoxFuture<'a, BackendResult<Vec<RunRecord>>> {
        Box::pin(JobStore::history(self, job, limit))
    }
    fn job<'a>(&'a self, job: &'a str) -> BoxFuture<'a, BackendResult<Option<JobState>>> {
        Box::pin(JobStore::job(self, job))
    }
    fn jobs(&self) -> BoxFuture<'_, BackendResult<Vec<JobState>>> {
        Box::pin(JobStore::jobs(self))
    }
    fn pending_requests<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, BackendResult<Vec<String>>> {
        Box::pin(JobStore::pending_requests(self, prefix))
    }
    fn set_paused<'a>(&'a self, job: &'a str, paused: bool) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(JobStore::set_paused(self, job, paused))
    }
    fn trigger<'a>(&'a self, job: &'a str, ask: Trigger<'a>) -> BoxFuture<'a, BackendResult<Triggered>> {
        Box::pin(JobStore::trigger(self, job, ask))
    }
    fn control_version(&self) -> BoxFuture<'_, BackendResult<u64>> {
        Box::pin(JobStore::control_version(self))
    }
    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        JobStore::subscribe_control(self)
    }
    fn publish_registry<'a>(&'a self, session: &'a SessionId, registry: &'a str) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(JobStore::publish_registry(self, session, registry))
    }
    fn registries(&self) -> BoxFuture<'_, BackendResult<Vec<(SessionId, String)>>> {
        Box::pin(JobStore::registries(self))
    }
    fn retention(&self) -> usize {
        JobStore::retention(self)
    }
    fn keeping(&self, records: usize) -> SharedJobStore {
        JobStore::keeping(self, records)
    }
    fn describe(&self) -> String {
        JobStore::describe(self)
    }
}

/// A type-erased jobs store, as [`Backend::job_store`](crate::backend::Backend::job_store)
/// returns it: cheap to clone (one `Arc`), with the methods of [`JobStore`] (no trait to
/// import); it also implements the trait, so a wrapper can hold either.
#[derive(Clone)]
pub struct SharedJobStore(Arc<dyn DynJobStore>);

impl SharedJobStore {
    /// Whether `self` and `other` are handles of one store (not two stores on one database).
    #[cfg(test)]
    pub(crate) fn same(&self, other: &SharedJobStore) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Erases `store`.
    pub fn new(store: impl JobStore) -> Self {
        SharedJobStore(Arc::new(store))
    }

    /// Erases a store the caller keeps a typed handle to as well.
    pub fn from_arc<J: JobStore>(store: Arc<J>) -> Self {
        SharedJobStore(store)
    }
    /// See [`JobStore::claim_run`].
    pub async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        self.0.claim_run(req).await
    }

    /// See [`JobStore::finish_run`].
    pub async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        self.0.finish_run(record).await
    }

    /// See [`JobStore::append`].
    pub async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        self.0.append(record).await
    }

    /// See [`JobStore::history`].
    pub async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        self.0.history(job, limit).await
    }

    /// See [`JobStore::job`].
    pub async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        self.0.job(job).await
    }

    /// See [`JobStore::jobs`].
    pub async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        self.0.jobs().await
    }

    /// See [`JobStore::pending_requests`].
    pub async fn pending_requests(&self, prefix: &str) -> BackendResult<Vec<String>> {
        self.0.pending_requests(prefix).await
    }

    /// See [`JobStore::set_paused`].
    pub async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        self.0.set_paused(job, paused).await
    }

    /// [`trigger_with`](Self::trigger_with) a request without a payload.
    pub async fn trigger(&self, job: &str, key: &str, at_ms: i64) -> BackendResult<Triggered> {
        self.trigger_with(job, Trigger::new(key, at_ms)).await
    }

    /// See [`JobStore::trigger`]; a key that is not a [`valid_request_key`], or a payload
    /// over [`MAX_PAYLOAD_BYTES`](simba_core::claim::MAX_PAYLOAD_BYTES), is refused here
    /// (`Misconfigured`), before any store sees it.
    pub async fn trigger_with(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        let key = ask.key;
        if !valid_request_key(key) {
            return Err(BackendError::Misconfigured(format!(
                "invalid request key {key:?}: use 1 to {MAX_REQUEST_KEY_BYTES} ASCII letters, digits or -_.:"
            )));
        }
        if let Some(p) = ask.payload.filter(|p| p.is_empty() || p.len() > simba_core::claim::MAX_PAYLOAD_BYTES) {
            return Err(BackendError::Misconfigured(format!(
                "a request's payload must be 1 to {} bytes, not {}",
                simba_core::claim::MAX_PAYLOAD_BYTES,
                p.len()
            )));
        }
        self.0.trigger(job, ask).await
    }

    /// See [`JobStore::control_version`].
    pub async fn control_version(&self) -> BackendResult<u64> {
        self.0.control_version().await
    }

    /// See [`JobStore::subscribe_control`].
    pub fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        self.0.subscribe_control()
    }

    /// See [`JobStore::publish_registry`].
    pub async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        self.0.publish_registry(session, registry).await
    }

    /// See [`JobStore::registries`].
    pub async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        self.0.registries().await
    }

    /// See [`JobStore::retention`].
    pub fn retention(&self) -> usize {
        self.0.retention()
    }

    /// See [`JobStore::keeping`].
    pub fn keeping(&self, records: usize) -> SharedJobStore {
        self.0.keeping(records)
    }

    /// See [`JobStore::describe`].
    pub fn describe(&self) -> String {
        self.0.describe()
    }
}

impl fmt::Debug for SharedJobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedJobStore").field(&self.describe()).finish()
    }
}

impl JobStore for SharedJobStore {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        SharedJobStore::claim_run(self, req).await
    }
    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        SharedJobStore::finish_run(self, record).await
    }
    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        SharedJobStore::append(self, record).await
    }
    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        SharedJobStore::history(self, job, limit).await
    }
    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        SharedJobStore::job(self, job).await
    }
    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        SharedJobStore::jobs(self).await
    }
    async fn pending_requests(&self, prefix: &str) -> BackendResult<Vec<String>> {
        SharedJobStore::pending_requests(self, prefix).await
    }
    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        SharedJobStore::set_paused(self, job, paused).await
    }
    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        SharedJobStore::trigger_with(self, job, ask).await
    }
    async fn control_version(&self) -> BackendResult<u64> {
        SharedJobStore::control_version(self).await
    }
    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        SharedJobStore::subscribe_control(self)
    }
    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        SharedJobStore::publish_registry(self, session, registry).await
    }
    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        SharedJobStore::registries(self).await
    }
    fn retention(&self) -> usize {
        SharedJobStore::retention(self)
    }
    fn keeping(&self, records: usize) -> SharedJobStore {
        SharedJobStore::keeping(self, records)
    }
    fn describe(&self) -> String {
        SharedJobStore::describe(self)
    }
}

/// Whether a store's own control watch is in place yet. A store that broadcasts control
/// changes through a watch of its own (ZooKeeper, etcd, Redis) makes a control write wait for
/// it, bounded, so that the writing node's subscribers hear the change.
#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
#[derive(Debug, Default)]
pub(crate) struct WatchReady(std::sync::Mutex<Option<tokio::sync::watch::Receiver<bool>>>);

#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
impl WatchReady {
    /// Starts tracking a new watch: the watch task sends `true` once it is in place (and
    /// `false` while it is re-created).
    pub(crate) fn track(&self) -> tokio::sync::watch::Sender<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(rx);
        tx
    }

    /// Waits until the tracked watch is in place, at most `bound`; at once when none is.
    pub(crate) async fn settle(&self, bound: std::time::Duration) {
        let ready = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(mut ready) = ready {
            let _ = tokio::time::timeout(bound, ready.wait_for(|r| *r)).await;
        }
    }
}

/// The group part of a partition job name: `Some("g")` for `g/3`.
pub fn group_of(job: &str) -> Option<&str> {
    job.rsplit_once('/').map(|(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
        }
        for k in SlotKind::ALL {
            assert_eq!(k.as_str().parse::<SlotKind>(), Ok(k));
        }
        assert!("nope".parse::<Outcome>().is_err_and(|e| e.contains("skipped_running")));
    }

    #[test]
    fn errors_truncate_at_a_char_boundary() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let t = truncate_error(&long);
        assert!(t.len() <= MAX_ERROR_BYTES && t.len() >= MAX_ERROR_BYTES - 1);
        assert_eq!(truncate_error("short"), "short");
        assert_eq!(group_of("billing/3"), Some("billing"));
        assert_eq!(group_of("report"), None);
    }

    #[test]
    fn records_serialize_with_stable_snake_case_names() {
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).ok(), Some(serde_json::Value::from(o.as_str())));
        }
        for k in SlotKind::ALL {
            assert_eq!(serde_json::to_value(k).ok(), Some(serde_json::Value::from(k.as_str())));
        }
        let mut r = RunRecord::not_run("billing/3", 1_764_608_400_000, Outcome::SkippedRunning);
        r.kind = SlotKind::CaughtUp;
        r.started_ms = Some(5);
        let state = JobState { job: "billing/3".into(), last: Some(r), ..JobState::default() };
        let json = serde_json::to_value(&state).expect("serialize");
        assert_eq!(
            json,
            serde_json::json!({
                "job": "billing/3", "paused": false, "last_slot_ms": null, "trigger_pending_ms": null,
                "last": {
                    "job": "billing/3", "slot_ms": 1_764_608_400_000_i64, "kind": "caught_up",
                    "outcome": "skipped_running", "attempt": 0, "attempts": 0, "session": "", "node": "",
                    "token": 0, "started_ms": 5, "ended_ms": null, "error": null, "request_key": null
                }
            })
        );
    }
}
