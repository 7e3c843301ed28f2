//! The jobs store of the SQL backends (issue 12, ADR 0012): run history, the slot ledger and
//! job control in three more tables beside the lease tables, on SQLite, PostgreSQL and
//! MySQL/MariaDB alike.
//!
//! | table | key | what |
//! | --- | --- | --- |
//! | `simba_job` | `job` | one row per job name: `paused`, `last_slot` (the slot ledger), run-now requests (`trigger_id`, `trigger_ms`, `taken_id`, `group_taken_id`) |
//! | `simba_job_run` | `(job, kind, slot_ms)` | one record per slot; at most `retention` per job |
//! | `simba_job_version` | `id = 1` | the control version, bumped by every pause, resume, trigger and taken trigger |
//!
//! The tables are created on the first call of the store, idempotently (`IF NOT EXISTS`), so
//! a database written by an older build (lease tables only) gains them and nothing else
//! changes; no row is ever deleted but records past retention.
//!
//! The claim is the lease's fenced claim: its first statement matches the lease row only
//! for the live holder with the caller's token (and locks it, so claims of one job are
//! serialised), then the slot is checked against both the job's ledger and the lease's
//! `last_slot` (what [`claim_slot`](crate::backend::Backend::claim_slot) writes, so a node of
//! an older build and one of this build never run one slot twice during a rolling deploy),
//! and the ledger, the lease and the `running` record are written, all in one transaction.
//! Run-now requests are counters: `trigger` bumps `trigger_id`, a claim copies the id it took
//! into `taken_id` (or, for partition `g/i` taking a request of group `g`, into
//! `group_taken_id`), so a request made during a claim is never lost.

use std::marker::PhantomData;

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};
use tokio::sync::OnceCell;

use super::SqlStore;
use super::dialect::{Dialect, Param, Stmt};
use crate::backend::job_store::{
    BoxFuture, Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, Outcome, RunRecord, SlotKind, group_of,
    truncate_error,
};
use crate::backend::{BackendError, BackendResult, SessionId};

/// What a dialect writes its own way for the jobs store.
pub(crate) trait JobDialect: Dialect {
    /// The tables, idempotent.
    const JOB_SCHEMA: &'static [&'static str];
    /// The end of an `INSERT` that leaves an existing row alone.
    const KEEP_ROW: &'static str;
    /// What a `SELECT` of control rows ends with to lock them for the transaction.
    const LOCK_ROWS: &'static str = " FOR UPDATE";
    /// Whether the schema is created under PostgreSQL's advisory lock.
    const ADVISORY_LOCK: Option<&'static str> = None;
    /// The first statement of a claim or control transaction: the server ends a transaction
    /// whose client stalls inside it (a node stopped, or its link black-holed, between two
    /// statements), so the rows it locked do not block the next holder's claims for as long as
    /// the stall lasts (the fault suite's LinkBlackHole on PostgreSQL: no run for over 10 s).
    /// `(statement, optional)`: an optional one may fail (a server without the setting).
    const STALL_GUARD: Option<(&'static str, bool)> = None;

    /// The jobs store's statements rendered for this dialect, once.
    fn job_statements() -> &'static JobStatements;
}

/// Implements [`JobDialect::job_statements`] with a static of its own.
macro_rules! job_statements {
    ($dialect:ty) => {
        fn job_statements() -> &'static JobStatements {
            static STATEMENTS: std::sync::LazyLock<JobStatements> =
                std::sync::LazyLock::new(JobStatements::new::<$dialect>);
            &STATEMENTS
        }
    };
}

#[cfg(feature = "sqlite")]
impl JobDialect for super::sqlite::SqliteDialect {
    const JOB_SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE IF NOT EXISTS simba_job (
            job            TEXT    PRIMARY KEY,
            paused         INTEGER NOT NULL,
            last_slot      INTEGER NULL,
            trigger_id     INTEGER NOT NULL,
            trigger_ms     INTEGER NULL,
            taken_id       INTEGER NOT NULL,
            group_taken_id INTEGER NOT NULL
        )",
        "CREATE TABLE IF NOT EXISTS simba_job_run (
            job        TEXT    NOT NULL,
            kind       INTEGER NOT NULL,
            slot_ms    INTEGER NOT NULL,
            outcome    TEXT    NOT NULL,
            attempt    INTEGER NOT NULL,
            attempts   INTEGER NOT NULL,
            session_id TEXT    NOT NULL,
            node       TEXT    NOT NULL,
            token      INTEGER NOT NULL,
            started_ms INTEGER NULL,
            ended_ms   INTEGER NULL,
            error      TEXT    NULL,
            PRIMARY KEY (job, kind, slot_ms)
        )",
        "CREATE INDEX IF NOT EXISTS simba_job_run_time ON simba_job_run (job, slot_ms)",
        "CREATE TABLE IF NOT EXISTS simba_job_version (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)",
        "INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        "CREATE TABLE IF NOT EXISTS simba_registry (
            session_id   TEXT    PRIMARY KEY,
            body         TEXT    NOT NULL,
            published_ms INTEGER NOT NULL
        )",
    ];
    const KEEP_ROW: &'static str = "ON CONFLICT DO NOTHING";
    /// `BEGIN IMMEDIATE` already holds the database's write lock.
    const LOCK_ROWS: &'static str = "";
    job_statements!(super::sqlite::SqliteDialect);
}

