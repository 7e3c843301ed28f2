//! The schedule store on ZooKeeper (ADR 0020): one subtree per space (namespace) beside the
//! lease and jobs nodes, every write one `multi` with its audit record and its partition's
//! change counter (rules A6, A7).
//!
//! | node | what |
//! | --- | --- |
//! | `/simba/schedules/{space}` | the space's row (JSON): partition count, change counter of every partition ever written, the range of audit records kept |
//! | `/simba/schedules/{space}/p/{partition}` | one partition; its data: the bytes its `getChildren` reply takes |
//! | `/simba/schedules/{space}/p/{partition}/{id}` | one schedule (JSON, `Schedule`'s serde form) |
//! | `/simba/schedules/{space}/audit/{seq}` | one audit record (JSON); `seq` zero-padded to 20 digits, so names sort |
//!
//! The space segment is the namespace's name (`~` for the default one); ids are segments
//! as they are (rule A1's alphabet needs no escaping; anything else is percent-escaped).
//!
//! **Atomicity.** A write reads the space's row, the partition node and the schedule node in
//! one `multiRead` (a consistent snapshot), then commits one `multi`: the space row rewritten
//! at the version read (bumping the partition's counter and the audit range), the schedule
//! node created, set or deleted, the audit record created, and the records past retention
//! deleted. The row's version check serialises the writes of a space as the SQL stores' row
//! lock does: a writer that lost the race reads again (every lost race is another writer's
//! commit, so writers always progress). Audit records are named by the row's sequence rather
//! than ZooKeeper's sequential suffix: that suffix comes from the parent's `cversion`, which
//! deletions also bump, so a write could not tell which records to trim without listing the
//! whole trail (O(retention) bytes per write).
//!
//! **Costs.** `changes` and `partitions`: one `getData`. `get`: one `multiRead` (two when the
//! store has not seen the space's partition count yet). A write: one `multiRead` and one
//! `multi`; the writes of a space through one backend take turns (they would only make each
//! other read again). `list` of one partition (what a holder loads): one `getChildren`, then
//! one `getData` per schedule returned (sent together). `list` of the whole space: the row,
//! then one `getChildren` per partition written since this backend last listed it (sent
//! together; the backend keeps each partition's ids with the change counter they were read
//! at), merged in id order, then one `getData` per schedule returned. `audit`: one `getData`,
//! then the records newest first, read in batches of 256 (for one target, until `limit` are
//! found: up to the whole trail).
//!
//! **Limits.** A `getChildren` reply must fit in `jute.maxbuffer` (1 MiB by default), so a
//! partition's children are capped: the partition node counts the bytes its listing takes, and
//! a create that would take it past [`LIST_BUDGET`] is refused (nothing written). With 64
//! partitions that is about 3,000,000 ids of 16 characters or 500,000 of the longest (128);
//! a namespace meant for more sets more partitions before its first create.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use zookeeper_client as zk;

use self::path::{audit_path, listed_bytes, partition_path, schedule_path, segment, space_path, unsegment};
use self::write::{NodeOp, Plan, Step};
use super::ZooKeeperBackend;
use crate::backend::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, DEFAULT_AUDIT_RETENTION, ListQuery, Schedule, ScheduleStore,
    SharedScheduleStore, partition_of,
};
use crate::backend::{BackendError, BackendResult};

mod path;
mod watch;
mod write;

const SCHEDULES: &str = "/simba/schedules";

/// How many bytes the `getChildren` reply of one partition may take (4 bytes per name plus
/// the name), under ZooKeeper's default `jute.maxbuffer` of 1 MiB with room for the reply's
/// header and stat.
const LIST_BUDGET: u64 = 1_000_000;

/// How many times a write reads again after another write of its space committed first.
const ATTEMPTS: usize = 64;

/// How many records past retention one write drops at most (a retention lowered by more is
/// reached over the next writes), so a `multi` stays far below `jute.maxbuffer`.
const MAX_TRIM: u64 = 5_000;

/// How many nodes a read sends at once.
const BATCH: usize = 256;

/// What the schedule stores of one backend share (its clones too): the directory made once,
/// each space's partition count as last read (so reads find a schedule's node at once), and
/// each space's write turn.
#[derive(Default)]
pub(super) struct State {
    setup: OnceCell<()>,
    partitions: Mutex<HashMap<String, u32>>,
    /// The writes of a space through this backend take turns: they would only make each other
    /// read again (the space's row serialises them on the server), and every lost race costs a
    /// failed `multi` (16 racing writers through separate backends: 7 ms a create, against 2
    /// ms for one writer).
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Each partition's ids (sorted) as a listing of the whole space last read them, with the
    /// partition's change counter they are at least as new as: a partition whose counter did
    /// not move since is not listed again (every create and delete moves it). Listing 100,000
    /// ids for every page of 100 took 0.5 s a page.
    listed: Mutex<HashMap<(String, u32), (u64, Ids)>>,
    /// The watch that broadcasts the spaces' changes (A11), started at the first subscriber.
    watch: watch::Watch,
}

