//! The run of one slot: the slot loops (`schedule.rs`) hand each slot to the job's
//! [`SlotRunner`], which claims it, calls the job's function in attempts (retries with
//! backoff, a timeout, manual runs alike), and records how each attempt ended through the
//! job's [`Recording`] (`history.rs`).
//!
//! Read top-down: [`SlotRunner::run`] -> [`claim`](SlotRunner::claim) ->
//! [`attempts`](SlotRunner::attempts) -> [`attempt`](SlotRunner::attempt) -> the record.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use simba_core::backfill::BackfillPlan;
use simba_core::policy::Bounds;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::clock::WallClock;
use super::context::JobContext;
use super::history::Recording;
use super::policy::RunPolicy;
use super::registry::JobFuture;
use super::writer::{Queued, Write, WriterTx};
use crate::backend::BackendResult;
use crate::job_store::{Claim, ClaimRequest, Outcome, RunRecord, SlotKind, truncate_error};
use crate::metrics::ClaimResult;
use crate::{BoxError, Error, RevokeReason, Simba, Term};

/// One slot, as a slot loop hands it to the runner.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    /// The slot's name in the store: its instant in unix milliseconds (a fixed-rate slot's is
    /// above the last one claimed, whatever this node's wall clock says).
    pub(crate) ms: i64,
    /// The slot's wall-clock instant.
    pub(crate) at: DateTime<Utc>,
    /// Why the slot exists.
    pub(crate) kind: SlotKind,
    /// Whether the slot is claimed with the lease backend's `claim_slot` when there is no jobs
    /// store, so that it runs at most once across the cluster (J5): cron, caught-up and manual
    /// slots. Fixed-rate slots were never claimed there.
    pub(crate) claim_without_store: bool,
}

impl Slot {
    /// A slot at `at` (cron, caught-up, manual).
    pub(crate) fn at(at: DateTime<Utc>, kind: SlotKind) -> Slot {
        Slot { ms: at.timestamp_millis(), at, kind, claim_without_store: true }
    }

    /// A fixed-rate slot, named `ms` at wall-clock instant `at`.
    pub(crate) fn fixed_rate((ms, at): (i64, DateTime<Utc>)) -> Slot {
        Slot { ms, at, kind: SlotKind::Scheduled, claim_without_store: false }
    }
}

/// What a claim decided.
enum Claimed {
    /// Run it; with the `running` record when there is a store.
    Run(Option<RunRecord>),
    /// Do not run it.
    Skip,
    /// Do not run it: the job is paused.
    Paused,
}

/// How one attempt ended.
enum Attempt {
    Done(Result<(), BoxError>),
    /// The body returned `Ok` within the grace after its timeout signal: recorded as run,
    /// with a note, and never retried (its work is done).
    LateOk,
    /// The body did not complete within the grace, or returned an error during it.
    TimedOut(Option<String>),
    /// A newer slot replaced the run (`overlap = "cancel_running"`, J11): it was signalled,
    /// and stopped within the grace (`true`) or was dropped after it (`false`).
    Replaced(bool),
}

/// Where a claimed manual run's payload override is put before its body is called (rule
/// A15): the schedule's body reads it, and falls back to the schedule's payload.
pub(crate) type PayloadCell = Arc<std::sync::Mutex<Option<Arc<str>>>>;

/// A backfill the holder took (rule J16): its request's `manual` record (the backfill's own,
/// `running` while its slots are claimed), the slots of its range still to claim, oldest
/// first, and when the next may start at the budget.
pub(crate) struct Walk {
    record: RunRecord,
    plan: BackfillPlan,
    slots: VecDeque<i64>,
    next_at: Instant,
    total: usize,
    ran: usize,
    refused: usize,
}

impl Walk {
    /// What is left of it, for its `cancelled` record (`back`: slots taken from it but not
    /// run, counted as left).
    fn left(&self, back: usize) -> String {
        let (left, total, ran, refused) = (self.slots.len() + back, self.total, self.ran, self.refused);
        format!("{left} of {total} slots of the backfill left ({ran} run, {refused} skipped)")
    }

    /// When its next slot may start at the budget.
    pub(crate) fn next_at(&self) -> Instant {
        self.next_at
    }
}

/// The job body that `make` makes, a panic while it is made or run becoming its error: the
/// attempt is then `failed` with the panic's message and retried as any failure is, rather
/// than unwinding through the runner (whose guard would record the slot `cancelled`, as if
/// the term had ended, and whose schedule would lose the backfills it carried).
fn unwinding_to_error(make: impl FnOnce() -> JobFuture) -> impl std::future::Future<Output = Result<(), BoxError>> {
    use futures_util::FutureExt;
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(make));
    async move {
        match made {
            Ok(fut) => std::panic::AssertUnwindSafe(fut).catch_unwind().await.unwrap_or_else(|p| Err(panicked(&*p))),
            Err(p) => Err(panicked(&*p)),
        }
    }
}

/// A job body's panic as its error: `the job panicked: <message>`.
fn panicked(payload: &(dyn std::any::Any + Send)) -> BoxError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|m| (*m).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned());
    format!("the job panicked: {message}").into()
}

