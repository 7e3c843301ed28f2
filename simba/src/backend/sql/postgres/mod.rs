//! The PostgreSQL backend (feature `postgres`): sessions, leases and group memberships in
//! three tables of one database, shared by every node; releases broadcast with
//! `LISTEN`/`NOTIFY`.
//!
//! Data model (rule B3, ADR 0002): the same three tables as the SQLite backend,
//! `simba_session`, `simba_lease` and `simba_member`, created on connect. Lease rows are never
//! deleted, so a lease's token never resets (T3); releasing a lease only clears its
//! `session_id`. Times are `BIGINT` milliseconds since the Unix epoch. The calls all SQL
//! backends run alike are in the shared SQL module (ADR 0002); this module keeps connecting,
//! the schema, opening a session (with the collection of dead sessions), renewal, acquisition
//! and the release listener, and its own spelling of release and close (one statement each,
//! with `NOTIFY`).
//!
//! Time is the database's clock (B2): every "now" is `clock_timestamp()`, read when the
//! expression runs. `now()` would not do: it is frozen at the start of the transaction, so a
//! call that waited on a lock could renew a session that expired meanwhile (breaking S3).
//!
//! Round trips per call (S1): every call is ONE statement (data-modifying CTEs where several
//! tables change). Opening a session (`OPEN`) is sent with the simple query protocol, its
//! arguments written into the text, so that it is one round trip even on a connection that has
//! not prepared it: the first call of a process, or the one after a timed-out call dropped
//! its connection. Over a slow link a prepared statement costs a second round trip there,
//! and a session must open within `renew_interval`. Acquire first takes a released lease with
//! one conditional `UPDATE` (the fast path, `ACQUIRE`); in the same statement, only when that
//! took nothing, it calls the function `simba_acquire_v1`, created with the tables: it
//! answers `Held` or `Expired` with one read; only when the lease looks free or already ours
//! does it lock the lease row, then check and take it. Under READ COMMITTED a statement's
//! subqueries read the snapshot taken when it started, even after it waited for a row lock,
//! so the liveness of the holder is checked by a statement that starts after the lease row is
//! locked (see ADR 0002); a `VOLATILE` PL/pgSQL function takes a new snapshot for each of its
//! statements, so the three steps keep that order inside one round trip. Taking a lease
//! from an expired holder also rewrites the holder's session row ("sealing" it): a renewal of
//! that session that started before, and waited for the row, re-checks its expiry with a
//! fresh clock and fails, so the expired session never comes back (S3). Renewals run on a
//! connection of their own, outside the pool, so that no pool ping follows them.
//!
//! Releases: `release` and `close_session` call `pg_notify('simba_released', name)` for every
//! lease they free, delivered when they commit. Each backend instance runs one background
//! task that `LISTEN`s on its own connection, reconnects when the connection drops, and feeds
//! [`subscribe_releases`](Backend::subscribe_releases); the task ends with the backend's last
//! clone. A notification lost while reconnecting only delays a candidate to its next attempt.
//!
//! Job control: the jobs store's pause, resume and run-now routine notifies
//! [`CONTROL_CHANNEL`] with the job's name, and the same listener, on the same connection,
//! forwards those names to the jobs store's
//! [`subscribe_control`](crate::job_store::JobStore::subscribe_control), so a holder hears a
//! run-now request when it commits rather than at its next poll of the control version. After
//! the listener reconnects it sends an empty name, once it listens again: the changes made
//! while it was away were not notified to it, so a subscriber reads the control version again.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::dialect::{Dialect, Placeholders, Shared, Stmt};
use super::server::{self, CONNECT_TIMEOUT, LOCK_WAIT_MS, describe, schema_missing, schema_script};
use super::{SqlStore, digest};
use crate::backend::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

mod listen;

/// The channel that `release` and `close_session` notify with the freed lease's name.
pub const RELEASE_CHANNEL: &str = "simba_released";

