//! The schedule store on etcd (ADR 0020): schedules, their indexes, the partition count, the
//! change counters and the audit trail as keys under `{prefix}/schedules/{space}/`, where
//! `{space}` is the namespace's name escaped into one segment (empty for the default one, so
//! spaces share no key).
//!
//! | key (under the space) | value | what |
//! | --- | --- | --- |
//! | `partitions` | the count, decimal | written by the space's first create, never changed |
//! | `s/{id}` | the schedule (JSON of [`Schedule`]) | one per schedule, in id order |
//! | `p/{partition}/{id}` | empty | the partition index: what a holder loads |
//! | `h/{handler}/{id}` | empty | the handler index |
//! | `c/{partition}` | empty | the partition's change counter is the key's version |
//! | `a/{when}{revision}{random}` | an audit record (JSON of [`AuditRecord`]) | ordered by time |
//!
//! Ids and handler names follow the lease-name rule (no `/`), so every prefix above is
//! exactly its own keys. Every write is one read `Txn` (the partition count, the schedule,
//! the count and oldest keys of the audit trail) and one write `Txn` that compares what it
//! read (a create: the schedule's create revision is 0 and the partition count is the one
//! read or absent; the other writes: the schedule's mod revision) and writes the schedule and
//! its index keys, bumps the partition's counter, appends the audit record and drops the
//! records past retention with one range delete; a failed compare reads again. At most 8
//! operations and one row (under 40 KiB with the API's bounds) per write, far below etcd's
//! 128 operations and 1.5 MiB per request.
//!
//! Writes of different schedules never compare the same key, so they do not serialise. Racing
//! writers of one space may each drop the same oldest record, so every write, once committed,
//! reads the trail's count and oldest keys again and drops what is past retention: when the
//! writes stop, the trail holds exactly the retention.
//!
//! A listing is a range read with a limit: of `s/` (unfiltered, by prefix), or of an index
//! (`p/{partition}/`, `h/{handler}/`) whose ids are then read at the index read's revision in
//! transactions of [`ROWS_PER_READ`] gets. It never reads the space's other schedules.
//!
//! Requests per call:
//!
//! | call | requests |
//! | --- | --- |
//! | `create`, `update`, `delete`, `set_paused` | 2 `Txn` (read, write) and 1 keys-only `Range` (the trail settled); 1 `Range` more after the retention was lowered, 1 `DeleteRange` after a race; again per lost race |
//! | `get`, `partitions`, `changes` | 1 `Range` |
//! | `list` (unfiltered, by prefix) | 1 `Range` per [`ROWS_PER_READ`] schedules |
//! | `list` (by partition, by handler) | 1 keys-only `Range` per [`KEYS_PER_READ`] ids, 1 `Txn` per [`ROWS_PER_READ`] schedules |
//! | `audit` | 1 `Range` per [`KEYS_PER_READ`] records, newest first (of one target: reads the kept trail until enough) |

use std::fmt::Display;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    WatchOptions,
};

use tokio::sync::broadcast;

use super::EtcdBackend;
use super::ops::{prefix_end, slot_value};
use crate::backend::job_codec::escape_job;
use crate::backend::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, DEFAULT_AUDIT_RETENTION, ListQuery, Schedule, ScheduleStore,
    SharedScheduleStore, partition_of,
};
use crate::backend::{BackendError, BackendResult};

/// How many times a write reads again after another writer changed what it read.
const ATTEMPTS: usize = 16;

/// How many of the oldest audit keys a write reads to trim (one at full retention; more only
/// after the retention was lowered, when the write reads as many as it drops).
const TRIM_LOOK: i64 = 8;

/// How many schedules one read returns at most: a row is at most about 36 KiB under the API's
/// bounds (a 16 KiB payload escaped in JSON, notes and names), and a gRPC answer at most 4 MiB.
const ROWS_PER_READ: usize = 64;

/// How many index keys or audit records one read returns at most.
const KEYS_PER_READ: usize = 500;