#[cfg(feature = "postgres")]
impl JobDialect for super::postgres::PgDialect {
    const JOB_SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE IF NOT EXISTS simba_job (
            job            TEXT COLLATE \"C\" PRIMARY KEY,
            paused         BIGINT NOT NULL,
            last_slot      BIGINT NULL,
            trigger_id     BIGINT NOT NULL,
            trigger_ms     BIGINT NULL,
            taken_id       BIGINT NOT NULL,
            group_taken_id BIGINT NOT NULL
        )",
        "CREATE TABLE IF NOT EXISTS simba_job_run (
            job        TEXT COLLATE \"C\" NOT NULL,
            kind       BIGINT NOT NULL,
            slot_ms    BIGINT NOT NULL,
            outcome    TEXT NOT NULL,
            attempt    BIGINT NOT NULL,
            attempts   BIGINT NOT NULL,
            session_id TEXT NOT NULL,
            node       TEXT NOT NULL,
            token      BIGINT NOT NULL,
            started_ms BIGINT NULL,
            ended_ms   BIGINT NULL,
            error      TEXT NULL,
            PRIMARY KEY (job, kind, slot_ms)
        )",
        "CREATE INDEX IF NOT EXISTS simba_job_run_time ON simba_job_run (job, slot_ms)",
        "CREATE TABLE IF NOT EXISTS simba_job_version (id BIGINT PRIMARY KEY, version BIGINT NOT NULL)",
        "INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        "CREATE TABLE IF NOT EXISTS simba_registry (
            session_id   TEXT COLLATE \"C\" PRIMARY KEY,
            body         TEXT NOT NULL,
            published_ms BIGINT NOT NULL
        )",
    ];
    const KEEP_ROW: &'static str = "ON CONFLICT DO NOTHING";
    const ADVISORY_LOCK: Option<&'static str> = Some("SELECT pg_advisory_xact_lock(7305521853129551362)");
    const STALL_GUARD: Option<(&'static str, bool)> =
        Some(("SET LOCAL idle_in_transaction_session_timeout = '500ms'", false));
    job_statements!(super::postgres::PgDialect);
}

#[cfg(feature = "mysql")]
impl JobDialect for super::mysql::MySqlDialect {
    const JOB_SCHEMA: &'static [&'static str] = &[
        "CREATE TABLE IF NOT EXISTS simba_job (
            job            VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
            paused         BIGINT NOT NULL,
            last_slot      BIGINT NULL,
            trigger_id     BIGINT NOT NULL,
            trigger_ms     BIGINT NULL,
            taken_id       BIGINT NOT NULL,
            group_taken_id BIGINT NOT NULL
        ) ENGINE = InnoDB",
        "CREATE TABLE IF NOT EXISTS simba_job_run (
            job        VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
            kind       BIGINT NOT NULL,
            slot_ms    BIGINT NOT NULL,
            outcome    VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
            attempt    BIGINT NOT NULL,
            attempts   BIGINT NOT NULL,
            session_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
            node       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
            token      BIGINT NOT NULL,
            started_ms BIGINT NULL,
            ended_ms   BIGINT NULL,
            error      TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
            PRIMARY KEY (job, kind, slot_ms),
            KEY simba_job_run_time (job, slot_ms)
        ) ENGINE = InnoDB",
        "CREATE TABLE IF NOT EXISTS simba_job_version (id BIGINT NOT NULL PRIMARY KEY, version BIGINT NOT NULL) \
         ENGINE = InnoDB",
        "INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON DUPLICATE KEY UPDATE id = id",
        "CREATE TABLE IF NOT EXISTS simba_registry (
            session_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
            body         MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
            published_ms BIGINT NOT NULL
        ) ENGINE = InnoDB",
    ];
    const KEEP_ROW: &'static str = "ON DUPLICATE KEY UPDATE job = job";
    /// MariaDB's setting, in whole seconds (MySQL has none: the statement fails there and the
    /// transaction goes on unguarded).
    const STALL_GUARD: Option<(&'static str, bool)> = Some(("SET SESSION idle_transaction_timeout = 1", true));
    job_statements!(super::mysql::MySqlDialect);
}

