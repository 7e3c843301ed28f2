//! The schedule store on Redis (ADR 0020): every write is one Lua script (one round trip,
//! atomic on the server) that changes the row, its indexes, its partition's change counter
//! and the audit trail together; reads are one command or one read-only script.
//!
//! With `{s}` the space's tag (`""` for the default namespace, `billing~` for namespace
//! `billing`: the namespace separator, which no id, handler or namespace contains, so the keys
//! of two spaces never meet), and the backend's key prefix first, as for its other keys (a
//! hash tag in the prefix keeps them in one Cluster slot):
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `{prefix}:schedule:{s}{id}` | hash | the row: `id`, `partition`, `handler`, `spec` and `policies` (JSON), `payload` (JSON text), `paused`, `pause_note` (absent when none), `created_by`, `created_ms`, `updated_by`, `updated_ms`, `revision` |
//! | `{prefix}:schedules:{s}ids` | sorted set | every id of the space, score 0 (ordered by bytes) |
//! | `{prefix}:schedules:{s}part:{n}` | sorted set | the ids of partition `n`, score 0 |
//! | `{prefix}:schedules:{s}handler:{h}` | sorted set | the ids of handler `h`, score 0 |
//! | `{prefix}:schedules:{s}space` | hash | `partitions`: the count, written by the space's first create |
//! | `{prefix}:schedules:{s}changes` | hash | partition -> change counter |
//! | `{prefix}:schedules:{s}audit` | list | the audit records as JSON, newest first, trimmed to the writer's retention |
//! | `{prefix}:schedules:{s}audit:{id}` | list | the same records of schedule `id` only, trimmed with the space's |
//!
//! None has a TTL. A `get` is one `HMGET`. A `list` walks one index with `ZRANGEBYLEX` from
//! its cursor (the partition's for a holder, the handler's, else the space's), and stops at
//! the first id past the prefix or at the limit: its cost is the page, not the space (a
//! handler within a partition walks the smaller of the two sets and drops the others' rows).
//! An audit read is one `LRANGE` of the space's trail or of the target's.

use super::RedisBackend;
use super::schedule_scripts::{ROW_FIELDS, SCRIPTS};
use crate::backend::namespace::SEPARATOR;
use crate::backend::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, DEFAULT_AUDIT_RETENTION, ListQuery, Schedule, ScheduleStore,
    SharedScheduleStore, partition_of,
};
use crate::backend::{BackendError, BackendResult};

/// The largest limit a read passes on (a Lua number counts exactly to 2^53, `LRANGE` takes an
/// `i64`): a larger one reads everything as well.
const MAX_LIMIT: usize = 1 << 52;

/// The schedule store of a [`RedisBackend`]: a handle on the backend's connection, with
/// nothing of its own to share (no schema, no cache), so each call of
/// `Backend::schedule_store` makes one. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RedisScheduleStore {
    backend: RedisBackend,
    retention: usize,
}

/// The keys of one space (see the module documentation).
struct SpaceKeys {
    /// `{prefix}:schedule:{s}`: a row's key without its id.
    row: String,
    /// `{prefix}:schedules:{s}`: the space's other keys without their names.
    base: String,
}

impl SpaceKeys {
    fn new(prefix: &str, space: &str) -> Self {
        let tag = if space.is_empty() { String::new() } else { format!("{space}{SEPARATOR}") };
        SpaceKeys { row: format!("{prefix}:schedule:{tag}"), base: format!("{prefix}:schedules:{tag}") }
    }
    fn row(&self, id: &str) -> String {
        format!("{}{id}", self.row)
    }
    fn ids(&self) -> String {
        format!("{}ids", self.base)
    }
    fn partition_base(&self) -> String {
        format!("{}part:", self.base)
    }
    fn partition(&self, partition: u32) -> String {
        format!("{}part:{partition}", self.base)
    }
    fn handler_base(&self) -> String {
        format!("{}handler:", self.base)
    }
    fn handler(&self, handler: &str) -> String {
        format!("{}handler:{handler}", self.base)
    }
    fn space(&self) -> String {
        format!("{}space", self.base)
    }
    fn changes(&self) -> String {
        format!("{}changes", self.base)
    }
    fn audit(&self) -> String {
        format!("{}audit", self.base)
    }
    fn audit_of(&self, target: &str) -> String {
        format!("{}audit:{target}", self.base)
    }
}