/// The schedule store of an [`EtcdBackend`].
pub(crate) struct EtcdScheduleStore {
    backend: EtcdBackend,
    retention: usize,
    /// `{prefix}/schedules/`.
    root: String,
}

/// The keys of one space.
struct Space {
    /// `{root}{escaped space}/`.
    base: String,
}

impl Space {
    fn partitions(&self) -> String {
        format!("{}partitions", self.base)
    }
    fn rows(&self) -> String {
        format!("{}s/", self.base)
    }
    fn row(&self, id: &str) -> String {
        format!("{}s/{id}", self.base)
    }
    fn by_partition(&self, partition: u32) -> String {
        format!("{}p/{partition}/", self.base)
    }
    fn by_handler(&self, handler: &str) -> String {
        format!("{}h/{handler}/", self.base)
    }
    fn counters(&self) -> String {
        format!("{}c/", self.base)
    }
    fn counter(&self, partition: u32) -> String {
        format!("{}c/{partition}", self.base)
    }
    fn audit(&self) -> String {
        format!("{}a/", self.base)
    }
}

/// What a write read, in one `Txn` at one revision.
struct Read {
    revision: i64,
    /// The partition count and its key's mod revision.
    partitions: Option<(u32, i64)>,
    /// The schedule and its key's mod revision.
    row: Option<(Schedule, i64)>,
    /// How many audit records the space has.
    audit_count: usize,
    /// The oldest audit keys, ascending.
    oldest: Vec<Vec<u8>>,
}

fn first(responses: &[TxnOpResponse], i: usize) -> Option<&KeyValue> {
    match responses.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs().first(),
        _ => None,
    }
}

/// The key right after `key` (the start of a range that excludes `key`).
fn after(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

/// The part of `key` after `base`, as text.
fn tail<'k>(key: &'k [u8], base: &str) -> Option<&'k str> {
    std::str::from_utf8(key).ok()?.strip_prefix(base)
}

impl EtcdScheduleStore {
    pub(crate) fn new(backend: EtcdBackend) -> Self {
        let root = format!("{}/schedules/", backend.prefix());
        EtcdScheduleStore { backend, retention: DEFAULT_AUDIT_RETENTION, root }
    }

    fn space(&self, space: &str) -> Space {
        Space { base: format!("{}{}/", self.root, escape_job(space)) }
    }

    fn err(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        self.backend.err(what, e)
    }