/// One partition's ids, sorted.
type Ids = Arc<Vec<String>>;

/// A space's row (the data of `/simba/schedules/{space}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SpaceRow {
    /// The partition count written by the space's first create (A9).
    partitions: u32,
    /// The change counter of every partition ever written (A6).
    changes: BTreeMap<u32, u64>,
    /// The sequence of the oldest audit record kept (none kept while above `audit_last`).
    audit_first: u64,
    /// The sequence of the newest audit record (0 before the first write).
    audit_last: u64,
}

/// What a write read, in one `multiRead`: the space's row, the partition's node and the
/// schedule's node, each with its version (`None`: missing).
struct Snapshot {
    space: Option<(SpaceRow, i32)>,
    partition_bytes: u64,
    row: Option<(Schedule, i32)>,
}

/// The schedule store of a [`ZooKeeperBackend`].
pub(super) struct ZkScheduleStore {
    backend: ZooKeeperBackend,
    state: Arc<State>,
    retention: usize,
}

impl ZkScheduleStore {
    /// The store of `backend`, sharing `state` with the backend's other handles.
    pub(super) fn new(backend: ZooKeeperBackend, state: Arc<State>) -> Self {
        ZkScheduleStore { backend, state, retention: DEFAULT_AUDIT_RETENTION }
    }

    fn err(&self, what: &str, e: zk::Error) -> BackendError {
        self.backend.err(what, e)
    }

    fn protocol(&self, what: &str) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    /// The backend's own client, with the schedules directory created once, failing fast
    /// while its driver reconnects.
    async fn client(&self, what: &str) -> BackendResult<zk::Client> {
        let client = self.backend.inner.shared.get().await?;
        self.state
            .setup
            .get_or_try_init(|| async {
                self.backend.count(1);
                let persistent = self.backend.inner.spec.persistent();
                client.mkdir(SCHEDULES, &persistent).await.map_err(|e| self.err(&format!("create {SCHEDULES}"), e))
            })
            .await?;
        self.backend.fail_if_disconnected(&client, what)?;
        Ok(client)
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, path: &str, data: &[u8]) -> BackendResult<T> {
        serde_json::from_slice(data).map_err(|e| self.protocol(&format!("{path} holds no schedule data ({e})")))
    }

    fn cached_partitions(&self, space: &str) -> Option<u32> {
        self.state.partitions.lock().unwrap_or_else(PoisonError::into_inner).get(space).copied()
    }

    fn remember_partitions(&self, space: &str, partitions: u32) {
        self.state.partitions.lock().unwrap_or_else(PoisonError::into_inner).insert(space.to_owned(), partitions);
    }

    /// The space's row and its version (`None`: no schedule was ever created in it).
    async fn space_row(&self, client: &zk::Client, space: &str, what: &str) -> BackendResult<Option<(SpaceRow, i32)>> {
        let path = space_path(space);
        self.backend.count(1);
        match client.get_data(&path).await {
            Ok((data, stat)) => {
                let row: SpaceRow = self.decode(&path, &data)?;
                self.remember_partitions(space, row.partitions);
                Ok(Some((row, stat.version)))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.err(what, e)),
        }
    }