/// Runs the slots of one job in one term, one at a time (J5): each slot is claimed, run in
/// attempts, and recorded.
pub(crate) struct SlotRunner<F> {
    simba: Simba,
    rec: Recording,
    term: Term,
    /// The job's function, called once per attempt with the term.
    body: F,
    /// Where the claim's payload override goes (a schedule's runner only).
    payload: Option<PayloadCell>,
    /// The job's cron grid, whose past slots a backfill claims (`None`: a fixed-rate job,
    /// which has no past grid).
    grid: Option<(Cron, Tz, Bounds)>,
    /// The backfills taken in this term, oldest first (J16).
    walks: std::sync::Mutex<VecDeque<Walk>>,
}

impl<F: Fn(Term) -> JobFuture> SlotRunner<F> {
    /// The runner of the job function `body` in `term`, recording through `rec`.
    pub(crate) fn new(simba: Simba, rec: Recording, term: Term, body: F) -> Self {
        SlotRunner { simba, rec, term, body, payload: None, grid: None, walks: Default::default() }
    }

    /// Backfills walk the past slots of `cron` in `tz` within `bounds` (a cron job's runner;
    /// an instant outside the bounds is no slot, J14, so no backfill runs it).
    pub(crate) fn with_grid(mut self, cron: Cron, tz: Tz, bounds: Bounds) -> Self {
        self.grid = Some((cron, tz, bounds));
        self
    }

    fn walks(&self) -> std::sync::MutexGuard<'_, VecDeque<Walk>> {
        self.walks.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the oldest backfill's next slot may start (`None`: no backfill is walking).
    pub(crate) fn backfill_due(&self) -> Option<Instant> {
        self.walks().front().map(|w| w.next_at)
    }

    /// The oldest backfill's next slot to claim, when one is due; a backfill with no slot left
    /// is finished (its record `ran`, the tally logged) and the next one's slot answered.
    pub(crate) fn backfill_next(&self) -> Option<Slot> {
        let mut walks = self.walks();
        loop {
            let w = walks.front_mut()?;
            if let Some(ms) = w.slots.pop_front() {
                let at = DateTime::from_timestamp_millis(ms)?;
                return Some(Slot { ms, at, kind: SlotKind::Backfill, claim_without_store: false });
            }
            let w = walks.pop_front()?;
            tracing::info!(
                job = %self.rec.job, request = w.record.request_key.as_deref().unwrap_or_default(),
                slots = w.total, ran = w.ran, skipped = w.refused,
                "backfill done: {} of {} slots claimed and run, {} skipped", w.ran, w.total, w.refused
            );
            let done =
                RunRecord { outcome: Outcome::Ran, ended_ms: Some(self.rec.now().timestamp_millis()), ..w.record };
            self.rec.finish(&done, &self.term);
        }
    }

    /// The holder took a backfill's request (its `manual` record `running`): its range's
    /// slots on the job's grid are walked from the next wait of the slot loop on.
    fn take_backfill(&self, plan: BackfillPlan, record: RunRecord) {
        let job = &self.rec.job;
        let Some((cron, tz, bounds)) = &self.grid else {
            let why = "this job has no cron grid to backfill: a fixed-rate job's or schedule's slots are named after \
                       the last one claimed, so it has no past slots to run again";
            tracing::warn!(%job, "{why}");
            let mut failed = record;
            failed.outcome = Outcome::Failed;
            failed.error = Some(why.to_owned());
            failed.ended_ms = Some(self.rec.now().timestamp_millis());
            self.rec.finish(&failed, &self.term);
            return;
        };
        let mut slots = VecDeque::new();
        let mut after = DateTime::from_timestamp_millis(plan.from_ms.saturating_sub(1));
        while let Some(s) = after.and_then(|a| simba_core::slots::next_slot(cron, *tz, a)) {
            if s.timestamp_millis() > plan.to_ms || slots.len() as u64 >= simba_core::backfill::MAX_BACKFILL_SLOTS {
                break;
            }
            if bounds.contains(s) {
                slots.push_back(s.timestamp_millis());
            }
            after = Some(s);
        }
        tracing::info!(
            %job, request = record.request_key.as_deref().unwrap_or_default(), slots = slots.len(), rate = plan.rate(),
            "backfill taken: claiming its slots oldest first at the budget"
        );
        let total = slots.len();
        self.walks().push_back(Walk { record, plan, slots, next_at: Instant::now(), total, ran: 0, refused: 0 });
    }

    /// Hands the backfills `walks` (taken by another runner of the same job and term) to this
    /// runner, behind the ones it has: a schedule's partition worker keeps them between its
    /// per-slot runners (A16).
    pub(crate) fn give_walks(&self, walks: VecDeque<Walk>) {
        self.walks().extend(walks);
    }

    /// Puts `slot`, taken by [`backfill_next`](Self::backfill_next) and not claimed, back at
    /// the front of the oldest backfill (its count of the slots left includes it again).
    pub(crate) fn backfill_put_back(&self, slot: Slot) {
        if let Some(w) = self.walks().front_mut() {
            w.slots.push_front(slot.ms);
        }
    }

    /// Takes this runner's backfills back (none are left to be ended when it drops).
    pub(crate) fn take_walks(&self) -> VecDeque<Walk> {
        std::mem::take(&mut *self.walks())
    }

