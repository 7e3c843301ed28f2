//! The schedule store's trait and types; public as `simba::schedule_store` (see there).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use simba_core::schedules::{Fires, Spec};

use crate::backend::BackendResult;

pub use simba_core::schedules::{DEFAULT_PARTITIONS, MAX_PAYLOAD_BYTES, is_schedule_job, job_name, partition_of};
/// What a schedule does with slots missed while no node held its partition: the one misfire
/// type of code-defined jobs (`simba::job::Misfire` is the same type), by the names
/// `simba.toml` and the macros use (`skip`, `run_once`). Re-exported from the rules crate
/// rather than from `job`, so the backend layer does not name the jobs runtime.
pub use simba_rules::misfire::Policy as Misfire;

/// How many audit records a store keeps per namespace unless told otherwise.
pub const DEFAULT_AUDIT_RETENTION: usize = 10_000;

/// The longest `who` of an audit record, in bytes.
pub const MAX_WHO_BYTES: usize = 255;

/// The longest note of a pause or an audit record, in bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// A boxed future, as the erased store returns them (the one erasure point).
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// When a schedule fires. Serialized as `{"kind": "cron", "expr": ..., "time_zone": ...}` or
/// `{"kind": "fixed_rate", "period_ms": ...}`, as stores persist it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ScheduleSpec {
    /// A 6-field cron expression with seconds first, in an IANA time zone.
    Cron {
        /// The expression (`"0 0 9 * * MON"`).
        expr: String,
        /// The time zone (`"Europe/Berlin"`, `"UTC"`).
        time_zone: String,
    },
    /// Every `period_ms` milliseconds, on the grid of multiples of the period since the Unix
    /// epoch (1 s to 366 days).
    FixedRate {
        /// The period, in milliseconds.
        period_ms: u64,
    },
}

impl ScheduleSpec {
    /// A cron schedule in `time_zone` (an IANA name).
    pub fn cron(expr: impl Into<String>, time_zone: impl Into<String>) -> Self {
        ScheduleSpec::Cron { expr: expr.into(), time_zone: time_zone.into() }
    }

    /// Every `period` (whole milliseconds; 1 s to 366 days).
    pub fn fixed_rate(period: std::time::Duration) -> Self {
        ScheduleSpec::FixedRate { period_ms: u64::try_from(period.as_millis()).unwrap_or(u64::MAX) }
    }

    /// Checks the spec with the one cron parser (rule A3); the error says what is wrong.
    pub fn check(&self) -> Result<Fires, String> {
        simba_core::schedules::check_spec(match self {
            ScheduleSpec::Cron { expr, time_zone } => Spec::Cron { expr, time_zone },
            ScheduleSpec::FixedRate { period_ms } => Spec::FixedRate { period_ms: *period_ms },
        })
    }
}

impl fmt::Display for ScheduleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleSpec::Cron { expr, time_zone } => write!(f, "cron \"{expr}\" in {time_zone}"),
            ScheduleSpec::FixedRate { period_ms } => write!(f, "every {period_ms} ms"),
        }
    }
}

/// What a slot does when the schedule's previous run is still in flight (J11, the code-defined
/// jobs' policy with the same names): `skip` (recorded `skipped_running`, the default),
/// `buffer_one`, `allow_all` or `cancel_running`.
pub use simba_core::policy::Overlap;

/// A schedule's policies, stored as a JSON object of named fields (`misfire`, `overlap`, and
/// where set `catch_up_window_ms`, `jitter_ms`, `start_ms`, `end_ms`): the code-defined jobs'
/// rules J12-J14 with the same meaning. A field added later is read as its default from rows
/// written before it, and a field a node does not know yet is ignored by it, so stores never
/// need a migration for a new policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Policies {
    /// What to do with slots missed while no node held the schedule's partition.
    #[serde(with = "misfire_name")]
    pub misfire: Misfire,
    /// What a slot does while the previous run is in flight (J11).
    #[serde(with = "overlap_name")]
    pub overlap: Overlap,
    /// Slots missed longer ago than this (milliseconds) when a term starts are recorded
    /// `missed`, saying so, and never caught up (J12). `None`: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up_window_ms: Option<u64>,
    /// Each slot starts up to this long (milliseconds) after its instant, by a hash of the
    /// schedule's job name and the slot, the same on every node, before the next slot (J13).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// No slot before this instant, unix milliseconds (J14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<i64>,
    /// No slot after this instant, unix milliseconds (J14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<i64>,
}

