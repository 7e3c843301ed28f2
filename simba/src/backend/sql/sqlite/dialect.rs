//! All of SQLite's SQL: its spelling of the shared statements ([`SqliteDialect`]), the lease
//! schema (`schema.sql`), the jobs schema (`jobs_schema.sql`), and the statements only SQLite
//! runs (`renew.sql`, `digest.sql`, `take.sql`, `after_refusal.sql`, the `*_present.sql`
//! checks), each a file of this folder included at compile time. `{now}` and `:n` in them are
//! rendered by [`Stmt::render`](super::super::dialect::Stmt::render); nothing else is
//! substituted.

use std::sync::LazyLock;

use super::super::dialect::{Dialect, Placeholders, Shared, Stmt, script};
use super::super::jobs::{JobDialect, JobStatements, job_statements};
use super::super::schedules::{ScheduleDialect, ScheduleStatements, schedule_statements};

/// SQLite's spelling of the shared statements.
#[derive(Debug)]
pub(crate) struct SqliteDialect;

impl Dialect for SqliteDialect {
    type Db = sqlx::Sqlite;
    const NAME: &'static str = "SQLite";
    /// `unixepoch('subsec')` needs SQLite 3.42 or later; the bundled SQLite is newer. SQLite
    /// keeps "now" constant within one statement, so several uses in one statement agree.
    const NOW_MS: &'static str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
    const PLACEHOLDERS: Placeholders = Placeholders::Numbered('?');
    const KEEP_MEMBER: &'static str =
        "ON CONFLICT (group_name, session_id) DO UPDATE SET joined_at = simba_member.joined_at";
    const BEGIN: Option<&'static str> = Some(BEGIN_IMMEDIATE);
    /// One write lock and one commit for the collection and the insert.
    const OPEN_IN_TRANSACTION: bool = true;
    /// An in-memory database lives in its one connection: never close it.
    const DISCARD_IDLE: bool = false;
    /// One writer at a time (`BEGIN IMMEDIATE`): nothing changes between the raise and the
    /// delete, and a new row reads the floor in its own statement (`take.sql`).
    const REMOVE_IDLE: [&'static str; 3] = [
        "INSERT INTO simba_lease_floor (id, token) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO simba_lease_floor (id, token) SELECT 1, COALESCE(MAX(token), 0) FROM \
         (SELECT token FROM simba_lease WHERE session_id IS NULL AND last_slot IS NULL \
         AND COALESCE(acquired_at, 0) <= {now} - :2 AND substr(name, 1, length(:1)) = :1 \
         ORDER BY name LIMIT :3) WHERE true \
         ON CONFLICT (id) DO UPDATE SET token = MAX(token, excluded.token)",
        "DELETE FROM simba_lease WHERE name IN (SELECT name FROM simba_lease WHERE session_id IS NULL \
         AND last_slot IS NULL AND COALESCE(acquired_at, 0) <= {now} - :2 \
         AND substr(name, 1, length(:1)) = :1 \
         AND token <= (SELECT token FROM simba_lease_floor WHERE id = 1) ORDER BY name LIMIT :3)",
    ];

    fn rows_affected(done: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    fn statements() -> &'static Shared {
        static SHARED: LazyLock<Shared> = LazyLock::new(Shared::new::<SqliteDialect>);
        &SHARED
    }
}

impl JobDialect for SqliteDialect {
    const JOB_SCHEMA: &'static str = include_str!("jobs_schema.sql");
    const KEEP_ROW: &'static str = "ON CONFLICT DO NOTHING";
    /// `BEGIN IMMEDIATE` already holds the database's write lock.
    const LOCK_ROWS: &'static str = "";
    /// The same: no row locks in SQLite.
    const SHARE_ROWS: &'static str = "";
    const WRITE_AND_TRIM_IN_TRANSACTION: bool = true;
    const JOB_INDEXES: usize = 1;
    /// Read without the write lock, so that a process whose tables exist (every `simba`
    /// command, every node after the first) never waits for the file's write lock to start.
    const SCHEMA_PRESENT: &'static str = include_str!("jobs_schema_present.sql").trim_ascii_end();
    job_statements!(SqliteDialect);
}

impl ScheduleDialect for SqliteDialect {
    const SCHEDULE_SCHEMA: &'static str = include_str!("schedules_schema.sql");
    /// Read without the write lock, as the jobs tables' check.
    const SCHEDULE_SCHEMA_PRESENT: &'static str = include_str!("schedules_schema_present.sql").trim_ascii_end();
    const SCHEDULE_OBJECTS: usize = 8;
    const KEEP_SPACE: &'static str = "ON CONFLICT (space) DO NOTHING";
    const BUMP_CHANGE: &'static str =
        "ON CONFLICT (space, part) DO UPDATE SET counter = simba_schedule_change.counter + 1";
    schedule_statements!(SqliteDialect);
}

/// Schema, rule B3 (`schema.sql`). Every statement is idempotent, so any number of processes
/// may run it, at any time. Times are integer milliseconds on the database's clock. TEXT
/// compares with the BINARY collation, byte by byte, the order of
/// [`SessionId`](crate::backend::SessionId)'s `Ord`.
pub(super) static SCHEMA: LazyLock<Vec<&'static str>> = LazyLock::new(|| script(include_str!("schema.sql")));

/// How many of the tables and the index of [`SCHEMA`] exist.
pub(super) const SCHEMA_PRESENT: &str = include_str!("schema_present.sql").trim_ascii_end();

/// Takes SQLite's write lock before the first read of a read-then-write call.
pub(super) const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";

/// The statements only SQLite runs: renewal and acquisition.
pub(super) struct Own {
    /// `:1` session id (`renew.sql`). Renews a live session; an expired one is left alone and
    /// never comes back (S3). Returns the remaining lifetime measured by the database after the
    /// renewal.
    pub(super) renew: Stmt,
    /// `:1` session id (`digest.sql`). The digest of the leases listed for a session: count and
    /// the sums of the low and high 32-bit halves of their tokens, so that SQLite's `SUM`
    /// (which fails on integer overflow) cannot overflow. The server work is O(leases held)
    /// through the `session_id` index, but it is one statement and a constant-size reply (S1).
    pub(super) digest: Stmt,
    /// `:1` name, `:2` session id (`take.sql`). One statement, so one write lock and one
    /// commit: creates the lease with token 1, or takes it over when it is released or its
    /// holder's session is missing or expired, incrementing the token; only for a live caller
    /// (the `SELECT`'s `WHERE`, which also lets SQLite parse the upsert after a `SELECT`).
    /// Returns the new token only when this statement won the lease; `last_slot` is kept
    /// across terms so that a cron slot never runs twice.
    pub(super) take: Stmt,
    /// `:1` name, `:2` session id (`after_refusal.sql`), read after `take` took nothing:
    /// whether the caller is live, and the lease's holder and token. Not atomic with the take,
    /// and need not be: when the caller holds the lease now it held it then (nobody else gives
    /// it a lease), and any other answer is a refusal, which is never unsafe.
    pub(super) after_refusal: Stmt,
}

/// [`Own`], rendered once.
pub(super) static OWN: LazyLock<Own> = LazyLock::new(|| Own {
    renew: SqliteDialect::render(include_str!("renew.sql").trim_ascii_end()),
    digest: SqliteDialect::render(include_str!("digest.sql").trim_ascii_end()),
    take: SqliteDialect::render(include_str!("take.sql").trim_ascii_end()),
    after_refusal: SqliteDialect::render(include_str!("after_refusal.sql").trim_ascii_end()),
});
