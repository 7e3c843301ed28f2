//! Schedules stored as data, operated from a service's own code or the `simba` tool (ADR
//! 0020): create, update, delete, pause, resume, get, list, next fires and the audit trail,
//! every input checked before anything is written (rule A3).

use std::collections::BTreeSet;

use crate::backend::{Backend, BackendError};
use crate::schedule_store::{
    Actor, AuditRecord, Created, DEFAULT_PARTITIONS, ListQuery, MAX_NOTE_BYTES, MAX_WHO_BYTES, Schedule,
    SharedScheduleStore, unsupported,
};

use super::{AdminError, Jobs, Requested, Toggle};

mod backfill;

/// The longest page [`Schedules::list`] reads.
pub const MAX_PAGE: usize = 1000;

/// The most fires [`Schedules::next_fires`] computes at once.
pub const MAX_FIRES: usize = 1000;

/// How many ids the search for the nearest one reads ([`ScheduleError::NotFound`]).
const NEAREST_SCAN: usize = 1000;

/// Why a schedule operation failed. Every refusal of input happens before anything is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The backend has no schedule store (none of this crate's stores; rule A8).
    #[error("{}", unsupported(store))]
    Unsupported {
        /// The store's description.
        store: String,
    },
    /// The input is wrong: the reason says what and what to do; nothing was stored.
    #[error("{reason}; nothing was stored")]
    Invalid {
        /// What is wrong.
        reason: String,
    },
    /// The handler is not among the handlers this API was given; nothing was stored.
    #[error(
        "unknown handler `{handler}`{}; nothing was stored",
        match nearest { Some(n) => format!(": did you mean `{n}`?"), None => format!(" (known: {})", known.join(", ")) }
    )]
    UnknownHandler {
        /// The handler as given.
        handler: String,
        /// The nearest known handler.
        nearest: Option<String>,
        /// The known handlers.
        known: Vec<String>,
    },
    /// A schedule with that id exists; nothing was stored.
    #[error("schedule `{id}` exists; nothing was stored (update it, or delete it first)")]
    Exists {
        /// The id.
        id: String,
    },
    /// No schedule has that id.
    #[error(
        "no schedule `{id}`{}",
        match nearest { Some(n) => format!(": did you mean `{n}`?"), None => ": `simba schedules list` lists them".to_owned() }
    )]
    NotFound {
        /// The id as given.
        id: String,
        /// The nearest existing id (among those that share the first half of `id`).
        nearest: Option<String>,
    },
    /// The namespace's schedules were created with another partition count; nothing was stored.
    #[error(
        "this namespace's schedules have {stored} partitions, and {configured} were configured; nothing was stored: \
         set `[schedules] partitions = {stored}` (the count is fixed at the namespace's first schedule)"
    )]
    PartitionsDiffer {
        /// The count the store holds.
        stored: u32,
        /// The count this API was configured with.
        configured: u32,
    },
    /// The store failed.
    #[error("the schedule store failed: {0}")]
    Store(#[from] BackendError),
    /// The run was requested (`key`), but its audit record was not written: repeat the call
    /// with the key, which requests nothing new and records it.
    #[error(
        "the run was requested (key {key}), but its audit record was not written ({error}): repeat with the key \
         `{key}`, which requests nothing new and records it"
    )]
    Unrecorded {
        /// The request's key.
        key: String,
        /// Why the record was not written.
        error: BackendError,
    },
    /// A run-now request was refused or not confirmed by the jobs store (the error says
    /// which, and with which key to repeat it).
    #[error("{0}")]
    Trigger(#[from] AdminError),
    /// The backend has no jobs store, where run-now requests live: nothing was requested.
    #[error("{store} keeps no jobs store, where run-now requests live: nothing was requested")]
    NoJobStore {
        /// The store's description.
        store: String,
    },
}

fn invalid(reason: impl Into<String>) -> ScheduleError {
    ScheduleError::Invalid { reason: reason.into() }
}

