//! Partition groups (rule J6): every node joins the group with its session; with `m` live
//! members and `n` partitions each node converges to `floor(n/m)` or `ceil(n/m)` partitions.
//! A node over its share steps surplus partitions down in the H1 order (keeping the others:
//! sticky); a node under its share acquires free ones. Leases keep two nodes from ever
//! holding one partition.
//!
//! The decision of each round is the core's (`simba_core::rebalance`); this module runs it
//! with the client's public API only: [`Simba::group`] for the membership,
//! [`Simba::lock`] for the partitions, [`LockGuard::hand_over`] for the handover (the H1 order of the election machine, `simba_core::election`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use simba_core::rebalance::{self, Plan};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{JobContext, Misfire, PartitionRun, Recording, Timer, run_scheduled};
use crate::job_store::SlotKind;
use crate::{Group, LockGuard, RevokeReason, Simba, Term};

/// One partitioned job as the runtime runs it.
#[derive(Clone)]
pub(crate) struct GroupSpec {
    pub(crate) job: Arc<str>,
    pub(crate) group: Arc<str>,
    pub(crate) partitions: u32,
    pub(crate) timer: Option<Timer>,
    pub(crate) misfire: Misfire,
    /// Each partition's slot policies (J11-J14).
    pub(crate) policies: super::Policies,
    pub(crate) run: PartitionRun,
    /// History and control; each partition records as `{job}/{i}`.
    pub(crate) recording: Recording,
}

impl GroupSpec {
    pub(crate) fn lease(&self, partition: u32) -> String {
        format!("{}.{partition}", self.group)
    }
}

struct Worker {
    stop: Option<oneshot::Sender<RevokeReason>>,
    handle: JoinHandle<()>,
}

/// Runs the group until `stop` is cancelled, then leaves the group and hands every partition
/// over (H1).
pub(crate) async fn run_group(simba: Simba, spec: GroupSpec, stop: CancellationToken) {
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<u32>();
    let mut held: BTreeMap<u32, Worker> = BTreeMap::new();
    let mut leaving: BTreeMap<u32, Worker> = BTreeMap::new();
    let group = simba.group(spec.group.to_string());
    let mut watch = group.watch();
    // Named in code, so bounded: the partitions' terms carry their lease names (rule O4).
    for i in 0..spec.partitions {
        simba.shared.lease_metrics.declare(&spec.lease(i), crate::metrics::LeaseKind::Partition);
    }
    // Partitions whose release was heard and that no round has tried since: kept across
    // rounds, because the round a release wakes may still see the releaser listed (a member
    // stepping surplus partitions down stays; a node whose membership record is not yet gone
    // from the store's listing) and have nothing to take yet.
    let mut released = BTreeSet::new();
    loop {
        released.extend(released_partitions(&spec, watch.take_released()));
        round(&simba, &group, &spec, &mut held, &mut leaving, &mut released, &ended_tx).await;
        tokio::select! {
            _ = stop.cancelled() => {
                shut_down(&group, held, leaving).await;
                for i in 0..spec.partitions {
                    simba.shared.lease_metrics.forget(&spec.lease(i));
                }
                return;
            }
            Some(i) = ended_rx.recv() => {
                if held.get(&i).is_some_and(|w| w.handle.is_finished()) {
                    held.remove(&i);
                }
                leaving.retain(|_, w| !w.handle.is_finished());
                held.retain(|_, w| !w.handle.is_finished());
            }
            () = watch.changed() => {}
        }
    }
}

/// The partitions among released lease names of the group (`{group}.{i}`).
fn released_partitions(spec: &GroupSpec, names: Vec<String>) -> BTreeSet<u32> {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(&*spec.group)?.strip_prefix('.')?.parse().ok())
        .filter(|i| *i < spec.partitions)
        .collect()
}

async fn round(
    simba: &Simba,
    group: &Group,
    spec: &GroupSpec,
    held: &mut BTreeMap<u32, Worker>,
    leaving: &mut BTreeMap<u32, Worker>,
    released: &mut BTreeSet<u32>,
    ended_tx: &mpsc::UnboundedSender<u32>,
) {
    held.retain(|_, w| !w.handle.is_finished());
    leaving.retain(|_, w| !w.handle.is_finished());
    let view = match group.members().await {
        Ok(Some(view)) => view,
        // No live session: the next one joins at the next round.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(group = %spec.group, error = %e, "cannot join the group or list its members; retrying");
            return;
        }
    };
    let held_now: BTreeSet<u32> = held.keys().copied().collect();
    let leaving_now: BTreeSet<u32> = leaving.keys().copied().collect();
    // Held or handed over: no longer a hint.
    released.retain(|i| !held_now.contains(i) && !leaving_now.contains(i));
    match rebalance::plan(spec.partitions, &view.members, &view.me, &held_now, &leaving_now, released) {
        Plan::Keep => {}
        Plan::StepDown(surplus) => {
            // Surplus: hand the highest-numbered partitions over (H1), keep the rest (sticky).
            let share = held.len() - surplus.len();
            for i in surplus {
                if let Some(mut w) = held.remove(&i) {
                    tracing::info!(group = %spec.group, partition = i, members = view.members.len(), share, "stepping a surplus partition down");
                    if let Some(s) = w.stop.take() {
                        let _ = s.send(RevokeReason::SteppedDown);
                    }
                    leaving.insert(i, w);
                }
            }
        }
        Plan::Acquire { mut need, candidates } => {
            // As many candidates at once as partitions are needed, in the plan's order: one
            // round trip for a round that finds them free (a crashed member's partitions are
            // then taken together, not one after another), never more won than needed.
            let mut candidates = candidates.into_iter();
            while need > 0 {
                if simba.session_id().as_ref() != Some(&view.me) {
                    return;
                }
                let batch: Vec<u32> = candidates.by_ref().take(need).collect();
                if batch.is_empty() {
                    return;
                }
                let tries = batch.iter().map(|&i| {
                    // Tried: won, or taken by another member meanwhile.
                    released.remove(&i);
                    async move { (i, simba.lock(spec.lease(i)).try_acquire_now().await) }
                });
                for (i, tried) in futures_util::future::join_all(tries.collect::<Vec<_>>()).await {
                    match tried {
                        Ok(Some(guard)) => {
                            held.insert(i, start_worker(simba, spec, i, guard, ended_tx.clone()));
                            need -= 1;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(group = %spec.group, partition = i, error = %e, "cannot contend for a partition");
                        }
                    }
                }
            }
        }
    }
}