/// The columns of a record, in the order every statement reads and writes them.
const RECORD_COLUMNS: &str =
    "job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token, started_ms, ended_ms, error";

/// A record as read: the columns of [`RECORD_COLUMNS`].
type RecordRow = (String, i64, i64, String, i64, i64, String, String, i64, Option<i64>, Option<i64>, Option<String>);

/// A control row as read: `job, paused, last_slot, trigger_id, trigger_ms, taken_id,
/// group_taken_id`, then the lease's `last_slot` (claims only; NULL elsewhere).
type ControlRow = (String, i64, Option<i64>, i64, Option<i64>, i64, i64);

/// The jobs store's statements rendered for one dialect.
pub(crate) struct JobStatements {
    /// `:1` lease, `:2` session, `:3` token: matches (and locks) the lease row only for its
    /// live holder with that token.
    fence: Stmt,
    /// `:1` job: a control row with no pause and no request, unless one exists.
    ensure_job: Stmt,
    /// `:1` job, `:2` its group (or the job again): both control rows, locked.
    read_control: Stmt,
    /// `:1` lease: its holder, token and `last_slot`, read without a lock.
    lease_slot: Stmt,
    /// `:1` job, `:2` slot: the ledger moves forward.
    set_job_slot: Stmt,
    /// `:1` lease, `:2` session, `:3` token, `:4` slot: the fence of a scheduled slot, which
    /// moves the lease's `last_slot` too (what `claim_slot` writes).
    set_lease_slot: Stmt,
    /// `:1` job, `:2` own request id taken, `:3` group request id taken.
    take_trigger: Stmt,
    /// Bumps the control version.
    bump_version: Stmt,
    /// The control version.
    version: Stmt,
    /// `:1` job, `:2` kind, `:3` slot.
    delete_record: Stmt,
    /// The 12 record columns as `:1`..`:12`, the three optional ones as `CASE WHEN :13/14/15 = 1`.
    insert_record: Stmt,
    /// The same columns; `:16` the claiming token. Overwrites the record of that identity
    /// claimed with that token.
    finish_record: Stmt,
    /// `:1` job, `:2` records kept: drops the older ones.
    retain: Stmt,
    /// `:1` job, `:2` limit.
    history: Stmt,
    /// `:1` job: its control row.
    job_row: Stmt,
    /// Every control row.
    job_rows: Stmt,
    /// `:1` job: its newest record.
    last_record: Stmt,
    /// The newest record of every job.
    last_records: Stmt,
    /// `:1` job, `:2` paused (0 or 1).
    set_paused: Stmt,
    /// `:1` job, `:2` the request's time.
    trigger: Stmt,
    /// `:1` session: drops its registry and those of sessions no longer live.
    registry_drop: Stmt,
    /// `:1` session, `:2` registry: written only while the session is live.
    registry_write: Stmt,
    /// The registries of live sessions, by session id.
    registry_read: Stmt,
}