    /// Reads the space's row, schedule `id`'s partition node and its node in one `multiRead`,
    /// placing `id` with `partitions` (or the count this store saw last, or read first); read
    /// again when the row says another count.
    async fn snapshot(
        &self,
        client: &zk::Client,
        space: &str,
        id: &str,
        partitions: Option<u32>,
        what: &str,
    ) -> BackendResult<Snapshot> {
        let mut count = match partitions.or_else(|| self.cached_partitions(space)) {
            Some(p) => p,
            None => match self.space_row(client, space, what).await? {
                Some((row, _)) => row.partitions,
                None => return Ok(Snapshot { space: None, partition_bytes: 0, row: None }),
            },
        };
        loop {
            let partition = partition_of(id, count);
            let (s, p, r) = (space_path(space), partition_path(space, partition), schedule_path(space, partition, id));
            let mut reader = client.new_multi_reader();
            for path in [&s, &p, &r] {
                reader.add_get_data(path).map_err(|e| self.err(what, e))?;
            }
            self.backend.count(1);
            let replies = reader.commit().await.map_err(|e| self.err(what, e))?;
            let [space_reply, partition_reply, row_reply]: [zk::MultiReadResult; 3] = replies
                .try_into()
                .map_err(|_| self.protocol(&format!("{what}: a multiRead of 3 reads answered otherwise")))?;
            let space_row = match self.node(&s, space_reply, what)? {
                Some((data, version)) => Some((self.decode::<SpaceRow>(&s, &data)?, version)),
                None => None,
            };
            if let Some((row, _)) =
                space_row.as_ref().filter(|(row, _)| row.partitions != count && partitions.is_none())
            {
                // The count cached was not the space's (a space deleted by hand and made again).
                count = row.partitions;
                self.remember_partitions(space, count);
                continue;
            }
            if let Some((row, _)) = &space_row {
                self.remember_partitions(space, row.partitions);
            }
            let partition_bytes = match self.node(&p, partition_reply, what)? {
                Some((data, _)) => std::str::from_utf8(&data).ok().and_then(|t| t.parse().ok()).unwrap_or(0),
                None => 0,
            };
            let row = match self.node(&r, row_reply, what)? {
                Some((data, version)) => Some((self.decode::<Schedule>(&r, &data)?, version)),
                None => None,
            };
            return Ok(Snapshot { space: space_row, partition_bytes, row });
        }
    }

    /// One reply of a `multiRead`: the node's data and version, `None` when it is missing.
    fn node(&self, path: &str, reply: zk::MultiReadResult, what: &str) -> BackendResult<Option<(Vec<u8>, i32)>> {
        match reply {
            zk::MultiReadResult::Data { data, stat } => Ok(Some((data, stat.version))),
            zk::MultiReadResult::Error { err: zk::Error::NoNode } => Ok(None),
            zk::MultiReadResult::Error { err } => Err(self.err(&format!("{what}: read {path}"), err)),
            other => Err(self.protocol(&format!("{what}: read {path}: answered {other:?}"))),
        }
    }
}

/// The ids of `sources` (each sorted) that `query`'s prefix and cursor admit, merged in id
/// order, each with its partition.
fn merged<'a>(sources: &'a [(u32, Ids)], query: &'a ListQuery) -> impl Iterator<Item = (&'a str, u32)> + Send + 'a {
    let mut heap = BinaryHeap::new();
    for (source, (_, ids)) in sources.iter().enumerate() {
        let after = query.after.as_deref().map_or(0, |a| ids.partition_point(|id| id.as_str() <= a));
        let prefix = query.prefix.as_deref().map_or(0, |p| ids.partition_point(|id| id.as_str() < p));
        let start = after.max(prefix);
        if let Some(id) = ids.get(start) {
            heap.push(Reverse((id.as_str(), source, start)));
        }
    }
    let next = std::iter::from_fn(move || {
        let Reverse((id, source, at)) = heap.pop()?;
        let (partition, ids) = &sources[source];
        if let Some(following) = ids.get(at + 1) {
            heap.push(Reverse((following.as_str(), source, at + 1)));
        }
        Some((id, *partition))
    });
    // Every id from here on is at least the prefix: those that start with it come first.
    next.take_while(move |(id, _)| query.prefix.as_deref().is_none_or(|p| id.starts_with(p)))
}

impl ZkScheduleStore {
    /// The data of each of `paths` (sent together), `None` where the node is missing.
    async fn read_many(
        &self,
        client: &zk::Client,
        paths: &[String],
        what: &str,
    ) -> BackendResult<Vec<Option<Vec<u8>>>> {
        self.backend.count(paths.len());
        let replies = join_all(paths.iter().map(|p| client.get_data(p))).await;
        replies
            .into_iter()
            .map(|reply| match reply {
                Ok((data, _)) => Ok(Some(data)),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(self.err(what, e)),
            })
            .collect()
    }

