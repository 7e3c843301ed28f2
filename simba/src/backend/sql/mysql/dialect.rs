//! All of MySQL's and MariaDB's SQL: its spelling of the shared statements ([`MySqlDialect`]),
//! the lease schema (`schema.sql`) and acquisition procedure (`acquire_v1.sql`), the jobs schema
//! (`jobs_schema.sql`) and procedures (`claim_run_v2.sql`, `claim_schedule_v1.sql`,
//! `job_control_v1.sql`, `trim_runs_v1.sql`) with their calls, and the statements only MySQL runs (`keep_alive.sql`,
//! `take_free.sql`, `acquire.sql`, the `*_present.sql` checks), each a file of this folder
//! included at compile time. `{now}` and `:n` in them are rendered by [`Stmt::render`]
//! (routines: `{now}` only); `keep_alive.sql` is the one text with more substitutions, written
//! by [`keep_alive_sql`].

use std::sync::LazyLock;

use super::super::dialect::{Dialect, Placeholders, Shared, Stmt, script};
use super::super::jobs::{JobDialect, JobStatements, job_statements};
use super::super::schedules::{ScheduleDialect, ScheduleStatements, schedule_statements};
use crate::backend::{HeldDigest, SessionId};

/// MySQL's spelling of the shared statements: positional `?` and `ON DUPLICATE KEY UPDATE`;
/// release, close and the collection of dead sessions are the defaults (no `RETURNING`, no
/// DML in CTEs), close in one transaction.
#[derive(Debug)]
pub(crate) struct MySqlDialect;

impl Dialect for MySqlDialect {
    type Db = sqlx::MySql;
    const NAME: &'static str = "MySQL";
    const NOW_MS: &'static str = "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)";
    const PLACEHOLDERS: Placeholders = Placeholders::Positional;
    /// sqlx sets `CLIENT_FOUND_ROWS`, so a row that already existed counts as affected.
    const KEEP_MEMBER: &'static str = "ON DUPLICATE KEY UPDATE joined_at = joined_at";
    /// The raise locks the floor's row (an upsert); the trigger of a new row reads it `LOCK IN
    /// SHARE MODE`, which waits for that lock. The delete re-checks every condition on the
    /// rows it locks.
    const REMOVE_IDLE: [&'static str; 3] = [
        "INSERT IGNORE INTO simba_lease_floor (id, token) VALUES (1, 0)",
        "INSERT INTO simba_lease_floor (id, token) SELECT 1, COALESCE(MAX(c.token), 0) FROM \
         (SELECT token FROM simba_lease WHERE session_id IS NULL AND last_slot IS NULL \
         AND COALESCE(acquired_at, 0) <= {now} - :2 AND SUBSTRING(name, 1, CHAR_LENGTH(:1)) = :1 \
         ORDER BY name LIMIT :3) c \
         ON DUPLICATE KEY UPDATE token = GREATEST(simba_lease_floor.token, VALUES(token))",
        "DELETE FROM simba_lease WHERE session_id IS NULL AND last_slot IS NULL \
         AND COALESCE(acquired_at, 0) <= {now} - :2 AND SUBSTRING(name, 1, CHAR_LENGTH(:1)) = :1 \
         AND token <= (SELECT f.token FROM simba_lease_floor f WHERE f.id = 1) ORDER BY name LIMIT :3",
    ];

    fn rows_affected(done: &sqlx::mysql::MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    fn statements() -> &'static Shared {
        static SHARED: LazyLock<Shared> = LazyLock::new(Shared::new::<MySqlDialect>);
        &SHARED
    }
}

/// Schema (`schema.sql`), rule B3. Every statement is idempotent and MySQL serialises concurrent
/// `CREATE TABLE IF NOT EXISTS` of one table, so any number of processes may run it at once.
/// InnoDB is required: row locks and transactions.
pub(super) static SCHEMA: LazyLock<Vec<&'static str>> = LazyLock::new(|| script(include_str!("schema.sql")));

/// How many of the tables exist, the connection's time zone, and InnoDB's commit
/// durability. When all three tables exist no DDL runs, so a user with only `SELECT, INSERT,
/// UPDATE, DELETE` on them can connect.
pub(super) const SCHEMA_PRESENT: &str = include_str!("schema_present.sql").trim_ascii_end();

/// The keep-alive batch, with `{id}`, `{count}` and `{sum}` filled in by [`keep_alive_sql`].
/// The `UPDATE` renews a live session (an expired one is left alone and never comes back, S3);
/// the `SELECT`, a new snapshot in autocommit mode, returns a row only if the session is live
/// (so it was just renewed), with the remaining time and whether the leases listed for the
/// session have the client's digest. The wrapping sum of tokens is computed exactly in
/// `DECIMAL` from the sums of their 32-bit halves.
const KEEP_ALIVE: &str = include_str!("keep_alive.sql").trim_ascii_end();

