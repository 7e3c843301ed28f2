//! Schedules stored as data, run (ADR 0020): the worker of one partition of the built-in group
//! `simba.schedules`. The group machinery (`group.rs`) spreads the partitions over the live
//! nodes and runs this worker once per term of each partition held; the worker loads the
//! partition's schedules from the schedule store, computes their slots with the core's one
//! rule (`simba_core::schedules::Fires`, as `admin::Schedules::next_fires` does), and hands each
//! due slot to the job runner (`runner.rs`): claimed under the partition's lease and token on
//! the schedule's own ledger (rule A5), run with the handler, recorded under `schedule/<id>` as
//! a code-defined job's slot. It re-reads the partition when its change counter moved, read
//! once per renewal interval (rule A11). A run-now request of a schedule (A15) is seen when
//! the jobs store's control version moves: the node reads the names with a request pending
//! once per move, for all its partitions, and the holder claims each request as a `manual`
//! slot whose handler gets the request's payload when it carries one. A request whose key is a
//! backfill's plan (A16) is a backfill: the holder keeps it in the term, per schedule, and
//! claims its range's slots one by one between the schedule's runs (`Shards::walk`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use simba_core::policy::{Bounds, Overlap, Runs, Step};
use simba_core::schedules::{Fires, job_name, term_start_gap};
use tokio::sync::watch;
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::changes::{ChangeFeed, counter_of};
use super::handler::Handler;
use super::held::{Entry, Shared};
use super::history::Recording;
use super::registry::{JobFuture, PartitionRun, job_future};
use super::runner::{PayloadCell, Slot, SlotRunner, Walk};
use super::wait;
use crate::job_store::{Outcome, SharedJobStore, SlotKind};
use crate::schedule_store::{ListQuery, Misfire, Policies, Schedule, SharedScheduleStore};
use crate::{BoxError, Simba, Term};

/// The name of the built-in group that runs schedules stored as data; partition `i` is the
/// lease `simba.schedules.i`.
pub(crate) const GROUP: &str = "simba.schedules";

/// How many schedules one read of a partition asks for at a time.
const PAGE: usize = 500;

/// How many schedules' last slots a term's start reads at a time (A14).
const GAP_READS: usize = 16;

/// How many times a term's start asks for one schedule's last slot (A14).
const GAP_TRIES: u32 = 3;

/// The reason a slot of a term's start gap is recorded `missed` with (A14).
const GAP_REASON: &str = "no node held the schedule's partition when the slot came";

/// The reason a slot is recorded `missed` with when a write replaced its schedule before this
/// node fired it.
const REPLACED_REASON: &str =
    "the schedule was edited, paused or deleted after this slot came and before the node fired it";

/// The reason a slot of a schedule whose handler this node lacks is recorded `missed` with.
const NO_HANDLER: &str = "no_handler";

/// What every partition's worker shares: the stores, the handlers this node has, and the
/// records' template (node, clock, writer, state). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Shards {
    inner: Arc<Inner>,
}

struct Inner {
    simba: Simba,
    store: SharedScheduleStore,
    /// The change counters, read once per renewal interval for all the held partitions.
    feed: Arc<ChangeFeed>,
    handlers: BTreeMap<String, Handler>,
    /// The records' template: its `job` is replaced by each schedule's `schedule/<id>`.
    rec: Recording,
    /// The ids of the schedules with a run-now request pending, read once per move of the
    /// jobs store's control version (A15); `None` without a jobs store.
    pending: Option<watch::Receiver<Arc<BTreeSet<String>>>>,
    /// The parsed specs and handler names the held schedules share.
    shared: Arc<Shared>,
}

/// The schedule ids with a run-now request pending in `store` (its `schedule/<id>` names).
async fn pending_requests(store: &SharedJobStore) -> crate::backend::BackendResult<BTreeSet<String>> {
    let names = store.pending_requests("schedule/").await?;
    Ok(names.into_iter().filter_map(|j| j.strip_prefix("schedule/").map(str::to_owned)).collect())
}

/// How many renewal intervals after a control move the node looks again at run-now requests
/// still pending; then twice as long each time, up to [`PENDING_AGAIN_MAX`].
const PENDING_AGAIN: u32 = 4;

/// The longest wait between two looks at requests still pending, in renewal intervals.
const PENDING_AGAIN_MAX: u32 = 64;