    fn protocol(&self, what: impl Display) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, kv: &KeyValue) -> BackendResult<T> {
        serde_json::from_slice(kv.value())
            .map_err(|e| self.protocol(format!("{} is unreadable ({e}); delete it", String::from_utf8_lossy(kv.key()))))
    }

    fn encode<T: serde::Serialize>(&self, value: &T) -> BackendResult<String> {
        serde_json::to_string(value).map_err(|e| self.protocol(format!("cannot encode a schedule: {e}")))
    }

    fn count_of(&self, kv: &KeyValue) -> BackendResult<u32> {
        std::str::from_utf8(kv.value())
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| self.protocol(format!("{} is not a partition count", String::from_utf8_lossy(kv.key()))))
    }

    /// The partition count, the schedule `id` and the audit trail's count and oldest keys, in
    /// one `Txn`.
    async fn read(&self, sp: &Space, id: &str, what: &str) -> BackendResult<Read> {
        let audit = sp.audit();
        let oldest = GetOptions::new()
            .with_range(prefix_end(&audit))
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Ascend)
            .with_limit(TRIM_LOOK);
        let txn = Txn::new().and_then([
            TxnOp::get(sp.partitions(), None),
            TxnOp::get(sp.row(id), None),
            TxnOp::get(audit.as_str(), Some(oldest)),
        ]);
        let reply = self.backend.kv().txn(txn).await.map_err(|e| self.err(what, &e))?;
        let revision = reply.header().map_or(0, |h| h.revision());
        let r = reply.op_responses();
        let partitions = first(&r, 0).map(|kv| Ok::<_, BackendError>((self.count_of(kv)?, kv.mod_revision())));
        let row = first(&r, 1).map(|kv| Ok::<_, BackendError>((self.decode::<Schedule>(kv)?, kv.mod_revision())));
        let (audit_count, oldest) = match r.get(2) {
            Some(TxnOpResponse::Get(g)) => {
                (usize::try_from(g.count()).unwrap_or(0), g.kvs().iter().map(|kv| kv.key().to_vec()).collect())
            }
            _ => (0, Vec::new()),
        };
        Ok(Read { revision, partitions: partitions.transpose()?, row: row.transpose()?, audit_count, oldest })
    }

    /// The operations that append `record` at `key` (`read`: what the write read) and drop the
    /// records past retention: the oldest keys go by one range delete, never one per key.
    async fn audit_ops(
        &self,
        sp: &Space,
        read: &Read,
        key: Vec<u8>,
        record: &AuditRecord,
        what: &str,
    ) -> BackendResult<Vec<TxnOp>> {
        let audit = sp.audit();
        let value = self.encode(record)?;
        let excess = (read.audit_count + 1).saturating_sub(self.retention);
        if excess == 0 {
            return Ok(vec![TxnOp::put(key, value, None)]);
        }
        let mut oldest = read.oldest.clone();
        if oldest.len() < excess && oldest.len() < read.audit_count {
            // The retention was lowered: read as many of the oldest keys as go.
            let options = GetOptions::new()
                .with_range(prefix_end(&audit))
                .with_keys_only()
                .with_sort(SortTarget::Key, SortOrder::Ascend)
                .with_limit(i64::try_from(excess).unwrap_or(i64::MAX));
            let got = self.backend.kv().get(audit.as_str(), Some(options)).await.map_err(|e| self.err(what, &e))?;
            oldest = got.kvs().iter().map(|kv| kv.key().to_vec()).collect();
        }
        // The new record is among the dropped when it is older than the records kept.
        let dropped_new = oldest.iter().filter(|k| **k < key).count() < excess;
        let dropping = if dropped_new { excess - 1 } else { excess };
        let mut ops = Vec::new();
        if let Some(last) = oldest.iter().filter(|k| **k != key).take(dropping).last() {
            ops.push(TxnOp::delete(audit.as_str(), Some(DeleteOptions::new().with_range(after(last)))));
        }
        if !dropped_new {
            ops.push(TxnOp::put(key, value, None));
        }
        Ok(ops)
    }

    /// After a write: drops the records past retention that racing writers left (each one
    /// trimmed by what it read, before the others' records landed). The last writer to finish
    /// reads after every write committed, so once the writes stop the trail holds exactly the
    /// retention. One keys-only `Range`; a range delete only when there is excess.
    async fn settle_trail(&self, sp: &Space, what: &str) -> BackendResult<()> {
        let audit = sp.audit();
        let oldest = |limit: i64| {
            GetOptions::new()
                .with_range(prefix_end(&audit))
                .with_keys_only()
                .with_sort(SortTarget::Key, SortOrder::Ascend)
                .with_limit(limit)
        };
        let mut kv = self.backend.kv();
        let got = kv.get(audit.as_str(), Some(oldest(TRIM_LOOK))).await.map_err(|e| self.err(what, &e))?;
        let excess = usize::try_from(got.count()).unwrap_or(0).saturating_sub(self.retention);
        if excess == 0 {
            return Ok(());
        }
        let got = if got.kvs().len() >= excess {
            got
        } else {
            let limit = i64::try_from(excess).unwrap_or(i64::MAX);
            kv.get(audit.as_str(), Some(oldest(limit))).await.map_err(|e| self.err(what, &e))?
        };
        if let Some(last) = got.kvs().get(excess - 1).or(got.kvs().last()) {
            let range = DeleteOptions::new().with_range(after(last.key()));
            kv.delete(audit.as_str(), Some(range)).await.map_err(|e| self.err(what, &e))?;
        }
        Ok(())
    }

    /// Runs `w` with the bookkeeping of every write: its partition's change counter and its
    /// audit record. `false`: a compare failed (read again).
    async fn commit(&self, sp: &Space, read: &Read, w: Write, record: &AuditRecord, what: &str) -> BackendResult<bool> {
        // Ordered by the writer's time, then by the revision it read; the random part tells
        // apart writers that read one revision in one millisecond (the compare makes sure).
        let key =
            format!("{}{}{:016x}{:08x}", sp.audit(), slot_value(record.at_ms), read.revision, rand::random::<u32>());
        let mut when = w.when;
        when.push(Compare::create_revision(key.as_str(), CompareOp::Equal, 0));
        let mut ops = w.ops;
        ops.push(TxnOp::put(sp.counter(w.partition), "", None));
        ops.extend(self.audit_ops(sp, read, key.into_bytes(), record, what).await?);
        let txn = Txn::new().when(when).and_then(ops);
        Ok(self.backend.kv().txn(txn).await.map_err(|e| self.err(what, &e))?.succeeded())
    }

    /// A write of schedule `id` that `change` makes from what it read: the compares, the
    /// operations, its partition and its action, or the answer when it writes nothing. Reads
    /// and writes again while another writer changed what it read.
    async fn write<T>(
        &self,
        space: &str,
        id: &str,
        actor: &Actor<'_>,
        what: &str,
        change: impl Fn(&Space, &Read) -> BackendResult<Result<(Write, T), T>>,
    ) -> BackendResult<T> {
        let sp = self.space(space);
        for _ in 0..ATTEMPTS {
            let read = self.read(&sp, id, what).await?;
            let (w, answer) = match change(&sp, &read)? {
                Ok(write) => write,
                Err(answer) => return Ok(answer),
            };
            let record = AuditRecord::new(actor, w.action, id);
            if self.commit(&sp, &read, w, &record, what).await? {
                self.settle_trail(&sp, what).await?;
                return Ok(answer);
            }
        }
        Err(self.protocol(format!("schedule `{id}` kept changing while written ({what}); try again")))
    }

    /// Schedules from `base` (a prefix of row keys, or of index keys whose last segment is an
    /// id) that `q` selects, up to its limit, all read at one revision.
    async fn list_from(&self, sp: &Space, base: &str, index: bool, q: &ListQuery) -> BackendResult<Vec<Schedule>> {
        let what = "list schedules";
        let mut from = match &q.after {
            Some(a) => after(format!("{base}{a}").as_bytes()),
            None => base.as_bytes().to_vec(),
        };
        let end = match &q.prefix {
            Some(p) => {
                let start = format!("{base}{p}").into_bytes();
                from = from.max(start);
                prefix_end(&format!("{base}{p}"))
            }
            None => prefix_end(base),
        };
        let mut out = Vec::new();
        let mut at = 0;
        let mut kv = self.backend.kv();
        while out.len() < q.limit && from < end {
            let per_read = if index { KEYS_PER_READ } else { ROWS_PER_READ };
            let want = (q.limit - out.len()).min(per_read);
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(i64::try_from(want).unwrap_or(1));
            if index {
                options = options.with_keys_only();
            }
            if at > 0 {
                options = options.with_revision(at);
            }
            let page = kv.get(from.clone(), Some(options)).await.map_err(|e| self.err(what, &e))?;
            if at == 0 {
                at = page.header().map_or(0, |h| h.revision());
            }
            let Some(last) = page.kvs().last() else { break };
            from = after(last.key());
            let rows: Vec<Schedule> = if index {
                let ids: Vec<&str> = page.kvs().iter().filter_map(|kv| tail(kv.key(), base)).collect();
                self.rows_at(sp, &ids, at).await?
            } else {
                page.kvs().iter().map(|kv| self.decode::<Schedule>(kv)).collect::<BackendResult<_>>()?
            };
            out.extend(rows.into_iter().filter(|s| q.matches(s)).take(q.limit - out.len()));
            if !page.more() {
                break;
            }
        }
        Ok(out)
    }

    /// The schedules `ids` (those that exist) at revision `at`, in transactions of
    /// [`ROWS_PER_READ`] gets.
    async fn rows_at(&self, sp: &Space, ids: &[&str], at: i64) -> BackendResult<Vec<Schedule>> {
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(ROWS_PER_READ) {
            let gets = chunk.iter().map(|id| TxnOp::get(sp.row(id), Some(GetOptions::new().with_revision(at))));
            let reply = self
                .backend
                .kv()
                .txn(Txn::new().and_then(gets.collect::<Vec<_>>()))
                .await
                .map_err(|e| self.err("read schedules", &e))?;
            let r = reply.op_responses();
            for i in 0..chunk.len() {
                if let Some(kv) = first(&r, i) {
                    rows.push(self.decode(kv)?);
                }
            }
        }
        Ok(rows)
    }
}

