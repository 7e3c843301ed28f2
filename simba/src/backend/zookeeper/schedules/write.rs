//! The writes of the schedule store: one snapshot read, then one `multi` (see the module
//! above).

use std::sync::{Arc, PoisonError};

use serde::Serialize;
use zookeeper_client as zk;

use super::path::{audit_path, listed_bytes, partition_path, schedule_path, segment, space_path};
use super::{ATTEMPTS, MAX_TRIM, Snapshot, SpaceRow, ZkScheduleStore};
use crate::backend::BackendResult;
use crate::backend::schedule_store::{Actor, AuditAction, AuditRecord, Schedule, partition_of};

/// What a write does to the schedule's node.
pub(super) enum NodeOp {
    Create(Box<Schedule>),
    Set(Box<Schedule>, i32),
    Delete(i32),
}

/// A write decided from a [`Snapshot`]: the node operation, the action audited, and the
/// answer once committed.
pub(super) struct Plan<T> {
    pub(super) partitions: u32,
    pub(super) op: NodeOp,
    pub(super) action: AuditAction,
    pub(super) answer: T,
}

/// What a write's decision is: nothing to write (answer at once), or a plan.
pub(super) enum Step<T> {
    Answer(T),
    Write(Plan<T>),
}

impl ZkScheduleStore {
    /// One write: reads a [`Snapshot`], lets `decide` answer or plan, commits the plan, and
    /// reads again when another write of the space committed first.
    pub(super) async fn write<T>(
        &self,
        space: &str,
        id: &str,
        partitions: Option<u32>,
        actor: &Actor<'_>,
        what: &str,
        decide: impl Fn(&Snapshot) -> BackendResult<Step<T>>,
    ) -> BackendResult<T> {
        let client = self.client(what).await?;
        let turn = {
            let mut turns = self.state.turns.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(turns.entry(space.to_owned()).or_default())
        };
        let _turn = turn.lock().await;
        let mut gone_below = 0;
        for _ in 0..ATTEMPTS {
            let snap = self.snapshot(&client, space, id, partitions, what).await?;
            let plan = match decide(&snap)? {
                Step::Answer(answer) => return Ok(answer),
                Step::Write(plan) => plan,
            };
            let w = Write { space, id, snap: &snap, actor, what };
            if self.commit(&client, &w, &plan, &mut gone_below).await? {
                return Ok(plan.answer);
            }
        }
        Err(self.protocol(&format!(
            "{what} `{id}`: the schedules of space `{space}` kept changing ({ATTEMPTS} writes of others committed \
             first, or nodes under {} were changed by hand); try again",
            space_path(space)
        )))
    }