/// The channel that the jobs store's control routine (pause, resume, run now) notifies with
/// the job's name.
pub const CONTROL_CHANNEL: &str = "simba_job_control";

/// Capacity of the release broadcast; a subscriber that falls further behind skips names
/// (and then relies on its next attempt).
const RELEASE_BUFFER: usize = 1024;

/// Connections in the pool. The engine has at most one keep-alive and one acquisition per
/// election in flight; more calls wait for a connection.
const MAX_CONNECTIONS: u32 = 10;

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
    /// Notifies [`RELEASE_CHANNEL`]; the `SELECT` returns (and counts) one row when it freed
    /// the lease.
    const RELEASE: &'static str = "WITH freed AS (UPDATE simba_lease SET session_id = NULL \
         WHERE name = :1 AND session_id = :2 AND token = :3 RETURNING name) \
         SELECT pg_notify('simba_released', name) FROM freed";
    /// One statement, notifying each freed lease. Leases are locked before the session row
    /// (the `One-Time Filter` runs the CTEs before the delete scans), the order acquisition
    /// uses.
    const CLOSE: &'static [&'static str] = &["WITH freed AS (UPDATE simba_lease SET session_id = NULL \
         WHERE session_id = :1 RETURNING name), \
         notified AS (SELECT pg_notify('simba_released', name) FROM freed), \
         left_groups AS (DELETE FROM simba_member WHERE session_id = :1 RETURNING 1) \
         DELETE FROM simba_session WHERE id = :1 \
         AND (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM left_groups) >= 0"];

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn statements() -> &'static Shared {
        static SHARED: LazyLock<Shared> = LazyLock::new(Shared::new::<PgDialect>);
        &SHARED
    }
}

/// The tables of the schema, rule B3 (the acquisition function follows them, see
/// [`schema`]). Every statement is idempotent; [`SCHEMA_LOCK`] serialises concurrent
/// creators, because two concurrent `CREATE TABLE IF NOT EXISTS` of the same table can fail
/// in PostgreSQL. `COLLATE "C"` compares names and ids byte by byte, as [`SessionId`]'s `Ord`
/// does, whatever the database's default collation.
const TABLES: [&str; 4] = [
    "CREATE TABLE IF NOT EXISTS simba_session (
    id         TEXT COLLATE \"C\" PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
)",
    // `token` is the fencing token of the current or last term. The row is never deleted so
    // that the token never resets (T3); `session_id IS NULL` means released.
    "CREATE TABLE IF NOT EXISTS simba_lease (
    name        TEXT COLLATE \"C\" PRIMARY KEY,
    session_id  TEXT COLLATE \"C\" NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL
)",
    "CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id)",
    "CREATE TABLE IF NOT EXISTS simba_member (
    group_name TEXT COLLATE \"C\" NOT NULL,
    session_id TEXT COLLATE \"C\" NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
)",
];

/// The whole schema: [`TABLES`], then the acquisition function.
fn schema() -> [&'static str; 5] {
    [TABLES[0], TABLES[1], TABLES[2], TABLES[3], OWN.acquire_function.sql()]
}

/// Whether every table and index exists (on the search path). When they do, no DDL runs, so
/// a user with only `SELECT, INSERT, UPDATE, DELETE` on the tables can connect.
const SCHEMA_PRESENT: &str = "SELECT to_regclass('simba_session') IS NOT NULL AND to_regclass('simba_lease') IS NOT NULL \
     AND to_regclass('simba_member') IS NOT NULL AND to_regclass('simba_lease_session') IS NOT NULL \
     AND to_regprocedure('simba_acquire_v1(text,text)') IS NOT NULL";

/// The durability of commits for this connection. With `off`, a server crash loses the last
/// commits, so a token already handed out could be handed out again (T3); the backend's own
/// connections turn it on (or keep a stronger setting).
const SYNCHRONOUS_COMMIT: &str = "SELECT current_setting('synchronous_commit')";

/// A transaction-scoped advisory lock (an arbitrary constant key) held while creating the
/// schema.
const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(7305521853129551361)";