    /// Ends every backfill of this runner `cancelled`: `why` (what stopped it), then the slots
    /// left; the same backfill asked again finishes it (the slots that ran are refused by their
    /// claim, J15).
    pub(crate) fn end_walks(&self, why: &str) {
        for w in self.take_walks() {
            let left = w.left(0);
            cancel_walk(
                &self.rec,
                &self.term,
                w,
                format!("{why}, with {left}; ask for the backfill again to finish it: slots that ran are refused"),
            );
        }
    }

    /// A backfill's slot found the job paused: the backfill stops there, its record `cancelled`
    /// naming the slots left (from this one on); asked again after the resume, it finishes.
    fn backfill_paused(&self, slot: Slot) {
        let Some(w) = self.walks().pop_front() else { return };
        let at = crate::job_store::rfc3339_ms(Some(slot.ms)).unwrap_or_default();
        let left = w.left(1);
        let why = format!(
            "the job was paused at slot {at} with {left}; resume it and ask for the backfill again: slots that ran are \
             refused"
        );
        cancel_walk(&self.rec, &self.term, w, why);
    }

    /// A backfill's slot was claimed (`ran`) or refused: the next starts after the budget's
    /// interval, or at once after a refusal (a refused slot costs no run).
    fn backfill_tally(&self, ran: bool) {
        if let Some(w) = self.walks().front_mut() {
            if ran {
                w.ran += 1;
                w.next_at = Instant::now() + w.plan.interval();
            } else {
                w.refused += 1;
            }
        }
    }

    /// Puts each claimed run's payload override (or none) in `cell` before its body runs.
    pub(crate) fn with_payload_cell(mut self, cell: PayloadCell) -> Self {
        self.payload = Some(cell);
        self
    }

    /// The job's records (and its names, store and clock).
    pub(crate) fn records(&self) -> &Recording {
        &self.rec
    }

    /// The term the slots run under.
    pub(crate) fn term(&self) -> &Term {
        &self.term
    }

    /// Runs `slot` to its end: claims it (one store round trip: fenced, monotonic,
    /// pause-aware, and writing the `running` record), then runs its attempts, each ending
    /// with a record of its outcome. Returns whether the slot ran (false: not claimed).
    pub(crate) async fn run(&self, slot: Slot) -> bool {
        self.run_replaceable(slot, &CancellationToken::new()).await
    }

    /// [`run`](Self::run), for a run that a newer slot may replace (`overlap =
    /// "cancel_running"`, J11): when `replaced` fires the run gets its cancellation signal, then
    /// [`RunPolicy::GRACE`], and is recorded `cancelled` (never retried).
    pub(crate) async fn run_replaceable(&self, slot: Slot, replaced: &CancellationToken) -> bool {
        let claimed = self.claim(slot).await;
        if slot.kind == SlotKind::Backfill {
            match claimed {
                Claimed::Paused => self.backfill_paused(slot),
                _ => self.backfill_tally(matches!(claimed, Claimed::Run(_))),
            }
        }
        let Claimed::Run(running) = claimed else { return false };
        if let Some(record) = running.as_ref().filter(|r| r.kind == SlotKind::Manual)
            && let Some(plan) = record.request_key.as_deref().and_then(BackfillPlan::from_key)
        {
            self.take_backfill(plan, record.clone());
            return true;
        }
        if let Some(cell) = &self.payload {
            let given = running.as_ref().and_then(|r| r.payload_override.clone());
            *cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = given;
        }
        if slot.kind == SlotKind::Manual {
            tracing::info!(job = %self.rec.job, token = self.term.token(), "running the job now, as requested");
        }
        self.attempts(running, slot, replaced).await;
        true
    }

    /// Claims `slot` like a run (counted, fenced, recorded `running`) but does not run it: the
    /// record is finished `missed` with `why` (a schedule slot whose handler this node lacks,
    /// A12), so no node runs the slot later and it is accounted for once. Returns whether it
    /// was claimed.
    pub(crate) async fn claim_as_missed(&self, slot: Slot, why: String) -> bool {
        let Claimed::Run(Some(mut record)) = self.claim(slot).await else { return false };
        record.outcome = Outcome::Missed;
        record.attempt = 0;
        record.started_ms = None;
        record.error = Some(why);
        crate::metrics::job_slot(&self.rec.metric, Outcome::Missed);
        self.rec.finish(&record, &self.term);
        true
    }

