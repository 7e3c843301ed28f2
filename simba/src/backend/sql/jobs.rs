//! The jobs store of the SQL backends (ADR 0012): run history, the slot ledger and
//! job control in three more tables beside the lease tables, on SQLite, PostgreSQL and
//! MySQL/MariaDB alike.
//!
//! | table | key | what |
//! | --- | --- | --- |
//! | `simba_job` | `job` | one row per job name: `paused`, `last_slot` (the slot ledger), run-now requests (`trigger_id`, `trigger_ms`, `taken_id`, `group_taken_id`) |
//! | `simba_job_run` | `(job, kind, slot_ms)` | one record per slot; at most `retention` per job |
//! | `simba_job_version` | `id = 1` | the control version, bumped by every pause, resume, trigger and taken trigger |
//! | `simba_job_request` | `job` | the name's run-now request log (`body`: `id slot key` lines, [`RequestLog`](simba_core::claim::RequestLog)): the keys of its pending and newest taken requests (R3) |
//! | `simba_job_run_key` | `(job, slot_ms)` | the request key of a manual run's record (read with the record; dropped once older than the job's oldest record) |
//!
//! The tables are created on the first call of the store, idempotently (`IF NOT EXISTS`), so
//! a database written by an older build (lease tables only, or the jobs tables without the
//! two request tables) gains them and nothing else changes; no row is ever deleted but records
//! past retention, request log lines past [`REMEMBERED_REQUESTS`](simba_core::claim::REMEMBERED_REQUESTS)
//! and the keys of records no longer kept.
//!
//! Run-now requests and manual claims (R3) run as a transaction statement by statement on
//! every dialect, as a schedule's slot does, not as a call of the routines: the routines of
//! version 2 know no request key, and run-now is an operator's action, rare beside the
//! scheduled claims that stay one call. The manual claim reads the job's and its group's
//! control rows locked, as the trigger does, so the two are serialised per name.
//!
//! The claim is the lease's fenced claim: a first look (no lock) at the lease row answers a
//! caller that does not hold the term; the job's and its group's control rows are read locked
//! (so claims of one job are serialised); its last statement, the fence, matches the lease row
//! only for the live holder with the caller's token and share-locks it to the commit (so no
//! takeover changes it before the claim commits, and claims under one lease do not queue
//! behind each other). The slot is checked against both the job's ledger and the lease's
//! `last_slot` (what [`claim_slot`](crate::backend::Backend::claim_slot) writes, so a node of
//! an older build and one of this build never run one slot twice during a rolling deploy),
//! and the ledger, the lease and the `running` record are written, all in one transaction.
//! Run-now requests are counters: `trigger` bumps `trigger_id`, a claim copies the id it took
//! into `taken_id` (or, for partition `g/i` taking a request of group `g`, into
//! `group_taken_id`), so a request made during a claim is never lost. What a claim answers and
//! writes is the core's claim rule, [`simba_core::claim::decide`]: SQLite's transaction calls
//! it on the rows it read; the PostgreSQL function and the MySQL procedure write its steps in
//! SQL and name it as their reference.
//!
//! Round trips: on PostgreSQL and MySQL/MariaDB the claim and the control changes (pause,
//! resume, run now) are one call of a routine created with the tables (`simba_claim_run_v2`,
//! `simba_job_control_v2` on PostgreSQL, `simba_job_control_v1` on MySQL: a PL/pgSQL function,
//! a stored procedure), whose steps are the ones SQLite runs as a transaction statement by
//! statement: so a run starts after one round trip, as with
//! [`claim_slot`](crate::backend::Backend::claim_slot), and no row lock is ever held while the
//! server waits for a client (ADR 0012, amendment "the SQL claim in one round trip").
//!
//! Retention: the claim never trims (on SQLite it holds the file's one write lock, which every
//! node's session renewal needs within its interval). A finish trims, whether or not it
//! matched, and so does an append that inserted: on SQLite the write and the trim are one
//! `BEGIN IMMEDIATE` transaction, on the servers two statements. The trim
//! ([`JobDialect::RETAIN`]) reads its boundary once from the index `(job, slot_ms, kind)` and
//! removes the records before it by a range of that index. PostgreSQL's control changes also
//! `NOTIFY` the job's name, which the backend's listener forwards to
//! [`subscribe_control`](JobStore::subscribe_control).
//!
//! This file holds what the three dialects share: [`JobDialect`], the generic store
//! [`SqlJobStore`] and the templates of its statements ([`JobStatements`]). Each dialect's own
//! SQL is in its folder: the tables (`jobs_schema.sql`), the routines (`postgres/claim_run_v2.sql`,
//! `postgres/job_control_v2.sql`, `mysql/claim_run_v2.sql`, `mysql/job_control_v1.sql`,
//! `mysql/trim_runs_v1.sql`) and their calls, included by its `JobDialect` implementation in its
//! `dialect.rs`.

use std::marker::PhantomData;

use simba_core::claim::{self, Decision, Logs, RequestLog, SlotHistory, Trigger};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};
use tokio::sync::{OnceCell, broadcast};

use super::SqlStore;
use super::batch::{Batches, ClaimItem, EndItem};
use super::dialect::{Dialect, Param, Stmt};
use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, Outcome, RunRecord, SlotKind, Triggered, group_of,
    truncate_error,
};
use crate::backend::{BackendError, BackendResult, SessionId};