/// Where a listing starts in an index (a `ZRANGEBYLEX` bound): after the cursor, at the
/// prefix, whichever is later (byte order, as the index sorts).
fn list_start(q: &ListQuery) -> String {
    match (q.prefix.as_deref(), q.after.as_deref()) {
        (Some(p), Some(a)) if a < p => format!("[{p}"),
        (_, Some(a)) => format!("({a}"),
        (Some(p), None) => format!("[{p}"),
        (None, None) => "-".to_owned(),
    }
}

/// `0` or `1`.
fn flag(b: bool) -> &'static str {
    if b { "1" } else { "0" }
}

impl RedisScheduleStore {
    pub(crate) fn new(backend: RedisBackend) -> Self {
        RedisScheduleStore { backend, retention: DEFAULT_AUDIT_RETENTION }
    }

    /// Tells the holders that `space` changed (rule A11): a publish after the write, a hint
    /// only (a lost one is found at the holders' next poll).
    async fn changed(&self, space: &str) {
        self.backend.publish(&self.backend.schedules_channel(), space).await;
    }

    fn keys(&self, space: &str) -> SpaceKeys {
        SpaceKeys::new(&self.backend.keys().prefix, space)
    }

    fn protocol(&self, what: String) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    fn json<T: serde::Serialize>(&self, value: &T) -> BackendResult<String> {
        serde_json::to_string(value).map_err(|e| self.protocol(format!("cannot encode a schedule: {e}")))
    }

    /// `actor`'s record of `action` on `target`, as the trail keeps it, and the retention.
    fn audit_record(&self, actor: &Actor<'_>, action: AuditAction, target: &str) -> BackendResult<(String, String)> {
        Ok((self.json(&AuditRecord::new(actor, action, target))?, self.retention.max(1).to_string()))
    }

    /// Runs one plain command.
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, what: &'static str) -> BackendResult<T> {
        let mut conn = self.backend.inner.link.conn();
        cmd.query_async(&mut conn).await.map_err(|e| self.backend.call_failed(what, e))
    }

    fn number<T: std::str::FromStr>(&self, id: &str, field: &str, v: Option<String>) -> BackendResult<T> {
        let v = v.ok_or_else(|| self.protocol(format!("the schedule `{id}` has no {field}")))?;
        v.parse().map_err(|_| self.protocol(format!("the {field} of schedule `{id}` is not a number: {v:?}")))
    }

    /// A row as [`ROW_FIELDS`] reads it; `None` when it has no id (no such row).
    fn schedule(&self, fields: Vec<Option<String>>) -> BackendResult<Option<Schedule>> {
        if fields.len() != ROW_FIELDS.len() {
            return Err(self.protocol(format!("a schedule row of {} fields", fields.len())));
        }
        let mut f = fields.into_iter();
        let mut next = || f.next().flatten();
        let Some(id) = next() else { return Ok(None) };
        let text = |v: Option<String>, field: &str| {
            v.ok_or_else(|| self.protocol(format!("the schedule `{id}` has no {field}")))
        };
        let partition: u32 = self.number(&id, "partition", next())?;
        let handler = text(next(), "handler")?;
        let spec = text(next(), "spec")?;
        let spec = serde_json::from_str(&spec)
            .map_err(|e| self.protocol(format!("an unreadable spec of schedule `{id}` ({e})")))?;
        let mut s = Schedule::new(id.clone(), handler, spec);
        s.payload = text(next(), "payload")?;
        s.policies = serde_json::from_str(&text(next(), "policies")?)
            .map_err(|e| self.protocol(format!("unreadable policies of schedule `{id}` ({e})")))?;
        s.paused = next().as_deref() == Some("1");
        s.pause_note = next();
        s.partition = partition;
        s.created_by = text(next(), "creator")?;
        s.created_ms = self.number(&id, "created_ms", next())?;
        s.updated_by = text(next(), "last writer")?;
        s.updated_ms = self.number(&id, "updated_ms", next())?;
        s.revision = self.number(&id, "revision", next())?;
        Ok(Some(s))
    }

    /// The index a listing walks first, and the one it walks instead when smaller.
    fn indexes(&self, keys: &SpaceKeys, q: &ListQuery) -> [String; 2] {
        match (q.partition, q.handler.as_deref()) {
            (Some(p), Some(h)) => [keys.partition(p), keys.handler(h)],
            (Some(p), None) => [keys.partition(p), keys.partition(p)],
            (None, Some(h)) => [keys.handler(h), keys.handler(h)],
            (None, None) => [keys.ids(), keys.ids()],
        }
    }
}