    /// The ids of the partitions `query` reads, each partition's sorted: one partition's
    /// children, or every written partition's (sent together), those of a partition whose
    /// change counter did not move since this backend listed it taken from then.
    async fn partition_ids(
        &self,
        client: &zk::Client,
        space: &str,
        query: &ListQuery,
        what: &str,
    ) -> BackendResult<Vec<(u32, Ids)>> {
        let wanted: Vec<(u32, Option<u64>)> = match query.partition {
            Some(p) => vec![(p, None)],
            None => match self.space_row(client, space, what).await? {
                Some((row, _)) => row.changes.into_iter().map(|(p, c)| (p, Some(c))).collect(),
                None => return Ok(Vec::new()),
            },
        };
        let mut out = Vec::with_capacity(wanted.len());
        let mut missing = Vec::new();
        {
            let listed = self.state.listed.lock().unwrap_or_else(PoisonError::into_inner);
            for (p, counter) in wanted {
                let seen = listed.get(&(space.to_owned(), p)).filter(|(c, _)| Some(*c) == counter);
                match seen {
                    Some((_, ids)) => out.push((p, Arc::clone(ids))),
                    None => missing.push((p, counter)),
                }
            }
        }
        let paths: Vec<String> = missing.iter().map(|(p, _)| partition_path(space, *p)).collect();
        self.backend.count(paths.len());
        let replies = join_all(paths.iter().map(|p| client.list_children(p))).await;
        for ((p, counter), reply) in missing.into_iter().zip(replies) {
            let mut ids: Vec<String> = match reply {
                Ok(names) => names.iter().map(|n| unsegment(n)).collect(),
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(self.err(what, e)),
            };
            ids.sort_unstable();
            let ids = Arc::new(ids);
            if let Some(c) = counter {
                let mut listed = self.state.listed.lock().unwrap_or_else(PoisonError::into_inner);
                listed.insert((space.to_owned(), p), (c, Arc::clone(&ids)));
            }
            out.push((p, ids));
        }
        Ok(out)
    }

    /// The audit records of sequences `seqs` (newest first) that still exist and concern
    /// `target` (all when `None`).
    async fn audit_records(
        &self,
        client: &zk::Client,
        space: &str,
        seqs: impl Iterator<Item = u64>,
        target: Option<&str>,
        what: &str,
    ) -> BackendResult<Vec<AuditRecord>> {
        let paths: Vec<String> = seqs.map(|seq| audit_path(space, seq)).collect();
        let mut out = Vec::new();
        for (path, data) in paths.iter().zip(self.read_many(client, &paths, what).await?) {
            let Some(data) = data else { continue };
            let record: AuditRecord = self.decode(path, &data)?;
            if target.is_none_or(|t| record.target == t) {
                out.push(record);
            }
        }
        Ok(out)
    }
}

impl ScheduleStore for ZkScheduleStore {
    async fn create(&self, space: &str, s: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        let description = &self.backend.inner.description;
        self.write(space, &s.id, Some(partitions), actor, "create schedule", |snap| {
            if let Some(stored) = snap.space.as_ref().map(|(row, _)| row.partitions).filter(|p| *p != partitions) {
                return Ok(Step::Answer(Created::PartitionsDiffer { stored }));
            }
            if snap.row.is_some() {
                return Ok(Step::Answer(Created::Exists));
            }
            let partition = partition_of(&s.id, partitions);
            let bytes = snap.partition_bytes + listed_bytes(&segment(&s.id));
            if bytes > LIST_BUDGET {
                return Err(BackendError::Misconfigured(format!(
                    "{description}: cannot create schedule `{}`: partition {partition} of space `{space}` holds \
                     {} bytes of ids, and ZooKeeper lists a node's children in one reply of at most jute.maxbuffer \
                     (1 MiB by default); a namespace for this many schedules needs more partitions \
                     ([schedules] partitions, set before its first create)",
                    s.id, snap.partition_bytes
                )));
            }
            let row = Schedule {
                partition,
                created_by: actor.who.to_owned(),
                created_ms: actor.at_ms,
                updated_by: actor.who.to_owned(),
                updated_ms: actor.at_ms,
                revision: 1,
                ..s.clone()
            };
            let op = NodeOp::Create(Box::new(row));
            Ok(Step::Write(Plan { partitions, op, action: AuditAction::Create, answer: Created::Created }))
        })
        .await
    }