/// Publishes [`pending_requests`] at start and after each move of `control`, until the node's
/// control watch ends or no worker listens. A failed read is tried again at the next move, or
/// after `every`; while requests are pending, they are read and told again, [`PENDING_AGAIN`]
/// intervals after the last move, then twice as long each time.
async fn watch_pending(
    store: SharedJobStore,
    mut control: watch::Receiver<u64>,
    tx: watch::Sender<Arc<BTreeSet<String>>>,
    every: Duration,
) {
    let mut again = false;
    let mut pause = PENDING_AGAIN;
    loop {
        let (failed, waiting);
        match pending_requests(&store).await {
            Ok(ids) => {
                (failed, waiting) = (false, !ids.is_empty());
                // A look again at requests still pending (`again`) tells the workers even when
                // nothing changed: a claim whose answer was lost may have left its request
                // pending, and no control move would come for it.
                tx.send_if_modified(|old| {
                    let moved = again && waiting || **old != ids;
                    if moved {
                        *old = Arc::new(ids);
                    }
                    moved
                });
            }
            Err(e) => {
                (failed, waiting) = (true, false);
                tracing::warn!(error = %e, "cannot read the schedules' run-now requests; trying again");
            }
        }
        tokio::select! {
            moved = control.changed() => {
                if moved.is_err() {
                    return;
                }
                (again, pause) = (false, PENDING_AGAIN);
            }
            () = tokio::time::sleep(every), if failed => again = false,
            () = tokio::time::sleep(every * pause), if waiting => {
                // Doubling, so that a request nobody can take (its schedule paused or deleted)
                // costs one read per 64 intervals at most.
                (again, pause) = (true, (pause * 2).min(PENDING_AGAIN_MAX));
            }
            () = tx.closed() => return,
        }
    }
}

impl Shards {
    /// The workers' shared part: schedules from `store`, run with `handlers`, recorded through
    /// `rec` (whose job name each schedule replaces).
    pub(crate) fn new(simba: Simba, store: SharedScheduleStore, handlers: Vec<Handler>, rec: Recording) -> Self {
        let handlers = handlers.into_iter().map(|h| (h.name.to_string(), h)).collect();
        let every = simba.config().renew_interval();
        let feed = ChangeFeed::new(store.clone(), every, every);
        let pending = match (&rec.store, &rec.control) {
            (Some(jobs), Some(control)) => {
                let (tx, rx) = watch::channel(Arc::default());
                tokio::spawn(watch_pending(jobs.clone(), control.clone(), tx, every));
                Some(rx)
            }
            _ => None,
        };
        let shared = Arc::default();
        Shards { inner: Arc::new(Inner { simba, store, feed, handlers, rec, pending, shared }) }
    }

    /// The partition worker, as the group runs it once per term.
    pub(crate) fn worker(&self) -> PartitionRun {
        let shards = self.clone();
        PartitionRun::from_closure(move |term, partition| -> JobFuture {
            job_future(shards.clone().run(term, partition))
        })
    }

    /// Runs partition `partition`'s schedules while `term` lasts: re-read whenever the node's
    /// change feed finds the partition's counter moved, each due slot fired.
    async fn run(self, term: Term, partition: u32) -> Result<(), BoxError> {
        let mut changes = self.inner.feed.listen();
        let mut pending = self.inner.pending.clone();
        let mut asked = true;
        let mut shard = Shard { partition, seen: None, loaded_ms: 0, entries: BTreeMap::new() };
        let mut in_flight = InFlight::default();
        let every = self.inner.simba.config().renew_interval();
        // When to read the partition again after a failed read, even if no counter moved.
        let mut retry: Option<Instant> = None;
        let mut stale = true;
        let mut gaps_done = false;
        let mut gauge = NextFire(None, partition);
        while term.is_valid() {
            if stale || retry.is_some_and(|at| Instant::now() >= at) {
                retry = None;
                let counters = changes.borrow_and_update().clone();
                if let Some(counters) = counters {
                    match self.refresh(&mut shard, counter_of(&counters, partition)).await {
                        Ok(unfired) => self.record_unfired(unfired, &term),
                        Err(e) => {
                            tracing::warn!(partition, error = %e, "cannot read the partition's schedules; trying again");
                            retry = Some(Instant::now() + every);
                        }
                    }
                }
                stale = false;
                // A schedule loaded now (created, resumed) may have a request waiting.
                asked = true;
                if !gaps_done && shard.seen.is_some() {
                    gaps_done = true;
                    self.term_start_gaps(&shard, &term, &mut in_flight).await;
                }
            }
            let now_ms = self.inner.rec.now().timestamp_millis();
            for (id, due) in shard.take_due(now_ms) {
                self.fire(&shard, &id, &due, SlotKind::Scheduled, &term, &mut in_flight);
            }
            if asked && shard.seen.is_some() {
                asked = false;
                let ids = pending.as_mut().map(|rx| Arc::clone(&rx.borrow_and_update())).unwrap_or_default();
                for id in ids.iter().filter(|id| shard.entries.contains_key(*id)) {
                    self.fire(&shard, id, &[now_ms], SlotKind::Manual, &term, &mut in_flight);
                }
            }
            self.walk(&shard, &term, &mut in_flight);
            let next_ms = shard.next_ms();
            if next_ms != gauge.0 {
                gauge.0 = next_ms;
                crate::metrics::schedules_next_fire(partition, next_ms);
            }
            let next = next_ms.map(|ms| Instant::now() + ms_until(now_ms, ms));
            let next = [next, retry, in_flight.walk_due()].into_iter().flatten().min();
            tokio::select! {
                () = term.cancelled() => break,
                Some(done) = in_flight.tasks.join_next_with_id(), if !in_flight.tasks.is_empty() => {
                    self.ended(&shard, done, &term, &mut in_flight, true);
                }
                () = wait::until(next) => {}
                moved = changes.changed() => {
                    if moved.is_err() {
                        break;
                    }
                    stale = true;
                }
                () = wait::moved(pending.as_mut()) => asked = true,
            }
        }
        // The runs in flight end with the term (their context's cancellation, then their
        // record); a slot still waiting is left unclaimed for the next holder.
        while let Some(done) = in_flight.tasks.join_next_with_id().await {
            self.ended(&shard, done, &term, &mut in_flight, false);
        }
        for (id, (_, walks)) in std::mem::take(&mut in_flight.walks) {
            self.walker(&id, &term, walks).end_walks("the term ended");
        }
        Ok(())
    }

