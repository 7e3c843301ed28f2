//! All of PostgreSQL's SQL: its spelling of the shared statements ([`PgDialect`]), the lease
//! schema (`schema.sql`) and acquisition function (`acquire_v1.sql`), the jobs schema
//! (`jobs_schema.sql`) and routines (`claim_run_v2.sql`, `claim_schedule_v2.sql`,
//! `job_control_v2.sql`) with their calls,
//! and the statements only PostgreSQL runs (`keep_alive.sql`, `acquire.sql`, `open_session.sql`,
//! `release.sql`, `close.sql`, the `*_present.sql` checks and the schema locks), each a file of
//! this folder included at compile time. `{now}` and `:n` in them are rendered by
//! [`Stmt::render`] (routines: `{now}` only); `open_session.sql` is the one text with more
//! substitutions, written by [`open_statement`].

use std::sync::LazyLock;

use super::super::dialect::{Dialect, Placeholders, Shared, Stmt, script};
use super::super::jobs::{JobDialect, JobStatements, job_statements};
use super::super::schedules::{ScheduleDialect, ScheduleStatements, schedule_statements};
use crate::backend::SessionId;

/// PostgreSQL's spelling of the shared statements: release and close notify the names they
/// free, and the multi-table calls are one statement each.
#[derive(Debug)]
pub(crate) struct PgDialect;

impl Dialect for PgDialect {
    type Db = sqlx::Postgres;
    const NAME: &'static str = "PostgreSQL";
    const NOW_MS: &'static str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
    const PLACEHOLDERS: Placeholders = Placeholders::Numbered('$');
    const KEEP_MEMBER: &'static str =
        "ON CONFLICT (group_name, session_id) DO UPDATE SET joined_at = simba_member.joined_at";
    /// Notifies [`RELEASE_CHANNEL`](super::RELEASE_CHANNEL); the `SELECT` returns (and counts) one row when it freed
    /// the lease.
    const RELEASE: &'static str = include_str!("release.sql").trim_ascii_end();
    /// One statement, notifying each freed lease. Leases are locked before the session row
    /// (the `One-Time Filter` runs the CTEs before the delete scans), the order acquisition
    /// uses.
    const CLOSE: &'static [&'static str] = &[include_str!("close.sql").trim_ascii_end()];
    /// The floor's row is locked by the raise (an upsert that always updates it); the trigger
    /// of a new row reads the floor `FOR SHARE`, which waits for that lock.
    const REMOVE_IDLE: [&'static str; 3] = [
        "INSERT INTO simba_lease_floor (id, token) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO simba_lease_floor (id, token) SELECT 1, COALESCE(MAX(c.token), 0) FROM \
         (SELECT token FROM simba_lease WHERE session_id IS NULL AND last_slot IS NULL \
         AND COALESCE(acquired_at, 0) <= {now} - :2 AND substr(name, 1, char_length(:1)) = :1 \
         ORDER BY name LIMIT :3) c \
         ON CONFLICT (id) DO UPDATE SET token = GREATEST(simba_lease_floor.token, excluded.token)",
        "DELETE FROM simba_lease WHERE name IN (SELECT name FROM simba_lease WHERE session_id IS NULL \
         AND last_slot IS NULL AND COALESCE(acquired_at, 0) <= {now} - :2 \
         AND substr(name, 1, char_length(:1)) = :1 \
         AND token <= (SELECT token FROM simba_lease_floor WHERE id = 1) ORDER BY name LIMIT :3) \
         AND session_id IS NULL AND last_slot IS NULL AND token <= (SELECT token FROM simba_lease_floor WHERE id = 1)",
    ];

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn statements() -> &'static Shared {
        static SHARED: LazyLock<Shared> = LazyLock::new(Shared::new::<PgDialect>);
        &SHARED
    }
}

/// The tables of the schema (`schema.sql`), rule B3 (the acquisition function follows them, see
/// [`schema`]). Every statement is idempotent; [`SCHEMA_LOCK`] serialises concurrent
/// creators, because two concurrent `CREATE TABLE IF NOT EXISTS` of the same table can fail
/// in PostgreSQL. `COLLATE "C"` compares names and ids byte by byte, as [`SessionId`]'s `Ord`
/// does, whatever the database's default collation.
pub(super) static TABLES: LazyLock<Vec<&'static str>> = LazyLock::new(|| script(include_str!("schema.sql")));

/// The whole schema: [`TABLES`], the acquisition function, then the token floor's function and
/// trigger.
pub(super) fn schema() -> Vec<&'static str> {
    let mut all = TABLES.clone();
    all.push(OWN.acquire_function.sql());
    all.push(FLOOR_FUNCTION);
    all.extend(FLOOR_TRIGGER.iter());
    all
}

