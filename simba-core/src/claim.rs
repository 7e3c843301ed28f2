//! The jobs store's claim rule (ADR 0012): what a claim of a job's slot or of its pending
//! run-now request answers, and what the store writes, decided from the rows the store read
//! in the claim's atomic step. One pure function, [`decide`], is the rule: the in-memory,
//! SQLite, ZooKeeper and etcd stores call it; the PostgreSQL function, the MySQL procedure and
//! the Redis script write the same steps in their own languages and name it as their
//! reference; every store runs the same conformance suite (`simba::tck::jobs`).
//!
//! The fence is not here: whether the claiming session holds the lease with its token is
//! checked by the store itself in the same atomic step (it answers `NotHolder` before or
//! instead of these writes). After the fence, in this order (`JobStore::claim_run`, steps
//! 2 to 4):
//!
//! 1. A scheduled or caught-up slot is already claimed unless it is after the job's ledger
//!    (`last_slot`) and the lease's last claimed slot (what `Backend::claim_slot` writes):
//!    monotonic, whatever the nodes' clocks say. A run-now claim is already claimed (there is
//!    nothing to take) unless a request is pending: the job's own, or for a partition `g/i`
//!    one of its group `g` that this partition has not taken. A claim takes ONE request, the
//!    oldest: the job's own before its group's (R3: each request is its own run, and the
//!    record names the request's key).
//! 2. Paused (the job or its group): a scheduled slot is still consumed (the ledger and the
//!    lease move, so it is not reported missed later; no record), a run-now request stays
//!    pending (nothing is written).
//! 3. Otherwise claimed: the ledger and the lease move (scheduled), or the request is taken
//!    (run now: the control version moves, since a pending request went away), and the store
//!    writes the `running` record at the answer's slot.
//!
//! A backfill claim ([`Ask::Backfill`], rule J15, ADR 0023) asks for a past slot again and
//! never touches the ledger: it reads the job's records of that slot and its oldest record kept
//! ([`SlotHistory`]) and answers [`Answer::Refused`] with the reason, or writes a `running`
//! record of kind `backfill` at the slot (records are identified by `(job, kind, slot)` and the
//! claim sees none of that kind, so a slot is backfilled at most once).
//!
//! Run-now requests ([`request`]) carry a key: a request whose key the name remembers is the
//! same request (a retry after a lost answer runs nothing twice, pending or taken), distinct
//! keys are distinct runs, and at most [`MAX_PENDING_REQUESTS`] wait per name. A name's
//! requests are a [`RequestLog`] beside its control row: the pending ones and the newest
//! taken ones, at most [`REMEMBERED_REQUESTS`]. A pending request whose id the log does not
//! hold was made by an older build (counters only): it runs with the next logged one, or
//! alone at the row's `trigger_ms` when none is logged.

/// How many run-now requests of one name may wait at once; a further one is refused
/// ([`Triggered::Full`]) until a claim takes one.
pub const MAX_PENDING_REQUESTS: usize = 16;

/// How many requests (pending and taken, newest first) a name remembers with their keys: a
/// retry of one of them is recognised ([`Triggered::Known`]); an older key is forgotten.
pub const REMEMBERED_REQUESTS: usize = 64;

/// How many pending requests of one name may carry a payload ([`Trigger::payload`]); a further
/// one with a payload is refused ([`Triggered::Full`]) until a claim takes one. With
/// [`MAX_PAYLOAD_BYTES`] each, a name's log stays far below the smallest store's value limit
/// (ZooKeeper's 1 MiB node).
pub const MAX_PENDING_PAYLOADS: usize = 4;

/// The longest payload a request may carry, in bytes: a schedule's own bound.
pub const MAX_PAYLOAD_BYTES: usize = crate::schedules::MAX_PAYLOAD_BYTES;

/// The longest request key, in bytes ([`valid_request_key`]).
pub const MAX_REQUEST_KEY_BYTES: usize = 64;

/// Whether `key` may name a run-now request: 1 to [`MAX_REQUEST_KEY_BYTES`] bytes of ASCII
/// letters, digits and `-_.:` (so every store keeps it as it is, in a line, a path or a field).
pub fn valid_request_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_REQUEST_KEY_BYTES
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A run-now request as asked ([`request`]): its key, its instant and, for a schedule stored
/// as data, the payload its run uses instead of the schedule's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trigger<'a> {
    /// The key the operator gave or the tool generated ([`valid_request_key`]).
    pub key: &'a str,
    /// When it was asked, unix milliseconds.
    pub at_ms: i64,
    /// The payload the run uses instead of the schedule's (JSON text, at most
    /// [`MAX_PAYLOAD_BYTES`]; the API checks it before asking).
    pub payload: Option<&'a str>,
}

impl<'a> Trigger<'a> {
    /// A request with `key` at `at_ms`, without a payload.
    pub fn new(key: &'a str, at_ms: i64) -> Self {
        Trigger { key, at_ms, payload: None }
    }

    /// With `payload` for the run instead of the schedule's.
    #[must_use]
    pub fn with_payload(mut self, payload: &'a str) -> Self {
        self.payload = Some(payload);
        self
    }
}

/// One run-now request of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Its id, strictly increasing per name (the control row's `trigger_id` when it was made).
    pub id: i64,
    /// Its manual slot, unix milliseconds: strictly after the name's previous request's.
    pub slot_ms: i64,
    /// The key the operator gave or the tool generated ([`valid_request_key`]).
    pub key: String,
    /// The payload its run uses instead of the schedule's; kept while the request is
    /// pending, dropped from the log at its next write once taken.
    pub payload: Option<String>,
}

impl Request {
    /// A request without a payload.
    pub fn new(id: i64, slot_ms: i64, key: impl Into<String>) -> Self {
        Request { id, slot_ms, key: key.into(), payload: None }
    }
}

/// `payload` as one space-free field of a log line: `%`, space, tab, CR and LF as `%XX`
/// (compact JSON has no other whitespace outside strings, and no raw control character).
fn escape_payload(payload: &str) -> String {
    let mut out = String::with_capacity(payload.len());
    for c in payload.chars() {
        match c {
            '%' => out.push_str("%25"),
            ' ' => out.push_str("%20"),
            '\t' => out.push_str("%09"),
            '\n' => out.push_str("%0A"),
            '\r' => out.push_str("%0D"),
            c => out.push(c),
        }
    }
    out
}