    /// Re-reads the partition's schedules when its change counter, `counter` by the node's
    /// last read, moved since the worker read them (or at the first): a schedule whose
    /// revision did not change keeps its next slot.
    async fn refresh(
        &self,
        shard: &mut Shard,
        counter: u64,
    ) -> Result<Vec<(String, Vec<i64>)>, crate::backend::BackendError> {
        let store = &self.inner.store;
        if shard.seen == Some(counter) {
            return Ok(Vec::new());
        }
        // Each page is turned into what loading needs as it comes (an entry for a schedule new
        // or edited here, a few fields otherwise), so that the rows of a whole partition are
        // never all in memory at once.
        let mut rows = Vec::new();
        let mut query = ListQuery::first(PAGE).partition(shard.partition);
        loop {
            let page = store.list(&query).await?;
            let last = page.last().map(|s| s.id.clone());
            let full = page.len() == PAGE;
            let now_ms = self.inner.rec.now().timestamp_millis();
            rows.extend(page.into_iter().map(|s| shard.read_row(s, now_ms, &self.inner.shared)));
            match last {
                Some(id) if full => query = query.after(id),
                _ => break,
            }
        }
        let now_ms = self.inner.rec.now().timestamp_millis();
        let unfired = shard.apply(rows, now_ms);
        shard.seen = Some(counter);
        shard.loaded_ms = now_ms;
        tracing::debug!(
            partition = shard.partition,
            schedules = shard.entries.len(),
            counter,
            "partition's schedules loaded"
        );
        Ok(unfired)
    }

    /// Records `missed` the slots a write replaced before this node fired them ([`Shard::load`]).
    fn record_unfired(&self, unfired: Vec<(String, Vec<i64>)>, term: &Term) {
        for (id, slots) in unfired {
            let rec = self.records(&id);
            tracing::info!(job = %rec.job, slots = slots.len(), "slots the node was late for when the schedule was written are recorded missed");
            for ms in slots {
                rec.append_with(at(ms), Outcome::Missed, Some(REPLACED_REASON.to_owned()), term);
            }
        }
    }

    /// A14: at the start of a term, after the first read of the partition, each schedule's
    /// slots that passed while no node held the partition (after the later of its slot claimed
    /// last and its last write, up to the read): recorded `missed`, or under misfire `run_once`
    /// the newest of them run as `caught_up`. One read of the last slot per schedule, at most
    /// [`GAP_READS`] at a time, before the term fires any slot (a slot it claimed first would
    /// hide the gap); a schedule whose last slot cannot be read after [`GAP_TRIES`] tries keeps
    /// no record of its gap, with a warning naming it.
    async fn term_start_gaps(&self, shard: &Shard, term: &Term, in_flight: &mut InFlight) {
        use futures_util::stream::{self, StreamExt};
        let now_ms = shard.loaded_ms;
        let inputs: Vec<(Recording, Arc<Fires>, i64, Policies, Bounds)> = shard
            .entries
            .iter()
            .map(|(id, e)| (self.records(id), Arc::clone(&e.fires), e.updated_ms, e.policies, e.bounds()))
            .collect();
        let reads = stream::iter(inputs).map(|(rec, fires, floor, policies, bounds)| {
            let term = term.clone();
            async move {
                let last = last_slot(&rec, &term).await;
                let run_once = policies.misfire == Misfire::RunOnce;
                let window = policies.catch_up_window_ms.map(Duration::from_millis);
                let gap = last.map(|last| {
                    let floor = last.unwrap_or(floor).max(floor);
                    (term_start_gap(&fires, (floor, now_ms), run_once, window, &bounds), window)
                });
                (rec, gap)
            }
        });
        let gaps: Vec<_> = reads.buffer_unordered(GAP_READS).collect().await;
        for (rec, gap) in gaps {
            let id = rec.job.strip_prefix("schedule/").unwrap_or(&rec.job).to_owned();
            let Ok((gap, window)) = gap else {
                tracing::warn!(job = %rec.job, "cannot read the schedule's last slot: the slots it missed while its partition had no holder are not recorded");
                continue;
            };
            if let Some(w) = window {
                let why = format!("{GAP_REASON}; older than the catch-up window ({})", humantime::format_duration(w));
                for s in gap.expired {
                    rec.append_with(s, Outcome::Missed, Some(why.clone()), term);
                }
            }
            for s in gap.missed {
                rec.append_with(s, Outcome::Missed, Some(GAP_REASON.to_owned()), term);
            }
            let catch_up = gap.catch_up.map(|c| c.timestamp_millis());
            if let Some(ms) = catch_up {
                self.fire(shard, &id, &[ms], SlotKind::CaughtUp, term, in_flight);
            }
        }
    }