/// `:1` session id. Renews a live session (an expired one is left alone and never comes back,
/// S3) and, in the same statement, computes the digest of the leases listed for it: count and
/// the sums of the low and high 32-bit halves of their tokens (`sum(bigint)` is `numeric`; each
/// half sum fits in `bigint`). No row when the session has expired or was closed.
///
/// The digest reads the statement's snapshot: a takeover committed while the renewal runs
/// shows at the next renewal. A takeover needs the session expired on the database's clock,
/// so such a reply arrives after the client's local deadline, and the engine discards it (D3).
const KEEP_ALIVE: &str = "WITH renewed AS (UPDATE simba_session SET expires_at = {now} + ttl_ms \
     WHERE id = :1 AND expires_at > {now} RETURNING expires_at), \
     listed AS (SELECT count(*) AS n, COALESCE(sum(token & 4294967295), 0) AS low, \
     COALESCE(sum(token >> 32), 0) AS high FROM simba_lease WHERE session_id = :1) \
     SELECT renewed.expires_at - {now}, listed.n, listed.low::bigint, listed.high::bigint FROM renewed, listed";

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
const ACQUIRE_FUNCTION: &str = "CREATE OR REPLACE FUNCTION simba_acquire_v1(p_name TEXT, p_session TEXT, OUT o_live BOOLEAN, OUT o_token BIGINT)
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v_holder TEXT;
    v_holder_live BOOLEAN;
    v_token BIGINT;
BEGIN
    SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}),
           lease.session_id,
           EXISTS (SELECT 1 FROM simba_session s WHERE s.id = lease.session_id AND s.expires_at > {now})
      INTO o_live, v_holder, v_holder_live
      FROM (SELECT 1) one LEFT JOIN simba_lease lease ON lease.name = p_name;
    IF NOT o_live OR (v_holder_live AND v_holder IS DISTINCT FROM p_session) THEN
        RETURN;
    END IF;
    SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO simba_lease (name, session_id, token, acquired_at)
            SELECT p_name, p_session, 1, {now}
            WHERE EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now})
            ON CONFLICT (name) DO NOTHING
            RETURNING token INTO o_token;
        IF o_token IS NOT NULL THEN
            RETURN;
        END IF;
        SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
        IF NOT FOUND THEN
            o_live := FALSE;
            RETURN;
        END IF;
    END IF;
    WITH me AS (SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}) AS live),
         sealed AS (UPDATE simba_session SET expires_at = expires_at
                    WHERE id = v_holder AND id <> p_session AND expires_at <= {now} AND (SELECT live FROM me) RETURNING id),
         free AS (SELECT (v_holder IS NULL OR EXISTS (SELECT 1 FROM sealed)
                          OR NOT EXISTS (SELECT 1 FROM simba_session WHERE id = v_holder)) AS yes),
         taken AS (UPDATE simba_lease SET session_id = p_session, token = simba_lease.token + 1, acquired_at = {now}
                   WHERE name = p_name AND session_id IS NOT DISTINCT FROM v_holder
                     AND (SELECT live FROM me) AND (SELECT yes FROM free)
                   RETURNING simba_lease.token)
    SELECT (SELECT live FROM me), (SELECT token FROM taken) INTO o_live, o_token;
    IF o_live AND o_token IS NULL AND v_holder = p_session THEN
        o_token := v_token;
    END IF;
END
$simba$";

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
const ACQUIRE: &str = "WITH fast AS (UPDATE simba_lease SET session_id = :2, token = simba_lease.token + 1, acquired_at = {now} \
     WHERE name = :1 AND session_id IS NULL \
     AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now}) RETURNING token) \
     SELECT TRUE AS o_live, token AS o_token FROM fast \
     UNION ALL SELECT o_live, o_token FROM simba_acquire_v1(:1, :2) WHERE NOT EXISTS (SELECT 1 FROM fast)";