/// The acquisition procedure, created with the tables, in one round trip (S1):
///
/// 1. Without locks, whether the caller's session is live, the lease's holder, and whether
///    the holder is live: enough to answer `Expired` or `Held`.
/// 2. Otherwise, in a transaction: create the lease row if missing (free, token 0; not
///    `INSERT IGNORE`, which would turn a too-long name into a silent truncation) or lock it;
///    read its holder and token `FOR UPDATE` (InnoDB's locking reads see the newest committed
///    rows, whatever the REPEATABLE READ snapshot holds); lock both session rows in key order
///    (`WHERE id IN (...)`, so two acquisitions cannot deadlock on them) and read whether they
///    are live; take the lease if the holder is none, missing or expired (the new token is the
///    one read under the lock plus one). Holding the expired holder's session row makes a
///    renewal of it that waited re-check its expiry with a fresh clock and fail (S3).
///
/// Its answer is one row: whether the caller's session is live, and the token won (NULL:
/// held). A retry after a lost reply finds the lease already ours: same term, same token.
///
/// `SQL SECURITY INVOKER`: it runs with the caller's rights on the tables, never more. On
/// any error it rolls back and re-raises, so the client sees a deadlock or a lock wait
/// timeout as before and tries again. Parameters and variables are `utf8mb4_bin` like the
/// columns, whatever the database's default collation. The `_v1` suffix versions the body.
const ACQUIRE_PROCEDURE: &str = include_str!("acquire_v1.sql").trim_ascii_end();

/// Whether the acquisition procedure exists in the current database.
pub(super) const PROCEDURE_PRESENT: &str = include_str!("procedure_present.sql").trim_ascii_end();

/// The trigger that starts a new lease row at the token floor (B3, T3): a row's token is the
/// last one handed out for its name, so a new row holds at least the floor and its first win
/// is above it. Created after the tables, like the procedure (and, like it, not preparable);
/// it reads the floor `LOCK IN SHARE MODE`, so an insert waits for a removal that holds the
/// floor and reads what it wrote. Nodes of a version without the floor insert through it too.
pub(super) const FLOOR_TRIGGER: &str = include_str!("lease_floor_v1.sql").trim_ascii_end();

/// Whether [`FLOOR_TRIGGER`] exists.
pub(super) const TRIGGER_PRESENT: &str = include_str!("trigger_present.sql").trim_ascii_end();

/// The statements only MySQL runs, rendered once.
pub(super) struct Own {
    /// [`KEEP_ALIVE`], before [`keep_alive_sql`] fills it in.
    pub(super) keep_alive: Stmt,
    /// [`ACQUIRE_PROCEDURE`].
    pub(super) procedure: Stmt,
    /// `:1` name, `:2` session id: [`ACQUIRE_PROCEDURE`]'s answer.
    pub(super) acquire: Stmt,
    /// `:1` name, `:2` session id. The fast path of acquisition (BENCHMARKS.md P2): ONE statement
    /// that takes a lease whose row exists and is released, for a live caller; the new token
    /// comes back as the reply's last insert id (`LAST_INSERT_ID(expr)`). An `UPDATE` reads
    /// the newest committed lease row under its exclusive lock, and InnoDB reads the
    /// subquery's session row with a shared lock (a current read, not the REPEATABLE READ
    /// snapshot, ADR 0002), so a caller that expired or closed meanwhile never wins. Any
    /// other case (no row yet, a holder, a dead holder whose session row must be locked, S3;
    /// a retry that already holds it) matches no row and goes to the procedure.
    pub(super) take_free: Stmt,
}

/// [`Own`], rendered once.
pub(super) static OWN: LazyLock<Own> = LazyLock::new(|| Own {
    keep_alive: MySqlDialect::render(KEEP_ALIVE),
    procedure: MySqlDialect::render(ACQUIRE_PROCEDURE),
    acquire: MySqlDialect::render(include_str!("acquire.sql").trim_ascii_end()),
    take_free: MySqlDialect::render(include_str!("take_free.sql").trim_ascii_end()),
});

/// The keep-alive batch for `session` and the client's digest. The numbers are zero-padded to
/// 20 digits (a `u64` has at most 20) so that the request has the same size whatever they are.
pub(super) fn keep_alive_sql(session: &SessionId, held: HeldDigest) -> String {
    OWN.keep_alive
        .sql()
        .replace("{id}", session.as_str())
        .replace("{count}", &format!("{:020}", held.count))
        .replace("{sum}", &format!("{:020}", held.token_sum))
}