    /// The records of schedule `id` (`schedule/<id>`).
    fn records(&self, id: &str) -> Recording {
        Recording { job: job_name(id).into(), ..self.inner.rec.clone() }
    }

    /// Fires schedule `id`'s due slots: the newest comes due under the schedule's overlap
    /// policy (J11: started, skipped, buffered or replacing the runs in flight, the core's
    /// [`Runs`] deciding); older ones the loop came too late for are recorded `missed`. A
    /// `manual` slot (a run-now request, A15) is one slot at now, which waits for the runs in
    /// flight rather than being skipped.
    fn fire(&self, shard: &Shard, id: &str, due: &[i64], kind: SlotKind, term: &Term, in_flight: &mut InFlight) {
        let (Some(entry), Some((&newest, older))) = (shard.entries.get(id), due.split_last()) else { return };
        let rec = self.records(id);
        for &ms in older {
            rec.append_with(at(ms), Outcome::Missed, Some("the node was late for this slot".to_owned()), term);
        }
        let slot = Slot::at(at(newest), kind);
        let overlap = entry.policies.overlap;
        let active = in_flight.active.entry(id.to_owned()).or_insert_with(|| Active::new(overlap));
        match active.runs.due(slot, slot.at, kind == SlotKind::Manual) {
            Step::Start(slot) => self.start(id, entry, slot, term, in_flight),
            Step::Wait | Step::Buffered => {}
            Step::Skipped => super::overlap::skipped(&rec.job, slot.at, active.runs.running(), overlap),
            Step::Cancel => {
                super::overlap::replacing(&rec.job, slot.at, active.runs.running());
                for r in active.replace.drain(..) {
                    r.cancel();
                }
            }
        }
    }

    /// Claims and runs `slot` of `entry`'s schedule as a task of the term. Without the
    /// handler on this node, the slot is claimed and recorded `missed` with the reason
    /// `no_handler` (A12), never dropped silently.
    fn start(&self, id: &str, entry: &Entry, slot: Slot, term: &Term, in_flight: &mut InFlight) {
        let id = id.to_owned();
        let rec = self.records(&id);
        let Some(active) = in_flight.active.get_mut(&id) else { return };
        active.runs.started();
        let replaced = CancellationToken::new();
        active.replace.push(replaced.clone());
        let simba = self.inner.simba.clone();
        let task = match self.inner.handlers.get(&*entry.handler) {
            None => {
                let handler = Arc::clone(&entry.handler);
                let why = format!("{NO_HANDLER}: handler `{handler}` is not registered on node {}", rec.node);
                let unrun = |_: Term| job_future(async { Ok::<(), BoxError>(()) });
                let runner = SlotRunner::new(simba, rec, term.clone(), unrun);
                Box::pin(async move {
                    let claimed = runner.claim_as_missed(slot, why).await;
                    if claimed {
                        let (job, node) = (&runner.records().job, &runner.records().node);
                        tracing::warn!(%job, %handler, %node, slot_ms = slot.ms, "no handler `{handler}` on this node: the slot is recorded missed (no_handler)");
                    }
                    (claimed, VecDeque::new())
                }) as std::pin::Pin<Box<dyn std::future::Future<Output = Ran> + Send>>
            }
            Some(handler) => {
                let (run, payload) = (handler.run.clone(), Arc::clone(&entry.payload));
                // A run-now request's payload, once its claim gave one (A15), else the schedule's.
                let given = PayloadCell::default();
                let cell = Arc::clone(&given);
                let body = move |t: Term| {
                    let given = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    run(t, given.unwrap_or_else(|| Arc::clone(&payload)))
                };
                let mut runner = SlotRunner::new(simba, rec, term.clone(), body).with_payload_cell(given);
                if let simba_core::schedules::Fires::Cron { cron, tz } = &*entry.fires {
                    runner = runner.with_grid((**cron).clone(), *tz, entry.bounds());
                }
                if slot.kind == SlotKind::Backfill {
                    runner.give_walks(in_flight.walks.remove(&id).map(|w| w.1).unwrap_or_default());
                }
                let (store, id) = (self.inner.store.clone(), id.clone());
                Box::pin(async move {
                    // A run-now request (A15) or a backfill's slot (A16) is claimed only while
                    // the schedule is there and not paused as the store has it now, not as this
                    // term last loaded it.
                    if matches!(slot.kind, SlotKind::Manual | SlotKind::Backfill)
                        && let Err(why) = runnable(&store, &id).await
                    {
                        if slot.kind == SlotKind::Backfill {
                            runner.backfill_put_back(slot);
                            runner.end_walks(why);
                        }
                        return (false, VecDeque::new());
                    }
                    let ran = runner.run_replaceable(slot, &replaced).await;
                    (ran, runner.take_walks())
                })
            }
        };
        let handle = in_flight.tasks.spawn(tracing::Instrument::in_current_span(task));
        in_flight.slots.insert(handle.id(), (id, slot));
    }

