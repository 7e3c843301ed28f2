//! The one ordered writer of a job's history records.
//!
//! Every record a job writes after its claim (end records, `cancelled` from a revoke or from a
//! dropped run, abandoned runs closed, `missed` and `skipped_running` slots) is queued here and
//! written by one task, in the order it was queued, so that an earlier state of a slot can
//! never land after a later one. A queued record that a newer record of the same identity
//! `(job, kind, slot_ms)` supersedes is replaced in place: the newest state wins.
//!
//! A write the store refuses (an error, or no answer within the term's call timeout) is
//! retried, the writer backing off from [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`], until
//! the store accepts it or it is past its deadline: the end of the term that wrote it plus
//! [`RECORD_GRACE`] (a misconfigured store, which retrying cannot help, gives it up at once).
//! A record given up is visible: a warning that names the job, the slot, the outcome, the
//! attempt and the last error, and the counter `simba_job_records_lost_total`.
//!
//! Records are not fenced by the lease (`finish_run` checks the record's own token, `append`
//! inserts only if absent), so a write that lands after its term ended cannot overwrite a
//! later holder's record.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::alert::{Alert, Alerts};
use crate::Term;
use crate::backend::BackendError;
use crate::job_store::{Outcome, RunRecord, SharedJobStore, SlotKind};

/// How long after the end of its term a record is still retried: long enough to ride out a
/// store outage of this length after the term was lost to it (the session cannot be renewed
/// while the store is down, so the term often ends first), bounded so that a store gone for
/// good does not keep records queued for ever.
pub(crate) const RECORD_GRACE: Duration = Duration::from_secs(30);
/// The wait after a refused write.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two tries of a write.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The most records one lane keeps queued (one job's, or those of the schedules hashed to it);
/// past it the oldest is given up (visibly). With one record per slot identity this is hours
/// of a 1 s job during an outage.
pub(crate) const MAX_QUEUED: usize = 10_000;

/// One record to write.
#[derive(Debug, Clone)]
pub(crate) enum Write {
    /// `finish_run`: how a claimed slot ended (also `cancelled`, and abandoned runs closed).
    Finish(RunRecord),
    /// `append`: a slot that was not claimed (`missed`, `skipped_running`).
    Append(RunRecord),
    /// A scheduled or caught-up slot whose claim got no answer, as `missed`: `finish_run`
    /// first (the claim may have taken effect and left a `running` record with this term's
    /// token), else `append` of a scheduled slot.
    Unclaimed(RunRecord),
    /// An abandoned run closed `cancelled` by a later term: only while the store still shows
    /// the slot `running` with the earlier term's token, and never in place of a record of the
    /// slot still queued here (the earlier term's own end records, waiting for the store,
    /// know how the run ended; the close only guesses).
    Close(RunRecord),
    /// A manual slot whose claim got no answer: the `running` record the claim would have
    /// written (its session, token and start name it; `error` the reason). If the claim took
    /// effect, the request was taken and that record waits in the store for an end that never
    /// comes: it is found among the job's newest records and finished `missed` with the
    /// reason. If it did not, nothing is written (the request is still pending).
    LostManual(RunRecord),
}

impl Write {
    fn record(&self) -> &RunRecord {
        match self {
            Write::Finish(r) | Write::Append(r) | Write::Unclaimed(r) | Write::Close(r) | Write::LostManual(r) => r,
        }
    }

    fn identity(&self) -> (&str, SlotKind, i64) {
        let r = self.record();
        (&r.job, r.kind, r.slot_ms)
    }
}

/// How many of a job's newest records a close looks through for the one it closes (it was the
/// newest when the term started).
const CLOSE_LOOKBACK: usize = 64;

/// A write with what the writer needs to bound it.
pub(crate) struct Queued {
    pub(crate) write: Write,
    /// The term that wrote it: its call timeout bounds each try, its end the retries.
    pub(crate) term: Term,
    /// The job's name in metrics (the group's name for a partition).
    pub(crate) metric: Arc<str>,
}