impl JobDialect for MySqlDialect {
    const JOB_SCHEMA: &'static str = include_str!("jobs_schema.sql");
    const KEEP_ROW: &'static str = "ON DUPLICATE KEY UPDATE job = job";
    /// MariaDB has no `FOR SHARE` (MySQL 8 has both).
    const SHARE_ROWS: &'static str = " LOCK IN SHARE MODE";
    const ROUTINES: &'static [&'static str] =
        &[MYSQL_CLAIM_PROCEDURE, MYSQL_CONTROL_PROCEDURE, MYSQL_TRIM_PROCEDURE, MYSQL_SCHEDULE_CLAIM_PROCEDURE];
    const CLAIM_CALL: Option<&'static str> = Some(include_str!("claim_call.sql").trim_ascii_end());
    const SCHEDULE_CLAIM_CALL: Option<&'static str> = Some(include_str!("claim_schedule_call.sql").trim_ascii_end());
    const CONTROL_CALL: Option<&'static str> = Some(include_str!("control_call.sql").trim_ascii_end());
    const RETAIN: &'static str = include_str!("retain.sql").trim_ascii_end();
    const SCHEMA_PRESENT: &'static str = include_str!("jobs_schema_present.sql").trim_ascii_end();
    const SCRIPT_DELIMITER: bool = true;
    job_statements!(MySqlDialect);
}

impl ScheduleDialect for MySqlDialect {
    const SCHEDULE_SCHEMA: &'static str = include_str!("schedules_schema.sql");
    const SCHEDULE_SCHEMA_PRESENT: &'static str = include_str!("schedules_schema_present.sql").trim_ascii_end();
    /// The four tables (their indexes are part of them).
    const SCHEDULE_OBJECTS: usize = 4;
    /// An existing row is locked by the update of nothing, as the upsert of a new one.
    const KEEP_SPACE: &'static str = "ON DUPLICATE KEY UPDATE space = space";
    const BUMP_CHANGE: &'static str = "ON DUPLICATE KEY UPDATE counter = counter + 1";
    schedule_statements!(MySqlDialect);
}

/// The claim on MySQL/MariaDB: one `CALL` of a stored procedure, whose transaction starts and
/// ends inside the server, so the claim's row locks live only while the server runs it (issue
/// 12; ADR 0012, "Amendment: the SQL claim in one round trip"). The same steps in the same
/// order as the PostgreSQL function and the transaction SQLite runs (`SqlJobStore::claim`);
/// an answer that writes nothing rolls back. The decision between the reads and the writes is
/// the core's claim rule, [`simba_core::claim::decide`], written in SQL: that function is the
/// reference this procedure follows, and the conformance suite (`simba::tck::jobs`) checks both
/// agree. The fence is a locking read of the lease row
/// (`FOR UPDATE`, not an `UPDATE ... SET token = token`, whose affected-row count depends on
/// the connection's `CLIENT_FOUND_ROWS`). Any error rolls back and is raised again. The
/// answer is the procedure's one result set `(result, slot)`. Created with `IF NOT EXISTS`
/// (MariaDB 10.1.3, MySQL 8.0.29); `_v2`: a changed body gets a new name (`_v1` also dropped
/// the records past retention, as PostgreSQL's; a database keeps it for older nodes).
const MYSQL_CLAIM_PROCEDURE: &str = include_str!("claim_run_v2.sql").trim_ascii_end();

/// A schedule's slot claimed on MySQL/MariaDB (rule A5): one `CALL`, the steps of
/// PostgreSQL's `simba_claim_schedule_v1` in one transaction inside the server
/// ([`simba_core::claim::decide`]'s `Ask::ScheduleSlot` is the reference): the group row
/// `schedule` share-locked, then the schedule's own row locked, the check against its own last
/// slot, and the fence last, which share-locks the partition's lease row (`LOCK IN SHARE MODE`)
/// so that the claims of one partition's schedules do not wait for each other's commits.
const MYSQL_SCHEDULE_CLAIM_PROCEDURE: &str = include_str!("claim_schedule_v1.sql").trim_ascii_end();

/// Pause, resume and run-now requests on MySQL/MariaDB: one `CALL`, its transaction inside
/// the server. Operations and answer as PostgreSQL's `simba_job_control_v2` (which also notifies). `trigger_ms` is
/// assigned first: MySQL evaluates assignments left to right, on the new values.
const MYSQL_CONTROL_PROCEDURE: &str = include_str!("job_control_v1.sql").trim_ascii_end();

/// The retention trim on MySQL/MariaDB ([`JobDialect::RETAIN`]): one `CALL`. The boundary is
/// read into variables first, which the `DELETE` then sees as constants, so it removes the
/// records before it by a range of the `(job, slot_ms)` index (InnoDB appends the key's `kind`
/// to it, which orders the boundary's read without a sort; `FORCE INDEX`: MariaDB otherwise
/// sorts the primary key's rows). One statement could not do it: MySQL reads the table a
/// `DELETE` writes only through a materialised derived table, and then scans every record of
/// the job to compare it with the boundary. No boundary (fewer records than kept): nothing to do.
const MYSQL_TRIM_PROCEDURE: &str = include_str!("trim_runs_v1.sql").trim_ascii_end();