/// One page of a listing: the schedules and, when more follow, the id to ask after
/// ([`ListQuery::after`](ListQuery::after())).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Page {
    /// The schedules, ordered by id.
    pub schedules: Vec<Schedule>,
    /// The last id of this page when another page follows.
    pub next: Option<String>,
}

/// The schedules of one store and namespace.
///
/// Unknown handlers: a create or an update names a handler; when this API was given the
/// handlers that exist ([`with_handlers`](Self::with_handlers): the service's own), an unknown
/// one is refused with the nearest name. Without them (the `simba` tool, which does not link
/// the service's code) only the name's syntax is checked, and a node that lacks the handler
/// records each slot `missed` with the reason `no_handler` at run time (ADR 0020).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use simba::admin::Schedules;
/// use simba::backend::memory::MemoryBackend;
/// use simba::schedule_store::{Schedule, ScheduleSpec};
///
/// let schedules = Schedules::for_backend(&MemoryBackend::new())?.with_handlers(["report"]);
/// let weekly = Schedule::new("tenant-4711.report", "report", ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin"))
///     .with_payload(r#"{"tenant": 4711}"#);
/// let stored = schedules.create(weekly, "alice").await?;
/// assert_eq!(stored.revision, 1);
/// let typo = Schedule::new("t2", "reprot", ScheduleSpec::cron("0 0 9 * * MON", "UTC"));
/// assert!(schedules.create(typo, "alice").await.is_err_and(|e| e.to_string().contains("`report`")));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Schedules {
    store: SharedScheduleStore,
    /// Where run-now requests go ([`trigger`](Self::trigger)).
    jobs: Option<Jobs>,
    partitions: u32,
    handlers: Option<BTreeSet<String>>,
    clock: crate::job::WallClock,
}

impl std::fmt::Debug for Schedules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedules")
            .field("store", &self.store)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

impl Schedules {
    /// The operations on `store`, with [`DEFAULT_PARTITIONS`] partitions.
    pub fn new(store: SharedScheduleStore) -> Self {
        Schedules {
            store,
            jobs: None,
            partitions: DEFAULT_PARTITIONS,
            handlers: None,
            clock: crate::job::WallClock::System,
        }
    }

    /// The operations on `backend`'s schedule store; [`ScheduleError::Unsupported`] when it
    /// has none.
    pub fn for_backend<B: Backend>(backend: &B) -> Result<Self, ScheduleError> {
        match backend.schedule_store() {
            Some(store) => Ok(Schedules { jobs: Jobs::for_backend(backend), ..Schedules::new(store) }),
            None => Err(ScheduleError::Unsupported { store: backend.describe() }),
        }
    }

    /// The operations on a client's backend (in its namespace).
    pub fn for_client(simba: &crate::Simba) -> Result<Self, ScheduleError> {
        match simba.schedule_store() {
            Some(store) => Ok(Schedules { jobs: Jobs::for_client(simba), ..Schedules::new(store) }),
            None => Err(ScheduleError::Unsupported { store: simba.backend_description() }),
        }
    }

    /// With `partitions` partitions (`[schedules] partitions`: 1 to 4096, fixed per
    /// namespace at its first create, rule A9).
    pub fn with_partitions(mut self, partitions: u32) -> Result<Self, ScheduleError> {
        simba_core::schedules::check_partitions(partitions).map_err(invalid)?;
        self.partitions = partitions;
        Ok(self)
    }