/// Opens a session in one statement (S1): collects the sessions dead for longer than the
/// grace period (`{grace}` ms) with their memberships, clears their leases' holder (lease rows
/// are kept: T3), and inserts session `{id}` with lifetime `{ttl}` ms. The session rows are
/// deleted only after the leases are updated (the `One-Time Filter` runs the CTEs first), the
/// lock order of acquisition (lease row, then session row), so the two cannot deadlock.
///
/// Sent with the simple query protocol, so `{id}` and `{ttl}` are written into the text:
/// [`open_statement`] does it, and only with a generated id (hexadecimal digits).
const OPEN: &str = "WITH dead AS (SELECT id FROM simba_session WHERE expires_at < {now} - {grace}), \
     cleared AS (UPDATE simba_lease SET session_id = NULL WHERE session_id IN (SELECT id FROM dead) RETURNING 1), \
     left_groups AS (DELETE FROM simba_member WHERE session_id IN (SELECT id FROM dead) RETURNING 1), \
     collected AS (DELETE FROM simba_session WHERE id IN (SELECT id FROM dead) \
     AND (SELECT count(*) FROM cleared) >= 0 AND (SELECT count(*) FROM left_groups) >= 0 RETURNING 1) \
     INSERT INTO simba_session (id, expires_at, ttl_ms, created_at) \
     SELECT '{id}', now_ms + {ttl}, {ttl}, now_ms FROM (SELECT {now} AS now_ms) clock \
     WHERE (SELECT count(*) FROM collected) >= 0";

/// [`OPEN`] for session `id` with lifetime `ttl_ms`, or `None` for an id this backend did not
/// generate (32 lowercase hexadecimal digits), which must not be written into SQL text.
fn open_statement(id: &SessionId, ttl_ms: i64) -> Option<String> {
    static TEMPLATE: LazyLock<String> =
        LazyLock::new(|| OPEN.replace("{now}", PgDialect::NOW_MS).replace("{grace}", &super::GC_GRACE_MS.to_string()));
    super::is_generated_id(id).then(|| TEMPLATE.replace("{id}", id.as_str()).replace("{ttl}", &ttl_ms.to_string()))
}

/// The statements only PostgreSQL runs, rendered once.
struct Own {
    keep_alive: Stmt,
    acquire_function: Stmt,
    /// `:1` name, `:2` session id: the function's answer.
    acquire: Stmt,
}

static OWN: LazyLock<Own> = LazyLock::new(|| Own {
    keep_alive: PgDialect::render(KEEP_ALIVE),
    acquire_function: PgDialect::render(ACQUIRE_FUNCTION),
    acquire: PgDialect::render(ACQUIRE),
});

/// The PostgreSQL backend. Cheap to clone: clones share one connection pool and one release
/// listener, which stops when the last clone is dropped.
///
/// Needs PostgreSQL 9.5 or later (`ON CONFLICT`); tested with 15. Every node must use the same
/// database (a primary, not a replica): a replica promoted after an asynchronous failover may
/// have lost recent tokens (see the README's correctness section).
#[derive(Clone, Debug)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
    /// Whether [`Backend::job_store`] answers the jobs store (by default; [`PostgresBackend::without_job_store`]).
    jobs: bool,
}

#[derive(Debug)]
struct Inner {
    sql: SqlStore<PgDialect>,
    /// How to open the renewal connection.
    options: PgConnectOptions,
    /// The connection renewals use, outside the pool: the pool pings every connection it gets
    /// back (sqlx 0.9), which would make a renewal two round trips (S1). Taken out while a
    /// renewal runs and put back only after a reply, so a renewal that failed or was cancelled
    /// mid-statement drops its connection and the next one connects afresh.
    renewer: tokio::sync::Mutex<Renewer>,
    releases: broadcast::Sender<String>,
    /// The names of jobs whose control changed, and an empty name after the listener
    /// reconnected (see [`CONTROL_CHANNEL`]).
    controls: broadcast::Sender<String>,
    /// Stops the release listener when the last clone is dropped.
    _listener: DropGuard,
}