impl JobStatements {
    fn new<D: JobDialect>() -> Self {
        let r = |t: &str| D::render(t);
        let optional = "CASE WHEN :13 = 1 THEN :10 END, CASE WHEN :14 = 1 THEN :11 END, CASE WHEN :15 = 1 THEN :12 END";
        let order = "ORDER BY slot_ms DESC, kind DESC";
        JobStatements {
            fence: r("UPDATE simba_lease SET token = token WHERE name = :1 AND session_id = :2 AND token = :3 \
                 AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})"),
            ensure_job: r(&format!(
                "INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id) \
                 VALUES (:1, 0, NULL, 0, NULL, 0, 0) {}",
                D::KEEP_ROW
            )),
            read_control: r(&format!(
                "SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id FROM simba_job \
                 WHERE job = :1 OR job = :2{}",
                D::LOCK_ROWS
            )),
            lease_slot: r("SELECT session_id, token, last_slot FROM simba_lease WHERE name = :1"),
            set_job_slot: r("UPDATE simba_job SET last_slot = :2 WHERE job = :1"),
            set_lease_slot: r(
                "UPDATE simba_lease SET last_slot = :4 WHERE name = :1 AND session_id = :2 AND token = :3 \
                 AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})",
            ),
            take_trigger: r("UPDATE simba_job SET taken_id = :2, group_taken_id = :3 WHERE job = :1"),
            bump_version: r("UPDATE simba_job_version SET version = version + 1 WHERE id = 1"),
            version: r("SELECT version FROM simba_job_version WHERE id = 1"),
            delete_record: r("DELETE FROM simba_job_run WHERE job = :1 AND kind = :2 AND slot_ms = :3"),
            insert_record: r(&format!(
                "INSERT INTO simba_job_run ({RECORD_COLUMNS}) VALUES (:1, :2, :3, :4, :5, :6, :7, :8, :9, {optional})"
            )),
            finish_record: r(
                "UPDATE simba_job_run SET outcome = :4, attempt = :5, attempts = :6, session_id = :7, node = :8, \
                 token = :9, started_ms = CASE WHEN :13 = 1 THEN :10 END, ended_ms = CASE WHEN :14 = 1 THEN :11 END, \
                 error = CASE WHEN :15 = 1 THEN :12 END WHERE job = :1 AND kind = :2 AND slot_ms = :3 AND token = :16",
            ),
            // The boundary is read from a derived table (materialised: it has a LIMIT), which
            // MySQL needs to read the table a DELETE writes.
            retain: r(&format!(
                "DELETE FROM simba_job_run WHERE job = :1 AND EXISTS (SELECT 1 FROM \
                 (SELECT slot_ms AS b_slot, kind AS b_kind FROM simba_job_run WHERE job = :1 {order} \
                 LIMIT 1 OFFSET :2) boundary WHERE simba_job_run.slot_ms < boundary.b_slot \
                 OR (simba_job_run.slot_ms = boundary.b_slot AND simba_job_run.kind < boundary.b_kind))"
            )),
            history: r(&format!("SELECT {RECORD_COLUMNS} FROM simba_job_run WHERE job = :1 {order} LIMIT :2")),
            job_row: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job WHERE job = :1"),
            job_rows: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job ORDER BY job"),
            last_record: r(&format!("SELECT {RECORD_COLUMNS} FROM simba_job_run WHERE job = :1 {order} LIMIT 1")),
            last_records: r(&format!(
                "SELECT {RECORD_COLUMNS} FROM simba_job_run r WHERE NOT EXISTS (SELECT 1 FROM simba_job_run n \
                 WHERE n.job = r.job AND (n.slot_ms > r.slot_ms OR (n.slot_ms = r.slot_ms AND n.kind > r.kind)))"
            )),
            set_paused: r("UPDATE simba_job SET paused = :2 WHERE job = :1"),
            // `trigger_ms` first: MySQL evaluates assignments left to right, on the new values.
            // job_store::trigger_slot: pending requests collapse at the newest time; after a
            // taken one, the next slot is later than it.
            trigger: r("UPDATE simba_job SET trigger_ms = CASE \
                 WHEN trigger_ms IS NULL THEN :2 \
                 WHEN trigger_id > taken_id THEN CASE WHEN trigger_ms > :2 THEN trigger_ms ELSE :2 END \
                 WHEN trigger_ms >= :2 THEN trigger_ms + 1 \
                 ELSE :2 END, \
                 trigger_id = trigger_id + 1 WHERE job = :1"),
            registry_drop: r("DELETE FROM simba_registry WHERE session_id = :1 OR NOT EXISTS \
                 (SELECT 1 FROM simba_session s WHERE s.id = simba_registry.session_id AND s.expires_at > {now})"),
            registry_write: r("INSERT INTO simba_registry (session_id, body, published_ms) \
                 SELECT id, :2, {now} FROM simba_session WHERE id = :1 AND expires_at > {now}"),
            registry_read: r("SELECT r.session_id, r.body FROM simba_registry r \
                 JOIN simba_session s ON s.id = r.session_id WHERE s.expires_at > {now} ORDER BY r.session_id"),
        }
    }
}

/// The kind as stored: its rank, so that the store orders records as [`SlotKind`]'s `Ord`.
fn kind_code(kind: SlotKind) -> i64 {
    match kind {
        SlotKind::Scheduled => 0,
        SlotKind::Manual => 1,
        SlotKind::CaughtUp => 2,
    }
}

fn kind_of(code: i64) -> Option<SlotKind> {
    match code {
        0 => Some(SlotKind::Scheduled),
        1 => Some(SlotKind::Manual),
        2 => Some(SlotKind::CaughtUp),
        _ => None,
    }
}

/// An optional value as two parameters: the flag (1 when present) and the value.
fn opt_int(v: Option<i64>) -> (i64, i64) {
    (i64::from(v.is_some()), v.unwrap_or(0))
}

/// The jobs store of one SQL database. Cheap to clone.
pub(crate) struct SqlJobStore<D: JobDialect> {
    sql: SqlStore<D>,
    retention: usize,
    schema: std::sync::Arc<OnceCell<()>>,
    statements: &'static JobStatements,
    dialect: PhantomData<D>,
}