    /// Refuses a create or an update naming a handler not among `names` (the handlers that
    /// exist).
    #[must_use]
    pub fn with_handlers<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.handlers.get_or_insert_with(BTreeSet::new).extend(names.into_iter().map(Into::into));
        self
    }

    /// Refuses a create or an update naming a handler that this binary does not register
    /// with `#[simba_handler]` (the link-time registry): for a service that creates schedules
    /// where its handlers are linked. A running node's
    /// [`RunningRuntime::schedules`](crate::runtime::RunningRuntime::schedules) also knows the
    /// handlers added to its builder.
    pub fn with_registered_handlers(self) -> Self {
        self.with_handlers(crate::job::HANDLERS.iter().map(|h| h.name.to_string()))
    }

    /// Stamps writes (and counts next fires) on `clock` rather than the system's: a node's
    /// API uses the node's clock, so a test on paused Tokio time reads one clock everywhere.
    #[must_use]
    pub fn with_wall_clock(mut self, clock: crate::job::WallClock) -> Self {
        self.clock = clock;
        self
    }

    /// Sends run-now requests ([`trigger`](Self::trigger)) through `jobs` (its store and its
    /// wait); [`for_backend`](Self::for_backend) and [`for_client`](Self::for_client) take the
    /// backend's.
    #[must_use]
    pub fn with_jobs(mut self, jobs: Jobs) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// The store this operates on.
    pub fn store(&self) -> &SharedScheduleStore {
        &self.store
    }

    /// The partition count this API creates with.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Checks `s` (rule A3) without writing anything: the id, the handler, the spec and the
    /// payload.
    pub fn check(&self, s: &Schedule) -> Result<(), ScheduleError> {
        simba_core::schedules::check_id(&s.id).map_err(invalid)?;
        self.check_handler(&s.handler)?;
        s.spec.check().map_err(invalid)?;
        if let Some(problem) = s.policies.problem(&s.spec) {
            return Err(invalid(format!("schedule `{}`: {problem}", s.id)));
        }
        check_payload(&s.payload)?;
        if let Some(note) = &s.pause_note {
            check_note(Some(note))?;
        }
        Ok(())
    }

    fn check_handler(&self, handler: &str) -> Result<(), ScheduleError> {
        if let Some(problem) = simba_rules::lease::name_problem(handler) {
            return Err(invalid(format!(
                "invalid handler name {handler:?}: handler names follow the lease-name rule, and here {problem}"
            )));
        }
        match &self.handlers {
            Some(known) if !known.contains(handler) => Err(ScheduleError::UnknownHandler {
                handler: handler.to_owned(),
                nearest: crate::suggest::nearest(handler, known.iter().map(String::as_str)).map(str::to_owned),
                known: known.iter().cloned().collect(),
            }),
            _ => Ok(()),
        }
    }

    /// Creates `schedule` (checked first; its bookkeeping fields are the store's) by `who`;
    /// returns it as stored.
    pub async fn create(&self, schedule: Schedule, who: &str) -> Result<Schedule, ScheduleError> {
        self.check(&schedule)?;
        let actor = actor(who, None, self.clock.now().timestamp_millis())?;
        match self.store.create(&schedule, self.partitions, &actor).await? {
            Created::Created => {}
            Created::Exists => return Err(ScheduleError::Exists { id: schedule.id }),
            Created::PartitionsDiffer { stored } => {
                return Err(ScheduleError::PartitionsDiffer { stored, configured: self.partitions });
            }
        }
        self.get(&schedule.id).await
    }

    /// Replaces the handler, spec, payload and policies of schedule `schedule.id` (checked
    /// first) by `who`; returns it as stored. A missing id is [`ScheduleError::NotFound`],
    /// naming the nearest existing one.
    pub async fn update(&self, schedule: Schedule, who: &str) -> Result<Schedule, ScheduleError> {
        self.check(&schedule)?;
        let actor = actor(who, None, self.clock.now().timestamp_millis())?;
        match self.store.update(&schedule, &actor).await? {
            Some(_) => self.get(&schedule.id).await,
            None => Err(self.not_found(&schedule.id).await),
        }
    }

    /// Deletes schedule `id` by `who`, with an optional note.
    pub async fn delete(&self, id: &str, who: &str, note: Option<&str>) -> Result<(), ScheduleError> {
        simba_core::schedules::check_id(id).map_err(invalid)?;
        let actor = actor(who, note, self.clock.now().timestamp_millis())?;
        if self.store.delete(id, &actor).await? { Ok(()) } else { Err(self.not_found(id).await) }
    }

    /// Pauses schedule `id` by `who`, keeping `note` as the reason.
    pub async fn pause(&self, id: &str, who: &str, note: Option<&str>) -> Result<Toggle, ScheduleError> {
        self.toggle(id, true, who, note).await
    }

    /// Resumes schedule `id` by `who` (the pause note is cleared; `note` goes to the audit
    /// trail).
    pub async fn resume(&self, id: &str, who: &str, note: Option<&str>) -> Result<Toggle, ScheduleError> {
        self.toggle(id, false, who, note).await
    }

    async fn toggle(&self, id: &str, paused: bool, who: &str, note: Option<&str>) -> Result<Toggle, ScheduleError> {
        simba_core::schedules::check_id(id).map_err(invalid)?;
        let actor = actor(who, note, self.clock.now().timestamp_millis())?;
        match self.store.set_paused(id, paused, &actor).await? {
            Some(was) => Ok(Toggle { changed: was != paused, paused, confirmed_after: None }),
            None => Err(self.not_found(id).await),
        }
    }

    /// Asks the holder of schedule `id`'s partition to run it once now (rule A15), by `who`,
    /// with `payload` instead of the schedule's when given, and returns the request. The run
    /// is a `manual` record of `schedule/<id>` naming the request's key; its handler gets the
    /// request's payload. Nothing is written when the id, the payload (JSON, at most
    /// [`MAX_PAYLOAD_BYTES`](crate::schedule_store::MAX_PAYLOAD_BYTES)), `who` or the note is
    /// refused, or the schedule does not exist.
    ///
    /// The request is the jobs store's (R3): `key` names it (`None`: generated), the same key
    /// again is the same request, pending or taken, and a try that fails while the store is
    /// unavailable is repeated with its key within the wait. A paused schedule's request
    /// waits until it is resumed. Each answered call is recorded in the audit trail
    /// (`trigger`, its note naming the key; a repeat says so).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use simba::admin::{Schedules, TriggerOptions};
    /// use simba::backend::memory::MemoryBackend;
    /// use simba::schedule_store::{Schedule, ScheduleSpec};
    ///
    /// let schedules = Schedules::for_backend(&MemoryBackend::new())?;
    /// let weekly = Schedule::new("tenant-4711.report", "report", ScheduleSpec::cron("0 0 9 * * MON", "UTC"));
    /// schedules.create(weekly, "alice").await?;
    /// let asked = TriggerOptions::new().key("rerun-2026-49").payload(r#"{"tenant": 4711, "week": 49}"#);
    /// let request = schedules.trigger("tenant-4711.report", "alice", asked).await?;
    /// assert_eq!((request.key.as_str(), request.known), ("rerun-2026-49", false));
    /// let again = schedules.trigger("tenant-4711.report", "alice", asked).await?;
    /// assert!(again.known, "the same key is the same request");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn trigger(&self, id: &str, who: &str, options: TriggerOptions<'_>) -> Result<Requested, ScheduleError> {
        simba_core::schedules::check_id(id).map_err(invalid)?;
        let now = self.clock.now();
        actor(who, options.note, now.timestamp_millis())?;
        if let Some(p) = options.payload {
            check_payload(p)?;
        }
        let Some(jobs) = &self.jobs else { return Err(ScheduleError::NoJobStore { store: self.store.describe() }) };
        self.get(id).await?;
        let job = crate::schedule_store::job_name(id);
        super::not_a_backfill_key(&job, options.key)?;
        let asked = jobs.request(&job, options.key, options.payload, now).await?;
        let mut note = format!("request {}", asked.key);
        if asked.known {
            note.push_str(" (a repeat: nothing new requested)");
        }
        if options.payload.is_some() {
            note.push_str(", with its own payload");
        }
        self.audit_request(id, crate::schedule_store::AuditAction::Trigger, who, note, options.note, &asked.key)
            .await?;
        Ok(asked)
    }

    /// Records a request of schedule `id` made by `who` in the audit trail as `action`: `what`
    /// (which names the request's `key`), then the caller's `note`, cut to
    /// [`MAX_NOTE_BYTES`]. A schedule deleted meanwhile keeps no record (with a warning); a
    /// failed write is [`ScheduleError::Unrecorded`], naming the key to repeat the call with.
    async fn audit_request(
        &self,
        id: &str,
        action: crate::schedule_store::AuditAction,
        who: &str,
        what: String,
        note: Option<&str>,
        key: &str,
    ) -> Result<(), ScheduleError> {
        let mut note = match note {
            Some(n) => format!("{what}: {n}"),
            None => what,
        };
        let mut end = note.len().min(MAX_NOTE_BYTES);
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        let actor = Actor { who, at_ms: self.clock.now().timestamp_millis(), note: Some(&note) };
        match self.store.record(id, action, &actor).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!(
                    schedule = id,
                    key,
                    "the schedule was deleted as its run was requested: the request is not in the audit trail"
                );
                Ok(())
            }
            Err(e) => {
                tracing::warn!(schedule = id, key, error = %e, "the run was requested, but its audit record was not written");
                Err(ScheduleError::Unrecorded { key: key.to_owned(), error: e })
            }
        }
    }

    /// Schedule `id`; [`ScheduleError::NotFound`] names the nearest existing id.
    pub async fn get(&self, id: &str) -> Result<Schedule, ScheduleError> {
        simba_core::schedules::check_id(id).map_err(invalid)?;
        match self.store.get(id).await? {
            Some(s) => Ok(s),
            None => Err(self.not_found(id).await),
        }
    }

    /// One page of schedules (at most [`MAX_PAGE`]), ordered by id, filtered by `query`.
    pub async fn list(&self, query: ListQuery) -> Result<Page, ScheduleError> {
        if query.limit > MAX_PAGE {
            return Err(invalid(format!("a page has at most {MAX_PAGE} schedules, not {}", query.limit)));
        }
        if let Some(prefix) = query.prefix.as_deref().filter(|p| !p.is_empty()) {
            simba_core::schedules::check_id(prefix).map_err(|e| invalid(format!("as a prefix, {e}")))?;
        }
        let limit = query.limit;
        let mut schedules = self.store.list(&ListQuery { limit: limit + 1, ..query }).await?;
        let next = if schedules.len() > limit {
            schedules.truncate(limit);
            schedules.last().map(|s| s.id.clone())
        } else {
            None
        };
        Ok(Page { schedules, next })
    }

    /// The next `count` fires (at most [`MAX_FIRES`]) of schedule `id` after now, unix
    /// milliseconds (rule A4). A paused schedule has fires too: they are its slots, consumed
    /// without a run while it stays paused.
    pub async fn next_fires(&self, id: &str, count: usize) -> Result<Vec<i64>, ScheduleError> {
        let now = self.clock.now().timestamp_millis();
        self.next_fires_after(id, now, count).await
    }

    /// The next `count` fires of schedule `id` after `after_ms`.
    pub async fn next_fires_after(&self, id: &str, after_ms: i64, count: usize) -> Result<Vec<i64>, ScheduleError> {
        if count > MAX_FIRES {
            return Err(invalid(format!("at most {MAX_FIRES} fires at once, not {count}")));
        }
        let s = self.get(id).await?;
        let fires =
            s.spec.check().map_err(|e| invalid(format!("schedule `{id}` has a spec this build refuses: {e}")))?;
        Ok(fires.next(after_ms, count))
    }

    /// The newest `limit` audit records of this namespace (of schedule `target` only, when
    /// given), newest first.
    pub async fn audit(&self, target: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, ScheduleError> {
        Ok(self.store.audit(target, limit).await?)
    }

    /// [`ScheduleError::NotFound`] for `id`, with the nearest id among those that share its
    /// first half (up to [`NEAREST_SCAN`] of them).
    async fn not_found(&self, id: &str) -> ScheduleError {
        let half: String = id.chars().take(id.chars().count().div_ceil(2)).collect();
        let nearby = self.store.list(&ListQuery::first(NEAREST_SCAN).prefix(half)).await.unwrap_or_default();
        let nearest = crate::suggest::nearest(id, nearby.iter().map(|s| s.id.as_str())).map(str::to_owned);
        ScheduleError::NotFound { id: id.to_owned(), nearest }
    }
}