/// The payload of an escaped field ([`escape_payload`]); `None` when an escape is broken.
fn unescape_payload(field: &str) -> Option<String> {
    let mut out = Vec::with_capacity(field.len());
    let mut bytes = field.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// The requests a name remembers, by id: every pending one and the newest taken ones, at most
/// [`REMEMBERED_REQUESTS`]. Stored as text ([`encode`](Self::encode)): one line per request,
/// `id slot key`, and ` payload` (escaped) when it has one (an older build reads the first
/// three fields and ignores the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestLog(pub Vec<Request>);

/// A log with no request, for claims that read none (scheduled slots).
pub static NO_REQUESTS: RequestLog = RequestLog(Vec::new());

impl RequestLog {
    /// The request with this key.
    pub fn find(&self, key: &str) -> Option<&Request> {
        self.0.iter().find(|r| r.key == key)
    }

    /// The oldest request with an id after `id`.
    pub fn first_after(&self, id: i64) -> Option<&Request> {
        self.0.iter().filter(|r| r.id > id).min_by_key(|r| r.id)
    }

    /// How many requests with an id after `taken_id` the log holds.
    pub fn pending_after(&self, taken_id: i64) -> usize {
        self.0.iter().filter(|r| r.id > taken_id).count()
    }

    /// How many requests with an id after `taken_id` carry a payload.
    pub fn payloads_after(&self, taken_id: i64) -> usize {
        self.0.iter().filter(|r| r.id > taken_id && r.payload.is_some()).count()
    }

    /// The log as stored: `id slot key[ payload]` lines, by id.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|r| match &r.payload {
                None => format!("{} {} {}\n", r.id, r.slot_ms, r.key),
                Some(p) => format!("{} {} {} {}\n", r.id, r.slot_ms, r.key, escape_payload(p)),
            })
            .collect()
    }

    /// The log stored as `text`; lines that are not requests are skipped.
    pub fn decode(text: &str) -> Self {
        let mut v: Vec<Request> = text
            .lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let id = parts.next()?.parse().ok()?;
                let slot_ms = parts.next()?.parse().ok()?;
                let key = parts.next().filter(|k| valid_request_key(k))?.to_owned();
                let payload = match parts.next() {
                    Some(field) => Some(unescape_payload(field)?),
                    None => None,
                };
                Some(Request { id, slot_ms, key, payload })
            })
            .collect();
        v.sort_by_key(|r| r.id);
        RequestLog(v)
    }
}

/// What a run-now request ([`request`]) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triggered {
    /// A new request, pending now.
    Requested(Request),
    /// A request with this key was made before (pending or taken): nothing new is made.
    Known(Request),
    /// [`MAX_PENDING_REQUESTS`] requests of the name wait already, or [`MAX_PENDING_PAYLOADS`]
    /// with a payload for a request that has one: nothing is made.
    Full {
        /// How many wait.
        pending: usize,
    },
}

/// [`request`] on a row and log held in place (the stores that rewrite both as one value):
/// they become what the request writes, and the answer says whether there is anything to
/// write.
pub fn request_in_place(row: &mut ControlRow, log: &mut RequestLog, ask: Trigger<'_>) -> (bool, Triggered) {
    match request(row, log, ask) {
        (answer, Some((r, l))) => {
            (*row, *log) = (r, l);
            (true, answer)
        }
        (answer, None) => (false, answer),
    }
}

/// The run-now request rule: the request `ask` for a name whose control row is `row` and
/// whose log is `log`. Answers what the store answers, and the row and log it writes (with
/// the control version moved) when a request was made; `None`: nothing to write. The log
/// written keeps the payloads of pending requests only (a taken one's is dropped).
pub fn request(row: &ControlRow, log: &RequestLog, ask: Trigger<'_>) -> (Triggered, Option<(ControlRow, RequestLog)>) {
    if let Some(known) = log.find(ask.key) {
        return (Triggered::Known(known.clone()), None);
    }
    let pending = log.pending_after(row.taken_id);
    if pending >= MAX_PENDING_REQUESTS
        || (ask.payload.is_some() && log.payloads_after(row.taken_id) >= MAX_PENDING_PAYLOADS)
    {
        return (Triggered::Full { pending }, None);
    }
    let mut next = *row;
    let slot_ms = trigger_slot(row.trigger_ms, ask.at_ms);
    next.trigger_ms = Some(slot_ms);
    next.trigger_id = row.trigger_id.saturating_add(1);
    let made =
        Request { id: next.trigger_id, slot_ms, key: ask.key.to_owned(), payload: ask.payload.map(str::to_owned) };
    let mut kept = log.0.clone();
    for r in kept.iter_mut().filter(|r| r.id <= row.taken_id) {
        r.payload = None;
    }
    kept.push(made.clone());
    let drop = kept.len().saturating_sub(REMEMBERED_REQUESTS);
    kept.drain(..drop);
    (Triggered::Requested(made), Some((next, RequestLog(kept))))
}

/// One job name's control row, as every store keeps it (plain values; a store maps its own
/// columns, hash fields or encoded text onto these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlRow {
    /// Whether this name itself is paused.
    pub paused: bool,
    /// The slot ledger: the latest scheduled or caught-up slot claimed, unix milliseconds.
    pub last_slot: Option<i64>,
    /// How many run-now requests were made for this name (the newest request's id).
    pub trigger_id: i64,
    /// The slot of the newest request ([`trigger_slot`]), unix milliseconds; for a partition,
    /// also moved past the slot of each group request it took, so its manual slots stay
    /// distinct.
    pub trigger_ms: Option<i64>,
    /// The id of the newest request of this name a claim took (for a group, any partition's).
    pub taken_id: i64,
    /// For a partition `g/i`: the id of the newest request of its group `g` it took.
    pub group_taken_id: i64,
}

impl ControlRow {
    /// The slot of this name's own request that no claim has taken yet.
    pub fn pending(&self) -> Option<i64> {
        if self.trigger_id > self.taken_id { self.trigger_ms } else { None }
    }

    /// The slot of a request of `group` (this partition's group's row) that this partition
    /// has not taken yet.
    pub fn group_pending(&self, group: &ControlRow) -> Option<i64> {
        if group.trigger_id > self.group_taken_id { group.trigger_ms } else { None }
    }

    /// Whether a run-now claim of this name (with its group's row `group`) may find a request
    /// to take: one of its own or of its group not taken yet. `false`: the claim answers
    /// `AlreadyClaimed` whatever the logs hold, so a store may answer it from rows read without
    /// a lock.
    pub fn run_now_pending(&self, group: Option<&ControlRow>) -> bool {
        self.pending().is_some() || group.is_some_and(|g| self.group_pending(g).is_some())
    }