/// How many records the writers of one runtime still hold (queued or being written), so that
/// a graceful stop can wait for them before it closes the session.
#[derive(Default)]
pub(crate) struct Pending {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Pending {
    fn add(&self) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn done(&self) {
        if self.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Records not yet written or given up.
    pub(crate) fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until every record handed to these writers was written or given up, for at most
    /// `limit`; returns how many are still held.
    pub(crate) async fn drained(&self, limit: Duration) -> usize {
        let until = Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count() == 0 {
                return 0;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return self.count();
            }
        }
    }
}

/// A cheap handle on one job's writer; the task starts with the first record and ends once
/// every handle is gone and its queue is written or given up.
///
/// A writer shared by many jobs (the schedules of a node, [`lanes`](Self::lanes)) writes on
/// several lanes at once, each an ordered queue with its own task: a job's records always go
/// to the same lane (by a hash of its name), so each job's records are still written in the
/// order they came, while the records of different jobs do not wait for each other's round
/// trips.
#[derive(Clone, Default)]
pub(crate) struct Writer {
    tx: Arc<OnceLock<Lanes>>,
    pending: Arc<Pending>,
    /// The application's alert hook: told of a `failed` or `missed` record once it took effect.
    alerts: Option<Alerts>,
    /// How many lanes the writer's task runs (0 and 1: one).
    lanes: usize,
}

/// The senders of a writer's lanes.
type Lanes = Arc<[mpsc::UnboundedSender<Queued>]>;

/// The sending side of a job's writer: counts what it hands over in the runtime's
/// [`Pending`]. Sending needs no runtime (a dropped run's guard sends from `Drop`).
#[derive(Clone)]
pub(crate) struct WriterTx {
    tx: Lanes,
    pending: Arc<Pending>,
}

impl WriterTx {
    /// Queues `q` on its job's lane; `Err` when the writer's task has stopped (its runtime is
    /// gone).
    pub(crate) fn send(&self, q: Queued) -> Result<(), ()> {
        let lane = match self.tx.len() {
            0 => return Err(()),
            1 => 0,
            n => lane_of(&q.write.record().job, n),
        };
        self.pending.add();
        self.tx[lane].send(q).map_err(|_| self.pending.done())
    }
}

/// The lane of `job`'s records among `lanes` (stable for the process's life).
fn lane_of(job: &str, lanes: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(job);
    usize::try_from(h % lanes as u64).unwrap_or(0)
}

impl Writer {
    /// A writer whose records count in `pending` (one per runtime).
    pub(crate) fn counted(pending: Arc<Pending>, alerts: Option<Alerts>) -> Self {
        Writer { tx: Arc::default(), pending, alerts, lanes: 1 }
    }

    /// This writer on `lanes` lanes, for the records of many jobs (see the type's text).
    pub(crate) fn lanes(self, lanes: usize) -> Self {
        Writer { lanes: lanes.max(1), ..self }
    }

    /// The writer's queue, starting its tasks on first use (inside a Tokio runtime).
    pub(crate) fn sender(&self, store: &SharedJobStore) -> WriterTx {
        let tx = self.tx.get_or_init(|| {
            (0..self.lanes.max(1))
                .map(|_| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(run(store.clone(), rx, self.pending.clone(), self.alerts.clone()));
                    tx
                })
                .collect()
        });
        WriterTx { tx: Arc::clone(tx), pending: Arc::clone(&self.pending) }
    }

    /// The application's alert hook: the writer raises `failed` and `missed`, the runner
    /// `late` starts.
    pub(crate) fn alerts(&self) -> Option<&Alerts> {
        self.alerts.as_ref()
    }
}

/// Queues `q`: replaces a queued record of the same identity, else appends it. A full queue
/// gives its oldest record up.
fn push(queue: &mut VecDeque<Queued>, q: Queued, pending: &Pending) {
    if let Some(old) = queue.iter_mut().find(|o| o.write.identity() == q.write.identity()) {
        // A close is a guess made from the store; a queued record of the slot is its run's own
        // word, which the close must not replace.
        if !matches!(q.write, Write::Close(_)) {
            *old = q;
        }
        pending.done();
        return;
    }
    if queue.len() >= MAX_QUEUED
        && let Some(oldest) = queue.pop_front()
    {
        give_up(&oldest, &format!("more than {MAX_QUEUED} records of the job were waiting for the store"));
        pending.done();
    }
    queue.push_back(q);
}