    /// A run of the term ended: once a schedule has none in flight, its skipped slots get
    /// their one record (R9) and its waiting slot starts (`start_next`: false at the term's
    /// end, which leaves it to the next holder; also left when the schedule is no longer
    /// loaded, deleted or paused meanwhile).
    fn ended(
        &self,
        shard: &Shard,
        done: Result<(Id, Ran), JoinError>,
        term: &Term,
        in_flight: &mut InFlight,
        start_next: bool,
    ) {
        let (task, (ran, walks)) = match done {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(error = %e, "a schedule's run task failed");
                (e.id(), (false, VecDeque::new()))
            }
        };
        let Some((id, slot)) = in_flight.slots.remove(&task) else { return };
        let revision = shard.entries.get(&id).map(|e| e.revision);
        in_flight.walks_back(&id, revision, walks, slot.kind == SlotKind::Backfill);
        let Some(active) = in_flight.active.get_mut(&id) else { return };
        // Each run-now request is its own run (R3): after one ran, the next pending one is
        // claimed (the claim answers `AlreadyClaimed` when none is left).
        if slot.kind == SlotKind::Manual && ran && start_next && term.is_valid() {
            let now_ms = self.inner.rec.now().timestamp_millis();
            self.quiet(shard, &id, active.runs.ended(slot.at, ran, true), term, in_flight);
            self.fire(shard, &id, &[now_ms], SlotKind::Manual, term, in_flight);
            return;
        }
        let quiet = active.runs.ended(slot.at, ran, start_next && term.is_valid());
        self.quiet(shard, &id, quiet, term, in_flight);
    }

    /// What a schedule's run ending left (`quiet`, when none is in flight any more): its
    /// skipped slots' one record (R9), and its waiting slot started.
    fn quiet(
        &self,
        shard: &Shard,
        id: &str,
        quiet: Option<simba_core::policy::Quiet<Slot>>,
        term: &Term,
        in_flight: &mut InFlight,
    ) {
        let Some(quiet) = quiet else { return };
        let Some(active) = in_flight.active.get_mut(id) else { return };
        active.replace.clear();
        self.records(id).skipped_run(&quiet.skipped, quiet.behind, term);
        match (quiet.next, shard.entries.get(id)) {
            (Some(next), Some(entry)) => self.start(id, entry, next, term, in_flight),
            (Some(next), None) => {
                tracing::debug!(schedule = %id, slot = %next.at, "the waiting slot is dropped: the schedule was deleted or paused");
                in_flight.active.remove(id);
            }
            (None, _) => {
                if active.runs.is_idle() {
                    in_flight.active.remove(id);
                }
            }
        }
    }
}

impl Shards {
    /// A runner of schedule `id`'s records in `term` holding `walks`, that runs nothing: the
    /// backfills' steps between their slots (the next slot, their end).
    fn walker(&self, id: &str, term: &Term, walks: VecDeque<Walk>) -> SlotRunner<impl Fn(Term) -> JobFuture> {
        let unrun = |_: Term| job_future(async { Ok::<(), BoxError>(()) });
        let runner = SlotRunner::new(self.inner.simba.clone(), self.records(id), term.clone(), unrun);
        runner.give_walks(walks);
        runner
    }