/// A write [`EtcdScheduleStore::write`] runs: compares, operations, the partition whose
/// counter it bumps and the action it records.
struct Write {
    when: Vec<Compare>,
    ops: Vec<TxnOp>,
    partition: u32,
    action: AuditAction,
}

impl Write {
    /// A write that replaces schedule `id`'s row (read at mod revision `rev`) with `next`.
    fn replace(sp: &Space, rev: i64, next: String, partition: u32, action: AuditAction, id: &str) -> Write {
        let key = sp.row(id);
        Write {
            when: vec![Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)],
            ops: vec![TxnOp::put(key, next, None)],
            partition,
            action,
        }
    }
}

impl ScheduleStore for EtcdScheduleStore {
    async fn create(&self, space: &str, s: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
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
        let value = self.encode(&row)?;
        self.write(space, &s.id, actor, "create a schedule", |sp, read| {
            if let Some((stored, _)) = read.partitions.filter(|(p, _)| *p != partitions) {
                return Ok(Err(Created::PartitionsDiffer { stored }));
            }
            if read.row.is_some() {
                return Ok(Err(Created::Exists));
            }
            let key = sp.row(&s.id);
            let mut when = vec![Compare::create_revision(key.as_str(), CompareOp::Equal, 0)];
            let mut ops = vec![
                TxnOp::put(key, value.as_str(), None),
                TxnOp::put(format!("{}{}", sp.by_partition(partition), s.id), "", None),
                TxnOp::put(format!("{}{}", sp.by_handler(&s.handler), s.id), "", None),
            ];
            match read.partitions {
                Some((_, rev)) => when.push(Compare::mod_revision(sp.partitions(), CompareOp::Equal, rev)),
                None => {
                    when.push(Compare::create_revision(sp.partitions(), CompareOp::Equal, 0));
                    ops.push(TxnOp::put(sp.partitions(), partitions.to_string(), None));
                }
            }
            Ok(Ok((Write { when, ops, partition, action: AuditAction::Create }, Created::Created)))
        })
        .await
    }