/// What a dialect writes its own way for the jobs store.
pub(crate) trait JobDialect: Dialect {
    /// The tables, idempotent: the dialect's `jobs_schema.sql`, a script that
    /// [`script`](super::dialect::script) splits into its statements.
    const JOB_SCHEMA: &'static str;
    /// The end of an `INSERT` that leaves an existing row alone.
    const KEEP_ROW: &'static str;
    /// What a `SELECT` of control rows ends with to lock them for the transaction.
    const LOCK_ROWS: &'static str = " FOR UPDATE";
    /// What a `SELECT` ends with to share-lock its rows for the transaction: others may read
    /// and share-lock them, no one may change them before the commit (the claim's fence).
    const SHARE_ROWS: &'static str = " FOR SHARE";
    /// Whether the schema is created under PostgreSQL's advisory lock.
    const ADVISORY_LOCK: Option<&'static str> = None;
    /// The stored routines created with the tables (`{now}` is the database's clock), after
    /// them and idempotently: on the servers, the claim and the control changes run inside
    /// the server in one call, so that no row lock is held across a client round trip.
    const ROUTINES: &'static [&'static str] = &[];
    /// The call of the claim routine (`:1` lease, `:2` session, `:3` token, `:4` job, `:5`
    /// its group or the job again, `:6` kind rank, `:7` slot, `:8` node, `:9` start time,
    /// `:10` attempts), answering one row `(result, slot)`: [`CLAIM_NOT_HOLDER`],
    /// [`CLAIM_TAKEN`], [`CLAIM_PAUSED`] or [`CLAIM_CLAIMED`] with the slot claimed. `None`:
    /// the claim is a transaction run statement by statement (SQLite, where the transaction
    /// holds a local file lock and no round trip crosses a network).
    const CLAIM_CALL: Option<&'static str> = None;
    /// Whether a run's end record and the retention trim are one statement (PostgreSQL: a
    /// data-modifying `WITH`), one round trip and one commit instead of two each.
    const FINISH_WITH_TRIM: bool = false;
    /// The call of the routine that claims a schedule's slot (rule A5, `Ask::ScheduleSlot`),
    /// with [`CLAIM_CALL`](Self::CLAIM_CALL)'s parameters and answer. `None`: the claim's
    /// transaction.
    const SCHEDULE_CLAIM_CALL: Option<&'static str> = None;
    /// The call of the routine that claims a batch of schedule slots in one transaction (`:1`
    /// a JSON array of claims: `i` its index, `lease`, `session`, `token`, `job`, `grp`,
    /// `kind`, `slot`, `node`, `started`, `attempts`), answering a row `(index, result, slot)`
    /// per claim, each as [`SCHEDULE_CLAIM_CALL`](Self::SCHEDULE_CLAIM_CALL)'s. `None`: each
    /// claim is its own call.
    const SCHEDULE_BATCH_CALL: Option<&'static str> = None;
    /// The call that writes a batch of end records, each with its retention trim (`:1` a JSON
    /// array of records: `i` its index and the columns as `batch::EndItem` names them, `:2` the
    /// `OFFSET` of the oldest record kept), answering a row `(index)` per record it updated.
    /// `None`: each end is its own call.
    const FINISH_BATCH_CALL: Option<&'static str> = None;
    /// The call of the control routine (`:1` job, `:2` operation: 0 pause/resume, 1 run-now
    /// request, `:3` its value: paused 0/1, or the request's time), answering one row: the
    /// old paused flag (0/1), or the new request id. `None`: a transaction, as the claim.
    const CONTROL_CALL: Option<&'static str> = None;
    /// Drops the records of job `:1` past the newest `:2 + 1` (`:2` is the `OFFSET` of the
    /// oldest record kept). The boundary, the oldest record kept, is read once from the index
    /// `(job, slot_ms, kind)` (an uncorrelated subquery: the engine evaluates it once, not per
    /// row), and the records before it are found by a range of that index: the cost is one
    /// index walk of `retention` entries plus the records removed, whatever the history holds.
    /// The derived table is for MySQL, which reads the table a `DELETE` writes only through a
    /// materialised one; MySQL overrides this anyway (a procedure whose boundary is a constant to
    /// its `DELETE`, so the delete is a range too).
    const RETAIN: &'static str = "DELETE FROM simba_job_run WHERE job = :1 AND (slot_ms, kind) < \
         (SELECT b_slot, b_kind FROM (SELECT slot_ms AS b_slot, kind AS b_kind FROM simba_job_run \
         WHERE job = :1 ORDER BY slot_ms DESC, kind DESC LIMIT 1 OFFSET :2) boundary)";
    /// Whether a finish or an append and the trim after it run in one transaction (SQLite: one
    /// acquisition of the file's write lock and one commit, rather than two of each).
    const WRITE_AND_TRIM_IN_TRANSACTION: bool = false;
    /// How many indexes beside the tables' keys [`SCHEMA_PRESENT`](Self::SCHEMA_PRESENT) counts.
    const JOB_INDEXES: usize = 0;
    /// How many of the [`JOB_TABLES`] tables, the [`JOB_INDEXES`](Self::JOB_INDEXES) indexes and
    /// the [`ROUTINES`](Self::ROUTINES) exist (one `BIGINT`): when all do, no DDL runs, so a user that may not create them can run the store
    /// an administrator set up (PostgreSQL checks the right to create in the schema before it
    /// sees that a table exists, even with `IF NOT EXISTS`). Read once without a transaction, then
    /// again under the schema's lock when something is missing.
    const SCHEMA_PRESENT: &'static str = "SELECT 0";
    /// Whether an administrator's script needs `DELIMITER` around the routines (the mysql
    /// client; psql reads PostgreSQL's dollar quoting as it is).
    const SCRIPT_DELIMITER: bool = false;
    /// A statement that broadcasts job `:1`'s control change inside the trigger's transaction
    /// (PostgreSQL's `pg_notify`); `None` where nodes poll the control version.
    const NOTIFY_CONTROL: Option<&'static str> = None;

    /// The jobs store's statements rendered for this dialect, once.
    fn job_statements() -> &'static JobStatements;
}

/// Implements [`JobDialect::job_statements`] with a static of its own (a static in a
/// generic function would be one for every dialect).
macro_rules! job_statements {
    ($dialect:ty) => {
        fn job_statements() -> &'static JobStatements {
            static STATEMENTS: std::sync::LazyLock<JobStatements> =
                std::sync::LazyLock::new(JobStatements::new::<$dialect>);
            &STATEMENTS
        }
    };
}
pub(crate) use job_statements;

/// How many tables the jobs store has (`simba_job`, `simba_job_run`, `simba_job_version`,
/// `simba_registry`, `simba_job_request`, `simba_job_run_key`): [`JobDialect::SCHEMA_PRESENT`]
/// counts them with the routines, so a database of an older build, without the last two,
/// gets them at the first call.
const JOB_TABLES: usize = 6;

/// [`FINISH_RECORD`] and [`JobDialect::RETAIN`] in one statement (a data-modifying `WITH`), the
/// trim's `:2` (the records kept past its boundary) as `:17`; answers how many records it
/// finished.
fn finish_and_trim<D: JobDialect>() -> Stmt {
    let trim = D::RETAIN.replace(":2", ":17");
    D::render(&format!(
        "WITH done AS ({FINISH_RECORD} RETURNING 1), trimmed AS ({trim} RETURNING 1) SELECT COUNT(*) FROM done"
    ))
}

/// A record's end: `:1`-`:15` the columns of [`RECORD_COLUMNS`] as [`RecordParams`] gives
/// them, `:16` the claiming token.
const FINISH_RECORD: &str = "UPDATE simba_job_run SET outcome = :4, attempt = :5, attempts = :6, session_id = :7, \
     node = :8, token = :9, started_ms = CASE WHEN :13 = 1 THEN :10 END, ended_ms = CASE WHEN :14 = 1 THEN :11 END, \
     error = CASE WHEN :15 = 1 THEN :12 END WHERE job = :1 AND kind = :2 AND slot_ms = :3 AND token = :16";

/// The columns of a record, in the order every statement reads and writes them.
const RECORD_COLUMNS: &str =
    "job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token, started_ms, ended_ms, error";

/// A record as read: the columns of [`RECORD_COLUMNS`], then its request key ([`READ_RECORD`]).
type RecordRow =
    (String, i64, i64, String, i64, i64, String, String, i64, Option<i64>, Option<i64>, Option<String>, Option<String>);

/// The columns of a record as read from `simba_job_run r` joined with [`KEY_JOIN`].
const READ_RECORD: &str = "r.job, r.kind, r.slot_ms, r.outcome, r.attempt, r.attempts, r.session_id, r.node, r.token, \
     r.started_ms, r.ended_ms, r.error, k.request_key";

/// The request key of a manual record `r` (kind rank 1).
const KEY_JOIN: &str = "LEFT JOIN simba_job_run_key k ON k.job = r.job AND k.slot_ms = r.slot_ms AND r.kind = 1";

/// A control row as read: `job, paused, last_slot, trigger_id, trigger_ms, taken_id,
/// group_taken_id`, then the lease's `last_slot` (claims only; NULL elsewhere).
type ControlRow = (String, i64, Option<i64>, i64, Option<i64>, i64, i64);