impl ScheduleStore for RedisScheduleStore {
    async fn create(&self, space: &str, s: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        let what = "create a schedule";
        let k = self.keys(space);
        let partition = partition_of(&s.id, partitions);
        let (spec, policies) = (self.json(&s.spec)?, self.json(&s.policies)?);
        let (record, keep) = self.audit_record(actor, AuditAction::Create, &s.id)?;
        let (count, part, at) = (partitions.to_string(), partition.to_string(), actor.at_ms.to_string());
        let keys =
            [k.space(), k.row(&s.id), k.ids(), k.partition(partition), k.handler(&s.handler), k.changes(), k.audit()];
        let args = [
            count.as_str(),
            &part,
            &s.id,
            &s.handler,
            &spec,
            &s.payload,
            &policies,
            flag(s.paused),
            s.pause_note.as_deref().unwrap_or(""),
            flag(s.pause_note.is_some()),
            actor.who,
            &at,
            &record,
            &keep,
        ];
        let answer: Vec<String> = self.backend.eval(&SCRIPTS.create, keys, args, what).await?;
        match answer.as_slice() {
            [c] if c == "0" => {
                self.changed(space).await;
                Ok(Created::Created)
            }
            [c] if c == "1" => Ok(Created::Exists),
            [c, stored] if c == "2" => match stored.parse() {
                Ok(stored) => Ok(Created::PartitionsDiffer { stored }),
                Err(_) => Err(self.protocol(format!("a partition count out of range: {stored:?}"))),
            },
            _ => Err(self.backend.protocol(what, answer)),
        }
    }