/// `simba_lease_floor_v1()`, the trigger function that starts a new lease row above the token
/// floor (B3, T3): a row's first token is its first win. It reads the floor `FOR SHARE`, which
/// conflicts with the lock a removal of idle leases holds on the floor's row until it commits,
/// and (in READ COMMITTED) then reads the floor that removal wrote. A row inserted by a node of
/// a version without the floor goes through it too.
const FLOOR_FUNCTION: &str = include_str!("lease_floor_v1.sql").trim_ascii_end();

/// The trigger of [`FLOOR_FUNCTION`] on `simba_lease` (dropped and created again).
static FLOOR_TRIGGER: LazyLock<Vec<&'static str>> = LazyLock::new(|| script(include_str!("lease_floor_trigger.sql")));

/// Whether every table and index exists (on the search path). When they do, no DDL runs, so
/// a user with only `SELECT, INSERT, UPDATE, DELETE` on the tables can connect.
pub(super) const SCHEMA_PRESENT: &str = include_str!("schema_present.sql").trim_ascii_end();

/// The durability of commits for this connection. With `off`, a server crash loses the last
/// commits, so a token already handed out could be handed out again (T3); the backend's own
/// connections turn it on (or keep a stronger setting).
pub(super) const SYNCHRONOUS_COMMIT: &str = include_str!("synchronous_commit.sql").trim_ascii_end();

/// A transaction-scoped advisory lock (an arbitrary constant key) held while creating the
/// schema.
pub(super) const SCHEMA_LOCK: &str = include_str!("schema_lock.sql").trim_ascii_end();

/// `:1` session id. Renews a live session (an expired one is left alone and never comes back,
/// S3) and, in the same statement, computes the digest of the leases listed for it: count and
/// the sums of the low and high 32-bit halves of their tokens (`sum(bigint)` is `numeric`; each
/// half sum fits in `bigint`). No row when the session has expired or was closed.
///
/// The digest reads the statement's snapshot: a takeover committed while the renewal runs
/// shows at the next renewal. A takeover needs the session expired on the database's clock,
/// so such a reply arrives after the client's local deadline, and the engine discards it (D3).
const KEEP_ALIVE: &str = include_str!("keep_alive.sql").trim_ascii_end();

/// `simba_acquire_v1(name, session)`: acquisition in one round trip (S1). Three statements,
/// each with its own snapshot (a `VOLATILE` function's statements do not share the calling
/// query's snapshot):
///
/// 1. Without locks, whether the session is live, the lease's holder, and whether the holder
///    is live: enough to answer `Expired` (`o_live` false) or `Held` (`o_token` NULL).
/// 2. Locks the lease row (`SELECT ... FOR UPDATE`: no new row version) and reads its holder
///    and token as of the lock (the newest committed version). A missing row is created
///    already taken, with token 1, if the caller is live (`ON CONFLICT DO NOTHING`: when
///    another caller created it meanwhile, lock that one instead).
/// 3. A statement that starts after the lock, so its snapshot includes every commit of the
///    holder before it: takes the lease, incrementing the token, when the session is live and
///    the holder is none, missing, or expired. An expired holder's row is sealed (rewritten)
///    so that a renewal waiting for it fails (S3).
///
/// A retry after a lost reply finds the lease already ours: same term, same token. The lock
/// is held until the calling statement's transaction ends, that is when the call returns.
/// The `_v1` suffix versions the body: a changed body gets a new name, so that nodes of two
/// versions never run each other's.
const ACQUIRE_FUNCTION: &str = include_str!("acquire_v1.sql").trim_ascii_end();

/// `:1` name, `:2` session id: acquisition in one round trip (S1), with a fast path for a
/// released lease. The data-modifying CTE takes the lease when its row says
/// released (`session_id IS NULL`) and the caller's session is live: one statement, the cost of
/// the raw primitive's conditional `UPDATE`. Only when it took nothing does
/// [`ACQUIRE_FUNCTION`] run (the `NOT EXISTS` is a one-time filter, evaluated before the
/// function is called): a missing row, a held lease, an expired holder, or a retry of a call
/// that already won.
///
/// The fast path needs none of the function's care. A released row has no holder whose
/// liveness a stale snapshot could misjudge, and no session to seal. When another caller takes
/// the row first, the `UPDATE` waits for its lock and re-checks `session_id IS NULL` on the
/// newest version (READ COMMITTED), finds it held, takes nothing, and the function answers
/// from fresh snapshots. The caller's own liveness is read as in the function's last step.
const ACQUIRE: &str = include_str!("acquire.sql").trim_ascii_end();