    /// A16: each schedule with a backfill due and no run in flight claims its backfill's next
    /// slot (oldest first, one run at a time, J16); a backfill with no slot left ends `ran`;
    /// one whose schedule was paused, deleted or edited since it was taken ends `cancelled`.
    fn walk(&self, shard: &Shard, term: &Term, in_flight: &mut InFlight) {
        let now = Instant::now();
        let due: Vec<String> = in_flight
            .walks
            .iter()
            .filter(|(id, (_, w))| !in_flight.active.contains_key(*id) && w.front().is_some_and(|w| w.next_at() <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some((revision, walks)) = in_flight.walks.remove(&id) else { continue };
            let runner = self.walker(&id, term, walks);
            let entry = shard.entries.get(&id).filter(|e| Some(e.revision) == revision);
            let Some(entry) = entry else {
                runner.end_walks(PAUSED_WALK);
                continue;
            };
            let Some(slot) = runner.backfill_next() else { continue };
            in_flight.walks.insert(id.clone(), (revision, runner.take_walks()));
            let active = in_flight.active.entry(id.clone()).or_insert_with(|| Active::new(entry.policies.overlap));
            match active.runs.due(slot, slot.at, true) {
                Step::Start(slot) => self.start(&id, entry, slot, term, in_flight),
                // Not reached: the schedule had no run in flight, so its slot starts at once.
                step => {
                    tracing::debug!(schedule = %id, ?step, "a backfill's slot did not start");
                    in_flight.active.remove(&id);
                }
            }
        }
    }
}

/// What stops a schedule's backfill that finds it paused, deleted or edited (A16).
const PAUSED_WALK: &str = "the schedule was paused, deleted or edited after the backfill was taken";

/// The partition's next-fire gauge as last set (`.0`), set to 0 when its term ends here.
struct NextFire(Option<i64>, u32);

impl Drop for NextFire {
    fn drop(&mut self) {
        crate::metrics::schedules_next_fire(self.1, None);
    }
}

/// The runs of one schedule in flight in this term, and the signals that replace them (J11).
struct Active {
    runs: Runs<Slot>,
    replace: Vec<CancellationToken>,
}

impl Active {
    fn new(overlap: Overlap) -> Self {
        Active { runs: Runs::new(overlap), replace: Vec::new() }
    }
}

/// The runs of a partition's term: one task each (its answer: whether the slot ran), the
/// schedule and slot of each task, and the schedules with runs in flight or a slot waiting.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<Ran>,
    slots: HashMap<Id, (String, Slot)>,
    active: HashMap<String, Active>,
    /// The backfills taken in this term (A16), by schedule, oldest first, with the schedule's
    /// revision when they were taken; out of here while one of their slots runs.
    walks: HashMap<String, (Option<u64>, VecDeque<Walk>)>,
}

/// What a run's task answers: whether its slot ran, and the schedule's backfills it held.
type Ran = (bool, VecDeque<Walk>);

impl InFlight {
    /// Puts `walks` of schedule `id` back: before the others when they come back from one of
    /// their slots (`older`: they were taken first), after them when a run-now claim just took
    /// them. A backfill taken now keeps the schedule's `revision` of now.
    fn walks_back(&mut self, id: &str, revision: Option<u64>, mut walks: VecDeque<Walk>, older: bool) {
        if walks.is_empty() {
            return;
        }
        let (kept, mut rest) = self.walks.remove(id).unwrap_or((revision, VecDeque::new()));
        if older {
            walks.append(&mut rest);
        } else {
            rest.append(&mut walks);
            walks = rest;
        }
        self.walks.insert(id.to_owned(), (kept.or(revision), walks));
    }

    /// When the earliest backfill of a schedule with no run in flight may take its next slot.
    fn walk_due(&self) -> Option<Instant> {
        self.walks
            .iter()
            .filter(|(id, _)| !self.active.contains_key(*id))
            .filter_map(|(_, (_, w))| w.front().map(Walk::next_at))
            .min()
    }
}

/// A row of a partition's read as loading needs it ([`Shard::read_row`]).
struct ReadRow {
    id: String,
    updated_ms: i64,
    kept: Kept,
}

/// What a read row leaves in the shard.
enum Kept {
    /// The shard's entry, read at the same revision (its next slot kept).
    Old,
    /// A new entry, for a schedule new or edited since the shard's entries were made.
    Fresh(Entry),
    /// No entry: the schedule is paused, or its spec no longer checks.
    None,
}

/// One partition's schedules, by id, and the change counter they were read at.
struct Shard {
    partition: u32,
    seen: Option<u64>,
    /// The wall-clock instant of the last read: slots up to it are not fired by the loop.
    loaded_ms: i64,
    entries: BTreeMap<String, Entry>,
}

impl Shard {
    /// Replaces the entries with `rows` (paused schedules and ones whose spec no longer checks
    /// are left out): a schedule read at the same revision keeps its next slot; a new or
    /// edited one fires next at its first slot after `now_ms`. Returns, by schedule, the slots
    /// of the entries replaced or left out that were due before their write (its `updated_ms`;
    /// now for a deleted one) and that this node had not fired yet (it was late): they belong
    /// to the spec the write replaced, and the caller records them `missed`.
    #[cfg(test)]
    fn load(&mut self, rows: Vec<Schedule>, now_ms: i64, shared: &Shared) -> Vec<(String, Vec<i64>)> {
        let rows = rows.into_iter().map(|s| self.read_row(s, now_ms, shared)).collect();
        self.apply(rows, now_ms)
    }