    async fn update(&self, space: &str, s: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        self.write(space, &s.id, actor, "update a schedule", |sp, read| {
            let Some((old, rev)) = &read.row else { return Ok(Err(None)) };
            let next = Schedule {
                handler: s.handler.clone(),
                spec: s.spec.clone(),
                payload: s.payload.clone(),
                policies: s.policies,
                updated_by: actor.who.to_owned(),
                updated_ms: actor.at_ms,
                revision: old.revision + 1,
                ..old.clone()
            };
            let mut w = Write::replace(sp, *rev, self.encode(&next)?, old.partition, AuditAction::Update, &s.id);
            if old.handler != next.handler {
                w.ops.push(TxnOp::delete(format!("{}{}", sp.by_handler(&old.handler), s.id), None));
                w.ops.push(TxnOp::put(format!("{}{}", sp.by_handler(&next.handler), s.id), "", None));
            }
            Ok(Ok((w, Some(next.revision))))
        })
        .await
    }

    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        self.write(space, id, actor, "delete a schedule", |sp, read| {
            let Some((old, rev)) = &read.row else { return Ok(Err(false)) };
            let key = sp.row(id);
            let w = Write {
                when: vec![Compare::mod_revision(key.as_str(), CompareOp::Equal, *rev)],
                ops: vec![
                    TxnOp::delete(key, None),
                    TxnOp::delete(format!("{}{id}", sp.by_partition(old.partition)), None),
                    TxnOp::delete(format!("{}{id}", sp.by_handler(&old.handler)), None),
                ],
                partition: old.partition,
                action: AuditAction::Delete,
            };
            Ok(Ok((w, true)))
        })
        .await
    }

    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        let what = if paused { "pause a schedule" } else { "resume a schedule" };
        self.write(space, id, actor, what, |sp, read| {
            let Some((old, rev)) = &read.row else { return Ok(Err(None)) };
            let next = Schedule {
                paused,
                pause_note: if paused { actor.note.map(str::to_owned) } else { None },
                updated_by: actor.who.to_owned(),
                updated_ms: actor.at_ms,
                revision: old.revision + 1,
                ..old.clone()
            };
            let action = if paused { AuditAction::Pause } else { AuditAction::Resume };
            Ok(Ok((Write::replace(sp, *rev, self.encode(&next)?, old.partition, action, id), Some(old.paused))))
        })
        .await
    }

    async fn record(&self, space: &str, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        self.write(space, id, actor, "record an action in the audit trail", |sp, read| {
            let Some((old, rev)) = &read.row else { return Ok(Err(false)) };
            // The row as read, at its revision: the write fails if it changed meanwhile.
            Ok(Ok((Write::replace(sp, *rev, self.encode(old)?, old.partition, action, id), true)))
        })
        .await
    }

    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        let got = self
            .backend
            .kv()
            .get(self.space(space).row(id), None)
            .await
            .map_err(|e| self.err("read a schedule", &e))?;
        got.kvs().first().map(|kv| self.decode(kv)).transpose()
    }

    async fn list(&self, space: &str, q: &ListQuery) -> BackendResult<Vec<Schedule>> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let sp = self.space(space);
        match (q.partition, &q.handler) {
            (Some(p), _) => self.list_from(&sp, &sp.by_partition(p), true, q).await,
            (None, Some(h)) => self.list_from(&sp, &sp.by_handler(h), true, q).await,
            (None, None) => self.list_from(&sp, &sp.rows(), false, q).await,
        }
    }

    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        let key = self.space(space).partitions();
        let got = self.backend.kv().get(key, None).await.map_err(|e| self.err("read the partition count", &e))?;
        got.kvs().first().map(|kv| self.count_of(kv)).transpose()
    }

    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        let base = self.space(space).counters();
        let options = GetOptions::new().with_range(prefix_end(&base)).with_keys_only();
        let got = self
            .backend
            .kv()
            .get(base.as_str(), Some(options))
            .await
            .map_err(|e| self.err("read the change counters", &e))?;
        let mut out = got
            .kvs()
            .iter()
            .map(|kv| {
                let partition = tail(kv.key(), &base).and_then(|p| p.parse().ok());
                let partition = partition.ok_or_else(|| {
                    self.protocol(format!("{} is not a change counter", String::from_utf8_lossy(kv.key())))
                })?;
                Ok((partition, u64::try_from(kv.version()).unwrap_or(0)))
            })
            .collect::<BackendResult<Vec<_>>>()?;
        out.sort_unstable();
        Ok(out)
    }

    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        let what = "read the audit trail";
        let base = self.space(space).audit();
        let mut end = prefix_end(&base);
        let (mut out, mut at) = (Vec::new(), 0);
        let mut kv = self.backend.kv();
        while out.len() < limit {
            let want = if target.is_some() { KEYS_PER_READ } else { (limit - out.len()).min(KEYS_PER_READ) };
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_sort(SortTarget::Key, SortOrder::Descend)
                .with_limit(i64::try_from(want).unwrap_or(1));
            if at > 0 {
                options = options.with_revision(at);
            }
            let page = kv.get(base.as_str(), Some(options)).await.map_err(|e| self.err(what, &e))?;
            if at == 0 {
                at = page.header().map_or(0, |h| h.revision());
            }
            let Some(last) = page.kvs().last() else { break };
            end = last.key().to_vec();
            for kv in page.kvs() {
                let r: AuditRecord = self.decode(kv)?;
                if out.len() < limit && target.is_none_or(|t| r.target == t) {
                    out.push(r);
                }
            }
            if !page.more() {
                break;
            }
        }
        Ok(out)
    }

    fn audit_retention(&self) -> usize {
        self.retention
    }

    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        let mut store = EtcdScheduleStore::new(self.backend.clone());
        store.retention = records.max(1);
        SharedScheduleStore::new(store)
    }

    fn subscribe_changes(&self) -> Option<broadcast::Receiver<String>> {
        subscribe_changes(&self.backend, self.root.clone())
    }

    fn describe(&self) -> String {
        self.backend.inner.description.to_string()
    }
}

