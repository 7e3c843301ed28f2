//! The runs of one job in flight during one term, and what a slot that comes due does beside
//! them (rule J11): the decision is the core's ([`on_due`]); this shell starts, buffers,
//! cancels and awaits the runs. Every run goes through the term's [`SlotRunner`], so each
//! slot is still claimed once through the ledger (J5), whatever overlaps.

use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use simba_core::policy::{Overlap, Runs, Step};
use tokio_util::sync::CancellationToken;

use super::history::Recording;
use super::registry::JobFuture;
use super::runner::{Slot, SlotRunner};
use crate::Term;
use crate::job_store::SlotKind;

/// A run in flight: its slot, and whether it ran (false: its claim was refused).
type Run<'r> = Pin<Box<dyn Future<Output = (Slot, bool)> + Send + 'r>>;

/// The runs of one job in flight in one term (J11). Its futures progress only while polled:
/// the slot loops poll [`ended`](Self::ended) in every wait. The bookkeeping (what waits, what
/// was skipped) is the core's [`Runs`], shared with the schedules' partition workers.
pub(super) struct InFlight<'r, F> {
    runner: &'r SlotRunner<F>,
    runs: FuturesUnordered<Run<'r>>,
    /// The signals that replace the runs in flight (`cancel_running`).
    replace: Vec<CancellationToken>,
    count: Runs<Slot>,
    /// A manual slot ran: another run-now request may be pending (R3: each is its own run),
    /// so the loop claims again ([`take_manual_again`](Self::take_manual_again)).
    manual_again: bool,
}

impl<'r, F: Fn(Term) -> JobFuture + Send + Sync> InFlight<'r, F> {
    pub(super) fn new(runner: &'r SlotRunner<F>, overlap: Overlap) -> Self {
        InFlight {
            runner,
            runs: FuturesUnordered::new(),
            replace: Vec::new(),
            count: Runs::new(overlap),
            manual_again: false,
        }
    }

    /// The term's slot runner.
    pub(super) fn runner(&self) -> &'r SlotRunner<F> {
        self.runner
    }

    /// The term the runs run under.
    pub(super) fn term(&self) -> &'r Term {
        self.runner.term()
    }

    /// The job's records.
    pub(super) fn records(&self) -> &'r Recording {
        self.runner.records()
    }

    /// The control version moved: a run-now request may be pending. It is a `manual` slot,
    /// which follows the overlap policy like the others; one that would be skipped is not
    /// claimed and stays pending in the store.
    pub(super) async fn manual(&mut self) {
        let rec = self.runner.records();
        if rec.store.is_none() || !self.runner.term().is_valid() {
            return;
        }
        self.due(Slot::at(rec.now(), SlotKind::Manual)).await;
    }

    /// When the oldest backfill's next slot may start: only while no run is in flight, so a
    /// backfill's runs never overlap the job's others (`None`: nothing to start).
    pub(super) fn backfill_due(&self) -> Option<tokio::time::Instant> {
        if self.runs.is_empty() { self.runner.backfill_due() } else { None }
    }

    /// Starts the oldest backfill's next slot (J16) as a run of the job, under its overlap
    /// policy like any other (under `skip` it is awaited here).
    pub(super) async fn backfill(&mut self) {
        if !self.runs.is_empty() || !self.runner.term().is_valid() {
            return;
        }
        if let Some(slot) = self.runner.backfill_next() {
            self.due(slot).await;
        }
    }

    /// Whether a manual run ended since the last call: the loop then claims the next pending
    /// run-now request at once rather than at the next move of the control version.
    pub(super) fn take_manual_again(&mut self) -> bool {
        std::mem::take(&mut self.manual_again)
    }

    /// `slot` came due: starts, skips, buffers it or replaces the runs in flight with it, as
    /// the core decides. Under `skip` (the behaviour before policies) a started run is
    /// awaited here, so no slot comes due while it runs: the loop then reports the slots it
    /// passed (R9). Returns the slot that ran when it was awaited.
    pub(super) async fn due(&mut self, slot: Slot) -> Option<DateTime<Utc>> {
        match self.count.due(slot, slot.at, matches!(slot.kind, SlotKind::Manual | SlotKind::Backfill)) {
            Step::Start(slot) => self.start(slot),
            Step::Wait => {
                tracing::debug!(job = %self.runner.records().job, "a run-now request waits: runs are in flight");
            }
            Step::Skipped => skipped(&self.runner.records().job, slot.at, self.runs.len(), self.count.overlap()),
            Step::Buffered => {}
            Step::Cancel => {
                replacing(&self.runner.records().job, slot.at, self.runs.len());
                for r in self.replace.drain(..) {
                    r.cancel();
                }
                // The new slot starts when the last cancelled run ended (`on_end`).
                let mut left = self.runs.len();
                while left > 0
                    && let Some(end) = self.runs.next().await
                {
                    left -= 1;
                    self.on_end(end, true);
                }
            }
        }
        if self.count.overlap() == Overlap::Skip {
            self.drain(false).await;
            return self.count.take_last_ran();
        }
        None
    }

    fn start(&mut self, slot: Slot) {
        let (runner, replaced) = (self.runner, CancellationToken::new());
        self.replace.push(replaced.clone());
        self.count.started();
        self.runs.push(Box::pin(async move {
            let ran = runner.run_replaceable(slot, &replaced).await;
            (slot, ran)
        }));
    }

    /// Completes when a run in flight ended (never when none is), having handled its end.
    /// Cancel-safe: the runs stay in flight when this future is dropped.
    pub(super) async fn ended(&mut self) {
        match self.runs.next().await {
            Some(end) => self.on_end(end, true),
            None => std::future::pending().await,
        }
    }

    /// Awaits every run in flight; the waiting slot starts when they end if `closing` is
    /// false (at the end of the term it is left unclaimed: the next holder finds it).
    pub(super) async fn drain(&mut self, closing: bool) {
        while let Some(end) = self.runs.next().await {
            self.on_end(end, !closing);
        }
    }

    /// A run ended: once none is in flight, the skipped slots get their one record and the
    /// waiting slot starts (if `start_next`).
    fn on_end(&mut self, (slot, ran): (Slot, bool), start_next: bool) {
        self.manual_again |= ran && slot.kind == SlotKind::Manual;
        let Some(quiet) = self.count.ended(slot.at, ran, start_next) else { return };
        self.replace.clear();
        let (rec, term) = (self.runner.records(), self.runner.term());
        rec.skipped_run(&quiet.skipped, quiet.behind, term);
        if let Some(next) = quiet.next
            && term.is_valid()
        {
            self.start(next);
        }
    }
}

/// Logs a slot of `job` at `at` skipped because `runs` runs are in flight under `overlap`
/// (J11; the slot loops and the schedules' partition workers alike).
pub(super) fn skipped(job: &str, at: DateTime<Utc>, runs: usize, overlap: Overlap) {
    tracing::debug!(%job, slot = %at, runs, overlap = overlap.as_str(), "slot skipped: runs are in flight");
}

/// Logs a slot of `job` at `at` that replaces the `runs` runs in flight (`cancel_running`, J11).
pub(super) fn replacing(job: &str, at: DateTime<Utc>, runs: usize) {
    tracing::info!(%job, slot = %at, runs, "a new slot replaces the runs in flight (overlap = cancel_running)");
}