    /// Pauses (`true`) or resumes: `(changed, was paused)`.
    pub fn set_paused(&mut self, paused: bool) -> (bool, bool) {
        let was = self.paused;
        self.paused = paused;
        (was != paused, was)
    }
}

/// The manual slot of a new run-now request at `at_ms`, given the name's last request slot
/// `prev`: later than it even within the same millisecond (or with a clock that stepped back),
/// since each request is its own run and the slot names the run's record.
pub fn trigger_slot(prev: Option<i64>, at_ms: i64) -> i64 {
    match prev {
        Some(p) => p.saturating_add(1).max(at_ms),
        None => at_ms,
    }
}

/// The slot kind a backfill claim writes (as stores persist kinds by name).
pub const BACKFILL_KIND: &str = "backfill";

/// The only kind whose records a backfill ignores: a run-now request's slot is the request's
/// instant, not a slot of the schedule, even when the two happen to be equal.
pub const MANUAL_KIND: &str = "manual";

/// The lowest kind in the stores' order of records (`slot_ms`, then kind): a record of the
/// slot with this kind is the first the retention trim drops.
pub const FIRST_KIND: &str = "scheduled";

/// The outcomes of a slot that did not run, which a backfill may run (J15).
pub const NOT_RUN_OUTCOMES: [&str; 2] = ["missed", "skipped_running"];

/// One record a backfill claim read of its slot: kind and outcome by their persisted names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRecord {
    /// The record's kind (`scheduled`, `manual`, `caught_up`, `backfill`).
    pub kind: String,
    /// The record's outcome (`ran`, `missed`, ...).
    pub outcome: String,
    /// When its run started, unix milliseconds.
    pub started_ms: Option<i64>,
}

impl SeenRecord {
    /// A record of `kind` with `outcome`, started at `started_ms`.
    pub fn new(kind: impl Into<String>, outcome: impl Into<String>, started_ms: Option<i64>) -> Self {
        SeenRecord { kind: kind.into(), outcome: outcome.into(), started_ms }
    }
}

/// What a backfill claim ([`Ask::Backfill`]) reads of the job's history in its atomic step,
/// beside the control rows: the records of the asked slot, then the oldest record the store
/// keeps (read in this order, so that a trim between the two reads refuses rather than runs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotHistory {
    /// Every record of the job at the asked slot, of any kind.
    pub at_slot: Vec<SeenRecord>,
    /// The job's oldest record kept, by `(slot_ms, kind)`: its slot and kind name; `None`
    /// when the job has no record.
    pub oldest: Option<(i64, String)>,
}

/// No history, for claims that read none (everything but a backfill).
pub static NO_HISTORY: SlotHistory = SlotHistory { at_slot: Vec::new(), oldest: None };

/// Why a backfill claim was refused (nothing is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The slot is after the ledger (or no slot was claimed yet): it is the scheduler's.
    SchedulersSlot,
    /// The slot is older than the job's oldest record kept: its record may have been dropped
    /// by retention (R7), so whether it ran is not known and it is not guessed.
    OutsideHistory,
    /// A record says the slot ran, runs, or was backfilled already.
    AlreadyRan {
        /// When that run started, unix milliseconds, where the record says.
        started_ms: Option<i64>,
    },
}

/// What a claim asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A scheduled or caught-up slot at this instant, unix milliseconds (the rule treats
    /// both alike).
    Slot(i64),
    /// The pending run-now request of the job or its group (the slot is the request's).
    RunNow,
    /// A slot of a schedule stored as data (ADR 0020, rule A5), at this instant, unix
    /// milliseconds, claimed under its partition's lease and token. The schedule's own ledger
    /// (`own.last_slot`, the control row of `schedule/<id>`) is the only ledger: the
    /// partition's lease carries many schedules, so its last slot is neither read nor
    /// written. Pause as for [`Ask::Slot`]: `own.paused` is the schedule's pause (the store
    /// reads it where it keeps it), and the group's row is the row of `schedule`, which pauses
    /// every schedule.
    ScheduleSlot(i64),
    /// A past slot at this instant, unix milliseconds, run again by a backfill (rule J15):
    /// only at or before the ledger (for a schedule its own, for a job the later of its own
    /// and the lease's), only when no record says it ran (none, or `missed` /
    /// `skipped_running`; manual records do not count), and only when it is not older than the
    /// oldest record kept. Claimed: a `running` record of kind [`BACKFILL_KIND`]; the ledger and
    /// the lease stay. Paused: nothing is written.
    Backfill(i64),
    /// [`Ask::Backfill`] of a schedule stored as data: its own ledger only, as
    /// [`Ask::ScheduleSlot`].
    ScheduleBackfill(i64),
}

/// What the claim answers (after the store's fence let it through).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The slot or a later one was claimed before, or no run-now request is pending.
    AlreadyClaimed,
    /// The job or its group is paused: nothing runs and no record is written.
    Paused,
    /// The slot is this term's: the store writes the `running` record at `slot_ms` (for a
    /// run-now claim, the request's slot).
    Claimed {
        /// The claimed slot, unix milliseconds.
        slot_ms: i64,
    },
    /// A backfill claim may not run this slot, for this reason; nothing is written.
    Refused(Refusal),
}

/// What the store writes besides the `running` record of an [`Answer::Claimed`], in the
/// claim's atomic step, under its fence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    /// The job's control row as it becomes; `None`: unchanged. (What a partition took of its
    /// group's requests is kept in its own row.)
    pub own: Option<ControlRow>,
    /// The group's row as it becomes when a partition took a request of its group that no
    /// partition had taken (its `taken_id` moves, which bounds the group's pending requests);
    /// `None`: unchanged.
    pub group: Option<ControlRow>,
    /// The lease's last claimed slot becomes this; `None`: unchanged.
    pub lease_slot: Option<i64>,
    /// A run-now request was taken: the control version moves.
    pub bump_version: bool,
}

impl Writes {
    /// Whether there is nothing to write (the store answers without its write step).
    pub fn is_empty(&self) -> bool {
        *self == Writes::default()
    }
}

/// The answer of a claim and the writes it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What the claim answers.
    pub answer: Answer,
    /// What the store writes (plus the `running` record when the answer is `Claimed`).
    pub writes: Writes,
    /// The run-now request a claimed manual run answers, when the log held it (its key goes
    /// into the record); `None` for slots and for a request of an older build.
    pub request: Option<Request>,
}