impl PostgresBackend {
    /// This backend with its jobs store (run history, pause, run now) switched on, which it
    /// is by default since its claim is one round trip (a PL/pgSQL function,
    /// ADR 0012): kept so that code written when the store was off by default still builds.
    #[must_use]
    pub fn with_job_store(mut self) -> Self {
        self.jobs = true;
        self
    }

    /// This backend without its jobs store: the runtime then claims cron slots with the
    /// one-statement [`Backend::claim_slot`] and records no history, and pause, run-now and
    /// `simba history` answer that the backend has no jobs store. For a database where the
    /// jobs tables and routines may not be created and an administrator will not create them
    /// ([`BackendError::Misconfigured`] says what to run).
    pub fn without_job_store(mut self) -> Self {
        self.jobs = false;
        self
    }

    /// Connects to the database at `url` and creates the schema if it is missing.
    ///
    /// `url` is `postgres://user[:password]@host[:port]/database[?param=value...]` (or
    /// `postgresql://`), with the parameters sqlx accepts (`sslmode`, `host=/socket/dir`,
    /// ...; TLS needs one of sqlx's TLS features). The database must exist.
    ///
    /// Fails within about 5 s when the server cannot be reached, with the URL (without its
    /// password) and the cause. When the tables are missing and the user may not create them,
    /// fails with [`BackendError::Misconfigured`] whose message is the schema to run by hand
    /// (also available from [`schema`](Self::schema)).
    ///
    /// Connections wait at most 5 s for a row lock (`lock_timeout`) and are closed by the
    /// server after 5 s idle inside a transaction, so a client paused mid-call cannot block a
    /// lease for long. Where `synchronous_commit` is `off`, they turn it on: a commit that a
    /// crash can lose could hand out a token twice (T3).
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url)).await
    }

    /// [`connect`](Self::connect) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let normalised =
            server::check_url(url, &["postgres", "postgresql"], "postgres", "postgres://user@host:5432/database")?;
        server::check_tls_files(url)?;
        let options = PgConnectOptions::from_str(&normalised)
            .map_err(|e| BackendError::Misconfigured(format!("invalid PostgreSQL URL {:?}: {e}", url.redacted())))?
            .application_name("simba")
            .options([("lock_timeout", LOCK_WAIT_MS), ("idle_in_transaction_session_timeout", LOCK_WAIT_MS)]);
        let description = describe_options(&options);
        // One connection first, outside the pool: the pool retries refused connections until
        // its timeout and then reports only that it timed out, losing the cause.
        let synchronous_commit = match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
            Ok(Ok(mut conn)) => {
                let setting = sqlx::query_scalar::<_, String>(SYNCHRONOUS_COMMIT).fetch_one(&mut conn).await;
                let _ = conn.close().await;
                setting.map_err(|e| connect_error(&description, e))?
            }
            Ok(Err(e)) => return Err(connect_error(&description, e)),
            Err(_) => {
                return Err(BackendError::Unavailable {
                    message: format!(
                        "cannot connect to {description}: no answer within {CONNECT_TIMEOUT:?}; check that the server is running and reachable"
                    ),
                    source: None,
                });
            }
        };
        let options = if synchronous_commit == "off" {
            tracing::info!(
                backend = %description,
                "synchronous_commit is off for this user and database; simba turns it on for its own connections, \
                 so that a committed token survives a server crash (T3)"
            );
            options.options([("synchronous_commit", "on")])
        } else {
            options
        };
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(CONNECT_TIMEOUT)
            // No ping before every call: a renewal is one round trip (S1). After a server
            // restart the first call on a dead connection fails (the engine retries) and the
            // idle ones are closed with it (`discard_idle_after`).
            .test_before_acquire(false)
            .connect_lazy_with(options);
        Self::with_description(pool, description.into()).await
    }

    /// Wraps an existing pool and creates the schema if it is missing.
    ///
    /// The pool's options are the caller's; [`connect`](Self::connect) documents the ones it
    /// sets.
    pub async fn from_pool(pool: PgPool) -> BackendResult<Self> {
        let description = describe_options(&pool.connect_options());
        let synchronous_commit: String = sqlx::query_scalar(SYNCHRONOUS_COMMIT)
            .fetch_one(&pool)
            .await
            .map_err(|e| BackendError::unavailable(format!("{description}: read synchronous_commit failed"), e))?;
        if synchronous_commit == "off" {
            tracing::warn!(
                backend = %description,
                "synchronous_commit is off: a server crash can lose the last commits, and a lease's token can go \
                 backwards (T3); set it on for simba's connections"
            );
        }
        Self::with_description(pool, description.into()).await
    }

    async fn with_description(pool: PgPool, description: Arc<str>) -> BackendResult<Self> {
        create_schema(&pool, &description).await?;
        let (releases, _) = broadcast::channel(RELEASE_BUFFER);
        let (controls, _) = broadcast::channel(RELEASE_BUFFER);
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(listen::forward_releases(
            (*pool.connect_options()).clone(),
            listen::Channels { releases: releases.clone(), controls: controls.clone() },
            stop.clone(),
            Arc::clone(&description),
            ready_tx,
        ));
        // Wait for the LISTEN, so that releases made once this returns are heard. If it is
        // slow, carry on: the listener keeps trying and candidates still retry on their own.
        if tokio::time::timeout(CONNECT_TIMEOUT, ready_rx).await.is_err() {
            tracing::warn!(backend = %description, "release listener not ready; candidates rely on their next attempt until it is");
        }
        tracing::debug!(backend = %description, "PostgreSQL backend ready");
        let options = (*pool.connect_options()).clone();
        // Opened now, so that the first renewal is one round trip.
        let renewer = Renewer::connect(&options, &description);
        Ok(PostgresBackend {
            inner: Arc::new(Inner {
                sql: SqlStore::new(pool, description),
                options,
                renewer: tokio::sync::Mutex::new(renewer),
                releases,
                controls,
                _listener: stop.drop_guard(),
            }),
            jobs: true,
        })
    }

    /// The schema as an SQL script (three tables and the acquisition function), for
    /// administrators who create it by hand (then grant `SELECT, INSERT, UPDATE, DELETE` on the
    /// tables and `EXECUTE` on `simba_acquire_v1(text, text)` to the user simba connects as).
    pub fn schema() -> String {
        schema_script(&schema())
    }

    /// The pool, for callers that want to read the tables (dashboards, tests).
    pub fn pool(&self) -> &PgPool {
        self.inner.sql.pool()
    }

    /// A connection for renewals: the one the last renewal put back, or the one being opened,
    /// or a new one. A renewal cancelled while it waits leaves the opening to finish for the
    /// next.
    async fn renewal_connection(&self, slot: &mut Renewer) -> BackendResult<PgConnection> {
        loop {
            match slot {
                Renewer::Ready(_) => {
                    if let Renewer::Ready(conn) = std::mem::replace(slot, Renewer::Absent) {
                        return Ok(conn);
                    }
                }
                Renewer::Connecting(task) => {
                    let joined = task.await;
                    *slot = Renewer::Absent;
                    return joined.unwrap_or_else(|e| {
                        Err(BackendError::Unavailable {
                            message: format!("{}: connect for renewals failed: {e}", self.inner.sql.description()),
                            source: None,
                        })
                    });
                }
                Renewer::Absent => *slot = Renewer::connect(&self.inner.options, self.inner.sql.description()),
            }
        }
    }
}