impl Default for Policies {
    /// `misfire = skip`, `overlap = skip`, no window, no jitter, no bounds: what a
    /// code-defined job does by default.
    fn default() -> Self {
        Policies {
            misfire: Misfire::Skip,
            overlap: Overlap::Skip,
            catch_up_window_ms: None,
            jitter_ms: None,
            start_ms: None,
            end_ms: None,
        }
    }
}

impl Policies {
    /// The default policies with `misfire`.
    pub fn with_misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// These policies with `overlap` (J11).
    pub fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// These policies with a catch-up window of `window` (J12).
    pub fn with_catch_up_window(mut self, window: std::time::Duration) -> Self {
        self.catch_up_window_ms = Some(u64::try_from(window.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// These policies with a start jitter of at most `max` (J13).
    pub fn with_jitter(mut self, max: std::time::Duration) -> Self {
        self.jitter_ms = Some(u64::try_from(max.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// These policies with slots only from `start_ms` to `end_ms` (unix milliseconds, both
    /// included; either open, J14).
    pub fn with_bounds(mut self, start_ms: Option<i64>, end_ms: Option<i64>) -> Self {
        (self.start_ms, self.end_ms) = (start_ms, end_ms);
        self
    }

    /// The policies as people read them (`simba schedules get`, the dashboard): the misfire
    /// policy, then the ones set, instants in RFC 3339, e.g. `misfire run_once, catch-up
    /// window 6h, jitter 5m`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use simba::schedule_store::{Misfire, Policies};
    ///
    /// let p = Policies::default().with_misfire(Misfire::RunOnce).with_jitter(Duration::from_secs(300));
    /// assert_eq!(p.summary(), "misfire run_once, jitter 5m");
    /// ```
    pub fn summary(&self) -> String {
        let ms = |v: u64| humantime::format_duration(std::time::Duration::from_millis(v)).to_string();
        let at = |v: i64| super::job_store::rfc3339_ms(Some(v)).unwrap_or_else(|| v.to_string());
        let mut text = format!("misfire {}", self.misfire.name());
        if self.overlap != Overlap::Skip {
            text.push_str(&format!(", overlap {}", self.overlap.as_str()));
        }
        if let Some(w) = self.catch_up_window_ms {
            text.push_str(&format!(", catch-up window {}", ms(w)));
        }
        if let Some(j) = self.jitter_ms {
            text.push_str(&format!(", jitter {}", ms(j)));
        }
        if let Some(start) = self.start_ms {
            text.push_str(&format!(", from {}", at(start)));
        }
        if let Some(end) = self.end_ms {
            text.push_str(&format!(", until {}", at(end)));
        }
        text
    }

    /// Why these policies are refused for `spec`, or `None` (the code-defined jobs' checks:
    /// a window longer than zero and only with `misfire = run_once`, a jitter shorter than a
    /// fixed rate, a start before the end).
    pub fn problem(&self, spec: &ScheduleSpec) -> Option<String> {
        match self.catch_up_window_ms {
            Some(0) => return Some("the catch-up window must be longer than zero (leave it out for no window)".into()),
            Some(_) if self.misfire != Misfire::RunOnce => {
                return Some(simba_rules::policies::WINDOW_NEEDS_RUN_ONCE.to_owned());
            }
            _ => {}
        }
        if let Some(jitter) = self.jitter_ms {
            let period = match spec {
                ScheduleSpec::FixedRate { period_ms } => Some(u128::from(*period_ms)),
                ScheduleSpec::Cron { .. } => None,
            };
            if let Some(p) = simba_rules::policies::jitter_problem(u128::from(jitter), period) {
                return Some(p);
            }
        }
        simba_rules::policies::bounds_problem(self.start_ms, self.end_ms).map(str::to_owned)
    }
}

/// [`Overlap`] by its `simba.toml` name (`skip`, `buffer_one`, `allow_all`, `cancel_running`).
mod overlap_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Overlap;

    pub(super) fn serialize<S: Serializer>(o: &Overlap, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(o.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Overlap, D::Error> {
        let name = String::deserialize(d)?;
        Overlap::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown overlap policy {name:?}: use {}", simba_rules::overlap::VALID))
        })
    }
}

/// [`Misfire`] by its `simba.toml` name (`skip`, `run_once`).
mod misfire_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Misfire;

    pub(super) fn serialize<S: Serializer>(m: &Misfire, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Misfire, D::Error> {
        let name = String::deserialize(d)?;
        match simba_rules::misfire::parse(&name) {
            Some(m) => Ok(m),
            None => Err(serde::de::Error::custom(format!(
                "unknown misfire policy `{name}`; expected {}",
                simba_rules::misfire::VALID
            ))),
        }
    }
}

/// A schedule stored as data (ADR 0020). It will grow (`#[non_exhaustive]`): build one with
/// [`Schedule::new`] and set fields.
///
/// Serialized (serde) with its field names as they are here, which are stable; times in unix
/// milliseconds; `payload` is the JSON text as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Schedule {
    /// The id, unique in the namespace (the lease-name rule, A1).
    pub id: String,
    /// The name of the handler that runs its slots.
    pub handler: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// The handler's input, JSON text of at most [`MAX_PAYLOAD_BYTES`].
    pub payload: String,
    /// Its policies.
    pub policies: Policies,
    /// Whether it is paused.
    pub paused: bool,
    /// The note given with the pause (cleared by a resume).
    pub pause_note: Option<String>,
    /// Its partition of `simba.schedules` ([`partition_of`] its id).
    pub partition: u32,
    /// Who created it.
    pub created_by: String,
    /// When, unix milliseconds.
    pub created_ms: i64,
    /// Who changed it last (an edit, a pause or a resume).
    pub updated_by: String,
    /// When, unix milliseconds.
    pub updated_ms: i64,
    /// 1 at create, bumped by every edit, pause and resume.
    pub revision: u64,
}

impl Schedule {
    /// A schedule `id` running `handler` on `spec` with an empty payload (`null`) and the
    /// default policies; the store's bookkeeping (partition, who, when, revision) is filled
    /// in by the API that writes it.
    pub fn new(id: impl Into<String>, handler: impl Into<String>, spec: ScheduleSpec) -> Self {
        Schedule {
            id: id.into(),
            handler: handler.into(),
            spec,
            payload: "null".to_owned(),
            policies: Policies::default(),
            paused: false,
            pause_note: None,
            partition: 0,
            created_by: String::new(),
            created_ms: 0,
            updated_by: String::new(),
            updated_ms: 0,
            revision: 0,
        }
    }

    /// This schedule with `payload` (JSON text).
    pub fn with_payload(mut self, payload: impl Into<String>) -> Self {
        self.payload = payload.into();
        self
    }

    /// This schedule with `policies`.
    pub fn with_policies(mut self, policies: Policies) -> Self {
        self.policies = policies;
        self
    }
}

/// What an operator did, as the audit trail records it (`create`, `pause`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditAction {
    /// A schedule was created.
    Create,
    /// A schedule was edited.
    Update,
    /// A schedule was deleted.
    Delete,
    /// A schedule was paused.
    Pause,
    /// A schedule was resumed.
    Resume,
    /// A run of a schedule was requested now (the note names the request's key).
    Trigger,
    /// A backfill of a schedule's past slots was requested (rule A16; the note names the
    /// request's key, the slots and the budget).
    Backfill,
}

impl AuditAction {
    /// Every action, in declaration order.
    pub const ALL: [AuditAction; 7] = [
        AuditAction::Create,
        AuditAction::Update,
        AuditAction::Delete,
        AuditAction::Pause,
        AuditAction::Resume,
        AuditAction::Trigger,
        AuditAction::Backfill,
    ];

    /// The snake_case name stores persist (`pause`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Create => "create",
            AuditAction::Update => "update",
            AuditAction::Delete => "delete",
            AuditAction::Pause => "pause",
            AuditAction::Resume => "resume",
            AuditAction::Trigger => "trigger",
            AuditAction::Backfill => "backfill",
        }
    }

    /// The action named `name` (its [`as_str`](Self::as_str)).
    pub fn parse(name: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who writes, when, and why: given with every write of the store, which records it with the
/// write's action and target in the same atomic step (rule A7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor<'a> {
    /// Who (the tool's `--as` or the OS user, a dashboard token's name, an API caller's string).
    pub who: &'a str,
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// An optional note (a pause's reason).
    pub note: Option<&'a str>,
}

/// One audit record, newest first in [`ScheduleStore::audit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// Who.
    pub who: String,
    /// What.
    pub action: AuditAction,
    /// The schedule id it acted on.
    pub target: String,
    /// The note given, if any.
    pub note: Option<String>,
}

impl AuditRecord {
    /// A record of `action` on `target` by `actor`.
    pub fn new(actor: &Actor<'_>, action: AuditAction, target: impl Into<String>) -> Self {
        AuditRecord {
            at_ms: actor.at_ms,
            who: actor.who.to_owned(),
            action,
            target: target.into(),
            note: actor.note.map(str::to_owned),
        }
    }
}

/// Which schedules a [`ScheduleStore::list`] reads: ordered by id, after `after`, at most
/// `limit`, filtered by handler, by id prefix or by partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListQuery {
    /// Only schedules of this handler.
    pub handler: Option<String>,
    /// Only ids that start with this.
    pub prefix: Option<String>,
    /// Only ids after this one (the last id of the previous page).
    pub after: Option<String>,
    /// Only schedules of this partition of `simba.schedules` (what a holder loads).
    pub partition: Option<u32>,
    /// At most this many (0 reads none).
    pub limit: usize,
}