impl Decision {
    fn nothing(answer: Answer) -> Self {
        Decision { answer, writes: Writes::default(), request: None }
    }
}

/// What a claim reads beside the control rows: the request logs a run-now claim reads (the
/// job's own and its group's) and the history a backfill claim reads. A scheduled claim may
/// pass [`Logs::NONE`].
#[derive(Debug, Clone, Copy)]
pub struct Logs<'a> {
    /// The job's own log.
    pub own: &'a RequestLog,
    /// Its group's log (empty when the job is no partition).
    pub group: &'a RequestLog,
    /// The job's records of the asked slot and its oldest record ([`Ask::Backfill`] only).
    pub history: &'a SlotHistory,
}

impl<'a> Logs<'a> {
    /// No log (a claim of a slot, which reads none).
    pub const NONE: Logs<'static> = Logs { own: &NO_REQUESTS, group: &NO_REQUESTS, history: &NO_HISTORY };

    /// The request logs of a run-now claim, without history.
    pub fn requests(own: &'a RequestLog, group: &'a RequestLog) -> Self {
        Logs { own, group, history: &NO_HISTORY }
    }

    /// The history of a backfill claim, without request logs.
    pub fn history(history: &'a SlotHistory) -> Self {
        Logs { own: &NO_REQUESTS, group: &NO_REQUESTS, history }
    }
}

/// The claim rule (see the module's documentation): a claim asking `ask` for a job whose
/// control row is `own`, whose group's row is `group` (`None` when the job is no partition,
/// or its group has no row), on a lease whose last claimed slot is `lease_slot`; a run-now
/// claim also reads the request `logs`.
pub fn decide(
    ask: Ask,
    own: &ControlRow,
    group: Option<&ControlRow>,
    lease_slot: Option<i64>,
    logs: Logs<'_>,
) -> Decision {
    let paused = own.paused || group.is_some_and(|g| g.paused);
    match ask {
        Ask::Slot(slot_ms) => slot(slot_ms, own, own.last_slot.max(lease_slot), Some(slot_ms), paused),
        Ask::ScheduleSlot(slot_ms) => slot(slot_ms, own, own.last_slot, None, paused),
        Ask::RunNow => run_now(own, group, logs, paused),
        Ask::Backfill(slot_ms) => backfill(slot_ms, own.last_slot.max(lease_slot), logs.history, paused),
        Ask::ScheduleBackfill(slot_ms) => backfill(slot_ms, own.last_slot, logs.history, paused),
    }
}

/// A backfill claim of `slot_ms` against the ledger `last` and what the store read of the
/// history (see [`Ask::Backfill`]): refused, paused, or claimed with no control write.
fn backfill(slot_ms: i64, last: Option<i64>, history: &SlotHistory, paused: bool) -> Decision {
    if last.is_none_or(|last| slot_ms > last) {
        return Decision::nothing(Answer::Refused(Refusal::SchedulersSlot));
    }
    let ran = history
        .at_slot
        .iter()
        .filter(|r| r.kind != MANUAL_KIND)
        .find(|r| r.kind == BACKFILL_KIND || !NOT_RUN_OUTCOMES.contains(&r.outcome.as_str()));
    if let Some(r) = ran {
        return Decision::nothing(Answer::Refused(Refusal::AlreadyRan { started_ms: r.started_ms }));
    }
    // Retention drops the oldest records by (slot, kind): the slot's own records are all kept
    // only while the oldest record kept is before it, or is its record of the first kind.
    let kept = match &history.oldest {
        None => true,
        Some((oldest, kind)) => *oldest < slot_ms || (*oldest == slot_ms && kind == FIRST_KIND),
    };
    if !kept {
        return Decision::nothing(Answer::Refused(Refusal::OutsideHistory));
    }
    if paused {
        return Decision::nothing(Answer::Paused);
    }
    Decision::nothing(Answer::Claimed { slot_ms })
}

/// A run-now claim: the job's own oldest pending request, else its group's oldest one this
/// partition has not taken (within the group's newest [`MAX_PENDING_REQUESTS`]).
fn run_now(own: &ControlRow, group: Option<&ControlRow>, logs: Logs<'_>, paused: bool) -> Decision {
    let group_next = |g: &ControlRow| {
        let from = own.group_taken_id.max(g.trigger_id.saturating_sub(MAX_PENDING_REQUESTS as i64));
        logs.group.first_after(from).filter(|r| r.id <= g.trigger_id)
    };
    let (next, taken) = if own.pending().is_some() {
        // An own request: the oldest the log holds (older unlogged ones, made by an older
        // build, run with it), or all of them at the newest time when none is logged.
        let logged = logs.own.first_after(own.taken_id).filter(|r| r.id <= own.trigger_id);
        let (slot_ms, id) = logged.map_or((own.trigger_ms.unwrap_or_default(), own.trigger_id), |r| (r.slot_ms, r.id));
        (logged.cloned(), (slot_ms, ControlRow { taken_id: id, ..*own }, None))
    } else if let Some(g) = group.filter(|g| own.group_pending(g).is_some()) {
        let logged = group_next(g);
        let (gslot, id) = logged.map_or((g.trigger_ms.unwrap_or_default(), g.trigger_id), |r| (r.slot_ms, r.id));
        // The partition's manual slot: the group request's, but after every slot of its own
        // requests (its `trigger_ms` moves to it), so that two runs never share a record.
        let slot_ms = own.trigger_ms.map_or(gslot, |t| gslot.max(t.saturating_add(1)));
        let mine = ControlRow { group_taken_id: id, trigger_ms: Some(slot_ms), ..*own };
        let grp = (g.taken_id < id).then_some(ControlRow { taken_id: id, ..*g });
        (logged.cloned(), (slot_ms, mine, grp))
    } else {
        return Decision::nothing(Answer::AlreadyClaimed);
    };
    if paused {
        return Decision::nothing(Answer::Paused);
    }
    let (slot_ms, mine, grp) = taken;
    Decision {
        answer: Answer::Claimed { slot_ms },
        writes: Writes { own: Some(mine), group: grp, lease_slot: None, bump_version: true },
        request: next,
    }
}