    /// Claims `slot` for the term: one store round trip (`claim_run`, or the lease backend's
    /// `claim_slot` without a jobs store, [`claim_without_store`](Self::claim_without_store)).
    async fn claim(&self, slot: Slot) -> Claimed {
        let Some(store) = &self.rec.store else { return self.claim_without_store(slot).await };
        let (term, slot_ms, kind) = (&self.term, slot.ms, slot.kind);
        let to = term.call_timeout();
        let req = ClaimRequest {
            session: term.session_id(),
            lease: term.name(),
            token: term.token(),
            job: &self.rec.job,
            slot_ms,
            kind,
            node: &self.rec.node,
            started_ms: self.rec.now().timestamp_millis(),
            attempts: self.rec.policy.attempts.max(1),
        };
        let job = &self.rec.job;
        let sent = std::sync::atomic::AtomicBool::new(false);
        let call = async {
            // A bounded recording's claim waits for its turn first (its timeout covers the wait).
            let _turn = match &self.rec.claims {
                Some(claims) => claims.acquire().await.ok(),
                None => None,
            };
            sent.store(true, std::sync::atomic::Ordering::Relaxed);
            store.claim_run(req).await
        };
        let answer = tokio::time::timeout(to, call).await;
        let result = claim_result(&answer);
        // A run-now check that finds no request pending ran nothing and claimed nothing.
        if !(kind == SlotKind::Manual && result == ClaimResult::AlreadyClaimed) {
            crate::metrics::job_claim(&self.rec.metric, result);
        }
        match answer {
            Ok(Ok(Claim::Claimed(rec))) => {
                crate::metrics::job_paused(job, false);
                Claimed::Run(Some(rec))
            }
            Ok(Ok(Claim::Paused)) => {
                crate::metrics::job_paused(job, true);
                tracing::debug!(%job, slot_ms, %kind, "the job is paused; not running this slot");
                Claimed::Paused
            }
            Ok(Ok(Claim::AlreadyClaimed)) => {
                if kind != SlotKind::Manual {
                    tracing::info!(%job, slot_ms, "slot already ran (or the term ended); skipping it");
                }
                Claimed::Skip
            }
            Ok(Ok(Claim::NotHolder)) => {
                tracing::debug!(%job, slot_ms, "the term ended before the slot was claimed");
                Claimed::Skip
            }
            Ok(Ok(Claim::Refused(why))) => {
                let slot = crate::job_store::rfc3339_ms(Some(slot_ms)).unwrap_or_default();
                tracing::info!(%job, %slot, "backfill: slot skipped, {}", refusal(why));
                Claimed::Skip
            }
            Ok(Err(e)) => {
                tracing::warn!(%job, slot_ms, error = %e, "cannot claim the slot; skipping it rather than risking a second run");
                self.rec.unclaimed(&req, term, &e.to_string());
                Claimed::Skip
            }
            Err(_) => {
                let error = if sent.load(std::sync::atomic::Ordering::Relaxed) {
                    format!("no answer within {to:?}")
                } else {
                    format!("not sent within {to:?}: the node's other claims kept the store busy")
                };
                tracing::warn!(%job, slot_ms, %error, "cannot claim the slot; skipping it rather than risking a second run");
                self.rec.unclaimed(&req, term, &error);
                Claimed::Skip
            }
        }
    }

    /// The claim without a jobs store: the lease backend's fenced slot record, for the slots
    /// that take it ([`Slot::claim_without_store`]); the others run unclaimed (fixed-rate
    /// slots, which were never claimed).
    async fn claim_without_store(&self, slot: Slot) -> Claimed {
        if !slot.claim_without_store {
            return Claimed::Run(None);
        }
        let slot_ms = slot.ms;
        let answer = self.simba.claim_slot(&self.term, slot_ms).await;
        let result = match &answer {
            Ok(true) => ClaimResult::Claimed,
            Ok(false) => ClaimResult::AlreadyClaimed,
            Err(_) => ClaimResult::Failed,
        };
        crate::metrics::job_claim(&self.rec.metric, result);
        match answer {
            Ok(true) => Claimed::Run(None),
            Ok(false) => {
                tracing::info!(job = %self.rec.metric, slot_ms, "slot already ran (or the term ended); skipping it");
                Claimed::Skip
            }
            Err(e) => {
                tracing::warn!(job = %self.rec.metric, slot_ms, error = %e, "cannot record the slot; skipping it rather than risking a second run");
                Claimed::Skip
            }
        }
    }

    /// Runs one claimed slot to its end: attempts, backoff, timeout, and its record.
    async fn attempts(&self, claimed: Option<RunRecord>, slot: Slot, replaced: &CancellationToken) {
        let (term, kind) = (&self.term, slot.kind);
        let slot_ms = claimed.as_ref().map_or(slot.at.timestamp_millis(), |r| r.slot_ms);
        let attempts = self.rec.policy.attempts.max(1);
        let mut rec = claimed;
        let slot_at = DateTime::from_timestamp_millis(slot_ms).unwrap_or(slot.at);
        // A backfill's slot is past by design: it is not late (no `late` alert, J16).
        let lateness = if kind == SlotKind::Backfill {
            Duration::ZERO
        } else {
            (self.rec.now() - slot_at).to_std().unwrap_or_default()
        };
        let mut attempt = 1;
        loop {
            let cancel = CancellationToken::new();
            let ctx = self.begin(rec.as_mut(), (slot_at, kind), (attempt, attempts), lateness, &cancel);
            let started = Instant::now();
            tracing::debug!(job = %self.rec.job, lease = term.name(), token = term.token(), attempt, ?lateness, "job run starting");
            let span = run_span(&self.rec.job, term, attempt);
            let fut = unwinding_to_error(|| (self.body)(term.clone()));
            let fut = ctx.scope(tracing::Instrument::instrument(fut, span));
            let result = self.attempt(fut, cancel, rec.as_ref(), replaced).await;
            let took = started.elapsed();
            let (outcome, error) = self.outcome_of(&result, kind);
            let failed = matches!(outcome, Outcome::Failed | Outcome::TimedOut);
            crate::metrics::job_finished(&self.rec.metric, took, failed);
            self.log_outcome((attempt, attempts), outcome, error.as_deref(), took);
            let retry = failed && attempt < attempts && term.is_valid() && !replaced.is_cancelled();
            let wait = self.rec.policy.backoff_before(attempt + 1, self.simba.random_unit());
            let retry = retry && term.remaining() > wait;
            let final_outcome = if retry { Outcome::Retried } else { outcome };
            crate::metrics::job_slot(&self.rec.metric, final_outcome);
            self.end(rec.as_mut(), final_outcome, error.as_deref().map(truncate_error));
            if !retry {
                return;
            }
            tracing::info!(job = %self.rec.job, attempt, attempts, backoff = ?wait, "retrying the failed run");
            tokio::select! {
                _ = term.cancelled() => return,
                _ = replaced.cancelled() => {
                    // Replaced while waiting to retry: the slot ends here, as cancelled.
                    self.end(rec.as_mut(), Outcome::Cancelled, Some(REPLACED.to_owned()));
                    crate::metrics::job_slot(&self.rec.metric, Outcome::Cancelled);
                    return;
                }
                _ = sleep(wait) => {}
            }
            if !term.is_valid() {
                return;
            }
            attempt += 1;
        }
    }