impl<D: JobDialect> SqlJobStore<D> {
    /// A store on `sql`'s pool keeping the default number of records per job.
    pub(crate) fn new(sql: SqlStore<D>) -> Self {
        Self::with_retention(sql, DEFAULT_RETENTION)
    }

    /// A store on `sql`'s pool keeping `retention` records per job (at least one).
    pub(crate) fn with_retention(sql: SqlStore<D>, retention: usize) -> Self {
        SqlJobStore {
            sql,
            retention: retention.max(1),
            schema: std::sync::Arc::default(),
            statements: D::job_statements(),
            dialect: PhantomData,
        }
    }
}

/// The parameters of a record for [`JobStatements::insert_record`] and `finish_record`.
struct RecordParams<'a> {
    r: &'a RunRecord,
    started: (i64, i64),
    ended: (i64, i64),
    error: Option<String>,
    token: i64,
}

impl<'a> RecordParams<'a> {
    fn new(r: &'a RunRecord) -> Self {
        RecordParams {
            r,
            started: opt_int(r.started_ms),
            ended: opt_int(r.ended_ms),
            error: r.error.as_deref().map(truncate_error),
            token: i64::try_from(r.token).unwrap_or(i64::MAX),
        }
    }

    fn params(&self) -> [Param<'_>; 16] {
        let r = self.r;
        [
            Param::Text(&r.job),
            Param::Int(kind_code(r.kind)),
            Param::Int(r.slot_ms),
            Param::Text(r.outcome.as_str()),
            Param::Int(i64::from(r.attempt)),
            Param::Int(i64::from(r.attempts)),
            Param::Text(&r.session),
            Param::Text(&r.node),
            Param::Int(self.token),
            Param::Int(self.started.1),
            Param::Int(self.ended.1),
            Param::Text(self.error.as_deref().unwrap_or("")),
            Param::Int(self.started.0),
            Param::Int(self.ended.0),
            Param::Int(i64::from(self.error.is_some())),
            Param::Int(self.token),
        ]
    }
}