/// A scheduled slot at `slot_ms` against the ledger `last`: already claimed at or before it;
/// otherwise the job's ledger moves (and the lease's last slot to `lease_write`), claimed or,
/// when paused, consumed without a run.
fn slot(slot_ms: i64, own: &ControlRow, last: Option<i64>, lease_write: Option<i64>, paused: bool) -> Decision {
    if last.is_some_and(|last| last >= slot_ms) {
        return Decision::nothing(Answer::AlreadyClaimed);
    }
    let writes = Writes {
        own: Some(ControlRow { last_slot: Some(slot_ms), ..*own }),
        lease_slot: lease_write,
        ..Writes::default()
    };
    let answer = if paused { Answer::Paused } else { Answer::Claimed { slot_ms } };
    Decision { answer, writes, request: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_780_000_000_000;

    fn row() -> ControlRow {
        ControlRow::default()
    }

    /// A row with requests `1..=trigger_id`, the newest at `trigger_ms`, `taken_id` of them taken.
    fn requested(trigger_id: i64, trigger_ms: i64, taken_id: i64) -> ControlRow {
        ControlRow { trigger_id, trigger_ms: Some(trigger_ms), taken_id, ..row() }
    }

    fn claimed(slot_ms: i64, own: ControlRow, lease_slot: Option<i64>, bump_version: bool) -> Decision {
        Decision {
            answer: Answer::Claimed { slot_ms },
            writes: Writes { own: Some(own), group: None, lease_slot, bump_version },
            request: None,
        }
    }

    fn nothing(answer: Answer) -> Decision {
        Decision { answer, writes: Writes::default(), request: None }
    }

    /// A scheduled slot after the ledger and the lease is claimed: both move to it, nothing
    /// else in the row changes, the control version stays.
    #[test]
    fn slot_after_the_ledger_and_the_lease_is_claimed() {
        let own = ControlRow { last_slot: Some(T - 1000), ..requested(2, T - 5, 1) };
        assert_eq!(
            decide(Ask::Slot(T), &own, None, Some(T - 2000), Logs::NONE),
            claimed(T, ControlRow { last_slot: Some(T), ..own }, Some(T), false)
        );
        assert_eq!(
            decide(Ask::Slot(T), &row(), None, None, Logs::NONE),
            claimed(T, ControlRow { last_slot: Some(T), ..row() }, Some(T), false)
        );
    }

    /// Monotonic: a slot at or before the job's ledger, or at or before the lease's last slot
    /// (written by `claim_slot`, e.g. by an older build), is already claimed; nothing is written.
    #[test]
    fn slot_at_or_before_the_ledger_or_the_lease_is_already_claimed() {
        let ledger = ControlRow { last_slot: Some(T), ..row() };
        assert_eq!(decide(Ask::Slot(T), &ledger, None, None, Logs::NONE), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::Slot(T - 1), &ledger, None, None, Logs::NONE), nothing(Answer::AlreadyClaimed));
        assert_eq!(
            decide(Ask::Slot(T), &row(), None, Some(T), Logs::NONE),
            nothing(Answer::AlreadyClaimed),
            "the lease's slot"
        );
        assert_eq!(
            decide(Ask::Slot(T), &ledger, None, Some(T - 9), Logs::NONE),
            nothing(Answer::AlreadyClaimed),
            "the later of both"
        );
        assert_eq!(
            decide(Ask::Slot(T), &ControlRow { last_slot: Some(T - 9), ..row() }, None, Some(T + 1), Logs::NONE),
            nothing(Answer::AlreadyClaimed),
            "the lease ahead of the ledger"
        );
        let paused = ControlRow { paused: true, ..ledger };
        assert_eq!(
            decide(Ask::Slot(T), &paused, None, None, Logs::NONE),
            nothing(Answer::AlreadyClaimed),
            "before pause"
        );
    }

    /// Paused (the job or its group): a scheduled slot is still consumed (ledger and lease
    /// move) but answers `Paused`, so no record is written.
    #[test]
    fn paused_slot_is_consumed() {
        let own = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::Slot(T), &own, None, None, Logs::NONE),
            Decision {
                answer: Answer::Paused,
                writes: Writes {
                    own: Some(ControlRow { last_slot: Some(T), ..own }),
                    lease_slot: Some(T),
                    bump_version: false,
                    group: None,
                },
                request: None,
            }
        );
        let group = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::Slot(T), &row(), Some(&group), Some(T - 1), Logs::NONE),
            Decision {
                answer: Answer::Paused,
                writes: Writes {
                    own: Some(ControlRow { last_slot: Some(T), ..row() }),
                    lease_slot: Some(T),
                    bump_version: false,
                    group: None,
                },
                request: None,
            },
            "the group's pause"
        );
    }

    /// A scheduled claim leaves run-now requests alone, own and the group's.
    #[test]
    fn slot_leaves_requests_pending() {
        let own = ControlRow { group_taken_id: 1, ..requested(3, T - 7, 2) };
        let group = requested(2, T - 3, 0);
        let d = decide(Ask::Slot(T), &own, Some(&group), None, Logs::NONE);
        assert_eq!(d, claimed(T, ControlRow { last_slot: Some(T), ..own }, Some(T), false));
        let after = d.writes.own.unwrap_or_default();
        assert_eq!((after.pending(), after.group_pending(&group)), (Some(T - 7), Some(T - 3)));
    }

    /// Run now without a pending request (none made, all taken, the group's taken by this
    /// partition) is already claimed; nothing is written.
    #[test]
    fn run_now_without_a_pending_request_is_already_claimed() {
        assert_eq!(decide(Ask::RunNow, &row(), None, None, Logs::NONE), nothing(Answer::AlreadyClaimed));
        assert_eq!(decide(Ask::RunNow, &requested(2, T, 2), None, None, Logs::NONE), nothing(Answer::AlreadyClaimed));
        let own = ControlRow { group_taken_id: 4, ..requested(1, T, 1) };
        assert_eq!(
            decide(Ask::RunNow, &own, Some(&requested(4, T + 5, 0)), None, Logs::NONE),
            nothing(Answer::AlreadyClaimed)
        );
        let paused = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::RunNow, &paused, None, None, Logs::NONE),
            nothing(Answer::AlreadyClaimed),
            "pending before pause"
        );
    }

    /// R3: a run-now claim may find a request exactly when the job's own row or its group's
    /// has one not taken by this name; otherwise `decide` answers `AlreadyClaimed` with no write
    /// (what a store may answer from rows read without a lock).
    #[test]
    fn r3_run_now_pending_agrees_with_decide() {
        let own = ControlRow { group_taken_id: 4, ..requested(1, T, 1) };
        let cases = [
            (row(), None),
            (requested(2, T, 1), None),
            (own, Some(requested(4, T + 5, 0))),
            (own, Some(requested(5, T + 5, 0))),
        ];
        for (own, group) in cases {
            let decided = decide(Ask::RunNow, &own, group.as_ref(), None, Logs::NONE);
            let nothing_to_take = decided.answer == Answer::AlreadyClaimed && decided.writes.is_empty();
            assert_eq!(own.run_now_pending(group.as_ref()), !nothing_to_take, "{own:?} {group:?}");
        }
    }

    /// The job's own request: taken at its slot (`taken_id` catches up with `trigger_id`),
    /// the control version moves, the ledger and the lease stay.
    #[test]
    fn run_now_takes_the_own_request() {
        let own = ControlRow { last_slot: Some(T - 60_000), ..requested(3, T + 20, 1) };
        assert_eq!(
            decide(Ask::RunNow, &own, None, Some(T - 60_000), Logs::NONE),
            claimed(T + 20, ControlRow { taken_id: 3, ..own }, None, true)
        );
        // A partition's own request while its group has none pending: the group's id stays.
        let own = ControlRow { group_taken_id: 2, ..requested(1, T, 0) };
        assert_eq!(
            decide(Ask::RunNow, &own, Some(&requested(2, T - 100, 0)), None, Logs::NONE),
            claimed(T, ControlRow { taken_id: 1, ..own }, None, true)
        );
    }

    /// The group's request, for a partition that has not taken it (an older build's: no log):
    /// taken by this partition, at the group request's slot; the group's row records that a
    /// partition took it.
    #[test]
    fn run_now_takes_the_groups_request() {
        let group = requested(2, T + 5, 0);
        let own = ControlRow { group_taken_id: 1, ..row() };
        let d = decide(Ask::RunNow, &own, Some(&group), None, Logs::NONE);
        assert_eq!(d.answer, Answer::Claimed { slot_ms: T + 5 });
        assert_eq!(d.writes.own, Some(ControlRow { group_taken_id: 2, trigger_ms: Some(T + 5), ..own }));
        assert_eq!(d.writes.group, Some(ControlRow { taken_id: 2, ..group }));
        assert_eq!(d.request, None);
    }

    /// The rows and logs after `keys` requests of a name at `T` (each its own slot).
    fn after_requests(keys: &[&str]) -> (ControlRow, RequestLog) {
        let (mut c, mut log) = (row(), RequestLog::default());
        for k in keys {
            let (answer, writes) = request(&c, &log, Trigger::new(k, T));
            assert!(matches!(answer, Triggered::Requested(_)), "{k}: {answer:?}");
            (c, log) = writes.unwrap_or_default();
        }
        (c, log)
    }

    /// R3: each request is its own run, oldest first, and the claim names it; the job's own
    /// requests before its group's; a partition's slot for a group request comes after its own
    /// slots, so no two runs share a record.
    #[test]
    fn r3_each_request_is_one_run_oldest_first() {
        let (mut own, own_log) = after_requests(&["a", "b"]);
        let (mut group, group_log) = after_requests(&["g1"]);
        let logs = Logs::requests(&own_log, &group_log);
        let mut runs = Vec::new();
        loop {
            let d = decide(Ask::RunNow, &own, Some(&group), None, logs);
            let Answer::Claimed { slot_ms } = d.answer else { break };
            assert!(d.writes.bump_version);
            own = d.writes.own.unwrap_or_default();
            group = d.writes.group.unwrap_or(group);
            runs.push((slot_ms, d.request.map(|r| r.key)));
        }
        assert_eq!(
            runs,
            vec![(T, Some("a".into())), (T + 1, Some("b".into())), (T + 2, Some("g1".into()))],
            "three requests, three runs, three slots"
        );
        assert_eq!(group.taken_id, 1, "a partition took the group's request");
        assert_eq!(decide(Ask::RunNow, &own, Some(&group), None, logs).answer, Answer::AlreadyClaimed);
    }

    /// R3: a request whose id the log does not hold (an older build's) runs with the next
    /// logged one; with none logged, all pending run once at the newest time.
    #[test]
    fn r3_unlogged_requests_of_an_older_build_run_once() {
        let own = requested(3, T + 9, 0);
        let d = decide(Ask::RunNow, &own, None, None, Logs::NONE);
        assert_eq!((d.answer, d.writes.own.map(|o| o.taken_id)), (Answer::Claimed { slot_ms: T + 9 }, Some(3)));
        let log = RequestLog(vec![Request::new(2, T + 5, "k")]);
        let d = decide(Ask::RunNow, &own, None, None, Logs::requests(&log, &NO_REQUESTS));
        assert_eq!(d.answer, Answer::Claimed { slot_ms: T + 5 });
        assert_eq!((d.writes.own.map(|o| o.taken_id), d.request.map(|r| r.key)), (Some(2), Some("k".into())));
    }

    /// R3: a group's partition further behind than the group's newest
    /// [`MAX_PENDING_REQUESTS`] requests starts at the oldest of them.
    #[test]
    fn r3_a_lagging_partition_takes_the_groups_newest_requests() {
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let (mut group, mut log) = (row(), RequestLog::default());
        for k in &keys {
            group.taken_id = group.trigger_id; // other partitions keep up
            let (_, w) = request(&group, &log, Trigger::new(k, T));
            (group, log) = w.unwrap_or_default();
        }
        let d = decide(Ask::RunNow, &row(), Some(&group), None, Logs::requests(&NO_REQUESTS, &log));
        assert_eq!(d.request.map(|r| r.id), Some(40 - MAX_PENDING_REQUESTS as i64 + 1));
    }

    /// Paused (the job or its group): a run-now request stays pending; nothing is written.
    #[test]
    fn paused_run_now_stays_pending() {
        let own = ControlRow { paused: true, ..requested(1, T, 0) };
        assert_eq!(decide(Ask::RunNow, &own, None, None, Logs::NONE), nothing(Answer::Paused));
        let group = ControlRow { paused: true, ..requested(1, T + 1, 0) };
        assert_eq!(decide(Ask::RunNow, &requested(1, T, 0), Some(&group), None, Logs::NONE), nothing(Answer::Paused));
        assert_eq!(
            decide(Ask::RunNow, &row(), Some(&group), None, Logs::NONE),
            nothing(Answer::Paused),
            "the group's request"
        );
    }

    /// R3: a request's key names it: the same key again is the same request, pending or
    /// taken (nothing new is made, nothing is written); distinct keys are distinct requests,
    /// each with a later slot than the last, even in the same millisecond or with a clock that
    /// stepped back; at most [`MAX_PENDING_REQUESTS`] wait; the log keeps the newest
    /// [`REMEMBERED_REQUESTS`].
    #[test]
    fn r3_requests_are_keyed_distinct_and_bounded() {
        let (c, log) = after_requests(&["a"]);
        let (again, writes) = request(&c, &log, Trigger::new("a", T + 50));
        assert_eq!((again, writes), (Triggered::Known(Request::new(1, T, "a")), None));
        let (made, writes) = request(&c, &log, Trigger::new("b", T - 5));
        assert_eq!(made, Triggered::Requested(Request::new(2, T + 1, "b")));
        let (c2, log2) = writes.unwrap_or_default();
        assert_eq!((c2.trigger_id, c2.trigger_ms, c2.pending()), (2, Some(T + 1), Some(T + 1)));
        let taken = ControlRow { taken_id: 2, ..c2 };
        assert!(matches!(request(&taken, &log2, Trigger::new("a", T)).0, Triggered::Known(_)), "taken: still known");
        let keys: Vec<String> = (0..MAX_PENDING_REQUESTS).map(|i| format!("p{i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (full, full_log) = after_requests(&keys);
        assert_eq!(
            request(&full, &full_log, Trigger::new("one-more", T)),
            (Triggered::Full { pending: MAX_PENDING_REQUESTS }, None)
        );
        let (mut c, mut log) = (row(), RequestLog::default());
        for i in 0..REMEMBERED_REQUESTS + 10 {
            c.taken_id = c.trigger_id;
            (c, log) = request(&c, &log, Trigger::new(&format!("r{i}"), T)).1.unwrap_or_default();
        }
        assert_eq!(log.0.len(), REMEMBERED_REQUESTS);
        assert!(log.find("r0").is_none() && log.find(&format!("r{}", REMEMBERED_REQUESTS + 9)).is_some());
        assert_eq!(RequestLog::decode(&log.encode()), log, "stored as text and read back");
        assert_eq!(trigger_slot(None, T), T);
        assert_eq!(trigger_slot(Some(i64::MAX), T), i64::MAX);
        assert!(valid_request_key("a-Z_0.9:x") && !valid_request_key("") && !valid_request_key("a b"));
        assert!(!valid_request_key(&"k".repeat(MAX_REQUEST_KEY_BYTES + 1)));
        let mut p = row();
        assert_eq!(p.set_paused(true), (true, false));
        assert_eq!(p.set_paused(true), (false, true));
        assert_eq!(p.set_paused(false), (true, true));
    }
    /// A15: a request may carry a payload; it survives the log's text form (spaces, newlines
    /// and `%` in it included), is dropped from the log once its request is taken (at the
    /// next write), and at most [`MAX_PENDING_PAYLOADS`] pending requests carry one; a request
    /// without a payload is not limited by them.
    #[test]
    fn a15_a_request_carries_its_payload_while_pending() {
        let payload = "{\"tenant\": 4711,\n \"note\": \"50% off\tnow\"}";
        let (c, log) =
            request(&row(), &RequestLog::default(), Trigger::new("p1", T).with_payload(payload)).1.unwrap_or_default();
        let line = log.encode();
        assert_eq!(line.lines().count(), 1, "one line: {line:?}");
        assert_eq!(line.split(' ').count(), 4, "four fields: {line:?}");
        let read = RequestLog::decode(&line);
        assert_eq!(read, log, "read back as written");
        assert_eq!(read.0[0].payload.as_deref(), Some(payload));
        let old_build: Vec<&str> = line.trim_end().splitn(4, ' ').take(3).collect();
        assert_eq!(old_build, ["1", &T.to_string(), "p1"], "the first three fields as an older build reads them");
        assert_eq!(RequestLog::decode("1 5 k 50%2"), RequestLog::default(), "a broken escape is not a request");

        // Taken, then another request is written: the taken one's payload is gone.
        let taken = ControlRow { taken_id: c.trigger_id, ..c };
        let (c2, log2) = request(&taken, &log, Trigger::new("p2", T + 1)).1.unwrap_or_default();
        assert_eq!(log2.0.iter().map(|r| r.payload.is_some()).collect::<Vec<_>>(), [false, false]);

        // At most MAX_PENDING_PAYLOADS pending with a payload; one without is still made.
        let (mut c, mut log) = (c2, log2);
        for i in 0..MAX_PENDING_PAYLOADS {
            (c, log) = request(&c, &log, Trigger::new(&format!("q{i}"), T).with_payload("{}")).1.unwrap_or_default();
        }
        let pending = log.pending_after(c.taken_id);
        assert_eq!(
            request(&c, &log, Trigger::new("one-more", T).with_payload("{}")),
            (Triggered::Full { pending }, None)
        );
        assert!(matches!(request(&c, &log, Trigger::new("plain", T)).0, Triggered::Requested(_)));
    }

    /// A5: a schedule's slot is checked against the schedule's own ledger only: the
    /// partition lease's last slot (other schedules of the partition, or `claim_slot`) neither
    /// refuses it nor moves; the ledger moves; pause (the schedule's or `schedule`'s) consumes it.
    #[test]
    fn a5_schedule_slot_uses_the_schedules_own_ledger() {
        let own = ControlRow { last_slot: Some(T - 1000), ..requested(1, T - 5, 0) };
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &own, None, Some(T + 60_000), Logs::NONE),
            claimed(T, ControlRow { last_slot: Some(T), ..own }, None, false),
            "a later slot of another schedule on the partition's lease does not refuse it"
        );
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &row(), None, None, Logs::NONE),
            claimed(T, ControlRow { last_slot: Some(T), ..row() }, None, false),
            "a schedule's first slot"
        );
        let ledger = ControlRow { last_slot: Some(T), ..row() };
        assert_eq!(decide(Ask::ScheduleSlot(T), &ledger, None, None, Logs::NONE), nothing(Answer::AlreadyClaimed));
        assert_eq!(
            decide(Ask::ScheduleSlot(T - 1), &ledger, None, Some(T - 9), Logs::NONE),
            nothing(Answer::AlreadyClaimed)
        );
        let paused = ControlRow { paused: true, ..row() };
        let consumed = Decision {
            answer: Answer::Paused,
            writes: Writes {
                own: Some(ControlRow { last_slot: Some(T), ..paused }),
                group: None,
                lease_slot: None,
                bump_version: false,
            },
            request: None,
        };
        assert_eq!(decide(Ask::ScheduleSlot(T), &paused, None, None, Logs::NONE), consumed);
        let all_paused = ControlRow { paused: true, ..row() };
        assert_eq!(
            decide(Ask::ScheduleSlot(T), &row(), Some(&all_paused), None, Logs::NONE).answer,
            Answer::Paused,
            "`schedule` paused pauses every schedule"
        );
        let after = decide(Ask::ScheduleSlot(T), &own, None, None, Logs::NONE).writes.own.unwrap_or_default();
        assert_eq!(after.pending(), Some(T - 5), "a run-now request stays pending");
    }

    fn seen(kind: &str, outcome: &str) -> SeenRecord {
        SeenRecord::new(kind, outcome, Some(T - 7))
    }

    fn backfill_of(slot: i64, own: &ControlRow, lease: Option<i64>, history: &SlotHistory) -> Decision {
        decide(Ask::Backfill(slot), own, None, lease, Logs::history(history))
    }

    /// J15: a backfill runs a past slot at or before the ledger that no record says ran (none,
    /// `missed`, `skipped_running`; a manual record of the same instant does not count), and
    /// writes nothing but its record: the ledger, the lease and the control version stay.
    #[test]
    fn j15_backfill_runs_a_past_slot_that_did_not_run_without_moving_the_ledger() {
        let own = ControlRow { last_slot: Some(T + 60_000), ..requested(1, T - 5, 0) };
        let kept = SlotHistory { at_slot: Vec::new(), oldest: Some((T - 60_000, "scheduled".into())) };
        assert_eq!(backfill_of(T, &own, None, &kept), nothing(Answer::Claimed { slot_ms: T }), "no record");
        for outcome in NOT_RUN_OUTCOMES {
            let h = SlotHistory { at_slot: vec![seen("scheduled", outcome)], ..kept.clone() };
            assert_eq!(backfill_of(T, &own, None, &h).answer, Answer::Claimed { slot_ms: T }, "{outcome}");
        }
        let manual = SlotHistory { at_slot: vec![seen("manual", "ran")], ..kept.clone() };
        assert_eq!(backfill_of(T, &own, None, &manual).answer, Answer::Claimed { slot_ms: T }, "a manual record");
        assert_eq!(
            backfill_of(T + 60_000, &own, None, &kept).answer,
            Answer::Claimed { slot_ms: T + 60_000 },
            "the ledger's own slot"
        );
        assert_eq!(
            backfill_of(T, &ControlRow { last_slot: Some(T - 1), ..row() }, Some(T), &kept).answer,
            Answer::Claimed { slot_ms: T },
            "a job's ledger includes its lease's last slot"
        );
        let no_records = SlotHistory::default();
        assert_eq!(
            backfill_of(T, &own, None, &no_records).answer,
            Answer::Claimed { slot_ms: T },
            "no record kept at all"
        );
        assert!(backfill_of(T, &own, None, &kept).writes.is_empty(), "the ledger never moves");
    }

    /// J15: a backfill is refused, writing nothing, for a slot after the ledger (the
    /// scheduler's), a slot a record says ran, runs or was backfilled (at most once), and a
    /// slot whose records retention may have dropped (outside the retained history).
    #[test]
    fn j15_backfill_refusals() {
        let own = ControlRow { last_slot: Some(T), ..row() };
        let kept = SlotHistory { at_slot: Vec::new(), oldest: Some((T - 60_000, "scheduled".into())) };
        let refused = |r| nothing(Answer::Refused(r));
        assert_eq!(backfill_of(T + 1, &own, None, &kept), refused(Refusal::SchedulersSlot));
        assert_eq!(backfill_of(T, &row(), None, &kept), refused(Refusal::SchedulersSlot), "no ledger yet");
        assert_eq!(
            backfill_of(T + 1, &own, Some(T - 9), &kept),
            refused(Refusal::SchedulersSlot),
            "the earlier lease does not move the ledger on"
        );
        let ran = Refusal::AlreadyRan { started_ms: Some(T - 7) };
        for (kind, outcome) in [
            ("scheduled", "ran"),
            ("scheduled", "failed"),
            ("scheduled", "running"),
            ("caught_up", "ran"),
            ("backfill", "missed"),
            ("backfill", "ran"),
        ] {
            let h = SlotHistory { at_slot: vec![seen("manual", "ran"), seen(kind, outcome)], ..kept.clone() };
            assert_eq!(backfill_of(T - 1000, &own, None, &h), refused(ran), "{kind} {outcome}");
        }
        let older = SlotHistory { at_slot: Vec::new(), oldest: Some((T - 999, "scheduled".into())) };
        assert_eq!(backfill_of(T - 1000, &own, None, &older), refused(Refusal::OutsideHistory));
        let same = SlotHistory { at_slot: Vec::new(), oldest: Some((T - 1000, "manual".into())) };
        assert_eq!(
            backfill_of(T - 1000, &own, None, &same),
            refused(Refusal::OutsideHistory),
            "the slot's scheduled record may have been dropped before its manual one"
        );
        let first =
            SlotHistory { at_slot: vec![seen("scheduled", "missed")], oldest: Some((T - 1000, "scheduled".into())) };
        assert_eq!(backfill_of(T - 1000, &own, None, &first).answer, Answer::Claimed { slot_ms: T - 1000 });
    }

    /// J15: paused (the job or its group), a backfill runs nothing and writes nothing; a
    /// schedule's backfill reads its own ledger only, not its partition's lease.
    #[test]
    fn j15_backfill_paused_and_schedules() {
        let paused = ControlRow { paused: true, last_slot: Some(T), ..row() };
        assert_eq!(backfill_of(T, &paused, None, &SlotHistory::default()), nothing(Answer::Paused));
        let group = ControlRow { paused: true, ..row() };
        let own = ControlRow { last_slot: Some(T), ..row() };
        let d = decide(Ask::Backfill(T), &own, Some(&group), None, Logs::history(&NO_HISTORY));
        assert_eq!(d, nothing(Answer::Paused));
        let sched = |slot| decide(Ask::ScheduleBackfill(slot), &own, None, Some(T + 5000), Logs::NONE).answer;
        assert_eq!(sched(T), Answer::Claimed { slot_ms: T });
        assert_eq!(sched(T + 1), Answer::Refused(Refusal::SchedulersSlot), "the partition's lease is not its ledger");
    }
}