impl ListQuery {
    /// The first `limit` schedules, unfiltered.
    pub fn first(limit: usize) -> Self {
        ListQuery { limit, ..ListQuery::default() }
    }

    /// This query for schedules of `handler` only.
    pub fn handler(mut self, handler: impl Into<String>) -> Self {
        self.handler = Some(handler.into());
        self
    }

    /// This query for ids starting with `prefix` only.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// This query for the schedules of partition `partition` only.
    pub fn partition(mut self, partition: u32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// This query for ids after `id` (the next page).
    pub fn after(mut self, id: impl Into<String>) -> Self {
        self.after = Some(id.into());
        self
    }

    /// Whether `s` matches the filters and the cursor (not the limit): the reference the SQL
    /// statements follow.
    pub fn matches(&self, s: &Schedule) -> bool {
        self.handler.as_ref().is_none_or(|h| &s.handler == h)
            && self.prefix.as_ref().is_none_or(|p| s.id.starts_with(p.as_str()))
            && self.after.as_ref().is_none_or(|a| s.id.as_str() > a.as_str())
            && self.partition.is_none_or(|p| s.partition == p)
    }
}

/// What a [`ScheduleStore::create`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Created {
    /// Stored, at revision 1.
    Created,
    /// A schedule with that id exists; nothing was written.
    Exists,
    /// The namespace's schedules were created with another number of partitions (this
    /// one); nothing was written.
    PartitionsDiffer {
        /// The number the store holds.
        stored: u32,
    },
}

