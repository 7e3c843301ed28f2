//! The schedule store of the SQL backends (ADR 0020) on SQLite, PostgreSQL and MySQL/MariaDB
//! alike: four tables beside the lease and jobs tables, created on the store's first call
//! (`IF NOT EXISTS`; a read first, so a user without DDL rights runs tables an administrator
//! made).
//!
//! | table | key | what |
//! | --- | --- | --- |
//! | `simba_schedule` | `(space, id)` | one row per schedule; indexes by partition and by handler |
//! | `simba_schedule_space` | `space` | the space's partition count, written by its first create |
//! | `simba_schedule_change` | `(space, part)` | the partition's change counter |
//! | `simba_schedule_audit` | `seq` | the audit trail, the newest records of each space kept |
//!
//! Every write is one transaction (`BEGIN IMMEDIATE` on SQLite) that starts by locking its
//! space's row, so the writes of a space are serialised, then writes the schedule, bumps its
//! partition's counter, appends the audit record and trims the trail. Writes are operators'
//! actions, rare next to claims, so unlike the claim they are not routines: a client stalled
//! inside one holds its space's row, which delays other writes of that space, never a lease
//! or a claim (which read no schedule table).

use std::marker::PhantomData;

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};
use tokio::sync::OnceCell;

use super::SqlStore;
use super::dialect::{Param, Stmt};
use super::jobs::JobDialect;
use crate::backend::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, DEFAULT_AUDIT_RETENTION, ListQuery, Schedule, ScheduleStore,
    SharedScheduleStore, partition_of,
};
use crate::backend::{BackendError, BackendResult};

/// What a dialect writes its own way for the schedule store.
pub(crate) trait ScheduleDialect: JobDialect {
    /// The tables and indexes, idempotent (`schedules_schema.sql`).
    const SCHEDULE_SCHEMA: &'static str;
    /// How many of the tables and indexes exist (one `BIGINT`).
    const SCHEDULE_SCHEMA_PRESENT: &'static str;
    /// How many [`SCHEDULE_SCHEMA_PRESENT`](Self::SCHEDULE_SCHEMA_PRESENT) counts when all exist.
    const SCHEDULE_OBJECTS: usize;
    /// The end of the `INSERT INTO simba_schedule_space` that keeps an existing row (and locks
    /// it for the transaction).
    const KEEP_SPACE: &'static str;
    /// The end of the `INSERT INTO simba_schedule_change` that bumps an existing counter.
    const BUMP_CHANGE: &'static str;
    /// The statement that broadcasts a change of space `:1` at the write's commit
    /// (PostgreSQL's `pg_notify`); `None` where holders poll only.
    const NOTIFY_CHANGES: Option<&'static str> = None;

    /// The schedule store's statements rendered for this dialect, once.
    fn schedule_statements() -> &'static ScheduleStatements;
}

/// Implements [`ScheduleDialect::schedule_statements`] with a static of its own.
macro_rules! schedule_statements {
    ($dialect:ty) => {
        fn schedule_statements() -> &'static ScheduleStatements {
            static STATEMENTS: std::sync::LazyLock<ScheduleStatements> =
                std::sync::LazyLock::new(ScheduleStatements::new::<$dialect>);
            &STATEMENTS
        }
    };
}
pub(crate) use schedule_statements;

/// The columns of a schedule, in the order every statement reads them.
const COLUMNS: &str = "id, part, handler_name, spec, payload, policies, paused, pause_note, created_by, created_ms, \
                       updated_by, updated_ms, revision";

/// A schedule as read: the columns of [`COLUMNS`].
type Row = (String, i64, String, String, String, String, i64, Option<String>, String, i64, String, i64, i64);