/// The writer's task: the head of the queue is written (retried) before the next.
async fn run(
    store: SharedJobStore,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    pending: Arc<Pending>,
    alerts: Option<Alerts>,
) {
    let mut queue = VecDeque::new();
    let mut open = true;
    let mut backoff = FIRST_BACKOFF;
    loop {
        if queue.is_empty() {
            if !open {
                return;
            }
            match rx.recv().await {
                Some(q) => push(&mut queue, q, &pending),
                None => return,
            }
        }
        while let Ok(q) = rx.try_recv() {
            push(&mut queue, q, &pending);
        }
        let Some(head) = queue.front() else { continue };
        match write(&store, head).await {
            Ok(took) => {
                if took
                    && let Some(a) = &alerts
                    && let Some(alert) = Alert::of_record(head.write.record())
                {
                    a.deliver(&alert, &head.metric);
                }
                queue.pop_front();
                pending.done();
                backoff = FIRST_BACKOFF;
            }
            Err(Refused { error, permanent }) => {
                if permanent || Instant::now() >= deadline(&head.term) {
                    give_up(head, &error);
                    queue.pop_front();
                    pending.done();
                    continue;
                }
                tracing::debug!(job = %head.write.record().job, slot_ms = head.write.record().slot_ms, %error, ?backoff, "the store refused a record; retrying");
                let until = Instant::now() + backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                // Records queued meanwhile are taken in, so that a newer state of the head
                // replaces it before the next try.
                while open {
                    tokio::select! {
                        q = rx.recv() => match q {
                            Some(q) => push(&mut queue, q, &pending),
                            None => open = false,
                        },
                        () = sleep_until(until) => break,
                    }
                }
                sleep_until(until).await;
            }
        }
    }
}

/// The last instant a record of `term` is tried: the term's end plus [`RECORD_GRACE`] (while
/// the term lasts, its deadline moves with each renewal).
fn deadline(term: &Term) -> Instant {
    term.deadline() + RECORD_GRACE
}

struct Refused {
    error: String,
    permanent: bool,
}

impl From<BackendError> for Refused {
    fn from(e: BackendError) -> Self {
        let permanent = matches!(e, BackendError::Misconfigured(_));
        Refused { error: e.to_string(), permanent }
    }
}

/// One try of `q`, within the term's call timeout (the renewal period once the term ended:
/// the timeout of a call made for an ended session is zero). `Ok(true)`: this write set the
/// slot's record (`false`: it was there already, or retention or a later holder's record took
/// its place), so an alert is raised once, by the node whose write took effect.
async fn write(store: &SharedJobStore, q: &Queued) -> Result<bool, Refused> {
    let to = match q.term.call_timeout() {
        d if d.is_zero() => q.term.session().period(),
        d => d,
    };
    match tokio::time::timeout(to, write_once(store, &q.write)).await {
        Ok(r) => r,
        Err(_) => Err(Refused { error: format!("the store did not answer within {to:?}"), permanent: false }),
    }
}

async fn write_once(store: &SharedJobStore, w: &Write) -> Result<bool, Refused> {
    match w {
        Write::Finish(r) => {
            let took = store.finish_run(r).await?;
            if !took {
                // Retention dropped it, or a later holder's record took its identity.
                tracing::debug!(job = %r.job, slot_ms = r.slot_ms, outcome = %r.outcome, "the slot's record was gone (retention)");
            }
            Ok(took)
        }
        Write::Append(r) => Ok(store.append(r).await?),
        Write::Close(r) => {
            let still_running = store.history(&r.job, CLOSE_LOOKBACK).await?.iter().any(|s| {
                (s.kind, s.slot_ms) == (r.kind, r.slot_ms) && s.outcome == Outcome::Running && s.token == r.token
            });
            if still_running {
                return Ok(store.finish_run(r).await?);
            }
            tracing::debug!(job = %r.job, slot_ms = r.slot_ms, "the abandoned run's record was ended meanwhile; not closing it");
            Ok(false)
        }
        Write::LostManual(r) => {
            let taken = store.history(&r.job, CLOSE_LOOKBACK).await?.into_iter().find(|s| {
                s.kind == SlotKind::Manual
                    && s.outcome == Outcome::Running
                    && (s.session.as_str(), s.token, s.started_ms) == (r.session.as_str(), r.token, r.started_ms)
            });
            let Some(taken) = taken else {
                tracing::debug!(job = %r.job, "the manual claim that got no answer did not take effect: its request is still pending");
                return Ok(false);
            };
            let error = r.error.as_deref().unwrap_or("no answer");
            let mut done = unclaimed(taken, error);
            done.error = Some(crate::job_store::truncate_error(&format!(
                "the store did not answer the claim of this run-now request ({error}); it took the request, so the request will not run: trigger it again"
            )));
            tracing::warn!(job = %r.job, slot_ms = done.slot_ms, key = ?done.request_key, "a run-now request's claim took effect without an answer: its run is recorded missed");
            Ok(store.finish_run(&done).await?)
        }
        Write::Unclaimed(r) => {
            if store.finish_run(r).await? {
                return Ok(true);
            }
            let mut a = r.clone();
            a.kind = SlotKind::Scheduled;
            Ok(store.append(&a).await?)
        }
    }
}