/// A control row as the core's claim rule reads it.
fn core_row(r: &ControlRow) -> claim::ControlRow {
    claim::ControlRow {
        paused: r.1 != 0,
        last_slot: r.2,
        trigger_id: r.3,
        trigger_ms: r.4,
        taken_id: r.5,
        group_taken_id: r.6,
    }
}

/// The jobs store's statements rendered for one dialect.
pub(crate) struct JobStatements {
    /// `:1` lease, `:2` session, `:3` token: a row only for the lease's live holder with that
    /// token, the lease row share-locked ([`JobDialect::SHARE_ROWS`]) until the commit.
    fence: Stmt,
    /// `:1` job: a control row with no pause and no request, unless one exists.
    ensure_job: Stmt,
    /// `:1` job, `:2` its group (or the job again): both control rows, locked.
    read_control: Stmt,
    /// The same rows read without a lock (a run-now check that finds nothing to take).
    peek_control: Stmt,
    /// `:1` lease: its holder, token and `last_slot`, read without a lock.
    lease_slot: Stmt,
    /// `:1` job, `:2` slot: the ledger moves forward.
    set_job_slot: Stmt,
    /// `:1` lease, `:2` session, `:3` token, `:4` slot: the fence of a scheduled slot, which
    /// moves the lease's `last_slot` too (what `claim_slot` writes).
    set_lease_slot: Stmt,
    /// `:1` job, `:2` own request id taken, `:3` group request id taken.
    take_trigger: Stmt,
    /// The statements of run-now requests and their keys (R3).
    keyed: KeyedStatements,
    /// Bumps the control version.
    bump_version: Stmt,
    /// The control version.
    version: Stmt,
    /// What a backfill's claim reads (J15).
    backfill: BackfillStatements,
    /// `:1` job, `:2` kind, `:3` slot.
    delete_record: Stmt,
    /// The 12 record columns as `:1`..`:12`, the three optional ones as `CASE WHEN :13/14/15 = 1`.
    insert_record: Stmt,
    /// The same columns; `:16` the claiming token. Overwrites the record of that identity
    /// claimed with that token.
    finish_record: Stmt,
    /// [`finish_record`](Self::finish_record) and the retention trim in one statement (`:17`
    /// the trim's offset), answering how many records it finished; where
    /// [`JobDialect::FINISH_WITH_TRIM`].
    finish_and_trim: Option<Stmt>,
    /// `:1` job, `:2` records kept: drops the older ones.
    pub(crate) retain: Stmt,
    /// `:1` job, `:2` limit.
    history: Stmt,
    /// `:1` job: its control row.
    job_row: Stmt,
    /// Every control row.
    job_rows: Stmt,
    /// The control rows with a run-now request of their own pending.
    pending_rows: Stmt,
    /// `:1` job: its newest record.
    last_record: Stmt,
    /// The newest record of every job.
    pub(crate) last_records: Stmt,
    /// `:1` job, `:2` paused (0 or 1).
    set_paused: Stmt,
    /// The calls of the dialect's stored routines, rendered.
    calls: RoutineCalls,
    /// [`JobDialect::ROUTINES`] with the database's clock.
    routines: Vec<String>,
    /// [`JobDialect::JOB_SCHEMA`], statement by statement.
    schema: Vec<&'static str>,
    /// `:1` session: drops its registry and those of sessions no longer live.
    registry_drop: Stmt,
    /// `:1` session, `:2` registry: written only while the session is live.
    registry_write: Stmt,
    /// The registries of live sessions, by session id.
    registry_read: Stmt,
}

impl JobStatements {
    /// The routine that claims `req` in one call, if the dialect has one for it. A schedule's
    /// slot (rule A5) has its own ([`JobDialect::SCHEDULE_CLAIM_CALL`]): the claim routines'
    /// version 2 knows only the jobs' ask, whose ledger includes the lease's last slot, which
    /// the many schedules of one partition share. A manual slot (R3) and a backfill's (J15) are
    /// claimed by the transaction: the routines know no request log and no history read (an
    /// operator's actions, rare beside the scheduled claims).
    fn routine_for(&self, req: &ClaimRequest<'_>) -> Option<&Stmt> {
        if req.is_schedule_slot() {
            return self.calls.schedule_claim.as_ref();
        }
        self.calls.claim.as_ref().filter(|_| req.kind != SlotKind::Manual && !req.is_backfill())
    }

    pub(crate) fn new<D: JobDialect>() -> Self {
        let r = |t: &str| D::render(t);
        let optional = "CASE WHEN :13 = 1 THEN :10 END, CASE WHEN :14 = 1 THEN :11 END, CASE WHEN :15 = 1 THEN :12 END";
        JobStatements {
            fence: r(&format!(
                "SELECT 1 FROM simba_lease WHERE name = :1 AND session_id = :2 AND token = :3 \
                 AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {{now}}){}",
                D::SHARE_ROWS
            )),
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
            peek_control: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job WHERE job = :1 OR job = :2"),
            lease_slot: r("SELECT session_id, token, last_slot FROM simba_lease WHERE name = :1"),
            set_job_slot: r("UPDATE simba_job SET last_slot = :2 WHERE job = :1"),
            set_lease_slot: r(
                "UPDATE simba_lease SET last_slot = :4 WHERE name = :1 AND session_id = :2 AND token = :3 \
                 AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})",
            ),
            take_trigger: r("UPDATE simba_job SET taken_id = :2, group_taken_id = :3 WHERE job = :1"),
            keyed: KeyedStatements::new::<D>(),
            bump_version: r("UPDATE simba_job_version SET version = version + 1 WHERE id = 1"),
            version: r("SELECT version FROM simba_job_version WHERE id = 1"),
            backfill: BackfillStatements::new::<D>(),
            delete_record: r("DELETE FROM simba_job_run WHERE job = :1 AND kind = :2 AND slot_ms = :3"),
            insert_record: r(&format!(
                "INSERT INTO simba_job_run ({RECORD_COLUMNS}) VALUES (:1, :2, :3, :4, :5, :6, :7, :8, :9, {optional})"
            )),
            finish_record: r(FINISH_RECORD),
            finish_and_trim: D::FINISH_WITH_TRIM.then(finish_and_trim::<D>),
            retain: r(D::RETAIN),
            history: r(&format!(
                "SELECT {READ_RECORD} FROM simba_job_run r {KEY_JOIN} WHERE r.job = :1 \
                 ORDER BY r.slot_ms DESC, r.kind DESC LIMIT :2"
            )),
            job_row: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job WHERE job = :1"),
            job_rows: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job ORDER BY job"),
            pending_rows: r("SELECT job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id \
                 FROM simba_job WHERE trigger_id > taken_id ORDER BY job"),
            last_record: r(&format!(
                "SELECT {READ_RECORD} FROM simba_job_run r {KEY_JOIN} WHERE r.job = :1 \
                 ORDER BY r.slot_ms DESC, r.kind DESC LIMIT 1"
            )),
            // The job names are walked through the index, one seek per job (`jobs`), and each
            // job's newest key read from its end (`l`): a few index seeks per job, however many
            // records each keeps. (A `NOT EXISTS` of a newer record compared every record with
            // its job's others: 6 s on SQLite for two jobs of 10,000 records.)
            last_records: r(&format!(
                "WITH RECURSIVE jobs (job) AS (SELECT (SELECT job FROM simba_job_run ORDER BY job LIMIT 1) \
                 UNION ALL SELECT (SELECT n.job FROM simba_job_run n WHERE n.job > jobs.job ORDER BY n.job LIMIT 1) \
                 FROM jobs WHERE jobs.job IS NOT NULL) \
                 SELECT {READ_RECORD} FROM (SELECT jobs.job AS job, \
                 (SELECT n.slot_ms FROM simba_job_run n WHERE n.job = jobs.job {newest} LIMIT 1) AS l_slot, \
                 (SELECT n.kind FROM simba_job_run n WHERE n.job = jobs.job {newest} LIMIT 1) AS l_kind \
                 FROM jobs WHERE jobs.job IS NOT NULL) l \
                 JOIN simba_job_run r ON r.job = l.job AND r.kind = l.l_kind AND r.slot_ms = l.l_slot {KEY_JOIN}",
                newest = "ORDER BY n.slot_ms DESC, n.kind DESC",
            )),
            set_paused: r("UPDATE simba_job SET paused = :2 WHERE job = :1"),
            calls: RoutineCalls::new::<D>(),
            routines: D::ROUTINES.iter().map(|t| t.replace("{now}", D::NOW_MS)).collect(),
            schema: super::dialect::script(D::JOB_SCHEMA),
            registry_drop: r("DELETE FROM simba_registry WHERE session_id = :1 OR NOT EXISTS \
                 (SELECT 1 FROM simba_session s WHERE s.id = simba_registry.session_id AND s.expires_at > {now})"),
            registry_write: r("INSERT INTO simba_registry (session_id, body, published_ms) \
                 SELECT id, :2, {now} FROM simba_session WHERE id = :1 AND expires_at > {now}"),
            registry_read: r("SELECT r.session_id, r.body FROM simba_registry r \
                 JOIN simba_session s ON s.id = r.session_id WHERE s.expires_at > {now} ORDER BY r.session_id"),
        }
    }
}

