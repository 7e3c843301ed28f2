//! One job's view of the jobs store (issue 12): claiming slots, recording how each run ended,
//! retries, timeouts, and manual runs. Used by the scheduler in `schedule.rs`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::context::JobContext;
use super::registry::JobFuture;
use super::writer::{Queued, Write, Writer, WriterTx, unclaimed};
use crate::job_store::{Claim, ClaimRequest, Outcome, RunRecord, SharedJobStore, SlotKind, truncate_error};
use crate::{BoxError, Error, RevokeReason, Simba, Term};

/// How a job retries and times out (`retry`, `backoff`, `timeout`; issue 12 item 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPolicy {
    /// How many attempts a slot gets (1: no retry).
    pub attempts: u32,
    /// The first backoff; each retry doubles it, capped at [`RunPolicy::MAX_BACKOFF`], with
    /// up to 20% jitter.
    pub backoff: Duration,
    /// A run that outlives this is signalled, given [`RunPolicy::GRACE`], then dropped.
    pub timeout: Option<Duration>,
}

impl Default for RunPolicy {
    fn default() -> Self {
        RunPolicy { attempts: 1, backoff: Duration::from_secs(1), timeout: None }
    }
}

impl RunPolicy {
    /// The longest backoff between two attempts.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
    /// How long a timed-out run may take to return after its cancellation signal.
    pub const GRACE: Duration = Duration::from_secs(1);

    /// The wait before attempt `next` (2 or more), `unit` in `[0, 1)` for the jitter.
    pub fn backoff_before(&self, next: u32, unit: f64) -> Duration {
        let doublings = next.saturating_sub(2).min(20);
        let base = self.backoff.saturating_mul(1 << doublings).min(Self::MAX_BACKOFF);
        base.mul_f64(0.8 + 0.4 * unit.clamp(0.0, 1.0)).min(Self::MAX_BACKOFF)
    }
}

/// The scheduler's wall clock: the system's, or (for tests on paused Tokio time) one that
/// advances with Tokio's clock from the instant it was made.
#[derive(Debug, Clone, Copy, Default)]
pub enum WallClock {
    /// `Utc::now()`.
    #[default]
    System,
    /// `at` plus the Tokio time elapsed since `since`: cron runs on paused time.
    FollowsTokio {
        /// The wall-clock instant at `since`.
        at: DateTime<Utc>,
        /// The Tokio instant it was anchored at.
        since: Instant,
    },
}

impl WallClock {
    /// A clock that reads `at` now and advances with Tokio's clock (paused or not).
    pub fn follow_tokio_from(at: DateTime<Utc>) -> Self {
        WallClock::FollowsTokio { at, since: Instant::now() }
    }

    /// The current wall-clock time.
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            WallClock::System => Utc::now(),
            WallClock::FollowsTokio { at, since } => {
                *at + chrono::Duration::from_std(since.elapsed()).unwrap_or_default()
            }
        }
    }
}

/// What one job's scheduler needs to keep its history (cheap to clone).
#[derive(Clone)]
pub(crate) struct Recording {
    /// The name in metrics and logs (the group's job name for a partition).
    pub(crate) metric: Arc<str>,
    /// The name in the store (`job`, or `job/i` for partition `i`).
    pub(crate) job: Arc<str>,
    pub(crate) store: Option<SharedJobStore>,
    pub(crate) node: Arc<str>,
    pub(crate) policy: RunPolicy,
    /// Moves when the store's control version moved (or the store broadcast a change).
    pub(crate) control: Option<watch::Receiver<u64>>,
    /// The wall clock slots are computed on.
    pub(crate) clock: WallClock,
    /// Writes this job's records in order, retrying what the store refused (shared by the
    /// clones of one job's recording, and by the partitions of a group).
    pub(crate) writer: Writer,
}

/// What a claim decided.
pub(crate) enum Claimed {
    /// Run it; with the `running` record when there is a store.
    Run(Option<RunRecord>),
    /// Do not run it.
    Skip,
}

enum Attempt {
    Done(Result<(), BoxError>),
    /// The body returned `Ok` within the grace after its timeout signal: recorded as run,
    /// with a note, and never retried (its work is done).
    LateOk,
    /// The body did not complete within the grace, or returned an error during it.
    TimedOut(Option<String>),
}