/// Opens a session in one statement (S1): collects the sessions dead for longer than the
/// grace period (`{grace}` ms) with their memberships, clears their leases' holder (lease rows
/// are kept: T3), and inserts session `{id}` with lifetime `{ttl}` ms. The session rows are
/// deleted only after the leases are updated (the `One-Time Filter` runs the CTEs first), the
/// lock order of acquisition (lease row, then session row), so the two cannot deadlock.
///
/// Sent with the simple query protocol, so `{id}` and `{ttl}` are written into the text:
/// [`open_statement`] does it, and only with a generated id (hexadecimal digits).
const OPEN: &str = include_str!("open_session.sql").trim_ascii_end();

/// [`OPEN`] for session `id` with lifetime `ttl_ms`, or `None` for an id this backend did not
/// generate (32 lowercase hexadecimal digits), which must not be written into SQL text.
pub(super) fn open_statement(id: &SessionId, ttl_ms: i64) -> Option<String> {
    static TEMPLATE: LazyLock<String> = LazyLock::new(|| {
        OPEN.replace("{now}", PgDialect::NOW_MS).replace("{grace}", &super::super::GC_GRACE_MS.to_string())
    });
    super::super::is_generated_id(id)
        .then(|| TEMPLATE.replace("{id}", id.as_str()).replace("{ttl}", &ttl_ms.to_string()))
}

/// The statements only PostgreSQL runs, rendered once.
pub(super) struct Own {
    /// [`KEEP_ALIVE`].
    pub(super) keep_alive: Stmt,
    /// [`ACQUIRE_FUNCTION`].
    pub(super) acquire_function: Stmt,
    /// `:1` name, `:2` session id: the function's answer.
    pub(super) acquire: Stmt,
}

/// [`Own`], rendered once.
pub(super) static OWN: LazyLock<Own> = LazyLock::new(|| Own {
    keep_alive: PgDialect::render(KEEP_ALIVE),
    acquire_function: PgDialect::render(ACQUIRE_FUNCTION),
    acquire: PgDialect::render(ACQUIRE),
});

impl JobDialect for PgDialect {
    const JOB_SCHEMA: &'static str = include_str!("jobs_schema.sql");
    const KEEP_ROW: &'static str = "ON CONFLICT DO NOTHING";
    const ADVISORY_LOCK: Option<&'static str> = Some(include_str!("jobs_schema_lock.sql").trim_ascii_end());
    const ROUTINES: &'static [&'static str] = &[
        PG_CLAIM_FUNCTION,
        PG_CONTROL_FUNCTION,
        PG_SCHEDULE_CLAIM_FUNCTION,
        PG_SCHEDULE_BATCH_FUNCTION,
        PG_FINISH_BATCH_FUNCTION,
    ];
    const CLAIM_CALL: Option<&'static str> = Some(include_str!("claim_call.sql").trim_ascii_end());
    const FINISH_WITH_TRIM: bool = true;
    const SCHEDULE_CLAIM_CALL: Option<&'static str> = Some(include_str!("claim_schedule_call.sql").trim_ascii_end());
    const SCHEDULE_BATCH_CALL: Option<&'static str> = Some(include_str!("claim_schedules_call.sql").trim_ascii_end());
    const FINISH_BATCH_CALL: Option<&'static str> = Some(include_str!("finish_batch.sql").trim_ascii_end());
    const CONTROL_CALL: Option<&'static str> = Some(include_str!("control_call.sql").trim_ascii_end());
    const JOB_INDEXES: usize = 1;
    const SCHEMA_PRESENT: &'static str = include_str!("jobs_schema_present.sql").trim_ascii_end();
    const NOTIFY_CONTROL: Option<&'static str> = Some("SELECT pg_notify('simba_job_control', :1)");
    job_statements!(PgDialect);
}

impl ScheduleDialect for PgDialect {
    const SCHEDULE_SCHEMA: &'static str = include_str!("schedules_schema.sql");
    const SCHEDULE_SCHEMA_PRESENT: &'static str = include_str!("schedules_schema_present.sql").trim_ascii_end();
    const SCHEDULE_OBJECTS: usize = 8;
    const KEEP_SPACE: &'static str = "ON CONFLICT (space) DO NOTHING";
    const BUMP_CHANGE: &'static str =
        "ON CONFLICT (space, part) DO UPDATE SET counter = simba_schedule_change.counter + 1";
    const NOTIFY_CHANGES: Option<&'static str> = Some("SELECT pg_notify('simba_schedules', :1)");
    schedule_statements!(PgDialect);
}