/// The renewal connection ([`Inner::renewer`]).
#[derive(Debug)]
enum Renewer {
    /// None: the last renewal failed or was cancelled mid-statement, and dropped it.
    Absent,
    /// Being opened, with the keep-alive statement prepared on it, by a task of its own. Over
    /// a slow link that takes several round trips (with TLS, five or more), more than a
    /// renewal may wait (`renew_interval`): a renewal that times out meanwhile does not stop
    /// it, and the next renewal finds it ready, so renewals stay one round trip.
    Connecting(tokio::task::JoinHandle<BackendResult<PgConnection>>),
    /// Ready, the keep-alive statement prepared.
    Ready(PgConnection),
}

impl Renewer {
    /// Starts opening a renewal connection to `options`.
    fn connect(options: &PgConnectOptions, description: &str) -> Renewer {
        let (options, description) = (options.clone(), description.to_owned());
        Renewer::Connecting(tokio::spawn(async move {
            let connect = async {
                let mut conn = options.connect().await?;
                // sqlx keeps the prepared statement on the connection. No session has the
                // empty id, so this renews nothing.
                sqlx::query(OWN.keep_alive.sql()).bind("").fetch_optional(&mut conn).await?;
                Ok::<_, sqlx::Error>(conn)
            };
            match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(connected) => connected
                    .map_err(|e| BackendError::unavailable(format!("{description}: connect for renewals failed"), e)),
                Err(_) => Err(BackendError::Unavailable {
                    message: format!(
                        "{description}: connect for renewals failed: no answer within {CONNECT_TIMEOUT:?}"
                    ),
                    source: None,
                }),
            }
        }))
    }
}