    async fn update(&self, space: &str, s: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        let what = "update a schedule";
        let k = self.keys(space);
        let (spec, policies) = (self.json(&s.spec)?, self.json(&s.policies)?);
        let (record, keep) = self.audit_record(actor, AuditAction::Update, &s.id)?;
        let (handlers, at) = (k.handler_base(), actor.at_ms.to_string());
        let args = [handlers.as_str(), &s.id, &s.handler, &spec, &s.payload, &policies, actor.who, &at, &record, &keep];
        let revision: i64 =
            self.backend.eval(&SCRIPTS.update, [k.row(&s.id), k.changes(), k.audit()], args, what).await?;
        if revision < 0 {
            return Ok(None);
        }
        self.changed(space).await;
        self.backend.non_negative(what, revision).map(Some)
    }

    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        let k = self.keys(space);
        let (record, keep) = self.audit_record(actor, AuditAction::Delete, id)?;
        let (partitions, handlers) = (k.partition_base(), k.handler_base());
        let keys = [k.row(id), k.ids(), k.changes(), k.audit()];
        let args = [partitions.as_str(), &handlers, id, &record, &keep];
        let deleted: i64 = self.backend.eval(&SCRIPTS.delete, keys, args, "delete a schedule").await?;
        if deleted == 1 {
            self.changed(space).await;
        }
        Ok(deleted == 1)
    }

    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        let what = if paused { "pause a schedule" } else { "resume a schedule" };
        let k = self.keys(space);
        let action = if paused { AuditAction::Pause } else { AuditAction::Resume };
        let (record, keep) = self.audit_record(actor, action, id)?;
        let note = if paused { actor.note } else { None };
        let at = actor.at_ms.to_string();
        let args = [flag(paused), note.unwrap_or(""), flag(note.is_some()), actor.who, &at, &record, &keep, id];
        let was: i64 = self.backend.eval(&SCRIPTS.set_paused, [k.row(id), k.changes(), k.audit()], args, what).await?;
        match was {
            -1 => Ok(None),
            0 | 1 => {
                self.changed(space).await;
                Ok(Some(was == 1))
            }
            _ => Err(self.backend.protocol(what, was)),
        }
    }

    async fn record(&self, space: &str, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        let what = "record an action in the audit trail";
        let k = self.keys(space);
        let (record, keep) = self.audit_record(actor, action, id)?;
        let args = [id, record.as_str(), keep.as_str()];
        let done: i64 = self.backend.eval(&SCRIPTS.record, [k.row(id), k.changes(), k.audit()], args, what).await?;
        match done {
            0 => Ok(false),
            1 => {
                self.changed(space).await;
                Ok(true)
            }
            _ => Err(self.backend.protocol(what, done)),
        }
    }

    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.keys(space).row(id)).arg(&ROW_FIELDS[..]);
        let fields: Vec<Option<String>> = self.query(&cmd, "read a schedule").await?;
        self.schedule(fields)
    }

    async fn list(&self, space: &str, q: &ListQuery) -> BackendResult<Vec<Schedule>> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.keys(space);
        let (start, limit) = (list_start(q), q.limit.min(MAX_LIMIT).to_string());
        let partition = q.partition.map(|p| p.to_string()).unwrap_or_default();
        let args = [
            k.row.as_str(),
            &start,
            q.prefix.as_deref().unwrap_or(""),
            flag(q.handler.is_some()),
            q.handler.as_deref().unwrap_or(""),
            flag(q.partition.is_some()),
            &partition,
            &limit,
        ];
        let rows: Vec<Vec<Option<String>>> =
            self.backend.eval(&SCRIPTS.list, self.indexes(&k, q), args, "list schedules").await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.extend(self.schedule(row)?);
        }
        Ok(out)
    }

    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys(space).space()).arg("partitions");
        let stored: Option<String> = self.query(&cmd, "read the partition count").await?;
        stored
            .map(|n| n.parse().map_err(|_| self.protocol(format!("a partition count out of range: {n:?}"))))
            .transpose()
    }

    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.keys(space).changes());
        let flat: Vec<(String, String)> = self.query(&cmd, "read the change counters").await?;
        let mut changes = flat
            .into_iter()
            .map(|(p, c)| match (p.parse(), c.parse()) {
                (Ok(p), Ok(c)) => Ok((p, c)),
                _ => Err(self.protocol(format!("a change counter out of range: {p:?} {c:?}"))),
            })
            .collect::<BackendResult<Vec<(u32, u64)>>>()?;
        changes.sort_unstable();
        Ok(changes)
    }

    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.keys(space);
        let key = match target {
            None => k.audit(),
            Some(t) => k.audit_of(t),
        };
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(key).arg(0).arg(limit.min(MAX_LIMIT) - 1);
        let records: Vec<String> = self.query(&cmd, "read the audit trail").await?;
        records
            .iter()
            .map(|r| {
                serde_json::from_str(r).map_err(|e| self.protocol(format!("an unreadable audit record ({e}): {r}")))
            })
            .collect()
    }

    fn audit_retention(&self) -> usize {
        self.retention
    }

    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        SharedScheduleStore::new(RedisScheduleStore { retention: records.max(1), ..self.clone() })
    }

    fn describe(&self) -> String {
        format!("{} (schedule store)", self.backend.inner.description)
    }

    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.backend.subscribe_schedule_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout() {
        let default = SpaceKeys::new("simba", "");
        assert_eq!(default.row("tenant-1"), "simba:schedule:tenant-1");
        assert_eq!(default.ids(), "simba:schedules:ids");
        assert_eq!(default.partition(3), "simba:schedules:part:3");
        assert_eq!(default.partition_base(), "simba:schedules:part:");
        assert_eq!(default.handler("report"), "simba:schedules:handler:report");
        let billing = SpaceKeys::new("{simba}", "billing");
        assert_eq!(billing.row("tenant-1"), "{simba}:schedule:billing~tenant-1");
        assert_eq!(billing.space(), "{simba}:schedules:billing~space");
        assert_eq!(billing.changes(), "{simba}:schedules:billing~changes");
        assert_eq!(billing.audit(), "{simba}:schedules:billing~audit");
        assert_eq!(billing.audit_of("tenant-1"), "{simba}:schedules:billing~audit:tenant-1");
        assert_eq!(billing.handler_base(), "{simba}:schedules:billing~handler:");
    }

    /// A listing starts after the cursor or at the prefix, whichever comes later in byte order.
    #[test]
    fn list_starts_at_the_later_of_cursor_and_prefix() {
        assert_eq!(list_start(&ListQuery::first(1)), "-");
        assert_eq!(list_start(&ListQuery::first(1).after("a.1")), "(a.1");
        assert_eq!(list_start(&ListQuery::first(1).prefix("a")), "[a");
        assert_eq!(list_start(&ListQuery::first(1).prefix("a").after("a.10")), "(a.10");
        assert_eq!(list_start(&ListQuery::first(1).prefix("b").after("a.10")), "[b");
        assert_eq!(list_start(&ListQuery::first(1).prefix("a").after("Z")), "[a", "upper case sorts first");
    }
}