/// Where schedules stored as data live (ADR 0020), in the shape of
/// [`JobStore`](super::job_store::JobStore): methods return `impl Future + Send` (write them
/// as `async fn`), and the one type-erased form is [`SharedScheduleStore`]. Every method is
/// one logical step, atomic in the store, and may be dropped at any point (the store stays
/// consistent whether or not it took effect). A store never sleeps and never retries.
///
/// Every method takes the `space`: the namespace's name, `""` for the default one (ADR
/// 0013). Spaces share nothing: ids, partition counts, change counters and audit trails are
/// per space.
///
/// # Contract (each rule is a function of `simba::tck::schedules`)
///
/// * Ids are unique per space; a create of an existing id writes nothing (A6).
/// * Every write (create, update, delete, pause, resume) bumps the change counter of the
///   schedule's partition and appends its audit record in the same atomic step (A6, A7);
///   a write that finds nothing to change (a missing id) writes neither.
/// * The first create of a space writes its partition count; a create with another count is
///   refused (A9).
/// * The store keeps the newest [`audit_retention`](ScheduleStore::audit_retention) audit
///   records per space (A7).
/// * The store does not check schedules: the API does before it writes (A3).
pub trait ScheduleStore: Send + Sync + 'static {
    /// Stores `schedule` (its `partition` computed from `partitions`, revision 1, created and
    /// updated by `actor`), unless its id exists or the space has another partition count.
    fn create(
        &self,
        space: &str,
        schedule: &Schedule,
        partitions: u32,
        actor: &Actor<'_>,
    ) -> impl Future<Output = BackendResult<Created>> + Send;

    /// Replaces the handler, spec, payload and policies of `schedule.id` (pause, creation and
    /// partition stay), bumps its revision, records `actor` as its last writer; returns the
    /// new revision, or `None` when no such schedule exists (nothing written).
    fn update(
        &self,
        space: &str,
        schedule: &Schedule,
        actor: &Actor<'_>,
    ) -> impl Future<Output = BackendResult<Option<u64>>> + Send;

    /// Deletes schedule `id`; returns whether it existed.
    fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Pauses (`true`, keeping `actor.note` as the pause note) or resumes (`false`, clearing
    /// the note) schedule `id`, bumping its revision; returns whether it was paused before, or
    /// `None` when no such schedule exists (nothing written). Pausing a paused schedule writes
    /// its new note and is recorded like any pause.
    fn set_paused(
        &self,
        space: &str,
        id: &str,
        paused: bool,
        actor: &Actor<'_>,
    ) -> impl Future<Output = BackendResult<Option<bool>>> + Send;

    /// Records `action` on schedule `id` by `actor` for an action that changes no schedule
    /// (a trigger, whose request the jobs store keeps): the partition's counter and the audit
    /// record, in one atomic step, the row untouched (its revision too); `false` when no such
    /// schedule exists (nothing written).
    fn record(
        &self,
        space: &str,
        id: &str,
        action: AuditAction,
        actor: &Actor<'_>,
    ) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Schedule `id`, if it exists.
    fn get(&self, space: &str, id: &str) -> impl Future<Output = BackendResult<Option<Schedule>>> + Send;

    /// The schedules `query` selects, ordered by id (byte order).
    fn list(&self, space: &str, query: &ListQuery) -> impl Future<Output = BackendResult<Vec<Schedule>>> + Send;

    /// The space's partition count, once its first schedule was created.
    fn partitions(&self, space: &str) -> impl Future<Output = BackendResult<Option<u32>>> + Send;

    /// The change counter of every partition of the space that was ever written, by
    /// partition: a holder compares them with the ones it read before and re-reads the
    /// partitions that moved.
    fn changes(&self, space: &str) -> impl Future<Output = BackendResult<Vec<(u32, u64)>>> + Send;

    /// The newest `limit` audit records of the space (of `target` only, when given), newest
    /// first.
    fn audit(
        &self,
        space: &str,
        target: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = BackendResult<Vec<AuditRecord>>> + Send;

    /// How many audit records per space this store keeps.
    fn audit_retention(&self) -> usize;

    /// The same store keeping at most `records` audit records per space (at least 1) from its
    /// next write on. Where writers are configured differently, each write trims to its
    /// writer's bound.
    fn keeping_audit(&self, records: usize) -> SharedScheduleStore;

    /// A short description for logs and errors (no secrets).
    fn describe(&self) -> String;

    /// A stream of the spaces whose change counters moved, where the store can broadcast
    /// them: a holder reads the counters at once instead of at its next poll. Only a hint (a
    /// lost message delays a change to the next poll, one renewal interval); `None` (the
    /// default): holders poll.
    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// [`ScheduleStore`] with its futures boxed: the one erasure point, behind
/// [`SharedScheduleStore`].
trait DynScheduleStore: Send + Sync + 'static {
    fn create<'a>(
        &'a self,
        space: &'a str,
        s: &'a Schedule,
        partitions: u32,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Created>>;
    fn update<'a>(
        &'a self,
        space: &'a str,
        s: &'a Schedule,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Option<u64>>>;
    fn delete<'a>(&'a self, space: &'a str, id: &'a str, actor: &'a Actor<'a>) -> BoxFuture<'a, BackendResult<bool>>;
    fn set_paused<'a>(
        &'a self,
        space: &'a str,
        id: &'a str,
        paused: bool,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Option<bool>>>;
    fn record<'a>(
        &'a self,
        space: &'a str,
        id: &'a str,
        action: AuditAction,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<bool>>;
    fn get<'a>(&'a self, space: &'a str, id: &'a str) -> BoxFuture<'a, BackendResult<Option<Schedule>>>;
    fn list<'a>(&'a self, space: &'a str, q: &'a ListQuery) -> BoxFuture<'a, BackendResult<Vec<Schedule>>>;
    fn partitions<'a>(&'a self, space: &'a str) -> BoxFuture<'a, BackendResult<Option<u32>>>;
    fn changes<'a>(&'a self, space: &'a str) -> BoxFuture<'a, BackendResult<Vec<(u32, u64)>>>;
    fn audit<'a>(
        &'a self,
        space: &'a str,
        target: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, BackendResult<Vec<AuditRecord>>>;
    fn audit_retention(&self) -> usize;
    fn keeping_audit(&self, records: usize) -> SharedScheduleStore;
    fn describe(&self) -> String;
    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>>;
}