/// A payload is JSON text of at most [`MAX_PAYLOAD_BYTES`](crate::schedule_store::MAX_PAYLOAD_BYTES) (rule A3).
fn check_payload(payload: &str) -> Result<(), ScheduleError> {
    simba_core::schedules::check_payload_size(payload.len()).map_err(invalid)?;
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(payload) {
        return Err(invalid(format!("the payload is not JSON ({e}): give JSON text, e.g. {{\"tenant\": 4711}}")));
    }
    Ok(())
}

/// How a schedule's run-now request is asked ([`Schedules::trigger`]): its key, a payload
/// for this run instead of the schedule's, and a note for the audit trail; all optional.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct TriggerOptions<'a> {
    /// The request's key (`None`: generated).
    pub key: Option<&'a str>,
    /// The payload this run gets instead of the schedule's.
    pub payload: Option<&'a str>,
    /// Why, for the audit trail.
    pub note: Option<&'a str>,
}

impl<'a> TriggerOptions<'a> {
    /// No key (one is generated), the schedule's payload, no note.
    pub fn new() -> Self {
        TriggerOptions::default()
    }

    /// The request's key: the same key again is the same request (a retry runs nothing twice).
    #[must_use]
    pub fn key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }

    /// The payload this run gets instead of the schedule's (JSON text).
    #[must_use]
    pub fn payload(mut self, payload: &'a str) -> Self {
        self.payload = Some(payload);
        self
    }

    /// Why, for the audit trail.
    #[must_use]
    pub fn note(mut self, note: &'a str) -> Self {
        self.note = Some(note);
        self
    }
}