    /// What loading needs of row `s`, read at `now_ms`: its entry, built now, when the schedule
    /// is new or edited since this shard's entries were made (and not paused, and its spec
    /// checks); its id, revision and write time otherwise.
    fn read_row(&self, mut s: Schedule, now_ms: i64, shared: &Shared) -> ReadRow {
        let updated_ms = s.updated_ms;
        let id = std::mem::take(&mut s.id);
        let kept = if s.paused {
            Kept::None
        } else if self.entries.get(&id).is_some_and(|e| e.revision == s.revision) {
            Kept::Old
        } else {
            match shared.fires(&s.spec) {
                Ok(fires) => Kept::Fresh(Entry::new(shared.handler(&s.handler), fires, s, now_ms)),
                Err(e) => {
                    tracing::warn!(schedule = %id, error = %e, "the schedule's spec does not check; not running it");
                    Kept::None
                }
            }
        };
        ReadRow { id, updated_ms, kept }
    }

    /// Replaces the entries with the partition's `rows` as [`read_row`](Self::read_row) made
    /// them (see [`load`](Self::load)); returns the slots the replaced entries left unfired.
    fn apply(&mut self, rows: Vec<ReadRow>, now_ms: i64) -> Vec<(String, Vec<i64>)> {
        let mut unfired = Vec::new();
        let read: HashMap<&str, &ReadRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        for (id, old) in &self.entries {
            let row = read.get(id.as_str());
            let before = row.map_or(now_ms, |r| r.updated_ms);
            let changed = row.is_none_or(|r| !matches!(r.kept, Kept::Old));
            let slots = if changed { old.unfired(id, before, now_ms) } else { Vec::new() };
            if !slots.is_empty() {
                unfired.push((id.clone(), slots));
            }
        }
        drop(read);
        let mut entries = BTreeMap::new();
        for r in rows {
            match r.kept {
                Kept::Fresh(fresh) => {
                    entries.insert(r.id, fresh);
                }
                Kept::Old => {
                    if let Some((id, old)) = self.entries.remove_entry(&r.id) {
                        entries.insert(id, old);
                    }
                }
                Kept::None => {}
            }
        }
        self.entries = entries;
        unfired
    }

    /// When the partition's earliest next slot starts (its instant plus its jitter).
    fn next_ms(&self) -> Option<i64> {
        self.entries.iter().filter_map(|(id, e)| e.next_ms.map(|ms| e.starts_ms(id, ms))).min()
    }

    /// The slots due at `now_ms` (started, jitter included), by schedule, oldest first; each
    /// schedule's next slot moves past them.
    fn take_due(&mut self, now_ms: i64) -> Vec<(String, Vec<i64>)> {
        let mut due = Vec::new();
        for (id, e) in &mut self.entries {
            let mut slots = Vec::new();
            while let Some(ms) = e.next_ms.filter(|ms| e.starts_ms(id, *ms) <= now_ms) {
                slots.push(ms);
                e.next_ms = e.next_after(ms);
            }
            if !slots.is_empty() {
                due.push((id.clone(), slots));
            }
        }
        due
    }
}

/// Whether schedule `id` exists and is not paused in `store` now; when not, or when it cannot
/// be read, what stops a backfill of it (a run-now request stays pending for a later look).
async fn runnable(store: &SharedScheduleStore, id: &str) -> Result<(), &'static str> {
    match store.get(id).await {
        Ok(Some(s)) if !s.paused => Ok(()),
        Ok(_) => Err(PAUSED_WALK),
        Err(e) => {
            tracing::warn!(schedule = id, error = %e, "cannot read the schedule before its requested run; the request waits");
            Err("the schedule could not be read before the backfill's next slot")
        }
    }
}

/// The schedule's slot claimed last, read up to [`GAP_TRIES`] times (`Err` when no read
/// answered).
async fn last_slot(rec: &Recording, term: &Term) -> Result<Option<i64>, String> {
    let mut pause = Duration::from_millis(100);
    let mut tries = 0;
    loop {
        tries += 1;
        match rec.last_slot_ms(term).await {
            Ok(last) => return Ok(last),
            Err(e) if tries >= GAP_TRIES || !term.is_valid() => return Err(e),
            Err(e) => tracing::debug!(job = %rec.job, error = %e, tries, "cannot read the schedule's last slot yet"),
        }
        tokio::time::sleep(pause).await;
        pause *= 3;
    }
}