    /// Starts attempt `attempt` of `attempts` of the slot at `slot_at`: its record back to
    /// `running`, its start counted (with the slot's lateness on the first attempt, which also
    /// raises the `late` alert) and its run context, cancelled through `cancel`.
    fn begin(
        &self,
        rec: Option<&mut RunRecord>,
        (slot_at, kind): (DateTime<Utc>, SlotKind),
        (attempt, attempts): (u32, u32),
        lateness: Duration,
        cancel: &CancellationToken,
    ) -> JobContext {
        if let Some(r) = rec {
            r.attempt = attempt;
            r.outcome = Outcome::Running;
            r.started_ms = Some(self.rec.now().timestamp_millis());
            r.ended_ms = None;
            r.error = None;
        }
        crate::metrics::job_started(&self.rec.metric, if attempt == 1 { lateness } else { Duration::ZERO });
        if attempt == 1
            && let Some(alerts) = self.rec.writer.alerts()
        {
            let (job, metric) = (self.rec.job.as_ref(), self.rec.metric.as_ref());
            alerts.late((job, metric), slot_at, lateness, (&self.rec.node, self.term.token()));
        }
        JobContext {
            slot: slot_at,
            kind,
            attempt,
            attempts,
            node: Arc::clone(&self.rec.node),
            cancel: cancel.clone(),
            state: Arc::clone(&self.rec.state),
        }
    }

    /// Ends the slot's record (when the store keeps one) as `outcome`, with `error`, and
    /// hands it to the writer.
    fn end(&self, rec: Option<&mut RunRecord>, outcome: Outcome, error: Option<String>) {
        if let Some(r) = rec {
            r.outcome = outcome;
            r.ended_ms = Some(self.rec.now().timestamp_millis());
            r.error = error;
            self.rec.finish(r, &self.term);
        }
    }

    /// One attempt: the run, its timeout, and a `cancelled` record written at once when the
    /// term is lost mid-run (the election may drop this future right after).
    async fn attempt(
        &self,
        fut: impl std::future::Future<Output = Result<(), BoxError>>,
        cancel: CancellationToken,
        rec: Option<&RunRecord>,
        replaced: &CancellationToken,
    ) -> Attempt {
        tokio::pin!(fut);
        let deadline = self.rec.policy.timeout.map(|t| Instant::now() + t);
        let timed_out = super::wait::until(deadline);
        tokio::pin!(timed_out);
        // The election drops this future when the term is lost (H3): the guard still
        // records the slot as cancelled.
        let guard = CancelGuard {
            rec: self.rec.sender().zip(rec.cloned()),
            term: self.term.clone(),
            clock: self.rec.clock,
            metric: Arc::clone(&self.rec.metric),
        };
        let mut revoked_seen = false;
        let out = self.attempt_inner(fut, (cancel, replaced), rec, &mut timed_out, &mut revoked_seen).await;
        guard.disarm();
        out
    }

    /// [`attempt`](Self::attempt)'s race of the run against the term's revocation, the
    /// timeout and a newer slot replacing it (`replaced`, J11).
    async fn attempt_inner(
        &self,
        fut: impl std::future::Future<Output = Result<(), BoxError>>,
        (cancel, replaced): (CancellationToken, &CancellationToken),
        rec: Option<&RunRecord>,
        timed_out: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        revoked_seen: &mut bool,
    ) -> Attempt {
        let term = &self.term;
        tokio::pin!(fut);
        loop {
            tokio::select! {
                // The body first: one that completed by the time its timer fired (both ready
                // after the process was stopped past the timeout) ran, and says how.
                biased;
                r = &mut fut => return Attempt::Done(r),
                reason = term.revoked(), if !*revoked_seen => {
                    *revoked_seen = true;
                    cancel.cancel();
                    if let Some(r) = rec {
                        let mut r = r.clone();
                        r.outcome = Outcome::Cancelled;
                        r.ended_ms = Some(self.rec.now().timestamp_millis());
                        r.error = Some(format!("term lost: {reason}"));
                        self.rec.finish(&r, term);
                    }
                }
                _ = replaced.cancelled() => {
                    cancel.cancel();
                    tokio::select! {
                        biased;
                        _ = &mut fut => return Attempt::Replaced(true),
                        _ = sleep(RunPolicy::GRACE) => return Attempt::Replaced(false),
                    }
                }
                _ = timed_out.as_mut() => {
                    cancel.cancel();
                    // The timer decides only for a body that did not complete: one that
                    // returns `Ok` within the grace did its work, and is recorded as run (with
                    // a note) rather than retried; an error then is the timeout's.
                    tokio::select! {
                        biased;
                        r = &mut fut => return match r {
                            Ok(()) => Attempt::LateOk,
                            Err(e) => Attempt::TimedOut(Some(e.to_string())),
                        },
                        _ = sleep(RunPolicy::GRACE) => return Attempt::TimedOut(None),
                    }
                }
            }
        }
    }