impl Recording {
    /// The scheduler's wall clock, now.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Waits until the control version moves; never completes without a store.
    pub(crate) async fn control_changed(&mut self) {
        match self.control.as_mut() {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }

    /// The last slot claimed for this job in the store, read at the start of a term for
    /// `term`, within the session's call timeout (rule D2): a store that does not answer (its
    /// connection is being re-established) must not hold the term's first run back. `Ok(None)`
    /// without a store or a record; `Err` says why it could not be read.
    pub(crate) async fn last_slot_ms(&self, term: &Term) -> Result<Option<i64>, String> {
        let Some(store) = &self.store else { return Ok(None) };
        let to = term.call_timeout();
        match tokio::time::timeout(to, store.job(&self.job)).await {
            Ok(Ok(state)) => {
                if let Some(last) = state.as_ref().and_then(|s| s.last.as_ref()) {
                    self.close_abandoned(last, term);
                }
                Ok(state.and_then(|s| s.last_slot_ms))
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("the store did not answer within {to:?}")),
        }
    }

    /// A `running` record of an earlier term, found as the newest record when a term starts,
    /// was left by a holder that lost its term without recording an end: its process was
    /// killed, or it was cut off from the store until its session ended (a live holder records
    /// `cancelled` itself when its term ends, and then overwrites this with its own reason).
    /// It is closed as `cancelled` so that the history does not show it running for ever; the
    /// end time stays unknown. Not awaited: the term's first run does not wait for it.
    fn close_abandoned(&self, last: &RunRecord, term: &Term) {
        if last.outcome != Outcome::Running || last.token >= term.token() {
            return;
        }
        let mut rec = last.clone();
        rec.outcome = Outcome::Cancelled;
        rec.error = Some(format!(
            "abandoned: node {} (token {}) lost its term without recording how the run ended \
             (its process was killed, or cut off from the store); closed by node {} (token {})",
            last.node,
            last.token,
            self.node,
            term.token()
        ));
        tracing::info!(job = %self.job, slot_ms = rec.slot_ms, node = %last.node, token = last.token, "closing a run that an earlier holder left running");
        self.finish(&rec, term);
    }

    /// Claims `slot` for `term`: one store round trip (`claim_run`, or the lease backend's
    /// `claim_slot` without a jobs store). `check_slot` false: no claim without a store
    /// (fixed-rate slots, which were never claimed).
    pub(crate) async fn claim(
        &self,
        simba: &Simba,
        term: &Term,
        slot_ms: i64,
        kind: SlotKind,
        check_slot: bool,
    ) -> Claimed {
        let to = term.call_timeout();
        let Some(store) = &self.store else {
            if !check_slot {
                return Claimed::Run(None);
            }
            return match simba.claim_slot(term, slot_ms).await {
                Ok(true) => Claimed::Run(None),
                Ok(false) => {
                    tracing::info!(job = %self.metric, slot_ms, "slot already ran (or the term ended); skipping it");
                    Claimed::Skip
                }
                Err(e) => {
                    tracing::warn!(job = %self.metric, slot_ms, error = %e, "cannot record the slot; skipping it rather than risking a second run");
                    Claimed::Skip
                }
            };
        };
        let req = ClaimRequest {
            session: term.session_id(),
            lease: term.name(),
            token: term.token(),
            job: &self.job,
            slot_ms,
            kind,
            node: &self.node,
            started_ms: self.now().timestamp_millis(),
            attempts: self.policy.attempts.max(1),
        };
        match tokio::time::timeout(to, store.claim_run(req)).await {
            Ok(Ok(Claim::Claimed(rec))) => {
                crate::metrics::job_paused(&self.job, false);
                Claimed::Run(Some(rec))
            }
            Ok(Ok(Claim::Paused)) => {
                crate::metrics::job_paused(&self.job, true);
                tracing::debug!(job = %self.job, slot_ms, %kind, "the job is paused; not running this slot");
                Claimed::Skip
            }
            Ok(Ok(Claim::AlreadyClaimed)) => {
                if kind != SlotKind::Manual {
                    tracing::info!(job = %self.job, slot_ms, "slot already ran (or the term ended); skipping it");
                }
                Claimed::Skip
            }
            Ok(Ok(Claim::NotHolder)) => {
                tracing::debug!(job = %self.job, slot_ms, "the term ended before the slot was claimed");
                Claimed::Skip
            }
            Ok(Err(e)) => {
                tracing::warn!(job = %self.job, slot_ms, error = %e, "cannot claim the slot; skipping it rather than risking a second run");
                self.unclaimed(&req, term, &e.to_string());
                Claimed::Skip
            }
            Err(_) => {
                let error = format!("no answer within {to:?}");
                tracing::warn!(job = %self.job, slot_ms, %error, "cannot claim the slot; skipping it rather than risking a second run");
                self.unclaimed(&req, term, &error);
                Claimed::Skip
            }
        }
    }

    /// A scheduled or caught-up slot whose claim failed or got no answer is recorded `missed`
    /// with the reason, by the writer, once the store answers again (a manual request stays
    /// pending instead). Whether the claim took effect is unknown: the writer overwrites the
    /// `running` record it may have left, else inserts the `missed` record; a later holder's
    /// gap report of the same slot finds it and makes no second record.
    fn unclaimed(&self, req: &ClaimRequest<'_>, term: &Term, error: &str) {
        if req.kind == SlotKind::Manual {
            return;
        }
        crate::metrics::job_slot(&self.metric, Outcome::Missed);
        self.enqueue(term, Write::Unclaimed(unclaimed(req.running_record(req.slot_ms), error)));
    }

    /// Hands `write` to this job's ordered writer (nothing without a store).
    fn enqueue(&self, term: &Term, write: Write) {
        let Some(store) = &self.store else { return };
        let q = Queued { write, term: term.clone(), metric: Arc::clone(&self.metric) };
        if self.writer.sender(store).send(q).is_err() {
            tracing::warn!(job = %self.job, "cannot record the slot: the job's record writer stopped");
        }
    }

    /// Records a slot that did not run, through the job's writer.
    pub(crate) fn append(&self, slot: DateTime<Utc>, outcome: Outcome, term: &Term) {
        self.append_with(slot, outcome, None, term);
    }

    /// Records a run of consecutive slots that came while the run of `in_flight` was still
    /// going as ONE `skipped_running` record, named after the first slot, whose `error` says
    /// how many slots it stands for and through which instant (a job whose run outlasts its
    /// period would otherwise write a record every period). The slot metric counts each slot.
    pub(crate) fn skipped_run(&self, skipped: &[DateTime<Utc>], in_flight: Option<DateTime<Utc>>, term: &Term) {
        let (Some(&first), Some(&last)) = (skipped.first(), skipped.last()) else { return };
        for _ in 1..skipped.len() {
            crate::metrics::job_slot(&self.metric, Outcome::SkippedRunning);
        }
        let run = match in_flight {
            Some(t) => format!("the run of {} was still in flight", instant(t)),
            None => "the previous run was still in flight".to_owned(),
        };
        let text = match skipped.len() {
            1 => run,
            n => format!("{n} slots skipped through {}: {run}", instant(last)),
        };
        self.append_with(first, Outcome::SkippedRunning, Some(text), term);
    }

    /// [`append`](Self::append) with the record's `error` text.
    pub(crate) fn append_with(&self, slot: DateTime<Utc>, outcome: Outcome, error: Option<String>, term: &Term) {
        crate::metrics::job_slot(&self.metric, outcome);
        if self.store.is_none() {
            return;
        }
        let mut rec = RunRecord::not_run(self.job.as_ref(), slot.timestamp_millis(), outcome);
        rec.session = term.session_id().as_str().to_owned();
        rec.node = self.node.to_string();
        rec.token = term.token();
        rec.error = error.as_deref().map(truncate_error);
        self.enqueue(term, Write::Append(rec));
    }

    /// Records how a claimed slot ended, through the job's writer: not awaited, the next slot
    /// does not wait for the end record.
    fn finish(&self, rec: &RunRecord, term: &Term) {
        self.enqueue(term, Write::Finish(rec.clone()));
    }

    /// Runs one claimed slot to its end: attempts, backoff, timeout, and its record.
    pub(crate) async fn execute(
        &self,
        simba: &Simba,
        term: &Term,
        claimed: Option<RunRecord>,
        slot: DateTime<Utc>,
        kind: SlotKind,
        run: &(impl Fn(Term) -> JobFuture + ?Sized),
    ) {
        let slot_ms = claimed.as_ref().map_or(slot.timestamp_millis(), |r| r.slot_ms);
        let attempts = self.policy.attempts.max(1);
        let mut rec = claimed;
        let lateness =
            (self.now() - DateTime::from_timestamp_millis(slot_ms).unwrap_or(slot)).to_std().unwrap_or_default();
        let mut attempt = 1;
        loop {
            let cancel = CancellationToken::new();
            let ctx = JobContext {
                slot: DateTime::from_timestamp_millis(slot_ms).unwrap_or(slot),
                kind,
                attempt,
                attempts,
                node: Arc::clone(&self.node),
                cancel: cancel.clone(),
            };
            if let Some(r) = rec.as_mut() {
                r.attempt = attempt;
                r.outcome = Outcome::Running;
                r.started_ms = Some(self.now().timestamp_millis());
                r.ended_ms = None;
                r.error = None;
            }
            let started = Instant::now();
            crate::metrics::job_started(&self.metric, if attempt == 1 { lateness } else { Duration::ZERO });
            tracing::debug!(job = %self.job, lease = term.name(), token = term.token(), attempt, ?lateness, "job run starting");
            let span = tracing::info_span!("job", job = %self.job, lease = term.name(), token = term.token(), attempt);
            let fut = ctx.scope(tracing::Instrument::instrument(run(term.clone()), span));
            let result = self.attempt(term, fut, cancel, rec.as_ref()).await;
            let took = started.elapsed();
            let (outcome, error) = self.outcome_of(&result, term, kind);
            let failed = matches!(outcome, Outcome::Failed | Outcome::TimedOut);
            crate::metrics::job_finished(&self.metric, took, failed);
            self.log_outcome(term, (attempt, attempts), outcome, error.as_deref(), took);
            let retry = failed && attempt < attempts && term.is_valid();
            let wait = self.policy.backoff_before(attempt + 1, simba.random_unit());
            let retry = retry && term.remaining() > wait;
            let final_outcome = if retry { Outcome::Retried } else { outcome };
            crate::metrics::job_slot(&self.metric, final_outcome);
            if let Some(r) = rec.as_mut() {
                r.outcome = final_outcome;
                r.ended_ms = Some(self.now().timestamp_millis());
                r.error = error.as_deref().map(truncate_error);
                self.finish(r, term);
            }
            if !retry {
                return;
            }
            tracing::info!(job = %self.job, attempt, attempts, backoff = ?wait, "retrying the failed run");
            tokio::select! {
                _ = term.cancelled() => return,
                _ = sleep(wait) => {}
            }
            if !term.is_valid() {
                return;
            }
            attempt += 1;
        }
    }

    /// How an attempt ended, as its record says it: a run that returned while its term was
    /// lost is `cancelled`, a refusal because the term is ending `declined`.
    fn outcome_of(&self, result: &Attempt, term: &Term, kind: SlotKind) -> (Outcome, Option<String>) {
        match result {
            Attempt::Done(Ok(())) | Attempt::LateOk if term.revoke_reason().is_some_and(|r| !graceful(r)) => {
                (Outcome::Cancelled, term.revoke_reason().map(|r| format!("term lost: {r}")))
            }
            Attempt::LateOk => (
                if kind == SlotKind::CaughtUp { Outcome::CaughtUp } else { Outcome::Ran },
                self.policy.timeout.map(|t| {
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
            Attempt::TimedOut(then) => (
                Outcome::TimedOut,
                self.policy.timeout.map(|t| match then {
                    Some(e) => format!("timed out after {t:?}; then returned: {e}"),
                    None => format!("timed out after {t:?}"),
                }),
            ),
        }
    }

    /// Logs how attempt `n` of `of` ended: a decline at debug, a failure at error.
    fn log_outcome(
        &self,
        term: &Term,
        (attempt, attempts): (u32, u32),
        outcome: Outcome,
        error: Option<&str>,
        took: Duration,
    ) {
        match outcome {
            Outcome::Declined => {
                tracing::debug!(job = %self.job, token = term.token(), reason = error.unwrap_or(""), "job run declined: its term is ending")
            }
            Outcome::Failed | Outcome::TimedOut | Outcome::Cancelled => {
                tracing::error!(job = %self.job, lease = term.name(), token = term.token(), attempt, attempts, %outcome, error = error.unwrap_or(""), "job run failed")
            }
            _ => tracing::debug!(job = %self.job, token = term.token(), ?took, "job run finished"),
        }
    }

    /// One attempt: the run, its timeout, and a `cancelled` record written at once when the
    /// term is lost mid-run (the election may drop this future right after).
    async fn attempt(
        &self,
        term: &Term,
        fut: impl std::future::Future<Output = Result<(), BoxError>>,
        cancel: CancellationToken,
        rec: Option<&RunRecord>,
    ) -> Attempt {
        tokio::pin!(fut);
        let deadline = self.policy.timeout.map(|t| Instant::now() + t);
        let timed_out = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(timed_out);
        // The election drops this future when the term is lost (H3): the guard still
        // records the slot as cancelled.
        let sender = self.store.as_ref().map(|s| self.writer.sender(s));
        let guard = CancelGuard {
            rec: sender.zip(rec.cloned()),
            term: term.clone(),
            clock: self.clock,
            metric: Arc::clone(&self.metric),
        };
        let mut revoked_seen = false;
        let out = self.attempt_inner(term, fut, cancel, rec, &mut timed_out, &mut revoked_seen).await;
        guard.disarm();
        out
    }

    async fn attempt_inner(
        &self,
        term: &Term,
        fut: impl std::future::Future<Output = Result<(), BoxError>>,
        cancel: CancellationToken,
        rec: Option<&RunRecord>,
        timed_out: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
        revoked_seen: &mut bool,
    ) -> Attempt {
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
                        r.ended_ms = Some(self.now().timestamp_millis());
                        r.error = Some(format!("term lost: {reason}"));
                        self.finish(&r, term);
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
}

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

/// An instant as records' texts print it (RFC 3339, milliseconds, UTC).
fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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

/// This process's node name for records: `SIMBA_NODE`, else `host:pid`.
pub(crate) fn node_name() -> Arc<str> {
    if let Ok(n) = std::env::var("SIMBA_NODE")
        && !n.trim().is_empty()
    {
        return n.trim().into();
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_owned());
    format!("{host}:{}", std::process::id()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12 item 3: backoff doubles, is capped and jittered within ±20%.
    #[test]
    fn backoff_is_exponential_capped_and_jittered() {
        let p = RunPolicy { attempts: 5, backoff: Duration::from_secs(1), timeout: None };
        assert_eq!(p.backoff_before(2, 0.5), Duration::from_secs(1));
        assert_eq!(p.backoff_before(3, 0.5), Duration::from_secs(2));
        assert_eq!(p.backoff_before(4, 0.5), Duration::from_secs(4));
        assert!(p.backoff_before(2, 0.0) >= Duration::from_millis(800));
        assert!(p.backoff_before(2, 0.999) <= Duration::from_millis(1200));
        assert_eq!(p.backoff_before(40, 0.5), RunPolicy::MAX_BACKOFF);
    }

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
        }
    }

    /// What one attempt of a body that sleeps `body` and then returns `result` comes to,
    /// under a 400 ms timeout, and how its record says it.
    async fn attempt_of(body: Duration, result: Result<(), &'static str>) -> (Outcome, Option<String>) {
        let now = Instant::now();
        let cell = crate::term::SessionCell::new(
            crate::backend::SessionId::new("s"),
            now + Duration::from_secs(60),
            Duration::from_secs(1),
        );
        let term = Term::new("j".into(), 1, Arc::new(cell), now);
        let rec = recording(Duration::from_millis(400));
        let fut = async move {
            sleep(body).await;
            result.map_err(BoxError::from)
        };
        let out = rec.attempt(&term, fut, CancellationToken::new(), None).await;
        rec.outcome_of(&out, &term, SlotKind::Scheduled)
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