/// A worker that runs once per term, in a run context (its state, its node) whose
/// cancellation fires when the term ends.
fn once_per_term(
    rec: &Recording,
    term: &Term,
    i: u32,
    run: PartitionRun,
) -> impl Future<Output = Result<(), crate::BoxError>> + use<> {
    let ctx = JobContext {
        slot: rec.now(),
        kind: SlotKind::Scheduled,
        attempt: 1,
        attempts: 1,
        node: Arc::clone(&rec.node),
        cancel: CancellationToken::new(),
        state: Arc::clone(&rec.state),
    };
    let (cancel, term) = (ctx.cancel.clone(), term.clone());
    let body = ctx.scope(run(term.clone(), i));
    async move {
        let on_end = async move {
            term.cancelled().await;
            cancel.cancel();
            std::future::pending().await
        };
        tokio::select! {
            r = body => r,
            never = on_end => never,
        }
    }
}

fn start_worker(
    simba: &Simba,
    spec: &GroupSpec,
    i: u32,
    guard: LockGuard,
    ended: mpsc::UnboundedSender<u32>,
) -> Worker {
    let (stop_tx, stop_rx) = oneshot::channel();
    let (simba, spec) = (simba.clone(), spec.clone());
    let span = tracing::info_span!("partition", group = %spec.group, partition = i, token = guard.term().token());
    let handle = tokio::spawn(tracing::Instrument::instrument(
        async move {
            let term = guard.term().clone();
            tracing::info!(group = %spec.group, partition = i, token = term.token(), "partition acquired");
            let held_gauge = crate::metrics::PartitionHeld::new(&spec.group);
            let run = spec.run.clone();
            let mut task: JoinHandle<Result<(), crate::BoxError>> = match spec.timer.clone() {
                // The worker logs inside this partition's span.
                Some(timer) => tokio::spawn(tracing::Instrument::in_current_span(run_scheduled(
                    simba.clone(),
                    Recording { job: format!("{}/{i}", spec.job).into(), ..spec.recording.clone() },
                    timer,
                    (spec.misfire, spec.policies),
                    term.clone(),
                    move |t: Term| run(t, i),
                ))),
                None => {
                    tokio::spawn(tracing::Instrument::in_current_span(once_per_term(&spec.recording, &term, i, run)))
                }
            };
            tokio::select! {
                reason = term.revoked() => {
                    // H3: lost; do not wait for the worker.
                    task.abort();
                    tracing::warn!(group = %spec.group, partition = i, token = term.token(), %reason, "partition lost");
                    drop(guard);
                }
                reason = stop_rx => {
                    // H1: revoke, wait for the worker (aborted at the term's deadline), release.
                    let reason = reason.unwrap_or(RevokeReason::Stopped);
                    if let Err(e) = guard.hand_over(reason, task).await {
                        tracing::warn!(group = %spec.group, partition = i, error = %e, "release failed; the lease frees with the session");
                    }
                }
                res = &mut task => {
                    match res {
                        Ok(Ok(())) => tracing::info!(group = %spec.group, partition = i, "partition worker returned; releasing the partition"),
                        Ok(Err(e)) => tracing::error!(group = %spec.group, partition = i, error = %e, "partition worker failed; releasing the partition"),
                        Err(e) => tracing::error!(group = %spec.group, partition = i, error = %e, "partition worker panicked; releasing the partition"),
                    }
                    // The worker is done: H1 without a task to wait for (H2).
                    guard.revoke(RevokeReason::SteppedDown);
                    if let Err(e) = guard.release().await {
                        tracing::warn!(group = %spec.group, partition = i, error = %e, "release failed; the lease frees with the session");
                    }
                }
            }
            drop(held_gauge);
            let _ = ended.send(i);
        },
        span,
    ));
    Worker { stop: Some(stop_tx), handle }
}

/// Leaves the group first, then hands every partition over (H1). In this order the other
/// members' rounds, woken by the releases, already count one member less and take the
/// partitions at once; the other way round, those rounds still saw this node listed, found
/// themselves at their share and waited for their next candidate delay (BENCHMARKS.md P6). The
/// leases keep a partition from being held twice meanwhile: a member that tries one before
/// its release is told it is held.
async fn shut_down(group: &Group, held: BTreeMap<u32, Worker>, leaving: BTreeMap<u32, Worker>) {
    group.leave().await;
    let mut handles = Vec::new();
    for (_, mut w) in held.into_iter().chain(leaving) {
        if let Some(s) = w.stop.take() {
            let _ = s.send(RevokeReason::Stopped);
        }
        handles.push(w.handle);
    }
    for h in handles {
        let _ = h.await;
    }
}