impl<S: ScheduleStore> DynScheduleStore for S {
    fn create<'a>(
        &'a self,
        space: &'a str,
        s: &'a Schedule,
        partitions: u32,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Created>> {
        Box::pin(ScheduleStore::create(self, space, s, partitions, actor))
    }
    fn update<'a>(
        &'a self,
        space: &'a str,
        s: &'a Schedule,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Option<u64>>> {
        Box::pin(ScheduleStore::update(self, space, s, actor))
    }
    fn delete<'a>(&'a self, space: &'a str, id: &'a str, actor: &'a Actor<'a>) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(ScheduleStore::delete(self, space, id, actor))
    }
    fn set_paused<'a>(
        &'a self,
        space: &'a str,
        id: &'a str,
        paused: bool,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<Option<bool>>> {
        Box::pin(ScheduleStore::set_paused(self, space, id, paused, actor))
    }
    fn record<'a>(
        &'a self,
        space: &'a str,
        id: &'a str,
        action: AuditAction,
        actor: &'a Actor<'a>,
    ) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(ScheduleStore::record(self, space, id, action, actor))
    }
    fn get<'a>(&'a self, space: &'a str, id: &'a str) -> BoxFuture<'a, BackendResult<Option<Schedule>>> {
        Box::pin(ScheduleStore::get(self, space, id))
    }
    fn list<'a>(&'a self, space: &'a str, q: &'a ListQuery) -> BoxFuture<'a, BackendResult<Vec<Schedule>>> {
        Box::pin(ScheduleStore::list(self, space, q))
    }
    fn partitions<'a>(&'a self, space: &'a str) -> BoxFuture<'a, BackendResult<Option<u32>>> {
        Box::pin(ScheduleStore::partitions(self, space))
    }
    fn changes<'a>(&'a self, space: &'a str) -> BoxFuture<'a, BackendResult<Vec<(u32, u64)>>> {
        Box::pin(ScheduleStore::changes(self, space))
    }
    fn audit<'a>(
        &'a self,
        space: &'a str,
        target: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, BackendResult<Vec<AuditRecord>>> {
        Box::pin(ScheduleStore::audit(self, space, target, limit))
    }
    fn audit_retention(&self) -> usize {
        ScheduleStore::audit_retention(self)
    }
    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        ScheduleStore::keeping_audit(self, records)
    }
    fn describe(&self) -> String {
        ScheduleStore::describe(self)
    }
    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        ScheduleStore::subscribe_changes(self)
    }
}