/// The schedule changes of the backend's key prefix (rule A11): one watch per backend,
/// started at the first subscriber, that forwards the space of every change counter written
/// (`{root}{space}/c/{partition}`); it stops with the backend. A lost stream is watched
/// again after a second; what changed meanwhile is found by the holders' poll.
pub(super) fn subscribe_changes(backend: &EtcdBackend, root: String) -> Option<broadcast::Receiver<String>> {
    let inner = &backend.inner;
    let mut slot = inner.schedule_changes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(tx) = &*slot {
        return Some(tx.subscribe());
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let (tx, rx) = broadcast::channel(1024);
    let (client, stop, description, forward) =
        (inner.client.clone(), inner.stop.clone(), std::sync::Arc::clone(&inner.description), tx.clone());
    runtime.spawn(async move {
        let watch = async {
            loop {
                let options = WatchOptions::new().with_prefix();
                match client.clone().watch(root.as_str(), Some(options)).await {
                    Ok(mut stream) => {
                        while let Ok(Some(r)) = stream.message().await {
                            for space in r.events().iter().filter_map(|e| changed_space(&root, e)) {
                                let _ = forward.send(space);
                            }
                        }
                    }
                    Err(error) => {
                        tracing::debug!(backend = %description, %error, "cannot watch schedule changes; holders poll");
                    }
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        };
        tokio::select! {
            () = stop.cancelled() => {}
            () = watch => {}
        }
    });
    *slot = Some(tx);
    Some(rx)
}

/// The space whose change counter event `e` wrote, if it is one (`{root}{space}/c/{partition}`).
fn changed_space(root: &str, e: &etcd_client::Event) -> Option<String> {
    if e.event_type() != etcd_client::EventType::Put {
        return None;
    }
    let key = std::str::from_utf8(e.kv()?.key()).ok()?.strip_prefix(root)?;
    let (space, rest) = key.split_once('/')?;
    rest.strip_prefix("c/")?;
    Some(crate::backend::job_codec::unescape_job(space))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_keys() {
        let root = "simba/schedules/";
        let sp = |space: &str| Space { base: format!("{root}{}/", escape_job(space)) };
        assert_eq!(sp("").row("a.1"), "simba/schedules//s/a.1");
        assert_eq!(sp("ns1").by_partition(7), "simba/schedules/ns1/p/7/");
        assert_eq!(sp("a/b").counter(3), "simba/schedules/a%2Fb/c/3");
        assert_eq!(sp("ns1").by_handler("ping"), "simba/schedules/ns1/h/ping/");
        // A space's keys are never under another space's prefix.
        assert!(!sp("a").row("x").starts_with(&sp("").base));
        assert!(!sp("ab").row("x").starts_with(&sp("a").base));
    }
}