    /// How an attempt ended, as its record says it: a run that returned while its term was
    /// lost is `cancelled`, a refusal because the term is ending `declined`.
    fn outcome_of(&self, result: &Attempt, kind: SlotKind) -> (Outcome, Option<String>) {
        let (term, timeout) = (&self.term, self.rec.policy.timeout);
        match result {
            Attempt::Done(Ok(())) | Attempt::LateOk if term.revoke_reason().is_some_and(|r| !graceful(r)) => {
                (Outcome::Cancelled, term.revoke_reason().map(|r| format!("term lost: {r}")))
            }
            Attempt::LateOk => (
                if kind == SlotKind::CaughtUp { Outcome::CaughtUp } else { Outcome::Ran },
                timeout.map(|t| {
                    format!(
                        "finished after its timeout of {t:?}, within the {:?} grace after its cancellation signal",
                        RunPolicy::GRACE
                    )
                }),
            ),
            Attempt::Done(Ok(())) => (if kind == SlotKind::CaughtUp { Outcome::CaughtUp } else { Outcome::Ran }, None),
            Attempt::Done(Err(e)) if is_decline(e.as_ref(), term) => (Outcome::Declined, Some(e.to_string())),
            Attempt::Done(Err(e)) => match term.revoke_reason() {
                Some(r) if !graceful(r) => (Outcome::Cancelled, Some(format!("term lost: {r}: {e}"))),
                _ => (Outcome::Failed, Some(e.to_string())),
            },
            Attempt::Replaced(stopped) => (
                Outcome::Cancelled,
                Some(if *stopped {
                    format!("{REPLACED}; it stopped after its cancellation signal")
                } else {
                    format!("{REPLACED}; it was dropped {:?} after its cancellation signal", RunPolicy::GRACE)
                }),
            ),
            Attempt::TimedOut(then) => (
                Outcome::TimedOut,
                timeout.map(|t| match then {
                    Some(e) => format!("timed out after {t:?}; then returned: {e}"),
                    None => format!("timed out after {t:?}"),
                }),
            ),
        }
    }

    /// Logs how attempt `n` of `of` ended: a decline at debug, a failure at error.
    fn log_outcome(&self, (attempt, attempts): (u32, u32), outcome: Outcome, error: Option<&str>, took: Duration) {
        let (job, term) = (&self.rec.job, &self.term);
        match outcome {
            Outcome::Declined => {
                tracing::debug!(%job, token = term.token(), reason = error.unwrap_or(""), "job run declined: its term is ending")
            }
            Outcome::Failed | Outcome::TimedOut | Outcome::Cancelled => {
                tracing::error!(%job, lease = term.name(), token = term.token(), attempt, attempts, %outcome, error = error.unwrap_or(""), "job run failed")
            }
            _ => tracing::debug!(%job, token = term.token(), ?took, "job run finished"),
        }
    }
}

/// What the record of a run replaced by a newer slot says (J11).
const REPLACED: &str = "replaced: a newer slot came due and overlap is cancel_running";

/// Records a slot as `cancelled` when its run is dropped before it ended: through the job's
/// writer, whose queue takes a record without a runtime (the future may be dropped by a
/// runtime shutting down).
struct CancelGuard {
    rec: Option<(WriterTx, RunRecord)>,
    term: Term,
    clock: WallClock,
    metric: Arc<str>,
}

impl CancelGuard {
    fn disarm(mut self) {
        self.rec = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some((tx, mut rec)) = self.rec.take() else { return };
        rec.outcome = Outcome::Cancelled;
        rec.ended_ms = Some(self.clock.now().timestamp_millis());
        rec.error = Some(match self.term.revoke_reason() {
            Some(r) => format!("term lost: {r}"),
            None => "the run was dropped".to_owned(),
        });
        crate::metrics::job_slot(&self.metric, Outcome::Cancelled);
        let (job, slot_ms) = (rec.job.clone(), rec.slot_ms);
        let q = Queued { write: Write::Finish(rec), term: self.term.clone(), metric: Arc::clone(&self.metric) };
        if tx.send(q).is_err() {
            tracing::warn!(%job, slot_ms, "cannot record the cancelled run: the job's record writer stopped");
        }
    }
}

/// A graceful end of the term (stop, step down): a run that then returns tells its own
/// outcome.
fn graceful(r: RevokeReason) -> bool {
    matches!(r, RevokeReason::Stopped | RevokeReason::SteppedDown)
}

