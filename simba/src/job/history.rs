//! One job's history in the jobs store: the records of the slots it claimed,
//! skipped or missed, written through the job's ordered writer (`writer.rs`), and the runs an
//! earlier holder left `running`, closed. The run of a claimed slot is the runner's
//! (`runner.rs`); the slot loops (`schedule.rs`) say which slots are due.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::clock::WallClock;
use super::policy::RunPolicy;
use super::writer::{Queued, Write, Writer, WriterTx, unclaimed};
use crate::Term;
use crate::job_store::{ClaimRequest, Outcome, RunRecord, SharedJobStore, SlotKind, truncate_error};

/// What one job's scheduler needs to keep its history, and its runner to run its slots (cheap
/// to clone).
#[derive(Clone)]
pub(crate) struct Recording {
    /// The name in metrics and logs (the group's job name for a partition).
    pub(crate) metric: Arc<str>,
    /// The name in the store (`job`, or `job/i` for partition `i`).
    pub(crate) job: Arc<str>,
    pub(crate) store: Option<SharedJobStore>,
    pub(crate) node: Arc<str>,
    /// How the runner retries and times out the job's slots.
    pub(crate) policy: RunPolicy,
    /// Moves when the store's control version moved (or the store broadcast a change); the
    /// slot loop takes it to run run-now requests.
    pub(crate) control: Option<watch::Receiver<u64>>,
    /// The wall clock slots are computed on.
    pub(crate) clock: WallClock,
    /// Writes this job's records in order, retrying what the store refused (shared by the
    /// clones of one job's recording, and by the partitions of a group).
    pub(crate) writer: Writer,
    /// The application's state, which each run's context carries to the job.
    pub(crate) state: Arc<super::StateMap>,
    /// Bounds the claims in flight at once (the node's schedules share one: thousands of
    /// schedules due at one instant must not all be sent at once; `None`: unbounded).
    pub(crate) claims: Option<Arc<tokio::sync::Semaphore>>,
}

impl Recording {
    /// The scheduler's wall clock, now.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
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
        self.enqueue(term, Write::Close(rec));
    }

    /// A scheduled or caught-up slot whose claim failed or got no answer is recorded `missed`
    /// with the reason, by the writer, once the store answers again. Whether the claim took
    /// effect is unknown: the writer overwrites the `running` record it may have left, else
    /// inserts the `missed` record; a later holder's gap report of the same slot finds it and
    /// makes no second record. A manual slot's claim that took effect took its request: the
    /// writer finds the `running` record it left and finishes it `missed`; one that did not
    /// leaves the request pending ([`Write::LostManual`]).
    pub(super) fn unclaimed(&self, req: &ClaimRequest<'_>, term: &Term, error: &str) {
        if req.kind == SlotKind::Manual {
            // Whether the claim took the request is unknown: the writer looks (rule R3).
            let mut running = req.running_record(req.slot_ms);
            running.error = Some(error.to_owned());
            self.enqueue(term, Write::LostManual(running));
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
    pub(super) fn finish(&self, rec: &RunRecord, term: &Term) {
        self.enqueue(term, Write::Finish(rec.clone()));
    }

    /// A sender to this job's ordered writer, for a record written from a drop (none without
    /// a store).
    pub(super) fn sender(&self) -> Option<WriterTx> {
        self.store.as_ref().map(|s| self.writer.sender(s))
    }
}

/// An instant as records' texts print it (RFC 3339, milliseconds, UTC).
fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