fn give_up(q: &Queued, error: &str) {
    let r = q.write.record();
    crate::metrics::job_record_lost(&q.metric);
    tracing::warn!(
        job = %r.job,
        slot_ms = r.slot_ms,
        kind = %r.kind,
        outcome = %r.outcome,
        attempt = r.attempt,
        token = r.token,
        error,
        "gave up a job record: the store did not take it before its deadline (the end of its term plus {RECORD_GRACE:?}); the history lacks this state of the slot"
    );
}

/// The `missed` record of a slot whose claim got no answer (`error` says what the store did).
pub(crate) fn unclaimed(mut running: RunRecord, error: &str) -> RunRecord {
    running.outcome = Outcome::Missed;
    running.attempt = 0;
    running.started_ms = None;
    running.ended_ms = None;
    running.error = Some(crate::job_store::truncate_error(&format!(
        "the store did not answer: {error} (the slot's claim failed, so it did not run)"
    )));
    running
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    use tokio::sync::broadcast;

    use super::*;
    use crate::RevokeReason;
    use crate::backend::BackendResult;
    use crate::backend::SessionId;
    use crate::job_store::{Claim, ClaimRequest, JobState, JobStore, Trigger};
    use crate::term::SessionCell;

    /// Takes `finish_run` and `append` in the order they come, after refusing the first
    /// `refuse` of them.
    #[derive(Default)]
    struct Log {
        refuse: AtomicU32,
        taken: Mutex<Vec<RunRecord>>,
        /// A job whose `finish_run` waits for a permit of the semaphore.
        hold: Option<(String, tokio::sync::Semaphore)>,
    }

    impl Log {
        fn take(&self, r: &RunRecord) -> BackendResult<bool> {
            if self.refuse.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err(BackendError::Unavailable { message: "refused".into(), source: None });
            }
            self.taken.lock().map_err(|_| BackendError::Protocol("poisoned".into()))?.push(r.clone());
            Ok(true)
        }
        fn taken(&self) -> Vec<(i64, Outcome, u32)> {
            let taken = self.taken.lock().map(|t| t.clone()).unwrap_or_default();
            taken.iter().map(|r| (r.slot_ms, r.outcome, r.attempt)).collect()
        }
    }

    fn unused<T>() -> BackendResult<T> {
        Err(BackendError::Protocol("not used by the writer".into()))
    }

    impl JobStore for Log {
        async fn claim_run(&self, _: ClaimRequest<'_>) -> BackendResult<Claim> {
            unused()
        }
        async fn finish_run(&self, r: &RunRecord) -> BackendResult<bool> {
            if let Some((job, gate)) = &self.hold
                && r.job == *job
            {
                let _ = gate.acquire().await;
            }
            self.take(r)
        }
        async fn append(&self, r: &RunRecord) -> BackendResult<bool> {
            self.take(r)
        }
        async fn history(&self, _: &str, _: usize) -> BackendResult<Vec<RunRecord>> {
            unused()
        }
        async fn job(&self, _: &str) -> BackendResult<Option<JobState>> {
            unused()
        }
        async fn jobs(&self) -> BackendResult<Vec<JobState>> {
            unused()
        }
        async fn set_paused(&self, _: &str, _: bool) -> BackendResult<bool> {
            unused()
        }
        async fn trigger(&self, _: &str, _: Trigger<'_>) -> BackendResult<crate::job_store::Triggered> {
            unused()
        }
        async fn control_version(&self) -> BackendResult<u64> {
            unused()
        }
        fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
            None
        }
        async fn publish_registry(&self, _: &SessionId, _: &str) -> BackendResult<bool> {
            unused()
        }
        async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
            unused()
        }
        fn retention(&self) -> usize {
            100
        }
        fn keeping(&self, _: usize) -> SharedJobStore {
            SharedJobStore::new(Log::default())
        }
        fn describe(&self) -> String {
            "log".into()
        }
    }

    /// A term whose session's local deadline is `lasts` from now.
    fn term_for(lasts: Duration) -> Term {
        let now = Instant::now();
        let cell = SessionCell::new(SessionId::new("s1"), now + lasts, Duration::from_millis(500));
        Term::new("j".into(), 1, Arc::new(cell), now)
    }

    fn term() -> Term {
        term_for(Duration::from_secs(3))
    }

    fn record(slot_ms: i64, outcome: Outcome, attempt: u32) -> RunRecord {
        let mut r = RunRecord::not_run("j", slot_ms, outcome);
        r.attempt = attempt;
        r.token = 1;
        r
    }

    fn queued(write: Write, term: &Term) -> Queued {
        Queued { write, term: term.clone(), metric: "j".into() }
    }

    /// An abandoned run's close never replaces a queued record of the same slot: here the
    /// earlier term's own end record (`ran`, attempt 2) waits for a store that refuses writes
    /// when the next term queues its close of the slot it read as `running`; the end record
    /// lands and the close is dropped. (The close used to replace it: `cancelled`, attempt 1.)
    #[tokio::test(start_paused = true)]
    async fn a_close_never_replaces_a_queued_end_record() {
        let log = Arc::new(Log { refuse: AtomicU32::new(2), ..Log::default() });
        let store = SharedJobStore::from_arc(log.clone());
        let (writer, term) = (Writer::default(), term());
        let tx = writer.sender(&store);
        assert!(tx.send(queued(Write::Finish(record(1, Outcome::Ran, 2)), &term)).is_ok());
        assert!(tx.send(queued(Write::Close(record(1, Outcome::Cancelled, 1)), &term)).is_ok());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(log.taken(), vec![(1, Outcome::Ran, 2)]);
    }

    /// A close writes only while the store still shows the slot `running` with the earlier
    /// term's token: one ended meanwhile (its end record landed after the next term read it) is
    /// left as it ended.
    #[tokio::test(start_paused = true)]
    async fn a_close_writes_only_a_record_still_running() {
        let backend = crate::backend::memory::MemoryBackend::new();
        let store: SharedJobStore = SharedJobStore::new(backend.jobs());
        let (writer, term) = (Writer::default(), term());
        for (slot, outcome) in [(1, Outcome::Running), (2, Outcome::Running)] {
            let mut r = record(slot, outcome, 1);
            r.kind = SlotKind::Scheduled;
            assert!(store.append(&r).await.is_ok_and(|inserted| inserted));
        }
        let mut ended = record(2, Outcome::Ran, 1);
        ended.ended_ms = Some(5);
        assert!(store.finish_run(&ended).await.is_ok_and(|done| done));
        let tx = writer.sender(&store);
        for slot in [1, 2] {
            assert!(tx.send(queued(Write::Close(record(slot, Outcome::Cancelled, 1)), &term)).is_ok());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let h = store.history("j", 10).await.map_err(|e| e.to_string());
        let outcomes: Vec<(i64, Outcome)> = h.unwrap_or_default().iter().map(|r| (r.slot_ms, r.outcome)).collect();
        assert_eq!(outcomes, vec![(2, Outcome::Ran), (1, Outcome::Cancelled)]);
    }

    /// No lost records: writes are taken in the order queued, retried while the store
    /// refuses them, and a queued state of a slot that a newer one supersedes is never
    /// written after it (attempt 1's `retried` and a `cancelled` give way to attempt 2's end).
    #[tokio::test(start_paused = true)]
    async fn writes_in_order_and_the_newest_state_of_a_slot_wins() {
        let log = Arc::new(Log { refuse: AtomicU32::new(3), ..Log::default() });
        let store = SharedJobStore::from_arc(log.clone());
        let (writer, term) = (Writer::default(), term());
        let tx = writer.sender(&store);
        for w in [
            Write::Finish(record(1, Outcome::Retried, 1)),
            Write::Append(record(2, Outcome::SkippedRunning, 0)),
            Write::Finish(record(1, Outcome::Cancelled, 1)),
            Write::Finish(record(1, Outcome::Failed, 2)),
            Write::Append(record(3, Outcome::SkippedRunning, 0)),
        ] {
            assert!(tx.send(queued(w, &term)).is_ok());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            log.taken(),
            vec![(1, Outcome::Failed, 2), (2, Outcome::SkippedRunning, 0), (3, Outcome::SkippedRunning, 0)]
        );
        // A state queued while an earlier one of the same slot is being retried replaces it.
        log.refuse.store(2, Ordering::SeqCst);
        assert!(tx.send(queued(Write::Finish(record(4, Outcome::Retried, 1)), &term)).is_ok());
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(tx.send(queued(Write::Finish(record(4, Outcome::Ran, 2)), &term)).is_ok());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(log.taken().last(), Some(&(4, Outcome::Ran, 2)));
        assert_eq!(log.taken().len(), 4);
    }

    /// R6, lanes: a writer shared by many jobs writes on its lanes at once, each job's records
    /// on one lane in order. While the store holds a write of job `stuck`, another job's
    /// records (on another lane) are written, in order; on one lane they wait behind it.
    #[tokio::test(start_paused = true)]
    async fn r6_a_shared_writers_lanes_do_not_wait_for_each_other() {
        const LANES: usize = 8;
        let other = (0..100).map(|i| format!("job-{i}")).find(|j| lane_of(j, LANES) != lane_of("stuck", LANES));
        let Some(other) = other else { panic!("no job name on another lane than `stuck`") };
        let of =
            |job: &str, slot_ms: i64, outcome: Outcome| RunRecord { job: job.into(), ..record(slot_ms, outcome, 1) };
        for (lanes, written) in [(LANES, true), (1, false)] {
            let hold = Some(("stuck".to_owned(), tokio::sync::Semaphore::new(0)));
            let log = Arc::new(Log { hold, ..Log::default() });
            let store = SharedJobStore::from_arc(log.clone());
            let (writer, term) = (Writer::default().lanes(lanes), term());
            let tx = writer.sender(&store);
            assert!(tx.send(queued(Write::Finish(of("stuck", 1, Outcome::Ran)), &term)).is_ok());
            for slot in [1, 2, 3] {
                assert!(tx.send(queued(Write::Finish(of(&other, slot, Outcome::Ran)), &term)).is_ok());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            let expected: Vec<(i64, Outcome, u32)> =
                if written { [1, 2, 3].map(|slot| (slot, Outcome::Ran, 1)).to_vec() } else { Vec::new() };
            assert_eq!(log.taken(), expected, "{lanes} lane(s): the other job's records while `stuck` waits");
            if let Some((_, gate)) = &log.hold {
                gate.add_permits(100);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(log.taken().len(), 4, "{lanes} lane(s): every record written once the store answers");
        }
    }

    /// Counts `simba_job_records_lost_total`.
    struct Lost(Arc<AtomicU64>);

    impl metrics::Recorder for Lost {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
        fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
            if key.name() == crate::metrics::names::JOB_RECORDS_LOST {
                metrics::Counter::from_arc(Arc::clone(&self.0))
            } else {
                metrics::Counter::noop()
            }
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    /// A record given up is visible: retried while its term lasts and for the grace after its
    /// end, then counted in `simba_job_records_lost_total` (and logged); the records after it
    /// are still written.
    #[test]
    fn a_record_given_up_after_its_terms_end_and_grace_is_counted() {
        let lost = Arc::new(AtomicU64::new(0));
        let recorder = Lost(Arc::clone(&lost));
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
        let rt = rt.unwrap_or_else(|e| panic!("runtime: {e}"));
        let log = Arc::new(Log { refuse: AtomicU32::new(u32::MAX), ..Log::default() });
        let counted = metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                let store = SharedJobStore::from_arc(log.clone());
                let (writer, ended, lasting) = (Writer::default(), term(), term_for(Duration::from_secs(3600)));
                let tx = writer.sender(&store);
                assert!(tx.send(queued(Write::Finish(record(1, Outcome::Ran, 1)), &ended)).is_ok());
                assert!(tx.send(queued(Write::Append(record(2, Outcome::SkippedRunning, 0)), &lasting)).is_ok());
                tokio::time::sleep(Duration::from_secs(2)).await;
                ended.revoke(RevokeReason::Stopped);
                tokio::time::sleep(RECORD_GRACE - Duration::from_secs(1)).await;
                let before = lost.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                // The record of the term that lasts is still being retried.
                log.refuse.store(0, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(2)).await;
                before
            })
        });
        assert_eq!(counted, 0, "not before the end of the term and its grace");
        assert_eq!(lost.load(Ordering::SeqCst), 1);
        assert_eq!(log.taken(), vec![(2, Outcome::SkippedRunning, 0)]);
    }
}