/// Whether a run's error is its refusal to start because `term` is ending
/// (`term.ensure_valid(..)?`), also when wrapped. An error type that erases what it wraps
/// (`anyhow::Error` converted into a boxed error keeps the refusal's text but not its type) is
/// recognised by the refusal's own message for this term's lease and token.
pub(crate) fn is_decline(e: &(dyn std::error::Error + 'static), term: &Term) -> bool {
    let refusal = format!("term of lease `{}` (token {}) is not valid for another ", term.name(), term.token());
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if matches!(err.downcast_ref::<Error>(), Some(Error::TermExpired { .. })) {
            return true;
        }
        let text = err.to_string();
        if text.starts_with(&refusal) && text.ends_with(": stop this step and wait for the next term") {
            return true;
        }
        cur = err.source();
    }
    false
}

impl<F> Drop for SlotRunner<F> {
    /// The term ended with backfills still walking: each one's record ends `cancelled`, naming
    /// the slots left; the same backfill asked again finishes it (the slots that ran are
    /// refused by their claim, J15).
    fn drop(&mut self) {
        let walks = std::mem::take(&mut *self.walks.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for w in walks {
            let left = w.left(0);
            cancel_walk(
                &self.rec,
                &self.term,
                w,
                format!(
                    "the term ended with {left}; ask for the backfill again to finish it: slots that ran are refused"
                ),
            );
        }
    }
}

/// Ends backfill `w`'s record `cancelled`, saying `why`.
fn cancel_walk(rec: &Recording, term: &Term, w: Walk, why: String) {
    tracing::info!(job = %rec.job, "{why}");
    let ended = RunRecord {
        outcome: Outcome::Cancelled,
        error: Some(why),
        ended_ms: Some(rec.now().timestamp_millis()),
        ..w.record
    };
    rec.finish(&ended, term);
}

/// Why a backfill's slot was skipped, as its report says it (J15).
pub(crate) fn refusal(why: crate::job_store::Refusal) -> String {
    use crate::job_store::Refusal;
    match why {
        Refusal::AlreadyRan { started_ms: Some(ms) } => {
            format!("already ran at {}", crate::job_store::rfc3339_ms(Some(ms)).unwrap_or_default())
        }
        Refusal::AlreadyRan { started_ms: None } => "already ran".to_owned(),
        Refusal::OutsideHistory => "outside the retained history".to_owned(),
        Refusal::SchedulersSlot => "the scheduler's (not yet claimed)".to_owned(),
        _ => format!("{why:?}"),
    }
}

/// The span of one run (rule O9): a root of its own, so that an exported trace lasts one run
/// and not the whole term, linked by `follows_from` to the span current here (the term's
/// `leader` or `partition` span), so a trace viewer can still walk from the run to its term.
fn run_span(job: &str, term: &Term, attempt: u32) -> tracing::Span {
    let span = tracing::info_span!(parent: None, "job", job = %job, lease = term.name(), token = term.token(), attempt);
    span.follows_from(tracing::Span::current());
    span
}

/// The `result` label of a claim's answer (R2): what the store said, that it failed, or that
/// it did not answer within the call timeout.
fn claim_result(answer: &Result<BackendResult<Claim>, tokio::time::error::Elapsed>) -> ClaimResult {
    match answer {
        Ok(Ok(Claim::Claimed(_))) => ClaimResult::Claimed,
        Ok(Ok(Claim::Paused)) => ClaimResult::Paused,
        Ok(Ok(Claim::AlreadyClaimed | Claim::Refused(_))) => ClaimResult::AlreadyClaimed,
        Ok(Ok(Claim::NotHolder)) => ClaimResult::NotHolder,
        Ok(Err(_)) => ClaimResult::Failed,
        Err(_) => ClaimResult::TimedOut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::writer::Writer;

    fn recording(timeout: Duration) -> Recording {
        Recording {
            metric: "j".into(),
            job: "j".into(),
            store: None,
            node: "n".into(),
            policy: RunPolicy { attempts: 3, backoff: Duration::from_millis(100), timeout: Some(timeout) },
            control: None,
            clock: WallClock::System,
            writer: Writer::default(),
            claims: None,
            state: Default::default(),
        }
    }

    /// A term of job `j` (token 1) whose session lasts a minute, renewed every second.
    fn term() -> Term {
        let now = Instant::now();
        let cell = crate::term::SessionCell::new(
            crate::backend::SessionId::new("s"),
            now + Duration::from_secs(60),
            Duration::from_secs(1),
        );
        Term::new("j".into(), 1, Arc::new(cell), now)
    }

    /// What one attempt of a body that sleeps `body` and then returns `result` comes to,
    /// under a 400 ms timeout, and how its record says it.
    async fn attempt_of(body: Duration, result: Result<(), &'static str>) -> (Outcome, Option<String>) {
        let term = term();
        let simba = Simba::new(crate::backend::memory::MemoryBackend::new(), crate::SimbaConfig::default())
            .unwrap_or_else(|e| panic!("a client: {e}"));
        let never_called = |_: Term| -> JobFuture { Box::pin(async { Ok(()) }) };
        let runner = SlotRunner::new(simba, recording(Duration::from_millis(400)), term, never_called);
        let fut = async move {
            sleep(body).await;
            result.map_err(BoxError::from)
        };
        let out = runner.attempt(fut, CancellationToken::new(), None, &CancellationToken::new()).await;
        runner.outcome_of(&out, SlotKind::Scheduled)
    }

    /// A5: a bounded recording's claim (a node's schedules) that gets no turn within its call
    /// timeout is never sent: the slot does not run, and is recorded `missed`, saying so.
    #[tokio::test(start_paused = true)]
    async fn a5_a_claim_without_a_turn_is_not_sent_and_recorded_missed() {
        use crate::backend::Backend;
        let backend = crate::backend::memory::MemoryBackend::new();
        let Some(store) = backend.job_store() else { panic!("the memory backend has a jobs store") };
        let term = term();
        let simba = Simba::new(backend, crate::SimbaConfig::default()).unwrap_or_else(|e| panic!("a client: {e}"));
        let mut rec = recording(Duration::from_secs(1));
        rec.store = Some(store.clone());
        rec.claims = Some(Arc::new(tokio::sync::Semaphore::new(0)));
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let body = {
            let ran = Arc::clone(&ran);
            move |_: Term| -> JobFuture {
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
                Box::pin(async { Ok(()) })
            }
        };
        let runner = SlotRunner::new(simba, rec, term, body);
        let at = Utc::now();
        assert!(!runner.run(Slot::at(at, SlotKind::Scheduled)).await, "the slot was not claimed");
        sleep(Duration::from_secs(2)).await;
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst), "the body did not run");
        let history = store.history("j", 5).await.unwrap_or_else(|e| panic!("history: {e}"));
        let [missed] = history.as_slice() else { panic!("one record: {history:?}") };
        assert_eq!((missed.slot_ms, missed.outcome), (at.timestamp_millis(), Outcome::Missed));
        let error = missed.error.as_deref().unwrap_or_default();
        assert!(error.contains("not sent within"), "the record says the claim was not sent: {error}");
    }