/// The claim on PostgreSQL: one call of a PL/pgSQL function, so the claim's row locks live
/// only while the server runs it (ADR 0012, "Amendment: the SQL claim in one round
/// trip"). The steps and their order are the transaction's that SQLite runs statement by
/// statement (`SqlJobStore::claim`): an unlocked look at the lease (a non-holder is answered
/// before anything is written or locked), the job's control row created if absent, the job's
/// and its group's control rows locked (in key order, as the older build's `SELECT ... FOR
/// UPDATE` of both), the decision, the writes, and last the fence that locks the lease row.
/// An answer that writes nothing (not the holder, already claimed, paused manual slot) undoes
/// what the call wrote by raising `SB001` inside the inner block (a subtransaction), whose
/// handler keeps the answer. The decision between the reads and the writes is the core's claim rule,
/// [`simba_core::claim::decide`], written in PL/pgSQL: that function is the reference this one
/// follows (its unit tests give the exact answers and writes), and the conformance suite
/// (`simba::tck::jobs`) checks both agree. A `VOLATILE` function takes a new snapshot per statement, so
/// each statement sees what the rows it waited for committed. `_v2`: a changed body gets a
/// new name, so nodes of two builds never run each other's (`_v1` also dropped the records
/// past retention; the trim now follows a finish or an append instead, so the claim's locks
/// are held for its own rows only; a database keeps `_v1` for the nodes of an older build).
const PG_CLAIM_FUNCTION: &str = include_str!("claim_run_v2.sql").trim_ascii_end();

/// A schedule's slot claimed on PostgreSQL (rule A5): one call of a PL/pgSQL function, the
/// steps of the claim's transaction for `Ask::ScheduleSlot` ([`simba_core::claim::decide`] is
/// the reference; the conformance suite checks both agree): first the fence, which
/// share-locks the partition's lease row if the session still holds it and is live (the
/// claims of one partition's many schedules do not queue behind each other's commits, and a
/// takeover waits for them), then the schedule's control row created if absent, the group row
/// `schedule` (every schedule's pause) share-locked and the schedule's own row locked (key
/// order, as the other claims lock them), the check against the schedule's own last slot
/// only, the ledger moved, and the `running` record written unless paused. One round trip,
/// where the transaction took eight.
///
/// `_v2`: `_v1` checked the fence last and undid its writes by raising an error inside an
/// inner block when it failed; each such block is a subtransaction, and a batch of more than
/// 64 claims (PostgreSQL's cache of subtransaction ids per backend) made every snapshot on
/// the server look its transactions up in `pg_subtrans` while the batch ran. With the fence
/// first, an answer that writes nothing has written nothing to undo. The `running` record
/// replaces a record of the slot in one statement (`_v1`: a `DELETE`, then an `INSERT` that
/// failed on the key when a record of the slot, the node's `missed` for a claim whose answer
/// came too late, was written between the two, and with it every claim of the batch).
const PG_SCHEDULE_CLAIM_FUNCTION: &str = include_str!("claim_schedule_v2.sql").trim_ascii_end();

/// Schedule slots claimed together on PostgreSQL (rule A5, ADR 0020): a JSON array of claims,
/// each one [`PG_SCHEDULE_CLAIM_FUNCTION`]'s call, in the order of their job (every batch
/// locks the schedules' rows in one order, so two batches never wait for each other in a
/// circle), in one transaction: one round trip and one commit for a whole batch. Each answers
/// a row `(index, result, slot)`.
const PG_SCHEDULE_BATCH_FUNCTION: &str = include_str!("claim_schedules_v2.sql").trim_ascii_end();

/// End records written together on PostgreSQL: a JSON array of records, each updated where its
/// job, kind, slot and token match and then its job's history trimmed to the retention, one by
/// one in job order (each step a seek in the indexes; a join of the array with the records'
/// table was planned as two scans of the whole table per batch), in one transaction. Answers
/// the index of each record it updated.
const PG_FINISH_BATCH_FUNCTION: &str = include_str!("finish_runs_v1.sql").trim_ascii_end();

/// Pause, resume and run-now requests on PostgreSQL: one call (the control row is locked
/// only while the server runs it). `p_op` 0: set `paused` to `p_value`, answering the old
/// flag; 1: a run-now request at `p_value`, answering its id. Every change bumps the control
/// version and notifies the job's name on `simba_job_control`
/// ([`CONTROL_CHANNEL`](super::CONTROL_CHANNEL)), delivered to every listening
/// backend when the call commits: the holder hears a run-now request at once instead of at its
/// next poll of the version. `_v2`: `_v1` did not notify.
const PG_CONTROL_FUNCTION: &str = include_str!("job_control_v2.sql").trim_ascii_end();