impl<D: JobDialect> SqlJobStore<D>
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

    /// Creates the tables on the first call (every statement idempotent; in one transaction,
    /// under an advisory lock on PostgreSQL, where concurrent `CREATE ... IF NOT EXISTS` of
    /// one table can fail).
    /// Starts a transaction the dialect's way (`BEGIN IMMEDIATE` on SQLite); with `guarded`,
    /// under the dialect's stall guard, so that a node stalled inside it cannot hold its row
    /// locks for long (claims and control changes).
    async fn begin(&self, what: &'static str, guarded: bool) -> BackendResult<sqlx::Transaction<'static, D::Db>> {
        let mut tx = match D::BEGIN {
            Some(begin) => self.sql.pool().begin_with(begin).await,
            None => self.sql.pool().begin().await,
        }
        .map_err(self.sql.err(what))?;
        if let Some((guard, optional)) = D::STALL_GUARD.filter(|_| guarded) {
            let set = sqlx::raw_sql(guard).execute(&mut *tx).await;
            if !optional {
                set.map_err(self.sql.err(what))?;
            }
        }
        Ok(tx)
    }

    async fn ensure_schema(&self) -> BackendResult<()> {
        self.schema
            .get_or_try_init(|| async {
                let what = "create the jobs tables";
                let mut tx = self.begin(what, false).await?;
                if let Some(lock) = D::ADVISORY_LOCK {
                    sqlx::raw_sql(lock).execute(&mut *tx).await.map_err(self.sql.err(what))?;
                }
                for statement in D::JOB_SCHEMA {
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
            let script: Vec<String> = D::JOB_SCHEMA.iter().map(|s| format!("{s};")).collect();
            return BackendError::Misconfigured(format!(
                "{}: cannot create the jobs tables ({e}); run this once as an administrator, then grant SELECT, \
                 INSERT, UPDATE, DELETE on them:\n{}",
                self.sql.description(),
                script.join("\n")
            ));
        }
        BackendError::unavailable(format!("{}: create the jobs tables failed", self.sql.description()), e)
    }

    fn record(&self, row: RecordRow) -> BackendResult<RunRecord> {
        let (job, kind, slot_ms, outcome, attempt, attempts, session, node, token, started_ms, ended_ms, error) = row;
        let bad = |what: &str| BackendError::Protocol(format!("{}: {what} in simba_job_run", self.sql.description()));
        Ok(RunRecord {
            kind: kind_of(kind).ok_or_else(|| bad(&format!("unknown slot kind {kind} of job `{job}`")))?,
            outcome: outcome.parse::<Outcome>().map_err(|e| bad(&e))?,
            attempt: u32::try_from(attempt).map_err(|_| bad("an attempt out of range"))?,
            attempts: u32::try_from(attempts).map_err(|_| bad("an attempt count out of range"))?,
            token: self.sql.non_negative("token", token)?,
            job,
            slot_ms,
            session,
            node,
            started_ms,
            ended_ms,
            error,
        })
    }

    fn state(&self, row: ControlRow, last: Option<RunRecord>) -> JobState {
        let (job, paused, last_slot, trigger_id, trigger_ms, taken_id, _) = row;
        JobState {
            job,
            paused: paused != 0,
            last_slot_ms: last_slot,
            last,
            trigger_pending_ms: if trigger_id > taken_id { trigger_ms } else { None },
        }
    }

    /// A claim's first look at the lease row, without a lock: `None` unless `req.session`
    /// holds `req.lease` with `token`; otherwise the lease's last claimed slot.
    async fn lease_look(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        req: &ClaimRequest<'_>,
        token: i64,
        what: &'static str,
    ) -> BackendResult<Option<Option<i64>>> {
        let s = self.statements;
        let args = self.args(&s.lease_slot, &[Param::Text(req.lease)])?;
        let row: Option<(Option<String>, Option<i64>, Option<i64>)> = sqlx::query_as_with(s.lease_slot.sql(), args)
            .fetch_optional(&mut **tx)
            .await
            .map_err(self.sql.err(what))?;
        Ok(row
            .filter(|(holder, holder_token, _)| {
                holder.as_deref() == Some(req.session.as_str()) && *holder_token == Some(token)
            })
            .map(|(_, _, slot)| slot))
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        self.ensure_schema().await?;
        let s = self.statements;
        let Ok(token) = i64::try_from(req.token) else { return Ok(Claim::NotHolder) };
        let what = "claim a job run";
        let group = group_of(req.job).unwrap_or(req.job);
        let mut tx = self.begin(what, true).await?;
        macro_rules! exec {
            ($stmt:expr, $params:expr) => {{
                let args = self.args(&$stmt, &$params)?;
                let done = sqlx::query_with($stmt.sql(), args).execute(&mut *tx).await.map_err(self.sql.err(what))?;
                D::rows_affected(&done)
            }};
        }
        // The lease row is locked only by the claim's last statement, the fence, just before the
        // commit: a node stalled inside a claim (stopped, or its link black-holed) must not hold
        // the row that candidates lock to take the lease over (the fault suite found takeovers
        // on MariaDB waiting for a paused node's claim). A look without a lock first answers a
        // caller that does not hold the term before anything is written; the fence decides.
        let Some(lease_slot) = self.lease_look(&mut tx, &req, token, what).await? else { return Ok(Claim::NotHolder) };
        let fence = [Param::Text(req.lease), Param::Text(req.session.as_str()), Param::Int(token)];
        let fence_slot =
            [Param::Text(req.lease), Param::Text(req.session.as_str()), Param::Int(token), Param::Int(req.slot_ms)];
        exec!(s.ensure_job, [Param::Text(req.job)]);
        let rows: Vec<ControlRow> = {
            let args = self.args(&s.read_control, &[Param::Text(req.job), Param::Text(group)])?;
            sqlx::query_as_with(s.read_control.sql(), args).fetch_all(&mut *tx).await.map_err(self.sql.err(what))?
        };
        let own = rows.iter().find(|r| r.0 == req.job);
        let grp = rows.iter().find(|r| r.0 == group && group != req.job);
        let paused = own.is_some_and(|r| r.1 != 0) || grp.is_some_and(|r| r.1 != 0);
        let slot_ms = match req.kind {
            SlotKind::Scheduled | SlotKind::CaughtUp => {
                let last = own.and_then(|r| r.2).max(lease_slot);
                if last.is_some_and(|l| l >= req.slot_ms) {
                    return Ok(Claim::AlreadyClaimed);
                }
                exec!(s.set_job_slot, [Param::Text(req.job), Param::Int(req.slot_ms)]);
                if paused {
                    if exec!(s.set_lease_slot, fence_slot) == 0 {
                        return Ok(Claim::NotHolder);
                    }
                    tx.commit().await.map_err(self.sql.err(what))?;
                    return Ok(Claim::Paused);
                }
                req.slot_ms
            }
            SlotKind::Manual => {
                let (own_id, own_ms, taken, group_taken) = own.map_or((0, None, 0, 0), |r| (r.3, r.4, r.5, r.6));
                let own_pending = (own_id > taken).then_some(own_ms).flatten();
                let group_pending = grp.and_then(|g| (g.3 > group_taken).then_some(g.4).flatten());
                let Some(at) = own_pending.max(group_pending) else { return Ok(Claim::AlreadyClaimed) };
                if paused {
                    return Ok(Claim::Paused);
                }
                let group_id = grp.map_or(group_taken, |g| g.3);
                exec!(s.take_trigger, [Param::Text(req.job), Param::Int(own_id), Param::Int(group_id)]);
                exec!(s.bump_version, []);
                at
            }
        };
        let record = req.running_record(slot_ms);
        let p = RecordParams::new(&record);
        let params = p.params();
        exec!(s.delete_record, [params[0], params[1], params[2]]);
        exec!(s.insert_record, params);
        exec!(s.retain, [Param::Text(req.job), Param::Int(self.keep())]);
        let fenced = match req.kind {
            SlotKind::Scheduled | SlotKind::CaughtUp => exec!(s.set_lease_slot, fence_slot),
            SlotKind::Manual => exec!(s.fence, fence),
        };
        if fenced == 0 {
            return Ok(Claim::NotHolder);
        }
        tx.commit().await.map_err(self.sql.err(what))?;
        Ok(Claim::Claimed(record))
    }

    /// The `OFFSET` of the oldest record kept.
    fn keep(&self) -> i64 {
        i64::try_from(self.retention - 1).unwrap_or(i64::MAX)
    }

    async fn finish(&self, record: &RunRecord) -> BackendResult<bool> {
        self.ensure_schema().await?;
        let p = RecordParams::new(record);
        let done = self.sql.execute(&self.statements.finish_record, &p.params(), "record how a run ended").await?;
        self.sql
            .execute(&self.statements.retain, &[Param::Text(&record.job), Param::Int(self.keep())], "drop old runs")
            .await?;
        Ok(done == 1)
    }

    async fn append_record(&self, record: &RunRecord) -> BackendResult<bool> {
        self.ensure_schema().await?;
        let p = RecordParams::new(record);
        let args = self.args(&self.statements.insert_record, &p.params())?;
        let inserted = match sqlx::query_with(self.statements.insert_record.sql(), args).execute(self.sql.pool()).await
        {
            Ok(_) => true,
            Err(e) if e.as_database_error().is_some_and(|d| d.is_unique_violation()) => false,
            Err(e) => return Err(self.sql.err("record a slot")(e)),
        };
        if inserted {
            self.sql
                .execute(&self.statements.retain, &[Param::Text(&record.job), Param::Int(self.keep())], "drop old runs")
                .await?;
        }
        Ok(inserted)
    }

    async fn history_of(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        self.ensure_schema().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<RecordRow> = self
            .sql
            .fetch_all(&self.statements.history, &[Param::Text(job), Param::Int(limit)], "read a job's history")
            .await?;
        rows.into_iter().map(|r| self.record(r)).collect()
    }

    async fn job_state(&self, job: &str) -> BackendResult<Option<JobState>> {
        self.ensure_schema().await?;
        let rows: Vec<ControlRow> =
            self.sql.fetch_all(&self.statements.job_row, &[Param::Text(job)], "read a job").await?;
        let last: Vec<RecordRow> =
            self.sql.fetch_all(&self.statements.last_record, &[Param::Text(job)], "read a job").await?;
        let last = last.into_iter().next().map(|r| self.record(r)).transpose()?;
        Ok(match rows.into_iter().next() {
            Some(row) => Some(self.state(row, last)),
            None => last.map(|l| JobState { job: job.to_owned(), last: Some(l), ..JobState::default() }),
        })
    }

    async fn all_jobs(&self) -> BackendResult<Vec<JobState>> {
        self.ensure_schema().await?;
        let rows: Vec<ControlRow> = self.sql.fetch_all(&self.statements.job_rows, &[], "list jobs").await?;
        let lasts: Vec<RecordRow> = self.sql.fetch_all(&self.statements.last_records, &[], "list jobs").await?;
        let mut lasts: std::collections::BTreeMap<String, RunRecord> =
            lasts.into_iter().map(|r| self.record(r).map(|r| (r.job.clone(), r))).collect::<BackendResult<_>>()?;
        let mut states: Vec<JobState> = rows
            .into_iter()
            .map(|row| {
                let last = lasts.remove(&row.0);
                self.state(row, last)
            })
            .collect();
        states.extend(lasts.into_values().map(|l| JobState {
            job: l.job.clone(),
            last: Some(l),
            ..JobState::default()
        }));
        states.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(states)
    }

    async fn control<T>(
        &self,
        job: &str,
        what: &'static str,
        change: impl FnOnce(&ControlRow) -> (Option<(&'static Stmt, i64)>, T),
    ) -> BackendResult<T> {
        self.ensure_schema().await?;
        let s = self.statements;
        let mut tx = self.begin(what, true).await?;
        let args = self.args(&s.ensure_job, &[Param::Text(job)])?;
        sqlx::query_with(s.ensure_job.sql(), args).execute(&mut *tx).await.map_err(self.sql.err(what))?;
        let args = self.args(&s.read_control, &[Param::Text(job), Param::Text(job)])?;
        let row: ControlRow =
            sqlx::query_as_with(s.read_control.sql(), args).fetch_one(&mut *tx).await.map_err(self.sql.err(what))?;
        let (write, answer) = change(&row);
        if let Some((stmt, value)) = write {
            let args = self.args(stmt, &[Param::Text(job), Param::Int(value)])?;
            sqlx::query_with(stmt.sql(), args).execute(&mut *tx).await.map_err(self.sql.err(what))?;
            let args = self.args(&s.bump_version, &[])?;
            sqlx::query_with(s.bump_version.sql(), args).execute(&mut *tx).await.map_err(self.sql.err(what))?;
        }
        tx.commit().await.map_err(self.sql.err(what))?;
        Ok(answer)
    }

    async fn pause(&self, job: &str, paused: bool) -> BackendResult<bool> {
        let s = self.statements;
        self.control(job, "pause or resume a job", |row| {
            let was = row.1 != 0;
            ((was != paused).then_some((&s.set_paused, i64::from(paused))), was)
        })
        .await
    }

    async fn request(&self, job: &str, at_ms: i64) -> BackendResult<u64> {
        let s = self.statements;
        let id = self.control(job, "trigger a job", |row| (Some((&s.trigger, at_ms)), row.3 + 1)).await?;
        self.sql.non_negative("trigger id", id)
    }

    /// [`JobStore::publish_registry`]: two statements, no transaction (no lock is held between
    /// them): the first drops this session's entry and every entry of a session no longer
    /// live, the second writes this one only if the session is live.
    async fn publish(&self, session: &str, registry: &str) -> BackendResult<bool> {
        self.ensure_schema().await?;
        let s = self.statements;
        self.sql.execute(&s.registry_drop, &[Param::Text(session)], "publish the job registry").await?;
        let written = self
            .sql
            .execute(&s.registry_write, &[Param::Text(session), Param::Text(registry)], "publish the job registry")
            .await?;
        Ok(written == 1)
    }

    /// [`JobStore::registries`]: the entries of live sessions.
    async fn read_registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        self.ensure_schema().await?;
        let rows: Vec<(String, String)> =
            self.sql.fetch_all(&self.statements.registry_read, &[], "read the job registries").await?;
        Ok(rows.into_iter().map(|(s, r)| (SessionId::new(s), r)).collect())
    }

    async fn version(&self) -> BackendResult<u64> {
        self.ensure_schema().await?;
        let (v,): (i64,) = self.sql.fetch_one(&self.statements.version, &[], "read the control version").await?;
        self.sql.non_negative("control version", v)
    }
}

impl<D: JobDialect> JobStore for SqlJobStore<D>
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
    fn claim_run<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, BackendResult<Claim>> {
        Box::pin(self.claim(req))
    }
    fn finish_run<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(self.finish(record))
    }
    fn append<'a>(&'a self, record: &'a RunRecord) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(self.append_record(record))
    }
    fn history<'a>(&'a self, job: &'a str, limit: usize) -> BoxFuture<'a, BackendResult<Vec<RunRecord>>> {
        Box::pin(self.history_of(job, limit))
    }
    fn job<'a>(&'a self, job: &'a str) -> BoxFuture<'a, BackendResult<Option<JobState>>> {
        Box::pin(self.job_state(job))
    }
    fn jobs(&self) -> BoxFuture<'_, BackendResult<Vec<JobState>>> {
        Box::pin(self.all_jobs())
    }
    fn set_paused<'a>(&'a self, job: &'a str, paused: bool) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(self.pause(job, paused))
    }
    fn trigger<'a>(&'a self, job: &'a str, at_ms: i64) -> BoxFuture<'a, BackendResult<u64>> {
        Box::pin(self.request(job, at_ms))
    }
    fn control_version(&self) -> BoxFuture<'_, BackendResult<u64>> {
        Box::pin(self.version())
    }
    fn publish_registry<'a>(&'a self, session: &'a SessionId, registry: &'a str) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(self.publish(session.as_str(), registry))
    }
    fn registries(&self) -> BoxFuture<'_, BackendResult<Vec<(SessionId, String)>>> {
        Box::pin(self.read_registries())
    }
    fn retention(&self) -> usize {
        self.retention
    }

    fn keeping(&self, records: usize) -> crate::backend::job_store::SharedJobStore {
        std::sync::Arc::new(Self::with_retention(self.sql.clone(), records))
    }
    fn describe(&self) -> String {
        format!("{} (jobs store)", self.sql.description())
    }
}