fn describe_options(options: &PgConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(dir) => dir.display().to_string(),
        None => options.get_host().to_owned(),
    };
    describe(
        "postgres",
        options.get_username(),
        &host,
        options.get_port(),
        options.get_database().unwrap_or(options.get_username()),
    )
}

/// A failed first connection: wrong credentials or a missing database are configuration
/// errors; anything else (refused, reset, DNS) is the server being unavailable.
fn connect_error(description: &str, e: sqlx::Error) -> BackendError {
    let (message, tls) = server::connect_message(description, &e);
    if tls {
        return BackendError::Misconfigured(message);
    }
    match &e {
        // invalid_authorization_specification, invalid_password, invalid_catalog_name,
        // insufficient_privilege (CONNECT revoked).
        sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("28000" | "28P01" | "3D000" | "42501")) => {
            BackendError::Misconfigured(message)
        }
        sqlx::Error::Configuration(_) | sqlx::Error::Tls(_) => BackendError::Misconfigured(message),
        _ => BackendError::unavailable(message, e),
    }
}

/// Creates the tables if any is missing, under an advisory lock, in one transaction so that
/// a concurrent process never sees half a schema. A user without the right to create them
/// gets the schema to run by hand.
async fn create_schema(pool: &PgPool, description: &str) -> BackendResult<()> {
    let failed = |what: &'static str| move |e| BackendError::unavailable(format!("{description}: {what} failed"), e);
    let present: bool =
        sqlx::query_scalar(SCHEMA_PRESENT).fetch_one(pool).await.map_err(failed("check for the schema"))?;
    if present {
        return Ok(());
    }
    let mut tx = pool.begin().await.map_err(failed("create the schema"))?;
    sqlx::query(SCHEMA_LOCK).execute(&mut *tx).await.map_err(failed("lock the schema"))?;
    for statement in schema() {
        if let Err(e) = sqlx::query(statement).execute(&mut *tx).await {
            let denied = matches!(&e, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501"));
            if denied {
                let user = pool.connect_options().get_username().to_owned();
                return Err(schema_missing(
                    description,
                    &user,
                    &e.to_string(),
                    &schema_script(&schema()),
                    &format!(
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON simba_session, simba_lease, simba_member TO \"{user}\";\n\
                         GRANT EXECUTE ON FUNCTION simba_acquire_v1(text, text) TO \"{user}\";"
                    ),
                ));
            }
            return Err(failed("create the schema")(e));
        }
    }
    tx.commit().await.map_err(failed("commit the schema"))
}

impl Backend for PostgresBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        // One round trip, prepared or not (see [`OPEN`]).
        let sql = &self.inner.sql;
        let id = SessionId::random();
        let ttl = super::ttl_ms(ttl);
        let statement = open_statement(&id, ttl).ok_or_else(|| {
            BackendError::Protocol(format!("{}: a generated session id is not hexadecimal", sql.description()))
        })?;
        // In a task of its own: when the engine gives up waiting (`renew_interval`), the statement
        // still completes and its connection goes back to the pool ready, rather than being
        // dropped mid-statement, which would make the next open connect afresh, several round
        // trips over a slow link. The session it may have opened is never used and expires.
        let pool = self.pool().clone();
        let done = tokio::spawn(async move { sqlx::raw_sql(AssertSqlSafe(statement)).execute(&pool).await })
            .await
            .map_err(|e| BackendError::Protocol(format!("{}: opening a session failed: {e}", sql.description())))?
            .map_err(sql.err("open a session"))?;
        if done.rows_affected() != 1 {
            return Err(BackendError::Protocol(format!(
                "{}: opening a session inserted {} rows, not one",
                sql.description(),
                done.rows_affected()
            )));
        }
        Ok(SessionGrant { id, remaining: Duration::from_millis(sql.non_negative("ttl", ttl)?) })
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        // One statement whatever the number of leases (S1): constant round trips and bytes,
        // on the renewal connection (no pool ping after it).
        let sql = &self.inner.sql;
        let mut slot = self.inner.renewer.lock().await;
        let mut conn = self.renewal_connection(&mut slot).await?;
        let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(OWN.keep_alive.sql())
            .bind(session.as_str())
            .fetch_optional(&mut conn)
            .await
            .map_err(sql.err("renew a session"))?;
        *slot = Renewer::Ready(conn);
        drop(slot);
        let Some((remaining, count, low, high)) = row else { return Ok(KeepAlive::Expired) };
        Ok(KeepAlive::Alive {
            remaining: Duration::from_millis(sql.non_negative("remaining time", remaining)?),
            digest_matches: digest(sql.description(), count, low, high)? == held,
        })
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let (live, won): (bool, Option<i64>) = sqlx::query_as(OWN.acquire.sql())
            .bind(name)
            .bind(session.as_str())
            .fetch_one(self.pool())
            .await
            .map_err(self.inner.sql.err("acquire a lease"))?;
        Ok(match won {
            _ if !live => Acquire::Expired,
            Some(token) => Acquire::Won(self.inner.sql.non_negative("token", token)?),
            None => Acquire::Held,
        })
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.inner.sql.release(session, name, token).await
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.inner.sql.close_session(session).await
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.inner.sql.owned(session).await
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.inner.sql.claim_slot(session, name, token, slot).await
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.inner.sql.join_group(session, group).await
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.inner.sql.leave_group(session, group).await
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.inner.sql.members(group).await
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.inner.sql.inspect().await
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.releases.subscribe())
    }

    fn job_store(&self) -> Option<crate::backend::job_store::SharedJobStore> {
        self.jobs.then(|| {
            Arc::new(super::jobs::SqlJobStore::new(self.inner.sql.clone()).with_control(self.inner.controls.clone()))
                as crate::backend::job_store::SharedJobStore
        })
    }

    fn describe(&self) -> String {
        self.inner.sql.description().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_statement_writes_only_generated_ids_and_fills_every_argument() {
        let id = SessionId::random();
        let Some(sql) = open_statement(&id, 1500) else { panic!("a generated id is refused") };
        assert!(sql.contains(&format!("SELECT '{}', now_ms + 1500, 1500, now_ms", id.as_str())), "{sql}");
        assert!(sql.contains(&format!("::bigint - {})", super::super::GC_GRACE_MS)), "{sql}");
        assert!(!sql.contains('{') && !sql.contains('}'), "an argument is left unfilled: {sql}");
        assert_eq!(open_statement(&SessionId::new("x'); DROP TABLE simba_lease; --"), 1500), None);
        assert_eq!(open_statement(&SessionId::new("ABCDEF0123456789ABCDEF0123456789"), 1500), None);
    }
}