/// The schedule store's statements rendered for one dialect.
pub(crate) struct ScheduleStatements {
    /// `:1` space, `:2` partitions: the space's row, kept when it exists, locked.
    space_ensure: Stmt,
    /// `:1` space: its partition count, the row locked.
    space_lock: Stmt,
    /// `:1` space: its partition count.
    space_read: Stmt,
    /// `:1` space, `:2` id, `:3` part, `:4` handler, `:5` spec, `:6` payload, `:7` policies,
    /// `:8` paused, `:9` note, `:10` has a note, `:11` who, `:12` when.
    insert: Stmt,
    /// `:1` space, `:2` id: its partition, revision and pause, locked.
    row_lock: Stmt,
    /// `:1` space, `:2` id, `:3` handler, `:4` spec, `:5` payload, `:6` policies, `:7` who,
    /// `:8` when.
    update: Stmt,
    /// `:1` space, `:2` id, `:3` paused, `:4` note, `:5` has a note, `:6` who, `:7` when.
    set_paused: Stmt,
    /// `:1` space, `:2` id.
    delete: Stmt,
    /// `:1` space, `:2` part.
    bump: Stmt,
    /// `:1` space, `:2` when, `:3` who, `:4` action, `:5` target, `:6` note, `:7` has a note.
    audit_insert: Stmt,
    /// `:1` space, `:2` records kept minus one: the oldest record kept (none: fewer records).
    audit_boundary: Stmt,
    /// `:1` space, `:2` the oldest record kept: drops the older ones.
    audit_trim: Stmt,
    /// `:1` space: broadcasts its change at the commit ([`ScheduleDialect::NOTIFY_CHANGES`]).
    notify: Option<Stmt>,
    /// `:1` space, `:2` id.
    get: Stmt,
    /// `:1` space, `:2` has a handler, `:3` handler, `:4` has a prefix, `:5` prefix, `:6` its
    /// upper bound, `:7` has a cursor, `:8` cursor, `:9` limit.
    list: Stmt,
    /// `:1` space.
    changes: Stmt,
    /// `:1` space, `:2` has a target, `:3` target, `:4` limit.
    audit: Stmt,
    /// [`ScheduleDialect::SCHEDULE_SCHEMA`], statement by statement.
    schema: Vec<&'static str>,
}

impl ScheduleStatements {
    pub(crate) fn new<D: ScheduleDialect>() -> Self {
        let r = |t: &str| D::render(t);
        ScheduleStatements {
            space_ensure: r(&format!(
                "INSERT INTO simba_schedule_space (space, partitions) VALUES (:1, :2) {}",
                D::KEEP_SPACE
            )),
            space_lock: r(&format!("SELECT partitions FROM simba_schedule_space WHERE space = :1{}", D::LOCK_ROWS)),
            space_read: r("SELECT partitions FROM simba_schedule_space WHERE space = :1"),
            insert: r(&format!(
                "INSERT INTO simba_schedule (space, {COLUMNS}) VALUES (:1, :2, :3, :4, :5, :6, :7, :8, \
                 CASE WHEN :10 = 1 THEN :9 END, :11, :12, :11, :12, 1)"
            )),
            row_lock: r(&format!(
                "SELECT part, revision, paused FROM simba_schedule WHERE space = :1 AND id = :2{}",
                D::LOCK_ROWS
            )),
            update: r("UPDATE simba_schedule SET handler_name = :3, spec = :4, payload = :5, policies = :6, \
                 updated_by = :7, updated_ms = :8, revision = revision + 1 WHERE space = :1 AND id = :2"),
            set_paused: r("UPDATE simba_schedule SET paused = :3, pause_note = CASE WHEN :5 = 1 THEN :4 END, \
                 updated_by = :6, updated_ms = :7, revision = revision + 1 WHERE space = :1 AND id = :2"),
            delete: r("DELETE FROM simba_schedule WHERE space = :1 AND id = :2"),
            bump: r(&format!(
                "INSERT INTO simba_schedule_change (space, part, counter) VALUES (:1, :2, 1) {}",
                D::BUMP_CHANGE
            )),
            audit_insert: r("INSERT INTO simba_schedule_audit (space, at_ms, who, audit_action, target, note) \
                 VALUES (:1, :2, :3, :4, :5, CASE WHEN :7 = 1 THEN :6 END)"),
            // The boundary is read first and given to the DELETE as a value, so the DELETE is a
            // range of the (space, seq) index and locks this space's records only: with the
            // boundary as a subquery, InnoDB scanned the primary key and locked other spaces'
            // records, and writes of two spaces deadlocked.
            audit_boundary: r("SELECT seq FROM simba_schedule_audit WHERE space = :1 \
                 ORDER BY seq DESC LIMIT 1 OFFSET :2"),
            audit_trim: r("DELETE FROM simba_schedule_audit WHERE space = :1 AND seq < :2"),
            notify: D::NOTIFY_CHANGES.map(r),
            get: r(&format!("SELECT {COLUMNS} FROM simba_schedule WHERE space = :1 AND id = :2")),
            list: r(&format!(
                "SELECT {COLUMNS} FROM simba_schedule WHERE space = :1 AND (:2 = 0 OR handler_name = :3) \
                 AND (:4 = 0 OR (id >= :5 AND id < :6)) AND (:7 = 0 OR id > :8) AND (:10 = 0 OR part = :11) ORDER BY id LIMIT :9"
            )),
            changes: r("SELECT part, counter FROM simba_schedule_change WHERE space = :1 ORDER BY part"),
            audit: r("SELECT at_ms, who, audit_action, target, note FROM simba_schedule_audit WHERE space = :1 \
                 AND (:2 = 0 OR target = :3) ORDER BY seq DESC LIMIT :4"),
            schema: super::dialect::script(D::SCHEDULE_SCHEMA),
        }
    }
}

