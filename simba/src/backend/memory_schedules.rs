//! The in-memory schedule store: the reference implementation of the
//! [`ScheduleStore`] contract, one mutex over every space's schedules, change counters and
//! audit trail, so each write is atomic.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use super::BackendResult;
use super::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, DEFAULT_AUDIT_RETENTION, ListQuery, Schedule, ScheduleStore,
    SharedScheduleStore, partition_of,
};

/// The in-memory schedule store of a [`MemoryBackend`](super::memory::MemoryBackend), shared by
/// its clones.
#[derive(Clone)]
pub(crate) struct MemorySchedules {
    spaces: Arc<Mutex<BTreeMap<String, Space>>>,
    retention: usize,
    /// The spaces whose counters moved, to every subscriber (the store's broadcast).
    changed: broadcast::Sender<String>,
}

impl Default for MemorySchedules {
    fn default() -> Self {
        MemorySchedules {
            spaces: Arc::default(),
            retention: DEFAULT_AUDIT_RETENTION,
            changed: broadcast::channel(64).0,
        }
    }
}

/// One space (namespace).
#[derive(Default)]
struct Space {
    /// How many writes the space took (each moved a counter).
    writes: u64,
    partitions: Option<u32>,
    schedules: BTreeMap<String, Schedule>,
    changes: BTreeMap<u32, u64>,
    audit: VecDeque<AuditRecord>,
}

impl Space {
    /// The bookkeeping of every write: the partition's counter and the audit record, trimmed
    /// to `retention`.
    fn wrote(&mut self, partition: u32, record: AuditRecord, retention: usize) {
        self.writes += 1;
        *self.changes.entry(partition).or_default() += 1;
        self.audit.push_back(record);
        while self.audit.len() > retention {
            self.audit.pop_front();
        }
    }
}

impl MemorySchedules {
    /// Runs `f` on `space` under the store's lock; a write that moved a counter is broadcast.
    fn with<T>(&self, space: &str, f: impl FnOnce(&mut Space) -> T) -> T {
        let mut spaces = self.spaces.lock().unwrap_or_else(PoisonError::into_inner);
        let sp = spaces.entry(space.to_owned()).or_default();
        let before = sp.writes;
        let out = f(sp);
        if sp.writes != before {
            // No subscriber is not an error: nobody holds a partition.
            let _ = self.changed.send(space.to_owned());
        }
        out
    }
}

impl ScheduleStore for MemorySchedules {
    async fn create(&self, space: &str, s: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        Ok(self.with(space, |sp| {
            if let Some(stored) = sp.partitions.filter(|p| *p != partitions) {
                return Created::PartitionsDiffer { stored };
            }
            if sp.schedules.contains_key(&s.id) {
                return Created::Exists;
            }
            sp.partitions = Some(partitions);
            let partition = partition_of(&s.id, partitions);
            let row = Schedule {
                partition,
                created_by: actor.who.to_owned(),
                created_ms: actor.at_ms,
                updated_by: actor.who.to_owned(),
                updated_ms: actor.at_ms,
                revision: 1,
                ..s.clone()
            };
            sp.schedules.insert(s.id.clone(), row);
            sp.wrote(partition, AuditRecord::new(actor, AuditAction::Create, &s.id), self.retention);
            Created::Created
        }))
    }

    async fn update(&self, space: &str, s: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        Ok(self.with(space, |sp| {
            let row = sp.schedules.get_mut(&s.id)?;
            row.handler.clone_from(&s.handler);
            row.spec = s.spec.clone();
            row.payload.clone_from(&s.payload);
            row.policies = s.policies;
            row.updated_by = actor.who.to_owned();
            row.updated_ms = actor.at_ms;
            row.revision += 1;
            let (partition, revision) = (row.partition, row.revision);
            sp.wrote(partition, AuditRecord::new(actor, AuditAction::Update, &s.id), self.retention);
            Some(revision)
        }))
    }

    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        Ok(self.with(space, |sp| {
            let Some(row) = sp.schedules.remove(id) else { return false };
            sp.wrote(row.partition, AuditRecord::new(actor, AuditAction::Delete, id), self.retention);
            true
        }))
    }

    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        Ok(self.with(space, |sp| {
            let row = sp.schedules.get_mut(id)?;
            let was = row.paused;
            row.paused = paused;
            row.pause_note = if paused { actor.note.map(str::to_owned) } else { None };
            row.updated_by = actor.who.to_owned();
            row.updated_ms = actor.at_ms;
            row.revision += 1;
            let partition = row.partition;
            let action = if paused { AuditAction::Pause } else { AuditAction::Resume };
            sp.wrote(partition, AuditRecord::new(actor, action, id), self.retention);
            Some(was)
        }))
    }

    async fn record(&self, space: &str, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        Ok(self
            .with(space, |sp| {
                let partition = sp.schedules.get(id)?.partition;
                sp.wrote(partition, AuditRecord::new(actor, action, id), self.retention);
                Some(())
            })
            .is_some())
    }

    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        Ok(self.with(space, |sp| sp.schedules.get(id).cloned()))
    }

    async fn list(&self, space: &str, query: &ListQuery) -> BackendResult<Vec<Schedule>> {
        Ok(self
            .with(space, |sp| sp.schedules.values().filter(|s| query.matches(s)).take(query.limit).cloned().collect()))
    }

    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        Ok(self.with(space, |sp| sp.partitions))
    }

    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        Ok(self.with(space, |sp| sp.changes.iter().map(|(p, c)| (*p, *c)).collect()))
    }

    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        Ok(self.with(space, |sp| {
            sp.audit.iter().rev().filter(|r| target.is_none_or(|t| r.target == t)).take(limit).cloned().collect()
        }))
    }

    fn audit_retention(&self) -> usize {
        self.retention
    }

    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        SharedScheduleStore::new(MemorySchedules {
            spaces: Arc::clone(&self.spaces),
            retention: records.max(1),
            changed: self.changed.clone(),
        })
    }

    fn describe(&self) -> String {
        "memory://".to_owned()
    }

    fn subscribe_changes(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.changed.subscribe())
    }
}