    /// Commits `plan` in one `multi`; answers `false` when another write of the space came
    /// first (nothing written). `gone_below`: audit records below it were found deleted by
    /// someone else and are not trimmed again.
    async fn commit<T>(
        &self,
        client: &zk::Client,
        w: &Write<'_>,
        plan: &Plan<T>,
        gone_below: &mut u64,
    ) -> BackendResult<bool> {
        let (row, partition, trims) = self.next_row(w, plan, *gone_below);
        let mut m = client.new_multi_writer();
        let first_trim = self.add_writes(&mut m, w, plan, &row, partition).map_err(|e| self.err(w.what, e))?;
        for seq in trims.clone() {
            m.add_delete(&audit_path(w.space, seq), None).map_err(|e| self.err(w.what, e))?;
        }
        self.backend.count(1);
        match m.commit().await {
            Ok(_) => Ok(true),
            Err(zk::MultiWriteError::OperationFailed { index, source: zk::Error::NoNode }) if index >= first_trim => {
                let seq = trims.start + (index - first_trim) as u64;
                tracing::warn!(space = w.space, seq, "a schedule audit record was deleted by hand; not trimmed again");
                *gone_below = seq + 1;
                Ok(false)
            }
            // Another write of the space came first: the row's version moved, the space or the
            // partition node appeared, the schedule node changed.
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode,
                ..
            }) => Ok(false),
            Err(e) => Err(self.err(&format!("{} `{}`", w.what, w.id), zk::Error::from(e))),
        }
    }

    /// The space's row after the write: its partition's counter bumped, the audit record's
    /// sequence taken, and the range of records to drop past retention (at most
    /// [`MAX_TRIM`]); with the schedule's partition.
    fn next_row<T>(&self, w: &Write<'_>, plan: &Plan<T>, gone_below: u64) -> (SpaceRow, u32, std::ops::Range<u64>) {
        let mut row = match &w.snap.space {
            Some((row, _)) => row.clone(),
            None => SpaceRow { partitions: plan.partitions, audit_first: 1, ..SpaceRow::default() },
        };
        let partition = partition_of(w.id, row.partitions);
        *row.changes.entry(partition).or_default() += 1;
        row.audit_last += 1;
        row.audit_first = row.audit_first.max(gone_below);
        let trim_from = row.audit_first;
        while row.audit_last + 1 - row.audit_first > self.retention as u64 && row.audit_first - trim_from < MAX_TRIM {
            row.audit_first += 1;
        }
        let trims = trim_from..row.audit_first;
        (row, partition, trims)
    }

    /// Adds the write's operations but the trims to `m`: the space's row (created with its
    /// directories, or set at the version read), the partition node (created, or its listing
    /// bytes set), the schedule node and the audit record. Answers how many it added.
    fn add_writes<T>(
        &self,
        m: &mut zk::MultiWriter<'_>,
        w: &Write<'_>,
        plan: &Plan<T>,
        row: &SpaceRow,
        partition: u32,
    ) -> Result<usize, zk::Error> {
        let persistent = self.backend.inner.spec.persistent();
        let (s, p) = (space_path(w.space), partition_path(w.space, partition));
        let mut ops = 0;
        let space_data = json(row)?;
        match &w.snap.space {
            Some((_, version)) => m.add_set_data(&s, &space_data, Some(*version))?,
            None => {
                m.add_create(&s, &space_data, &persistent)?;
                m.add_create(&format!("{s}/p"), b"", &persistent)?;
                m.add_create(&format!("{s}/audit"), b"", &persistent)?;
                ops += 2;
            }
        }
        ops += 1;
        let listed = listed_bytes(&segment(w.id));
        let before = w.snap.partition_bytes;
        let bytes = match &plan.op {
            NodeOp::Create(_) => before + listed,
            NodeOp::Delete(_) => before.saturating_sub(listed),
            NodeOp::Set(..) => before,
        };
        let new_partition = w.snap.space.as_ref().is_none_or(|(r, _)| !r.changes.contains_key(&partition));
        if new_partition {
            m.add_create(&p, bytes.to_string().as_bytes(), &persistent)?;
            ops += 1;
        } else if bytes != before {
            m.add_set_data(&p, bytes.to_string().as_bytes(), None)?;
            ops += 1;
        }
        let node = schedule_path(w.space, partition, w.id);
        match &plan.op {
            NodeOp::Create(s) => m.add_create(&node, &json(s)?, &persistent)?,
            NodeOp::Set(s, v) => m.add_set_data(&node, &json(s)?, Some(*v))?,
            NodeOp::Delete(v) => m.add_delete(&node, Some(*v))?,
        }
        let record = AuditRecord::new(w.actor, plan.action, w.id);
        m.add_create(&audit_path(w.space, row.audit_last), &json(&record)?, &persistent)?;
        Ok(ops + 2)
    }
}

/// `value` as JSON bytes (the types written here always serialize).
fn json<T: Serialize>(value: &T) -> Result<Vec<u8>, zk::Error> {
    serde_json::to_vec(value).map_err(|e| zk::Error::UnexpectedError(format!("cannot encode schedule data: {e}")))
}

/// What one write is about.
struct Write<'a> {
    space: &'a str,
    id: &'a str,
    snap: &'a Snapshot,
    actor: &'a Actor<'a>,
    what: &'a str,
}