/// A type-erased schedule store seen from one space (namespace), as
/// [`Backend::schedule_store`](crate::backend::Backend::schedule_store) returns it: cheap to
/// clone (one `Arc`), with the methods of [`ScheduleStore`] minus the space (no trait to
/// import).
#[derive(Clone)]
pub struct SharedScheduleStore {
    store: Arc<dyn DynScheduleStore>,
    space: Arc<str>,
}

impl SharedScheduleStore {
    /// Whether `self` and `other` are handles of one store (not two stores on one database).
    #[cfg(test)]
    pub(crate) fn same(&self, other: &SharedScheduleStore) -> bool {
        Arc::ptr_eq(&self.store, &other.store)
    }

    /// Erases `store`, seen from the default space.
    pub fn new(store: impl ScheduleStore) -> Self {
        SharedScheduleStore { store: Arc::new(store), space: Arc::from("") }
    }

    /// The same store seen from `space` (a namespace's name; `""`: the default one).
    pub fn in_space(&self, space: &str) -> Self {
        SharedScheduleStore { store: Arc::clone(&self.store), space: Arc::from(space) }
    }

    /// The space this handle reads and writes.
    pub fn space(&self) -> &str {
        &self.space
    }

    /// See [`ScheduleStore::create`].
    pub async fn create(&self, schedule: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        self.store.create(&self.space, schedule, partitions, actor).await
    }