/// How long from `now_ms` until `ms` (zero when it passed).
fn ms_until(now_ms: i64, ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// The instant of `ms` unix milliseconds.
fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule_store::ScheduleSpec;

    fn every(id: &str, secs: u64, revision: u64) -> Schedule {
        let mut s = Schedule::new(id, "h", ScheduleSpec::fixed_rate(Duration::from_secs(secs)));
        s.revision = revision;
        s
    }

    /// J13, J14 for schedules: no slot outside the bounds, and each slot taken only once its
    /// jittered start (the core's `jitter` of `schedule/<id>` and the slot) has come, before the
    /// next slot.
    #[test]
    fn j13_j14_a_schedules_slots_follow_its_jitter_and_bounds() {
        use crate::schedule_store::Policies;
        let mut s = every("b", 10, 1);
        s.policies = Policies::default().with_jitter(Duration::from_secs(5)).with_bounds(Some(30_000), Some(60_000));
        let mut shard = Shard { partition: 0, seen: None, loaded_ms: 0, entries: BTreeMap::new() };
        shard.load(vec![s], 5_000, &Shared::default());
        assert_eq!(shard.entries["b"].next_ms, Some(30_000), "none before the start bound");
        let mut taken = Vec::new();
        for now in (0..80_000).step_by(100) {
            for (_, slots) in shard.take_due(now) {
                for ms in slots {
                    let delay = simba_core::policy::jitter(
                        "schedule/b",
                        ms,
                        Duration::from_secs(5),
                        Some(Duration::from_secs(10)),
                    );
                    let starts = ms + i64::try_from(delay.as_millis()).unwrap_or(0);
                    assert!(now >= starts && now < starts + 100, "slot {ms} taken at {now}, starts at {starts}");
                    assert!(starts < ms + 10_000, "before the next slot");
                    taken.push(ms);
                }
            }
        }
        assert_eq!(taken, [30_000, 40_000, 50_000, 60_000], "within the bounds, each once");
        assert_eq!(shard.next_ms(), None, "none after the end bound");
    }

    /// A11: a write (edit, pause, delete) that a late node loads after some of the schedule's
    /// slots came, and before it fired them, leaves those slots to be recorded `missed`: the
    /// ones before the write (its `updated_ms`; now for a delete), never one after it, none
    /// for an unchanged schedule.
    #[test]
    fn a11_slots_a_late_node_had_not_fired_when_a_write_came_are_returned() {
        let mut shard = Shard { partition: 0, seen: None, loaded_ms: 0, entries: BTreeMap::new() };
        let unfired = shard.load(
            vec![every("e", 1, 1), every("p", 1, 1), every("d", 1, 1), every("u", 1, 1)],
            500,
            &Shared::default(),
        );
        assert!(unfired.is_empty(), "a first load leaves nothing: {unfired:?}");
        let edited = Schedule { updated_ms: 2_500, ..every("e", 5, 2) };
        let paused = Schedule { updated_ms: 3_200, paused: true, ..every("p", 1, 2) };
        let unfired = shard.load(vec![edited, paused, every("u", 1, 1)], 4_100, &Shared::default());
        assert_eq!(
            unfired,
            [
                ("d".to_owned(), vec![1_000, 2_000, 3_000, 4_000]),
                ("e".to_owned(), vec![1_000, 2_000]),
                ("p".to_owned(), vec![1_000, 2_000, 3_000]),
            ],
            "the deleted one up to now, the others up to their write; `u` unchanged keeps its slots"
        );
        assert_eq!(shard.entries["u"].next_ms, Some(1_000), "unchanged: its slots are still to fire");
    }

    /// A11: slots come from the spec alone (A4); a reload at the same revision keeps the next slot, an
    /// edit starts from its new spec, a pause or a delete removes the schedule.
    #[test]
    fn a11_reload_keeps_unchanged_schedules_and_applies_edits() {
        let mut shard = Shard { partition: 0, seen: None, loaded_ms: 0, entries: BTreeMap::new() };
        shard.load(vec![every("a", 10, 1), every("b", 60, 1)], 5_000, &Shared::default());
        assert_eq!(shard.next_ms(), Some(10_000));
        assert_eq!(shard.take_due(35_000), [("a".to_owned(), vec![10_000, 20_000, 30_000])]);
        assert_eq!(shard.next_ms(), Some(40_000));
        shard.load(vec![every("a", 10, 1), every("b", 60, 2)], 36_000, &Shared::default());
        assert_eq!(shard.entries["a"].next_ms, Some(40_000), "unchanged: keeps its next slot");
        let mut paused = every("a", 10, 2);
        paused.paused = true;
        shard.load(vec![paused, every("b", 5, 3)], 36_000, &Shared::default());
        assert!(!shard.entries.contains_key("a"), "a paused schedule is not run");
        assert_eq!(shard.entries["b"].next_ms, Some(40_000), "edited: its new spec from now");
        shard.load(Vec::new(), 36_000, &Shared::default());
        assert!(shard.entries.is_empty(), "deleted");
    }
}