/// The upper bound of the ids that start with `prefix`: `prefix~`. `~` sorts after every
/// character of the id alphabet (`[A-Za-z0-9._:-]`, A1), so `[prefix, prefix~)` is exactly
/// the ids with that prefix, a range of the primary key.
fn prefix_end(prefix: &str) -> String {
    format!("{prefix}~")
}

/// An optional text as two parameters: the flag (1 when present) and the value.
fn opt_text(v: Option<&str>) -> (i64, &str) {
    (i64::from(v.is_some()), v.unwrap_or(""))
}

/// The schedule store of one SQL database. Cheap to clone.
pub(crate) struct SqlScheduleStore<D: ScheduleDialect> {
    sql: SqlStore<D>,
    retention: usize,
    schema: std::sync::Arc<OnceCell<()>>,
    statements: &'static ScheduleStatements,
    /// Where the database's broadcast of changes arrives (PostgreSQL's listener).
    changes: Option<tokio::sync::broadcast::Sender<String>>,
    dialect: PhantomData<D>,
}

impl<D: ScheduleDialect> Clone for SqlScheduleStore<D> {
    fn clone(&self) -> Self {
        SqlScheduleStore {
            sql: self.sql.clone(),
            retention: self.retention,
            schema: std::sync::Arc::clone(&self.schema),
            statements: self.statements,
            changes: self.changes.clone(),
            dialect: PhantomData,
        }
    }
}

impl<D: ScheduleDialect> SqlScheduleStore<D> {
    /// A store on `sql`'s pool keeping the default number of audit records.
    pub(crate) fn new(sql: SqlStore<D>) -> Self {
        SqlScheduleStore {
            sql,
            retention: DEFAULT_AUDIT_RETENTION,
            schema: std::sync::Arc::default(),
            statements: D::schedule_statements(),
            changes: None,
            dialect: PhantomData,
        }
    }

    /// This store, answering [`ScheduleStore::subscribe_changes`] with receivers of `changes`
    /// (what the database's listener forwards).
    pub(crate) fn with_changes(mut self, changes: tokio::sync::broadcast::Sender<String>) -> Self {
        self.changes = Some(changes);
        self
    }
}

/// An open transaction of the store.
type Tx<D> = sqlx::Transaction<'static, <D as super::dialect::Dialect>::Db>;