    /// See [`ScheduleStore::update`].
    pub async fn update(&self, schedule: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        self.store.update(&self.space, schedule, actor).await
    }

    /// See [`ScheduleStore::delete`].
    pub async fn delete(&self, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        self.store.delete(&self.space, id, actor).await
    }

    /// See [`ScheduleStore::set_paused`].
    pub async fn set_paused(&self, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        self.store.set_paused(&self.space, id, paused, actor).await
    }

    /// See [`ScheduleStore::record`].
    pub async fn record(&self, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        self.store.record(&self.space, id, action, actor).await
    }

    /// See [`ScheduleStore::get`].
    pub async fn get(&self, id: &str) -> BackendResult<Option<Schedule>> {
        self.store.get(&self.space, id).await
    }

    /// See [`ScheduleStore::list`].
    pub async fn list(&self, query: &ListQuery) -> BackendResult<Vec<Schedule>> {
        self.store.list(&self.space, query).await
    }

    /// See [`ScheduleStore::partitions`].
    pub async fn partitions(&self) -> BackendResult<Option<u32>> {
        self.store.partitions(&self.space).await
    }

    /// See [`ScheduleStore::changes`].
    pub async fn changes(&self) -> BackendResult<Vec<(u32, u64)>> {
        self.store.changes(&self.space).await
    }

    /// See [`ScheduleStore::audit`].
    pub async fn audit(&self, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        self.store.audit(&self.space, target, limit).await
    }