/// What a backfill's claim reads (J15), locked.
pub(crate) struct BackfillStatements {
    /// `:1` job: its oldest record's slot and kind.
    oldest_record: Stmt,
    /// `:1` job, `:2` slot: the kind, outcome and start of its records of that slot.
    slot_records: Stmt,
}

/// The calls of a dialect's stored routines, rendered (`None` where the dialect has none).
struct RoutineCalls {
    /// [`JobDialect::CLAIM_CALL`].
    claim: Option<Stmt>,
    /// [`JobDialect::SCHEDULE_CLAIM_CALL`].
    schedule_claim: Option<Stmt>,
    /// [`JobDialect::SCHEDULE_BATCH_CALL`].
    schedule_batch: Option<Stmt>,
    /// [`JobDialect::FINISH_BATCH_CALL`].
    finish_batch: Option<Stmt>,
    /// [`JobDialect::CONTROL_CALL`].
    control: Option<Stmt>,
}

impl RoutineCalls {
    fn new<D: JobDialect>() -> Self {
        let r = |t: &str| D::render(t);
        RoutineCalls {
            claim: D::CLAIM_CALL.map(r),
            schedule_claim: D::SCHEDULE_CLAIM_CALL.map(r),
            schedule_batch: D::SCHEDULE_BATCH_CALL.map(r),
            finish_batch: D::FINISH_BATCH_CALL.map(r),
            control: D::CONTROL_CALL.map(r),
        }
    }
}

impl BackfillStatements {
    fn new<D: JobDialect>() -> Self {
        let oldest = "SELECT slot_ms, kind FROM simba_job_run WHERE job = :1 ORDER BY slot_ms, kind LIMIT 1";
        let at_slot = "SELECT kind, outcome, started_ms FROM simba_job_run WHERE job = :1 AND slot_ms = :2";
        BackfillStatements {
            oldest_record: D::render(&format!("{oldest}{}", D::LOCK_ROWS)),
            slot_records: D::render(&format!("{at_slot}{}", D::LOCK_ROWS)),
        }
    }
}

/// The statements of run-now requests and the request keys of records (R3).
pub(crate) struct KeyedStatements {
    /// `:1` job, `:2` its newest manual slot (a partition that took a group request).
    set_trigger_ms: Stmt,
    /// `:1` group, `:2` the id of a request of it a partition took: its `taken_id` moves up.
    take_group: Stmt,
    /// `:1` job, `:2` its group (or the job again): their request logs.
    read_logs: Stmt,
    /// `:1` job: its request log, unless one exists.
    ensure_log: Stmt,
    /// `:1` job, `:2` its request log.
    write_log: Stmt,
    /// `:1` job, `:2` trigger id, `:3` trigger slot: a run-now request made.
    write_request: Stmt,
    /// `:1` job, `:2` slot, `:3` key: the request key of a manual record.
    write_run_key: Stmt,
    /// `:1` job, `:2` slot: drops the key of that record.
    delete_run_key: Stmt,
    /// `:1` job: drops the keys of records no longer kept.
    trim_run_keys: Stmt,
    /// [`JobDialect::NOTIFY_CONTROL`], rendered.
    notify_control: Option<Stmt>,
}

impl KeyedStatements {
    fn new<D: JobDialect>() -> Self {
        let r = |t: &str| D::render(t);
        KeyedStatements {
            set_trigger_ms: r("UPDATE simba_job SET trigger_ms = :2 WHERE job = :1"),
            take_group: r("UPDATE simba_job SET taken_id = :2 WHERE job = :1 AND taken_id < :2"),
            read_logs: r("SELECT job, body FROM simba_job_request WHERE job = :1 OR job = :2"),
            ensure_log: r(&format!("INSERT INTO simba_job_request (job, body) VALUES (:1, '') {}", D::KEEP_ROW)),
            write_log: r("UPDATE simba_job_request SET body = :2 WHERE job = :1"),
            write_request: r("UPDATE simba_job SET trigger_id = :2, trigger_ms = :3 WHERE job = :1"),
            write_run_key: r("INSERT INTO simba_job_run_key (job, slot_ms, request_key) VALUES (:1, :2, :3)"),
            delete_run_key: r("DELETE FROM simba_job_run_key WHERE job = :1 AND slot_ms = :2"),
            trim_run_keys: r("DELETE FROM simba_job_run_key WHERE job = :1 AND slot_ms < \
                 (SELECT MIN(slot_ms) FROM simba_job_run WHERE job = :1)"),
            notify_control: D::NOTIFY_CONTROL.map(r),
        }
    }
}

/// A claim routine's answer: the caller does not hold the lease with its token.
const CLAIM_NOT_HOLDER: i64 = 0;
/// A claim routine's answer: the slot or a later one was claimed, or no request is pending.
const CLAIM_TAKEN: i64 = 1;
/// A claim routine's answer: the job or its group is paused.
const CLAIM_PAUSED: i64 = 2;
/// A claim routine's answer: claimed, with the slot.
const CLAIM_CLAIMED: i64 = 3;

/// A claim routine's row: `(result, slot)`.
type ClaimAnswer = (i64, Option<i64>);

/// The kind as stored: its rank, so that the store orders records as [`SlotKind`]'s `Ord`.
fn kind_code(kind: SlotKind) -> i64 {
    match kind {
        SlotKind::Scheduled => 0,
        SlotKind::Manual => 1,
        SlotKind::CaughtUp => 2,
        SlotKind::Backfill => 3,
    }
}