    /// A timed-out attempt is recorded as what its body did. A body ready when its timer
    /// fires (both expired together, as after the process was stopped past the timeout) is
    /// polled first and ran; one that returns `Ok` within the grace after the timeout signal
    /// ran too, its record saying it finished late (never retried: `ran` is not a failure);
    /// an error within the grace, or no answer, is `timed_out`.
    #[tokio::test(start_paused = true)]
    async fn a_timed_out_attempt_is_recorded_as_what_its_body_did() {
        for _ in 0..20 {
            assert_eq!(attempt_of(Duration::from_millis(400), Ok(())).await, (Outcome::Ran, None));
        }
        let (outcome, error) = attempt_of(Duration::from_millis(700), Ok(())).await;
        assert_eq!(outcome, Outcome::Ran);
        assert!(error.as_deref().is_some_and(|e| e.starts_with("finished after its timeout of 400ms")), "{error:?}");
        let (outcome, error) = attempt_of(Duration::from_millis(700), Err("stopped")).await;
        assert_eq!(outcome, Outcome::TimedOut);
        assert_eq!(error.as_deref(), Some("timed out after 400ms; then returned: stopped"));
        let (outcome, error) = attempt_of(Duration::from_secs(5), Ok(())).await;
        assert_eq!((outcome, error.as_deref()), (Outcome::TimedOut, Some("timed out after 400ms")));
    }

    /// `ensure_valid`'s refusal is a decline, also when wrapped: by a `source()` chain, and by
    /// `anyhow::Error`, whose conversion into a boxed error keeps the refusal's text but not
    /// its type (a job returning `anyhow::Result` was recorded `failed` when it declined).
    #[test]
    fn term_expired_is_a_decline() {
        let now = Instant::now();
        let cell = crate::term::SessionCell::new(crate::backend::SessionId::new("s"), now, Duration::from_secs(1));
        let term = Term::new("x".into(), 1, Arc::new(cell), now);
        let refusal = || term.ensure_valid(Duration::from_millis(200)).expect_err("the term has no time left");
        let e: BoxError = Box::new(refusal());
        assert!(is_decline(e.as_ref(), &term));
        let wrapped: BoxError = Box::new(std::io::Error::other(refusal()));
        assert!(is_decline(wrapped.as_ref(), &term), "through source()");
        let erased: BoxError = anyhow::Error::from(refusal()).into();
        assert!(erased.downcast_ref::<Error>().is_none(), "anyhow erases the type");
        assert!(is_decline(erased.as_ref(), &term), "through anyhow");
        let with_context: BoxError = anyhow::Error::from(refusal()).context("settling batch 7").into();
        assert!(is_decline(with_context.as_ref(), &term), "through anyhow with context");
        let other: BoxError = "boom".into();
        assert!(!is_decline(other.as_ref(), &term));
        let other_term = Term::new(
            "y".into(),
            2,
            Arc::new(crate::term::SessionCell::new(crate::backend::SessionId::new("s"), now, Duration::from_secs(1))),
            now,
        );
        let theirs: BoxError =
            anyhow::Error::from(other_term.ensure_valid(Duration::ZERO).expect_err("expired")).into();
        assert!(!is_decline(theirs.as_ref(), &term), "another term's refusal is this run's failure");
    }
}