    /// See [`ScheduleStore::audit_retention`].
    pub fn audit_retention(&self) -> usize {
        self.store.audit_retention()
    }

    /// See [`ScheduleStore::keeping_audit`]; seen from the same space.
    pub fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        self.store.keeping_audit(records).in_space(&self.space)
    }

    /// See [`ScheduleStore::describe`].
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// See [`ScheduleStore::subscribe_changes`]: the spaces of every handle of the store (a
    /// listener keeps the messages naming [`space`](Self::space)).
    pub fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.store.subscribe_changes()
    }
}

impl fmt::Debug for SharedScheduleStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedScheduleStore").field("store", &self.describe()).field("space", &self.space).finish()
    }
}

/// What the error says when a backend has no schedule store (rule A8): every store of this
/// crate has one; a `Backend` written elsewhere may not.
pub fn unsupported(describe: &str) -> String {
    format!(
        "schedules are not supported by this store yet ({describe}): use one of simba's stores (memory, SQLite, \
         PostgreSQL, MySQL/MariaDB, Redis, ZooKeeper or etcd) for schedules stored as data"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Policies are a JSON object of named fields; a row written before a field existed reads
    /// it as its default, and a field not known yet is ignored.
    #[test]
    fn policies_serialize_by_name_and_grow() {
        let p = Policies::default().with_misfire(Misfire::RunOnce);
        assert_eq!(serde_json::to_value(p).ok(), Some(serde_json::json!({"misfire": "run_once", "overlap": "skip"})));
        let old: Policies = serde_json::from_str(r#"{"misfire": "run_once"}"#).expect("an older row");
        assert_eq!(old, p);
        let newer: Policies = serde_json::from_str(r#"{"overlap": "skip", "backfill_rps": 5}"#).expect("a newer row");
        assert_eq!(newer, Policies::default());
        for o in [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll, Overlap::CancelRunning] {
            let p = Policies::default().with_overlap(o);
            let json = serde_json::to_value(p).expect("json");
            assert_eq!(json["overlap"], o.as_str(), "J11: stored by its name");
            assert_eq!(serde_json::from_value::<Policies>(json).ok(), Some(p));
        }
        let bad = serde_json::from_str::<Policies>(r#"{"overlap": "replace"}"#).expect_err("an unknown name");
        assert!(bad.to_string().contains("unknown overlap policy \"replace\""), "{bad}");
        let all = Policies::default().with_jitter(std::time::Duration::from_millis(5)).with_bounds(Some(1), None);
        let json = serde_json::json!({"misfire": "skip", "overlap": "skip", "jitter_ms": 5, "start_ms": 1});
        assert_eq!(serde_json::to_value(all).ok(), Some(json), "only the fields set");
        assert_eq!(serde_json::from_str::<Policies>(&serde_json::to_string(&all).unwrap_or_default()).ok(), Some(all));
        let bad = serde_json::from_str::<Policies>(r#"{"misfire": "later"}"#).expect_err("unknown");
        assert!(bad.to_string().contains("run_once"), "{bad}");
    }

    #[test]
    fn specs_serialize_tagged() {
        let cron = ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin");
        let json = serde_json::to_value(&cron).expect("json");
        assert_eq!(json, serde_json::json!({"kind": "cron", "expr": "0 0 9 * * MON", "time_zone": "Europe/Berlin"}));
        assert_eq!(serde_json::from_value::<ScheduleSpec>(json).ok(), Some(cron));
        let fixed = ScheduleSpec::fixed_rate(std::time::Duration::from_secs(90));
        assert_eq!(
            serde_json::to_value(&fixed).ok(),
            Some(serde_json::json!({"kind": "fixed_rate", "period_ms": 90000}))
        );
        for a in AuditAction::ALL {
            assert_eq!(AuditAction::parse(a.as_str()), Some(a));
        }
    }
}