    async fn update(&self, space: &str, s: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        self.write(space, &s.id, None, actor, "update schedule", |snap| {
            let (Some((row, version)), Some((space_row, _))) = (&snap.row, &snap.space) else {
                return Ok(Step::Answer(None));
            };
            let mut row = row.clone();
            row.handler.clone_from(&s.handler);
            row.spec = s.spec.clone();
            row.payload.clone_from(&s.payload);
            row.policies = s.policies;
            row.updated_by = actor.who.to_owned();
            row.updated_ms = actor.at_ms;
            row.revision += 1;
            let answer = Some(row.revision);
            let op = NodeOp::Set(Box::new(row), *version);
            Ok(Step::Write(Plan { partitions: space_row.partitions, op, action: AuditAction::Update, answer }))
        })
        .await
    }

    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        self.write(space, id, None, actor, "delete schedule", |snap| {
            let (Some((_, version)), Some((space_row, _))) = (&snap.row, &snap.space) else {
                return Ok(Step::Answer(false));
            };
            let op = NodeOp::Delete(*version);
            Ok(Step::Write(Plan { partitions: space_row.partitions, op, action: AuditAction::Delete, answer: true }))
        })
        .await
    }

    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        let what = if paused { "pause schedule" } else { "resume schedule" };
        self.write(space, id, None, actor, what, |snap| {
            let (Some((row, version)), Some((space_row, _))) = (&snap.row, &snap.space) else {
                return Ok(Step::Answer(None));
            };
            let mut row = row.clone();
            let was = row.paused;
            row.paused = paused;
            row.pause_note = if paused { actor.note.map(str::to_owned) } else { None };
            row.updated_by = actor.who.to_owned();
            row.updated_ms = actor.at_ms;
            row.revision += 1;
            let action = if paused { AuditAction::Pause } else { AuditAction::Resume };
            let op = NodeOp::Set(Box::new(row), *version);
            Ok(Step::Write(Plan { partitions: space_row.partitions, op, action, answer: Some(was) }))
        })
        .await
    }

    async fn record(&self, space: &str, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        self.write(space, id, None, actor, "record an action in the audit trail", |snap| {
            let (Some((row, version)), Some((space_row, _))) = (&snap.row, &snap.space) else {
                return Ok(Step::Answer(false));
            };
            // The row as read, at its version: the write fails if it changed meanwhile.
            let op = NodeOp::Set(Box::new(row.clone()), *version);
            Ok(Step::Write(Plan { partitions: space_row.partitions, op, action, answer: true }))
        })
        .await
    }

    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        let what = "read a schedule";
        let client = self.client(what).await?;
        Ok(self.snapshot(&client, space, id, None, what).await?.row.map(|(s, _)| s))
    }

    async fn list(&self, space: &str, query: &ListQuery) -> BackendResult<Vec<Schedule>> {
        let what = "list schedules";
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client(what).await?;
        let sources = self.partition_ids(&client, space, query, what).await?;
        let mut ids = merged(&sources, query);
        let mut out = Vec::new();
        while out.len() < query.limit {
            // Without a handler filter every id read is returned: read no more than needed.
            let want = if query.handler.is_some() { BATCH } else { (query.limit - out.len()).min(BATCH) };
            let chunk: Vec<(&str, u32)> = ids.by_ref().take(want).collect();
            if chunk.is_empty() {
                break;
            }
            let paths: Vec<String> = chunk.iter().map(|(id, p)| schedule_path(space, *p, id)).collect();
            for (path, data) in paths.iter().zip(self.read_many(&client, &paths, what).await?) {
                // Deleted since the listing: not there any more.
                let Some(data) = data else { continue };
                let s: Schedule = self.decode(path, &data)?;
                if query.matches(&s) {
                    out.push(s);
                }
            }
        }
        out.truncate(query.limit);
        Ok(out)
    }

    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        let what = "read the schedules' partition count";
        let client = self.client(what).await?;
        Ok(self.space_row(&client, space, what).await?.map(|(row, _)| row.partitions))
    }

    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        let what = "read the schedules' change counters";
        let client = self.client(what).await?;
        Ok(self
            .space_row(&client, space, what)
            .await?
            .map(|(row, _)| row.changes.into_iter().collect())
            .unwrap_or_default())
    }

    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        let what = "read the schedules' audit trail";
        let client = self.client(what).await?;
        let Some((row, _)) = self.space_row(&client, space, what).await? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        let mut next = row.audit_last;
        while out.len() < limit && next >= row.audit_first.max(1) {
            // Without a target every record read is returned: read no more than needed.
            let want = if target.is_some() { BATCH } else { (limit - out.len()).min(BATCH) } as u64;
            let low = (next + 1).saturating_sub(want).max(row.audit_first).max(1);
            out.extend(self.audit_records(&client, space, (low..=next).rev(), target, what).await?);
            next = low - 1;
        }
        out.truncate(limit);
        Ok(out)
    }

    fn audit_retention(&self) -> usize {
        self.retention
    }

    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        SharedScheduleStore::new(ZkScheduleStore {
            backend: self.backend.clone(),
            state: Arc::clone(&self.state),
            retention: records.max(1),
        })
    }

    fn describe(&self) -> String {
        self.backend.inner.description.clone()
    }

    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.state.watch.subscribe(&self.backend)
    }
}