impl<D: ScheduleDialect> SqlScheduleStore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> &'a str: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> i64: Encode<'a, D::Db> + Type<D::Db> + Decode<'a, D::Db>,
    for<'a> String: Type<D::Db> + Decode<'a, D::Db>,
    for<'a> Option<i64>: Type<D::Db> + Decode<'a, D::Db>,
    for<'a> Option<String>: Type<D::Db> + Decode<'a, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    fn args(&self, stmt: &Stmt, params: &[Param<'_>]) -> BackendResult<<D::Db as Database>::Arguments> {
        stmt.args::<D::Db>(params)
            .map_err(|e| BackendError::Protocol(format!("{}: cannot encode an argument: {e}", self.sql.description())))
    }

    /// Creates the tables on the first call, unless they all exist (then nothing is locked).
    async fn ensure_schema(&self) -> BackendResult<()> {
        self.schema
            .get_or_try_init(|| async {
                let what = "create the schedule tables";
                let present: i64 = sqlx::query_scalar(D::SCHEDULE_SCHEMA_PRESENT)
                    .fetch_one(self.sql.pool())
                    .await
                    .map_err(self.sql.err(what))?;
                if usize::try_from(present).is_ok_and(|n| n >= D::SCHEDULE_OBJECTS) {
                    return Ok(());
                }
                let mut tx = self.begin(what).await?;
                if let Some(lock) = D::ADVISORY_LOCK {
                    sqlx::raw_sql(lock).execute(&mut *tx).await.map_err(self.sql.err(what))?;
                }
                for statement in &self.statements.schema {
                    sqlx::raw_sql(*statement).execute(&mut *tx).await.map_err(|e| self.schema_error(e))?;
                }
                tx.commit().await.map_err(self.sql.err(what))
            })
            .await
            .map(|_| ())
    }

    fn schema_error(&self, e: sqlx::Error) -> BackendError {
        let denied = e.as_database_error().is_some_and(|d| {
            matches!(d.code().as_deref(), Some("42501" | "1142" | "1044")) || d.message().contains("denied")
        });
        if denied {
            let script: Vec<String> = self.statements.schema.iter().map(|s| format!("{s};")).collect();
            return BackendError::Misconfigured(format!(
                "{}: cannot create the schedule tables ({e}); run this once as an administrator, then grant SELECT, \
                 INSERT, UPDATE, DELETE on them:\n{}",
                self.sql.description(),
                script.join("\n")
            ));
        }
        BackendError::unavailable(format!("{}: create the schedule tables failed", self.sql.description()), e)
    }

    async fn begin(&self, what: &'static str) -> BackendResult<Tx<D>> {
        super::dialect::begin::<D>(self.sql.pool()).await.map_err(self.sql.err(what))
    }

    /// A transaction with the schema in place.
    async fn write(&self, what: &'static str) -> BackendResult<Tx<D>> {
        self.ensure_schema().await?;
        self.begin(what).await
    }

    async fn exec(
        &self,
        tx: &mut Tx<D>,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<u64> {
        let args = self.args(stmt, params)?;
        let done = sqlx::query_with(stmt.sql(), args).execute(&mut **tx).await.map_err(self.sql.err(what))?;
        Ok(D::rows_affected(&done))
    }

    async fn one<O>(
        &self,
        tx: &mut Tx<D>,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<Option<O>>
    where
        O: for<'r> sqlx::FromRow<'r, <D::Db as Database>::Row> + Send + Unpin,
    {
        let args = self.args(stmt, params)?;
        sqlx::query_as_with(stmt.sql(), args).fetch_optional(&mut **tx).await.map_err(self.sql.err(what))
    }

    /// The bookkeeping of every write, in its transaction: the partition's counter, the audit
    /// record, the trim; then the commit.
    async fn wrote(
        &self,
        mut tx: Tx<D>,
        space: &str,
        part: i64,
        record: &AuditRecord,
        what: &'static str,
    ) -> BackendResult<()> {
        let s = self.statements;
        self.exec(&mut tx, &s.bump, &[Param::Text(space), Param::Int(part)], what).await?;
        let (has_note, note) = opt_text(record.note.as_deref());
        let audit = [
            Param::Text(space),
            Param::Int(record.at_ms),
            Param::Text(&record.who),
            Param::Text(record.action.as_str()),
            Param::Text(&record.target),
            Param::Text(note),
            Param::Int(has_note),
        ];
        self.exec(&mut tx, &s.audit_insert, &audit, what).await?;
        let keep = i64::try_from(self.retention.saturating_sub(1)).unwrap_or(i64::MAX);
        let boundary: Option<(i64,)> =
            self.one(&mut tx, &s.audit_boundary, &[Param::Text(space), Param::Int(keep)], what).await?;
        if let Some((seq,)) = boundary {
            self.exec(&mut tx, &s.audit_trim, &[Param::Text(space), Param::Int(seq)], what).await?;
        }
        if let Some(notify) = &s.notify {
            // Delivered at the commit, and only if it commits.
            self.exec(&mut tx, notify, &[Param::Text(space)], what).await?;
        }
        tx.commit().await.map_err(self.sql.err(what))
    }

    /// Locks `space`'s row (serialising its writes) and the schedule's: its partition and
    /// revision and pause, or `None` when there is none (then the transaction is dropped:
    /// nothing written).
    async fn lock(
        &self,
        tx: &mut Tx<D>,
        space: &str,
        id: &str,
        what: &'static str,
    ) -> BackendResult<Option<(i64, i64, i64)>> {
        let s = self.statements;
        let space_row: Option<(i64,)> = self.one(tx, &s.space_lock, &[Param::Text(space)], what).await?;
        if space_row.is_none() {
            return Ok(None);
        }
        self.one(tx, &s.row_lock, &[Param::Text(space), Param::Text(id)], what).await
    }

    fn schedule(&self, row: Row) -> BackendResult<Schedule> {
        let (
            id,
            part,
            handler,
            spec,
            payload,
            policies,
            paused,
            pause_note,
            created_by,
            created_ms,
            updated_by,
            updated_ms,
            revision,
        ) = row;
        let bad =
            |what: String| BackendError::Protocol(format!("{}: {what} in simba_schedule", self.sql.description()));
        let mut s = Schedule::new(
            id.clone(),
            handler,
            serde_json::from_str(&spec).map_err(|e| bad(format!("an unreadable spec of `{id}` ({e})")))?,
        );
        s.payload = payload;
        s.policies =
            serde_json::from_str(&policies).map_err(|e| bad(format!("unreadable policies of `{id}` ({e})")))?;
        s.paused = paused != 0;
        s.pause_note = pause_note;
        s.partition = u32::try_from(part).map_err(|_| bad(format!("a partition out of range of `{id}`")))?;
        s.created_by = created_by;
        s.created_ms = created_ms;
        s.updated_by = updated_by;
        s.updated_ms = updated_ms;
        s.revision = self.sql.non_negative("revision", revision)?;
        Ok(s)
    }

    fn json<T: serde::Serialize>(&self, value: &T) -> BackendResult<String> {
        serde_json::to_string(value)
            .map_err(|e| BackendError::Protocol(format!("{}: cannot encode a schedule: {e}", self.sql.description())))
    }
}

impl<D: ScheduleDialect> ScheduleStore for SqlScheduleStore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> &'a str: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> i64: Encode<'a, D::Db> + Type<D::Db> + Decode<'a, D::Db>,
    for<'a> String: Type<D::Db> + Decode<'a, D::Db>,
    for<'a> Option<i64>: Type<D::Db> + Decode<'a, D::Db>,
    for<'a> Option<String>: Type<D::Db> + Decode<'a, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    async fn create(&self, space: &str, sch: &Schedule, partitions: u32, actor: &Actor<'_>) -> BackendResult<Created> {
        let what = "create a schedule";
        let s = self.statements;
        let (spec, policies) = (self.json(&sch.spec)?, self.json(&sch.policies)?);
        let mut tx = self.write(what).await?;
        let p = i64::from(partitions);
        self.exec(&mut tx, &s.space_ensure, &[Param::Text(space), Param::Int(p)], what).await?;
        let stored: Option<(i64,)> = self.one(&mut tx, &s.space_lock, &[Param::Text(space)], what).await?;
        if let Some((stored,)) = stored.filter(|(n,)| *n != p) {
            let stored = u32::try_from(stored).map_err(|_| {
                BackendError::Protocol(format!("{}: a partition count out of range: {stored}", self.sql.description()))
            })?;
            return Ok(Created::PartitionsDiffer { stored });
        }
        let part = i64::from(partition_of(&sch.id, partitions));
        let (has_note, note) = opt_text(sch.pause_note.as_deref());
        let row = [
            Param::Text(space),
            Param::Text(&sch.id),
            Param::Int(part),
            Param::Text(&sch.handler),
            Param::Text(&spec),
            Param::Text(&sch.payload),
            Param::Text(&policies),
            Param::Int(i64::from(sch.paused)),
            Param::Text(note),
            Param::Int(has_note),
            Param::Text(actor.who),
            Param::Int(actor.at_ms),
        ];
        let args = self.args(&s.insert, &row)?;
        match sqlx::query_with(s.insert.sql(), args).execute(&mut *tx).await {
            Ok(_) => {}
            Err(e) if e.as_database_error().is_some_and(|d| d.is_unique_violation()) => return Ok(Created::Exists),
            Err(e) => return Err(self.sql.err(what)(e)),
        }
        self.wrote(tx, space, part, &AuditRecord::new(actor, AuditAction::Create, &sch.id), what).await?;
        Ok(Created::Created)
    }

    async fn update(&self, space: &str, sch: &Schedule, actor: &Actor<'_>) -> BackendResult<Option<u64>> {
        let what = "update a schedule";
        let s = self.statements;
        let (spec, policies) = (self.json(&sch.spec)?, self.json(&sch.policies)?);
        let mut tx = self.write(what).await?;
        let Some((part, revision, _)) = self.lock(&mut tx, space, &sch.id, what).await? else { return Ok(None) };
        let params = [
            Param::Text(space),
            Param::Text(&sch.id),
            Param::Text(&sch.handler),
            Param::Text(&spec),
            Param::Text(&sch.payload),
            Param::Text(&policies),
            Param::Text(actor.who),
            Param::Int(actor.at_ms),
        ];
        self.exec(&mut tx, &s.update, &params, what).await?;
        self.wrote(tx, space, part, &AuditRecord::new(actor, AuditAction::Update, &sch.id), what).await?;
        Ok(Some(self.sql.non_negative("revision", revision)? + 1))
    }

    async fn delete(&self, space: &str, id: &str, actor: &Actor<'_>) -> BackendResult<bool> {
        let what = "delete a schedule";
        let mut tx = self.write(what).await?;
        let Some((part, ..)) = self.lock(&mut tx, space, id, what).await? else { return Ok(false) };
        self.exec(&mut tx, &self.statements.delete, &[Param::Text(space), Param::Text(id)], what).await?;
        self.wrote(tx, space, part, &AuditRecord::new(actor, AuditAction::Delete, id), what).await?;
        Ok(true)
    }

    async fn set_paused(&self, space: &str, id: &str, paused: bool, actor: &Actor<'_>) -> BackendResult<Option<bool>> {
        let what = if paused { "pause a schedule" } else { "resume a schedule" };
        let s = self.statements;
        let mut tx = self.write(what).await?;
        let Some((part, _, was)) = self.lock(&mut tx, space, id, what).await? else { return Ok(None) };
        let note = if paused { actor.note } else { None };
        let (has_note, note) = opt_text(note);
        let params = [
            Param::Text(space),
            Param::Text(id),
            Param::Int(i64::from(paused)),
            Param::Text(note),
            Param::Int(has_note),
            Param::Text(actor.who),
            Param::Int(actor.at_ms),
        ];
        self.exec(&mut tx, &s.set_paused, &params, what).await?;
        let action = if paused { AuditAction::Pause } else { AuditAction::Resume };
        self.wrote(tx, space, part, &AuditRecord::new(actor, action, id), what).await?;
        Ok(Some(was != 0))
    }

    async fn record(&self, space: &str, id: &str, action: AuditAction, actor: &Actor<'_>) -> BackendResult<bool> {
        let what = "record an action in the audit trail";
        let mut tx = self.write(what).await?;
        let Some((part, _, _)) = self.lock(&mut tx, space, id, what).await? else { return Ok(false) };
        self.wrote(tx, space, part, &AuditRecord::new(actor, action, id), what).await?;
        Ok(true)
    }

    async fn get(&self, space: &str, id: &str) -> BackendResult<Option<Schedule>> {
        self.ensure_schema().await?;
        let rows: Vec<Row> =
            self.sql.fetch_all(&self.statements.get, &[Param::Text(space), Param::Text(id)], "read a schedule").await?;
        rows.into_iter().next().map(|r| self.schedule(r)).transpose()
    }

    async fn list(&self, space: &str, q: &ListQuery) -> BackendResult<Vec<Schedule>> {
        self.ensure_schema().await?;
        let (has_handler, handler) = opt_text(q.handler.as_deref());
        let (has_prefix, prefix) = opt_text(q.prefix.as_deref());
        let end = prefix_end(prefix);
        let (has_after, after) = opt_text(q.after.as_deref());
        let params = [
            Param::Text(space),
            Param::Int(has_handler),
            Param::Text(handler),
            Param::Int(has_prefix),
            Param::Text(prefix),
            Param::Text(&end),
            Param::Int(has_after),
            Param::Text(after),
            Param::Int(i64::try_from(q.limit).unwrap_or(i64::MAX)),
            Param::Int(i64::from(q.partition.is_some())),
            Param::Int(i64::from(q.partition.unwrap_or(0))),
        ];
        let rows: Vec<Row> = self.sql.fetch_all(&self.statements.list, &params, "list schedules").await?;
        rows.into_iter().map(|r| self.schedule(r)).collect()
    }

    async fn partitions(&self, space: &str) -> BackendResult<Option<u32>> {
        self.ensure_schema().await?;
        let rows: Vec<(i64,)> =
            self.sql.fetch_all(&self.statements.space_read, &[Param::Text(space)], "read the partition count").await?;
        rows.into_iter()
            .next()
            .map(|(n,)| {
                u32::try_from(n).map_err(|_| {
                    BackendError::Protocol(format!("{}: a partition count out of range: {n}", self.sql.description()))
                })
            })
            .transpose()
    }

    async fn changes(&self, space: &str) -> BackendResult<Vec<(u32, u64)>> {
        self.ensure_schema().await?;
        let rows: Vec<(i64, i64)> =
            self.sql.fetch_all(&self.statements.changes, &[Param::Text(space)], "read the change counters").await?;
        rows.into_iter()
            .map(|(p, c)| {
                let p = u32::try_from(p).map_err(|_| {
                    BackendError::Protocol(format!("{}: a partition out of range: {p}", self.sql.description()))
                })?;
                Ok((p, self.sql.non_negative("change counter", c)?))
            })
            .collect()
    }

    async fn audit(&self, space: &str, target: Option<&str>, limit: usize) -> BackendResult<Vec<AuditRecord>> {
        self.ensure_schema().await?;
        let (has_target, target) = opt_text(target);
        let params = [
            Param::Text(space),
            Param::Int(has_target),
            Param::Text(target),
            Param::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
        ];
        let rows: Vec<(i64, String, String, String, Option<String>)> =
            self.sql.fetch_all(&self.statements.audit, &params, "read the audit trail").await?;
        rows.into_iter()
            .map(|(at_ms, who, action, target, note)| {
                let action = AuditAction::parse(&action).ok_or_else(|| {
                    BackendError::Protocol(format!("{}: unknown audit action `{action}`", self.sql.description()))
                })?;
                let actor = Actor { who: &who, at_ms, note: note.as_deref() };
                Ok(AuditRecord::new(&actor, action, target))
            })
            .collect()
    }

    fn audit_retention(&self) -> usize {
        self.retention
    }

    fn keeping_audit(&self, records: usize) -> SharedScheduleStore {
        SharedScheduleStore::new(SqlScheduleStore { retention: records.max(1), ..self.clone() })
    }

    fn describe(&self) -> String {
        self.sql.description().to_string()
    }

    fn subscribe_changes(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.changes.as_ref().map(tokio::sync::broadcast::Sender::subscribe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `~` sorts after every character of the id alphabet, so the prefix range holds exactly
    /// the ids with the prefix.
    #[test]
    fn prefix_range_holds_exactly_the_prefixed_ids() {
        let alphabet: Vec<char> = ('0'..='9').chain('A'..='Z').chain('a'..='z').chain(['.', '_', ':', '-']).collect();
        assert!(alphabet.iter().all(|c| *c < '~'));
        let end = prefix_end("a.");
        for id in ["a.", "a.1", "a.zz", "a.-"] {
            assert!(id >= "a." && id < end.as_str(), "{id}");
        }
        for id in ["a", "a-", "a/", "a_", "b", "a:"] {
            assert!(!(id >= "a." && id < end.as_str()), "{id}");
        }
    }
}