fn check_note(note: Option<&str>) -> Result<(), ScheduleError> {
    match note {
        Some(n) if n.len() > MAX_NOTE_BYTES => {
            Err(invalid(format!("a note has at most {MAX_NOTE_BYTES} bytes, not {}", n.len())))
        }
        _ => Ok(()),
    }
}

/// `who` and `note` as the audit records them, at `at_ms`.
fn actor<'a>(who: &'a str, note: Option<&'a str>, at_ms: i64) -> Result<Actor<'a>, ScheduleError> {
    if who.trim().is_empty() || who.len() > MAX_WHO_BYTES {
        return Err(invalid(format!(
            "who acts must be named (the tool's `--as`, a token's name, the caller's string) in 1 to {MAX_WHO_BYTES} \
             bytes, not {:?}",
            who
        )));
    }
    check_note(note)?;
    Ok(Actor { who, at_ms, note })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use std::time::Duration;

    use crate::schedule_store::{MAX_PAYLOAD_BYTES, Policies, ScheduleSpec};

    fn api() -> Schedules {
        match Schedules::for_backend(&MemoryBackend::new()) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    fn weekly(id: &str) -> Schedule {
        Schedule::new(id, "report", ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin")).with_payload("{\"t\":1}")
    }

    fn every_min(id: &str) -> Schedule {
        Schedule::new(id, "report", ScheduleSpec::fixed_rate(Duration::from_secs(60)))
    }

    fn run_once() -> Policies {
        Policies::default().with_misfire(crate::schedule_store::Misfire::RunOnce)
    }

    async fn refused(api: &Schedules, s: Schedule) -> String {
        match api.create(s, "alice").await {
            Err(e) => e.to_string(),
            Ok(s) => panic!("stored {s:?}"),
        }
    }

    /// A1, A3: a bad id, cron, zone, rate, payload (not JSON, too large), handler name,
    /// contradicting policies, who or note is refused with the reason, and nothing is stored
    /// (no schedule, no audit record).
    #[tokio::test]
    async fn a3_bad_input_is_refused_and_nothing_is_stored() {
        let api = api();
        let cases: Vec<(Schedule, &str)> = vec![
            (weekly("tenant/4711"), "lease-name rule"),
            (Schedule { spec: ScheduleSpec::cron("0 9 * * MON", "UTC"), ..weekly("a") }, "6 fields"),
            (Schedule { spec: ScheduleSpec::cron("0 0 9 * * MON", "Berlin"), ..weekly("a") }, "IANA"),
            (Schedule { spec: ScheduleSpec::cron("0 0 0 30 2 *", "UTC"), ..weekly("a") }, "no slot"),
            (Schedule { spec: ScheduleSpec::FixedRate { period_ms: 10 }, ..weekly("a") }, "1 s to 366 days"),
            (weekly("a").with_payload("{tenant: 4711}"), "not JSON"),
            (weekly("a").with_payload(format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES))), "16384"),
            (Schedule { handler: "my handler".into(), ..weekly("a") }, "invalid handler name"),
            // Policies that contradict each other (J12-J14's checks, as for code-defined jobs).
            (weekly("a").with_policies(run_once().with_catch_up_window(Duration::ZERO)), "longer than zero"),
            (weekly("a").with_policies(Policies::default().with_catch_up_window(Duration::from_secs(60))), "run_once"),
            (every_min("a").with_policies(Policies::default().with_jitter(Duration::from_secs(60))), "shorter than"),
            (weekly("a").with_policies(Policies::default().with_bounds(Some(2_000), Some(1_000))), "end bound"),
        ];
        for (s, reason) in cases {
            let e = refused(&api, s).await;
            assert!(e.contains(reason) && e.contains("nothing was stored"), "{reason}: {e}");
        }
        let e = api.create(weekly("a"), "").await.expect_err("no who");
        assert!(e.to_string().contains("--as"), "{e}");
        let long = "n".repeat(MAX_NOTE_BYTES + 1);
        let stored = api.create(weekly("b"), "alice").await.expect("valid");
        let e = api.pause("b", "alice", Some(&long)).await.expect_err("long note");
        assert!(e.to_string().contains("1024 bytes"), "{e}");
        assert_eq!(api.list(ListQuery::first(10)).await.map(|p| p.schedules).ok(), Some(vec![stored]));
        assert_eq!(api.audit(None, 10).await.map(|a| a.len()).ok(), Some(1), "only b's create");
    }

    /// A3: given the handlers that exist, an unknown one is refused with the nearest name (or
    /// the known ones), at create and at update; without them only the syntax is checked.
    #[tokio::test]
    async fn a3_unknown_handler_is_refused_when_handlers_are_known() {
        let api = api().with_handlers(["report", "invoice"]);
        let e = refused(&api, Schedule { handler: "reprot".into(), ..weekly("a") }).await;
        assert!(e.contains("did you mean `report`"), "{e}");
        let e = refused(&api, Schedule { handler: "zzzzzzzz".into(), ..weekly("a") }).await;
        assert!(e.contains("known: invoice, report"), "{e}");
        api.create(weekly("a"), "alice").await.expect("known handler");
        let e = api.update(Schedule { handler: "nope".into(), ..weekly("a") }, "bob").await.expect_err("unknown");
        assert!(matches!(e, ScheduleError::UnknownHandler { .. }), "{e}");
        assert_eq!(api.get("a").await.map(|s| s.handler).ok().as_deref(), Some("report"), "unchanged");
        let open = Schedules::new(api.store().clone());
        open.update(Schedule { handler: "later".into(), ..weekly("a") }, "bob").await.expect("syntax only");
    }

    /// A4: the next fires of a stored schedule, in its zone; a fixed rate on the epoch grid.
    #[tokio::test]
    async fn a4_next_fires_of_a_stored_schedule() {
        let api = api();
        api.create(weekly("w"), "alice").await.expect("create");
        let monday_0900_berlin = 1_764_576_000_000; // 2025-12-01T08:00:00Z
        let fires = api.next_fires_after("w", monday_0900_berlin - 1, 2).await.expect("fires");
        assert_eq!(fires, [monday_0900_berlin, monday_0900_berlin + 7 * 86_400_000]);
        let every_minute = Schedule::new("m", "report", ScheduleSpec::fixed_rate(std::time::Duration::from_secs(60)));
        api.create(every_minute, "alice").await.expect("create");
        assert_eq!(api.next_fires_after("m", 61_000, 2).await.ok(), Some(vec![120_000, 180_000]));
        assert_eq!(api.next_fires("m", 3).await.map(|f| f.len()).ok(), Some(3));
        assert!(api.next_fires("m", MAX_FIRES + 1).await.is_err());
    }

    /// A6: update, delete, pause and get of a missing id name it and the nearest id; a
    /// duplicate create says the id exists; the API's page says whether more follow.
    #[tokio::test]
    async fn a6_update_of_a_missing_id_names_the_nearest() {
        let api = api();
        for id in ["tenant-4711.report", "tenant-4712.report", "other"] {
            api.create(weekly(id), "alice").await.expect("create");
        }
        let e = api.update(weekly("tenant-4711.reprot"), "bob").await.expect_err("missing");
        assert!(e.to_string().contains("no schedule `tenant-4711.reprot`: did you mean `tenant-4711.report`?"), "{e}");
        let e = api.delete("tenant-4711.rep", "bob", None).await.expect_err("missing");
        assert!(matches!(e, ScheduleError::NotFound { nearest: Some(_), .. }), "{e}");
        let e = api.pause("zzz", "bob", None).await.expect_err("missing");
        assert!(e.to_string().contains("simba schedules list"), "{e}");
        let e = api.create(weekly("other"), "bob").await.expect_err("exists");
        assert!(e.to_string().contains("schedule `other` exists"), "{e}");
        let toggle = api.pause("other", "bob", Some("why")).await.expect("pause");
        assert!(toggle.changed && toggle.paused);
        assert!(!api.pause("other", "bob", None).await.expect("again").changed);
        let page = api.list(ListQuery::first(2)).await.expect("list");
        assert_eq!(page.next.as_deref(), Some("tenant-4711.report"));
        let rest = api.list(ListQuery::first(2).after("tenant-4711.report")).await.expect("list");
        assert_eq!((rest.schedules.len(), rest.next), (1, None));
        assert!(api.list(ListQuery::first(MAX_PAGE + 1)).await.is_err());
        assert!(api.list(ListQuery::first(2).prefix("a/b")).await.is_err());
        let other = api.clone().with_partitions(8).expect("valid");
        let e = other.create(weekly("p8"), "alice").await.expect_err("fixed");
        assert!(e.to_string().contains("have 64 partitions"), "{e}");
    }

    /// A8: a namespaced backend's schedules are its namespace's space; the default view's are
    /// the default space; one id lives in both without meeting.
    #[tokio::test]
    async fn a8_a_namespace_is_a_space() {
        use crate::backend::Backend;
        use crate::backend::namespace::{Namespace, Namespaced};
        let raw = MemoryBackend::new();
        let ns = Namespace::new("billing-svc").expect("valid");
        let billing = Namespaced::new(raw.clone(), ns).schedule_store().expect("memory has schedules");
        let default = Namespaced::default_view(raw).schedule_store().expect("memory has schedules");
        assert_eq!((billing.space(), default.space()), ("billing-svc", ""));
        let (b, d) = (Schedules::new(billing), Schedules::new(default));
        b.create(weekly("same"), "alice").await.expect("create");
        assert!(matches!(d.get("same").await, Err(ScheduleError::NotFound { .. })), "not in the default space");
        d.create(weekly("same"), "bob").await.expect("its own");
        assert_eq!(b.audit(None, 10).await.map(|a| a[0].who.clone()).ok().as_deref(), Some("alice"));
    }
}