fn kind_of(code: i64) -> Option<SlotKind> {
    match code {
        0 => Some(SlotKind::Scheduled),
        1 => Some(SlotKind::Manual),
        2 => Some(SlotKind::CaughtUp),
        3 => Some(SlotKind::Backfill),
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
    /// Where the backend forwards the names of jobs whose control changed (PostgreSQL's
    /// listener); `None` where the database cannot broadcast.
    control: Option<broadcast::Sender<String>>,
    /// The pool that writes history records after their claim (`finish_run`, `append` and
    /// their trims), where it is not the lease calls' pool: on SQLite one connection with
    /// `synchronous = NORMAL` (ADR 0015, addendum), so that these commits do not sync the disk
    /// while they hold the file's write lock. Claims and control changes stay on `sql`'s pool.
    records: Option<sqlx::Pool<D::Db>>,
    /// The queue of schedule-slot claims sent in batches, started at the first such claim where
    /// the dialect has a batch routine ([`JobDialect::SCHEDULE_BATCH_CALL`]).
    claims: std::sync::Arc<std::sync::OnceLock<Batches<ClaimItem, ClaimAnswer>>>,
    /// The queue of end records sent in batches, started at the first end where the dialect has
    /// a batch routine ([`JobDialect::FINISH_BATCH_CALL`]).
    ends: std::sync::Arc<std::sync::OnceLock<Batches<EndItem, ()>>>,
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
            control: None,
            records: None,
            claims: std::sync::Arc::default(),
            ends: std::sync::Arc::default(),
            dialect: PhantomData,
        }
    }

    /// This store, writing history records after their claim through `records` (ADR 0015,
    /// addendum: SQLite's connection with `synchronous = NORMAL`).
    pub(crate) fn with_record_pool(mut self, records: sqlx::Pool<D::Db>) -> Self {
        self.records = Some(records);
        self
    }

    /// This store, answering [`JobStore::subscribe_control`] with receivers of `control`.
    pub(crate) fn with_control(mut self, control: broadcast::Sender<String>) -> Self {
        self.control = Some(control);
        self
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

    /// Starts a transaction the dialect's way (`BEGIN IMMEDIATE` on SQLite). Only SQLite runs
    /// its claims and control changes as transactions of several statements (one local file
    /// lock, no network); the servers run them as one call of a routine, so that no client
    /// stalled inside one (stopped, or its link black-holed) holds row locks: the fault suite
    /// found that stopping every run of a job on PostgreSQL for over 10 s (ADR 0012).
    async fn begin(&self, what: &'static str) -> BackendResult<sqlx::Transaction<'static, D::Db>> {
        super::dialect::begin::<D>(self.sql.pool()).await.map_err(self.sql.err(what))
    }

    /// Creates the tables on the first call (every statement idempotent; in one transaction,
    /// under an advisory lock on PostgreSQL, where concurrent `CREATE ... IF NOT EXISTS` of
    /// one table can fail), then the routines when any is missing.
    async fn ensure_schema(&self) -> BackendResult<()> {
        self.schema
            .get_or_try_init(|| async {
                let what = "create the jobs tables";
                // A read first, outside any transaction: when everything exists nothing is
                // locked (on SQLite, the file's write lock that every renewal needs).
                let expected = JOB_TABLES + D::JOB_INDEXES + self.statements.routines.len();
                let present: i64 = sqlx::query_scalar(D::SCHEMA_PRESENT)
                    .fetch_one(self.sql.pool())
                    .await
                    .map_err(self.sql.err(what))?;
                if usize::try_from(present).is_ok_and(|n| n >= expected) {
                    return Ok(());
                }
                let mut tx = self.begin(what).await?;
                if let Some(lock) = D::ADVISORY_LOCK {
                    sqlx::raw_sql(lock).execute(&mut *tx).await.map_err(self.sql.err(what))?;
                }
                let present: i64 =
                    sqlx::query_scalar(D::SCHEMA_PRESENT).fetch_one(&mut *tx).await.map_err(self.sql.err(what))?;
                let missing = usize::try_from(present).map_or(true, |n| n < expected);
                for statement in self.statements.schema.iter().filter(|_| missing) {
                    sqlx::raw_sql(*statement).execute(&mut *tx).await.map_err(|e| self.schema_error(e))?;
                }
                for routine in self.statements.routines.iter().filter(|_| missing) {
                    let created = sqlx::raw_sql(sqlx::AssertSqlSafe(routine.as_str())).execute(&mut *tx).await;
                    // MySQL: two nodes creating the procedure at once; the other one's is the same.
                    let raced = |e: &sqlx::Error| {
                        e.as_database_error().is_some_and(|d| {
                            d.code().as_deref() == Some("42000") && d.message().contains("already exists")
                        })
                    };
                    match created {
                        Ok(_) => {}
                        Err(e) if raced(&e) => {}
                        Err(e) => return Err(self.schema_error(e)),
                    }
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
            let mut script: Vec<String> = self.statements.schema.iter().map(|s| format!("{s};")).collect();
            if !self.statements.routines.is_empty() {
                let delimited = D::SCRIPT_DELIMITER;
                if delimited {
                    script.push("DELIMITER //".to_owned());
                }
                let end = if delimited { "//" } else { ";" };
                script.extend(self.statements.routines.iter().map(|r| format!("{r}{end}")));
                if delimited {
                    script.push("DELIMITER ;".to_owned());
                }
                script.push("-- the nodes' user also needs EXECUTE on these routines".to_owned());
            }
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
        let (
            job,
            kind,
            slot_ms,
            outcome,
            attempt,
            attempts,
            session,
            node,
            token,
            started_ms,
            ended_ms,
            error,
            request_key,
        ) = row;
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
            request_key,
            payload_override: None,
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

    /// The claim's fence when it does not move the lease's slot: whether `fence` (lease,
    /// session, token) names the lease's live holder, the row share-locked to the commit. A
    /// takeover waits for the commit as it would for an update, and the claims of one lease (a
    /// partition's schedules) do not wait for each other's commits.
    async fn fence_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        fence: [Param<'_>; 3],
        what: &'static str,
    ) -> BackendResult<bool> {
        let stmt = &self.statements.fence;
        let args = self.args(stmt, &fence)?;
        let row = sqlx::query_with(stmt.sql(), args).fetch_optional(&mut **tx).await;
        Ok(row.map_err(self.sql.err(what))?.is_some())
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

    /// Runs `stmt` with `params` in `tx`: the rows it affected.
    async fn exec_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<u64> {
        let args = self.args(stmt, params)?;
        let done = sqlx::query_with(stmt.sql(), args).execute(&mut **tx).await.map_err(self.sql.err(what))?;
        Ok(D::rows_affected(&done))
    }

    /// A manual claim's request logs (R3), read in `tx`: `job`'s and its `group`'s (empty when
    /// the group is the job itself).
    /// Whether a run-now claim of `job` may find a request to take, by the core's rule on the
    /// control rows read without a lock (a request made after the read moves the control
    /// version, and the holder checks again).
    async fn run_now_pending(&self, job: &str, group: &str, what: &'static str) -> BackendResult<bool> {
        let rows: Vec<ControlRow> =
            self.sql.fetch_all(&self.statements.peek_control, &[Param::Text(job), Param::Text(group)], what).await?;
        let own = rows.iter().find(|r| r.0 == job).map(core_row).unwrap_or_default();
        let grp = rows.iter().find(|r| r.0 == group && group != job).map(core_row);
        Ok(own.run_now_pending(grp.as_ref()))
    }

    async fn logs_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        job: &str,
        group: &str,
        what: &'static str,
    ) -> BackendResult<(RequestLog, RequestLog)> {
        let s = self.statements;
        let args = self.args(&s.keyed.read_logs, &[Param::Text(job), Param::Text(group)])?;
        let logs: Vec<(String, String)> = sqlx::query_as_with(s.keyed.read_logs.sql(), args)
            .fetch_all(&mut **tx)
            .await
            .map_err(self.sql.err(what))?;
        let log_of =
            |name: &str| logs.iter().find(|l| l.0 == name).map(|l| RequestLog::decode(&l.1)).unwrap_or_default();
        Ok((log_of(job), if group == job { RequestLog::default() } else { log_of(group) }))
    }

    /// Writes in `tx` the control columns the claim rule changed (`writes`, from the job's row
    /// `own`): the ledger, the requests taken, a partition's manual slot, the group's taken
    /// request, the control version.
    async fn apply_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        (job, group): (&str, &str),
        own: &claim::ControlRow,
        writes: &claim::Writes,
        what: &'static str,
    ) -> BackendResult<()> {
        let s = self.statements;
        if let Some(next) = &writes.own {
            if let Some(slot) = next.last_slot.filter(|_| next.last_slot != own.last_slot) {
                self.exec_in(tx, &s.set_job_slot, &[Param::Text(job), Param::Int(slot)], what).await?;
            }
            if (next.taken_id, next.group_taken_id) != (own.taken_id, own.group_taken_id) {
                let params = [Param::Text(job), Param::Int(next.taken_id), Param::Int(next.group_taken_id)];
                self.exec_in(tx, &s.take_trigger, &params, what).await?;
            }
            if let Some(ms) = next.trigger_ms.filter(|_| next.trigger_ms != own.trigger_ms) {
                self.exec_in(tx, &s.keyed.set_trigger_ms, &[Param::Text(job), Param::Int(ms)], what).await?;
            }
        }
        if let Some(g) = &writes.group {
            self.exec_in(tx, &s.keyed.take_group, &[Param::Text(group), Param::Int(g.taken_id)], what).await?;
        }
        if writes.bump_version {
            self.exec_in(tx, &s.bump_version, &[], what).await?;
        }
        Ok(())
    }

    /// What a backfill's claim (J15) reads of the job's history in `tx`, locked: the oldest
    /// record first (a trim, which deletes from the oldest on, then waits for this claim), then
    /// the records of the slot.
    async fn history_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        req: &ClaimRequest<'_>,
        what: &'static str,
    ) -> BackendResult<SlotHistory> {
        let s = self.statements;
        let args = self.args(&s.backfill.oldest_record, &[Param::Text(req.job)])?;
        let oldest: Option<(i64, i64)> = sqlx::query_as_with(s.backfill.oldest_record.sql(), args)
            .fetch_optional(&mut **tx)
            .await
            .map_err(self.sql.err(what))?;
        let args = self.args(&s.backfill.slot_records, &[Param::Text(req.job), Param::Int(req.slot_ms)])?;
        let rows: Vec<(i64, String, Option<i64>)> = sqlx::query_as_with(s.backfill.slot_records.sql(), args)
            .fetch_all(&mut **tx)
            .await
            .map_err(self.sql.err(what))?;
        let name = |code: i64| {
            kind_of(code).map(SlotKind::as_str).ok_or_else(|| {
                BackendError::Protocol(format!(
                    "{}: a record of `{}` has kind {code}, which this build does not know",
                    self.sql.description(),
                    req.job
                ))
            })
        };
        let mut at_slot = Vec::with_capacity(rows.len());
        for (kind, outcome, started_ms) in rows {
            at_slot.push(claim::SeenRecord::new(name(kind)?, outcome, started_ms));
        }
        let oldest = match oldest {
            Some((slot, kind)) => Some((slot, name(kind)?.to_owned())),
            None => None,
        };
        Ok(SlotHistory { at_slot, oldest })
    }

    /// Writes in `tx` the request key of the manual `record` (R3), and drops the keys of the
    /// job's records no longer kept.
    async fn run_key_in(
        &self,
        tx: &mut sqlx::Transaction<'static, D::Db>,
        record: &RunRecord,
        what: &'static str,
    ) -> BackendResult<()> {
        let s = self.statements;
        let (job, slot) = (Param::Text(&record.job), Param::Int(record.slot_ms));
        self.exec_in(tx, &s.keyed.delete_run_key, &[job, slot], what).await?;
        if let Some(key) = record.request_key.as_deref() {
            self.exec_in(tx, &s.keyed.write_run_key, &[job, slot, Param::Text(key)], what).await?;
        }
        self.exec_in(tx, &s.keyed.trim_run_keys, &[job], what).await?;
        Ok(())
    }

    /// The claim as one call of the dialect's routine ([`JobDialect::CLAIM_CALL`]).
    async fn claim_by_call(&self, call: &'static Stmt, req: &ClaimRequest<'_>, token: i64) -> BackendResult<Claim> {
        let what = "claim a job run";
        let group = group_of(req.job).unwrap_or(req.job);
        let params = [
            Param::Text(req.lease),
            Param::Text(req.session.as_str()),
            Param::Int(token),
            Param::Text(req.job),
            Param::Text(group),
            Param::Int(kind_code(req.kind)),
            Param::Int(req.slot_ms),
            Param::Text(req.node),
            Param::Int(req.started_ms),
            Param::Int(i64::from(req.attempts.max(1))),
        ];
        // `fetch_all`: MySQL answers a `CALL` with the procedure's result set, then a status.
        let rows: Vec<(i64, Option<i64>)> = self.sql.fetch_all(call, &params, what).await?;
        self.claim_answer(req, rows.first().copied())
    }

    /// The claim a claim routine's row `(result, slot)` answers to `req`.
    fn claim_answer(&self, req: &ClaimRequest<'_>, row: Option<ClaimAnswer>) -> BackendResult<Claim> {
        let bad = |why: String| BackendError::Protocol(format!("{}: the claim routine {why}", self.sql.description()));
        match row {
            Some((CLAIM_NOT_HOLDER, _)) => Ok(Claim::NotHolder),
            Some((CLAIM_TAKEN, _)) => Ok(Claim::AlreadyClaimed),
            Some((CLAIM_PAUSED, _)) => Ok(Claim::Paused),
            Some((CLAIM_CLAIMED, Some(slot_ms))) => Ok(Claim::Claimed(req.running_record(slot_ms))),
            Some((code, slot)) => Err(bad(format!("answered ({code}, {slot:?}), which this build does not know"))),
            None => Err(bad("answered no row".to_owned())),
        }
    }

    /// The queue that claims schedule slots in batches, started now if it is not yet; `None`
    /// where the dialect has no batch routine.
    fn claim_batches(&self) -> Option<&Batches<ClaimItem, ClaimAnswer>> {
        let call = self.statements.calls.schedule_batch.as_ref()?;
        Some(self.claims.get_or_init(|| {
            let sql = self.sql.clone();
            let send: super::batch::Call<ClaimAnswer> = std::sync::Arc::new(move |json: String| {
                let sql = sql.clone();
                Box::pin(async move {
                    let what = "claim schedule slots";
                    let rows: Vec<(i64, i64, Option<i64>)> = sql.fetch_all(call, &[Param::Text(&json)], what).await?;
                    Ok(rows.into_iter().filter_map(|(i, r, s)| Some((usize::try_from(i).ok()?, (r, s)))).collect())
                })
            });
            Batches::start(send, std::sync::Arc::clone(self.sql.description()))
        }))
    }

    /// Claims schedule slot `req` (its token `token`) in the next batch of `batches`.
    async fn claim_in_batch(
        &self,
        batches: &Batches<ClaimItem, ClaimAnswer>,
        req: &ClaimRequest<'_>,
        token: i64,
    ) -> BackendResult<Claim> {
        let group = group_of(req.job).unwrap_or(req.job);
        let answer = batches.call(ClaimItem::new(req, token, group, kind_code(req.kind))).await?;
        self.claim_answer(req, answer)
    }

    /// The queue that writes end records in batches, started now if it is not yet; `None`
    /// where the dialect has no batch routine.
    fn end_batches(&self) -> Option<&Batches<EndItem, ()>> {
        let call = self.statements.calls.finish_batch.as_ref()?;
        let keep = self.keep();
        Some(self.ends.get_or_init(|| {
            let sql = self.sql.clone();
            let send: super::batch::Call<()> = std::sync::Arc::new(move |json: String| {
                let sql = sql.clone();
                Box::pin(async move {
                    let what = "record how runs ended";
                    let rows: Vec<(i64,)> = sql.fetch_all(call, &[Param::Text(&json), Param::Int(keep)], what).await?;
                    Ok(rows.into_iter().filter_map(|(i,)| Some((usize::try_from(i).ok()?, ()))).collect())
                })
            });
            Batches::start(send, std::sync::Arc::clone(self.sql.description()))
        }))
    }

    /// The `OFFSET` of the oldest record kept.
    fn keep(&self) -> i64 {
        i64::try_from(self.retention - 1).unwrap_or(i64::MAX)
    }

    /// Runs `stmt` with `params`, then [`JobStatements::retain`] for `job` unless `stmt`
    /// failed on a unique key (an append of a record that exists: nothing was added); answers
    /// `answer` of the rows `stmt` affected (`None` for that unique violation). On SQLite both
    /// run in one `BEGIN IMMEDIATE` transaction: the file's write lock is taken once and held
    /// for two indexed statements, never for a scan of the history; on a file, on the records'
    /// own connection, whose commit does not sync the disk ([`with_record_pool`](Self::with_record_pool)).
    async fn write_and_trim(
        &self,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        job: &str,
        what: &'static str,
        answer: impl FnOnce(Option<u64>) -> bool,
    ) -> BackendResult<bool> {
        self.ensure_schema().await?;
        let retain = &self.statements.retain;
        let keep = [Param::Text(job), Param::Int(self.keep())];
        let unique = |e: &sqlx::Error| e.as_database_error().is_some_and(|d| d.is_unique_violation());
        if D::WRITE_AND_TRIM_IN_TRANSACTION {
            let pool = self.records.as_ref().unwrap_or_else(|| self.sql.pool());
            let begun = super::dialect::begin::<D>(pool).await;
            let mut tx = begun.map_err(self.sql.err(what))?;
            let args = self.args(stmt, params)?;
            let done = match sqlx::query_with(stmt.sql(), args).execute(&mut *tx).await {
                Ok(done) => Some(D::rows_affected(&done)),
                Err(e) if unique(&e) => None,
                Err(e) => return Err(self.sql.err(what)(e)),
            };
            if done.is_none() {
                // Nothing written: the transaction rolls back as it is dropped.
                return Ok(answer(None));
            }
            let args = self.args(retain, &keep)?;
            sqlx::query_with(retain.sql(), args).execute(&mut *tx).await.map_err(self.sql.err("drop old runs"))?;
            tx.commit().await.map_err(self.sql.err(what))?;
            return Ok(answer(done));
        }
        let args = self.args(stmt, params)?;
        let done = match sqlx::query_with(stmt.sql(), args).execute(self.sql.pool()).await {
            Ok(done) => Some(D::rows_affected(&done)),
            Err(e) if unique(&e) => None,
            Err(e) => return Err(self.sql.err(what)(e)),
        };
        if done.is_some() {
            self.sql.execute(retain, &keep, "drop old runs").await?;
        }
        Ok(answer(done))
    }

    async fn control<T>(
        &self,
        job: &str,
        what: &'static str,
        change: impl FnOnce(&ControlRow) -> (Option<(&'static Stmt, i64)>, T),
    ) -> BackendResult<T> {
        self.ensure_schema().await?;
        let s = self.statements;
        let mut tx = self.begin(what).await?;
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

    /// A control change as one call of the dialect's routine ([`JobDialect::CONTROL_CALL`]):
    /// operation `op` (0 pause or resume, 1 run-now request) with `value`; its answer.
    async fn control_by_call(
        &self,
        call: &'static Stmt,
        job: &str,
        op: i64,
        value: i64,
        what: &'static str,
    ) -> BackendResult<i64> {
        self.ensure_schema().await?;
        let rows: Vec<(i64,)> =
            self.sql.fetch_all(call, &[Param::Text(job), Param::Int(op), Param::Int(value)], what).await?;
        rows.first().map(|r| r.0).ok_or_else(|| {
            BackendError::Protocol(format!("{}: the control routine answered no row", self.sql.description()))
        })
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
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        self.ensure_schema().await?;
        let s = self.statements;
        let Ok(token) = i64::try_from(req.token) else { return Ok(Claim::NotHolder) };
        if let Some(batches) = req.is_schedule_slot().then(|| self.claim_batches()).flatten() {
            return self.claim_in_batch(batches, &req, token).await;
        }
        if let Some(call) = s.routine_for(&req) {
            return self.claim_by_call(call, &req, token).await;
        }
        let manual = req.kind == SlotKind::Manual;
        let what = "claim a job run";
        let group = group_of(req.job).unwrap_or(req.job);
        // A run-now check with no request to take (the holder checks at every term's start and
        // control change) is answered from one read without a lock: the transaction below
        // locks the control rows, and a stalled holder must not hold them for others.
        if manual && !self.run_now_pending(req.job, group, what).await? {
            return Ok(Claim::AlreadyClaimed);
        }
        let mut tx = self.begin(what).await?;
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
        exec!(s.ensure_job, [Param::Text(req.job)]);
        let rows: Vec<ControlRow> = {
            let args = self.args(&s.read_control, &[Param::Text(req.job), Param::Text(group)])?;
            sqlx::query_as_with(s.read_control.sql(), args).fetch_all(&mut *tx).await.map_err(self.sql.err(what))?
        };
        let (own_log, group_log) =
            if manual { self.logs_in(&mut tx, req.job, group, what).await? } else { Default::default() };
        // The core's claim rule decides; the statements below apply its writes, the fence last.
        let own = rows.iter().find(|r| r.0 == req.job).map(core_row).unwrap_or_default();
        let grp = rows.iter().find(|r| r.0 == group && group != req.job).map(core_row);
        let history =
            if req.is_backfill() { self.history_in(&mut tx, &req, what).await? } else { SlotHistory::default() };
        let logs = Logs { own: &own_log, group: &group_log, history: &history };
        let Decision { answer, writes, request } = claim::decide(req.ask(), &own, grp.as_ref(), lease_slot, logs);
        if writes.is_empty() && !matches!(answer, claim::Answer::Claimed { .. }) {
            return Ok(req.claim_of(answer, None));
        }
        self.apply_in(&mut tx, (req.job, group), &own, &writes, what).await?;
        let claim = req.claim_of(answer, request.as_ref());
        if let Claim::Claimed(record) = &claim {
            let p = RecordParams::new(record);
            let params = p.params();
            exec!(s.delete_record, [params[0], params[1], params[2]]);
            // No retention trim here: it would run under the claim's locks (on SQLite, the file's
            // one write lock, which every node's renewal needs), and a claim's record is always
            // followed by its end record, whose write trims.
            exec!(s.insert_record, params);
            if manual {
                self.run_key_in(&mut tx, record, what).await?;
            }
        }
        // The fence, last; for a scheduled slot (claimed or consumed while paused) it moves the
        // lease's slot too.
        let fenced = match writes.lease_slot {
            Some(slot) => exec!(s.set_lease_slot, [fence[0], fence[1], fence[2], Param::Int(slot)]) > 0,
            None => self.fence_in(&mut tx, fence, what).await?,
        };
        if !fenced {
            return Ok(Claim::NotHolder);
        }
        tx.commit().await.map_err(self.sql.err(what))?;
        Ok(claim)
    }

    /// The update, then the retention trim whether or not it matched (the claim that wrote the
    /// record did not trim): one statement where the dialect can ([`JobDialect::FINISH_WITH_TRIM`]).
    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        if let Some(batches) = self.end_batches() {
            self.ensure_schema().await?;
            return Ok(batches.call(EndItem::new(record, kind_code(record.kind))).await?.is_some());
        }
        let p = RecordParams::new(record);
        if let Some(stmt) = &self.statements.finish_and_trim {
            self.ensure_schema().await?;
            let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, q] = p.params();
            let params = [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, q, Param::Int(self.keep())];
            let done: Vec<(i64,)> = self.sql.fetch_all(stmt, &params, "record how a run ended").await?;
            return Ok(done.first().is_some_and(|d| d.0 == 1));
        }
        self.write_and_trim(&self.statements.finish_record, &p.params(), &record.job, "record how a run ended", |d| {
            d == Some(1)
        })
        .await
    }

    /// The insert, then the retention trim only if it inserted.
    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let p = RecordParams::new(record);
        self.write_and_trim(&self.statements.insert_record, &p.params(), &record.job, "record a slot", |d| d.is_some())
            .await
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        self.ensure_schema().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<RecordRow> = self
            .sql
            .fetch_all(&self.statements.history, &[Param::Text(job), Param::Int(limit)], "read a job's history")
            .await?;
        rows.into_iter().map(|r| self.record(r)).collect()
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
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

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
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

    /// The control rows with a request pending alone (a scan of the control table, without
    /// the newest record of every job that [`jobs`](Self::jobs) reads).
    async fn pending_requests(&self, prefix: &str) -> BackendResult<Vec<String>> {
        self.ensure_schema().await?;
        let rows: Vec<ControlRow> =
            self.sql.fetch_all(&self.statements.pending_rows, &[], "read the run-now requests").await?;
        Ok(rows
            .into_iter()
            .map(|row| self.state(row, None))
            .filter(|s| s.trigger_pending_ms.is_some() && s.job.starts_with(prefix))
            .map(|s| s.job)
            .collect())
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        let s = self.statements;
        if let Some(call) = &s.calls.control {
            let was = self.control_by_call(call, job, 0, i64::from(paused), "pause or resume a job").await?;
            return Ok(was != 0);
        }
        self.control(job, "pause or resume a job", |row| {
            let was = row.1 != 0;
            ((was != paused).then_some((&s.set_paused, i64::from(paused))), was)
        })
        .await
    }

    /// A transaction on every dialect (see the module's documentation): the control row and
    /// the log are read locked, the core's request rule decides, its writes follow.
    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        self.ensure_schema().await?;
        let s = self.statements;
        let what = "trigger a job";
        let mut tx = self.begin(what).await?;
        macro_rules! exec {
            ($stmt:expr, $params:expr) => {{
                let args = self.args(&$stmt, &$params)?;
                sqlx::query_with($stmt.sql(), args).execute(&mut *tx).await.map_err(self.sql.err(what))?;
            }};
        }
        exec!(s.ensure_job, [Param::Text(job)]);
        exec!(s.keyed.ensure_log, [Param::Text(job)]);
        let args = self.args(&s.read_control, &[Param::Text(job), Param::Text(job)])?;
        let row: ControlRow =
            sqlx::query_as_with(s.read_control.sql(), args).fetch_one(&mut *tx).await.map_err(self.sql.err(what))?;
        let args = self.args(&s.keyed.read_logs, &[Param::Text(job), Param::Text(job)])?;
        let logs: Vec<(String, String)> =
            sqlx::query_as_with(s.keyed.read_logs.sql(), args).fetch_all(&mut *tx).await.map_err(self.sql.err(what))?;
        let log = logs.first().map(|l| RequestLog::decode(&l.1)).unwrap_or_default();
        let (answer, writes) = claim::request(&core_row(&row), &log, ask);
        let Some((next, log)) = writes else { return Ok(answer) };
        let slot = next.trigger_ms.unwrap_or(ask.at_ms);
        exec!(s.keyed.write_request, [Param::Text(job), Param::Int(next.trigger_id), Param::Int(slot)]);
        exec!(s.keyed.write_log, [Param::Text(job), Param::Text(&log.encode())]);
        exec!(s.bump_version, []);
        if let Some(notify) = &s.keyed.notify_control {
            exec!(notify, [Param::Text(job)]);
        }
        tx.commit().await.map_err(self.sql.err(what))?;
        Ok(answer)
    }

    async fn control_version(&self) -> BackendResult<u64> {
        self.ensure_schema().await?;
        let (v,): (i64,) = self.sql.fetch_one(&self.statements.version, &[], "read the control version").await?;
        self.sql.non_negative("control version", v)
    }

    /// Two statements, no transaction (no lock is held between
    /// them): the first drops this session's entry and every entry of a session no longer
    /// live, the second writes this one only if the session is live.
    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        let session = session.as_str();
        self.ensure_schema().await?;
        let s = self.statements;
        self.sql.execute(&s.registry_drop, &[Param::Text(session)], "publish the job registry").await?;
        let written = self
            .sql
            .execute(&s.registry_write, &[Param::Text(session), Param::Text(registry)], "publish the job registry")
            .await?;
        Ok(written == 1)
    }

    /// The entries of live sessions.
    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        self.ensure_schema().await?;
        let rows: Vec<(String, String)> =
            self.sql.fetch_all(&self.statements.registry_read, &[], "read the job registries").await?;
        Ok(rows.into_iter().map(|(s, r)| (SessionId::new(s), r)).collect())
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        self.control.as_ref().map(broadcast::Sender::subscribe)
    }

    fn retention(&self) -> usize {
        self.retention
    }

    fn keeping(&self, records: usize) -> crate::backend::job_store::SharedJobStore {
        let mut store = Self::with_retention(self.sql.clone(), records);
        store.control.clone_from(&self.control);
        store.records.clone_from(&self.records);
        crate::backend::job_store::SharedJobStore::new(store)
    }

    fn describe(&self) -> String {
        format!("{} (jobs store)", self.sql.description())
    }
}
