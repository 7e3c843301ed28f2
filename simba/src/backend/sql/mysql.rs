//! The MySQL and MariaDB backend (feature `mysql`): sessions, leases and group memberships in
//! three InnoDB tables of one database, shared by every node.
//!
//! Data model (rule B3, ADR 0002): the same three tables as the SQLite and PostgreSQL
//! backends, `simba_session`, `simba_lease` and `simba_member`, created on connect. Lease rows
//! are never deleted, so a lease's token never resets (T3); releasing a lease only clears its
//! `session_id`. Times are `BIGINT` milliseconds since the Unix epoch. Names and ids are
//! `utf8mb4_bin`: compared byte by byte, so `Job` and `job` are two leases whatever the
//! server's default collation.
//!
//! Time is the database's clock (B2): every "now" is `SYSDATE(3)`, read when the expression
//! runs. `NOW(3)` would not do: it is fixed when the statement starts, so a renewal that
//! waited for a row lock could renew a session that expired meanwhile (breaking S3). Both are
//! local times of the connection's time zone: it must be a fixed offset (sqlx sets `+00:00`),
//! as a zone with daylight saving time would turn the clock back an hour once a year.
//!
//! The calls all SQL backends run alike are in the shared SQL module (ADR 0002); this module
//! keeps connecting, the schema (and the time zone check), renewal and acquisition, and retries
//! of transactions InnoDB gave up to a lock conflict.
//!
//! Round trips per call (S1): keep-alive is ONE round trip, a text-protocol batch of two
//! statements (sqlx enables multi-statements): the renewal `UPDATE` and a `SELECT` of the
//! remaining time and of whether the session's leases match the client's digest, compared on
//! the server so the reply is constant-size. Binding parameters needs prepared statements,
//! which hold one statement, so that batch inlines its values: the session id (only ids of
//! the form this backend generates, 32 hexadecimal digits; any other id cannot exist and is
//! answered `Expired`) and the digest's two numbers, zero-padded to a fixed width. Release,
//! claim, leave, owned and members are one statement each; join is one `INSERT ... SELECT`.
//! Acquire is one `CALL` of the procedure `simba_acquire_v1`, created with the tables: it
//! answers `Held` or `Expired` with one read; only when the lease looks free or already ours
//! does it run a short transaction (lock the lease row, lock and read both sessions, take,
//! `COMMIT`). InnoDB serves locking reads from the newest committed rows, whatever the
//! REPEATABLE READ snapshot holds. Locking the holder's session row makes a concurrent
//! renewal of an expired holder wait, then re-check its expiry with a fresh clock and fail,
//! so the expired session never comes back (S3).
//!
//! Releases (K2; BENCHMARKS.md P4): MySQL has no `NOTIFY`, so each backend instance runs one
//! release watch (`release_watch`) while one of its candidates waits: every 10 ms one
//! primary-key read of the waited-for lease rows (which of them are released or held by a
//! dead session). The cost is per node, not per lease held, and nothing runs while no
//! candidate waits; a release through this instance is sent without a query.

use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Executor, Row};

use super::dialect::{Dialect, Param, Placeholders, Shared, Stmt};
use super::release_watch::{self, Probe, ReleaseWatch};
use super::server::{self, CONNECT_TIMEOUT, LOCK_WAIT_MS, describe, schema_missing, schema_script};
use super::{SqlStore, is_generated_id};
use crate::backend::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

/// Connections in the pool. The engine has at most one keep-alive and one acquisition per
/// election in flight; more calls wait for a connection.
const MAX_CONNECTIONS: u32 = 10;

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

    fn rows_affected(done: &sqlx::mysql::MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    fn statements() -> &'static Shared {
        static SHARED: LazyLock<Shared> = LazyLock::new(Shared::new::<MySqlDialect>);
        &SHARED
    }
}

/// Schema, rule B3. Every statement is idempotent and MySQL serialises concurrent
/// `CREATE TABLE IF NOT EXISTS` of one table, so any number of processes may run it at once.
/// InnoDB is required: row locks and transactions.
const SCHEMA: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS simba_session (
    id         VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
) ENGINE = InnoDB",
    // `token` is the fencing token of the current or last term. The row is never deleted so
    // that the token never resets (T3); `session_id IS NULL` means released. Token 0 marks a
    // row created by an acquisition that lost; it is never handed out.
    "CREATE TABLE IF NOT EXISTS simba_lease (
    name        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    session_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL,
    KEY simba_lease_session (session_id)
) ENGINE = InnoDB",
    "CREATE TABLE IF NOT EXISTS simba_member (
    group_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    session_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
) ENGINE = InnoDB",
];

/// How many of the tables exist, the connection's time zone, and InnoDB's commit
/// durability. When all three tables exist no DDL runs, so a user with only `SELECT, INSERT,
/// UPDATE, DELETE` on them can connect.
const SCHEMA_PRESENT: &str = "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() \
     AND table_name IN ('simba_session', 'simba_lease', 'simba_member')), @@session.time_zone, \
     CAST(@@global.innodb_flush_log_at_trx_commit AS SIGNED)";

/// MySQL error numbers for "you may not": ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR,
/// ER_PROCACCESS_DENIED_ERROR.
const ACCESS_DENIED: [u16; 3] = [1044, 1142, 1370];

/// The server's error number of a database error.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error().and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>()).map(|d| d.number())
}

// ---- keep_alive and acquire -------------------------------------------------------------

/// The keep-alive batch, with `{id}`, `{count}` and `{sum}` filled in by [`keep_alive_sql`].
/// The `UPDATE` renews a live session (an expired one is left alone and never comes back, S3);
/// the `SELECT`, a new snapshot in autocommit mode, returns a row only if the session is live
/// (so it was just renewed), with the remaining time and whether the leases listed for the
/// session have the client's digest. The wrapping sum of tokens is computed exactly in
/// `DECIMAL` from the sums of their 32-bit halves.
const KEEP_ALIVE: &str = "UPDATE simba_session SET expires_at = {now} + ttl_ms WHERE id = '{id}' AND expires_at > {now}; \
     SELECT s.expires_at - {now}, (SELECT COUNT(*) = {count} AND MOD(COALESCE(SUM(token & 4294967295), 0) \
     + MOD(COALESCE(SUM(token >> 32), 0), 4294967296) * 4294967296, 18446744073709551616) = {sum} \
     FROM simba_lease WHERE session_id = '{id}') FROM simba_session s WHERE s.id = '{id}' AND s.expires_at > {now}";

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
const ACQUIRE_PROCEDURE: &str = "CREATE PROCEDURE simba_acquire_v1(
    IN p_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_session VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
MODIFIES SQL DATA
SQL SECURITY INVOKER
BEGIN
    DECLARE v_live BOOLEAN DEFAULT FALSE;
    DECLARE v_holder VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_holder_live BOOLEAN DEFAULT FALSE;
    DECLARE v_token BIGINT DEFAULT 0;
    DECLARE v_won BIGINT DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    acquire: BEGIN
        SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}),
               lease.session_id,
               EXISTS (SELECT 1 FROM simba_session s WHERE s.id = lease.session_id AND s.expires_at > {now})
          INTO v_live, v_holder, v_holder_live
          FROM (SELECT 1 AS one) d LEFT JOIN simba_lease lease ON lease.name = p_name;
        IF NOT v_live OR (v_holder_live AND NOT (v_holder <=> p_session)) THEN
            LEAVE acquire;
        END IF;
        START TRANSACTION;
        INSERT INTO simba_lease (name, session_id, token) VALUES (p_name, NULL, 0) ON DUPLICATE KEY UPDATE token = token;
        SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
        SELECT COALESCE(SUM(id = p_session AND expires_at > {now}), 0) > 0,
               COALESCE(SUM(id = v_holder AND expires_at > {now}), 0) > 0
          INTO v_live, v_holder_live
          FROM simba_session WHERE id IN (p_session, v_holder) FOR UPDATE;
        IF NOT v_live THEN
            SET v_won = NULL;
        ELSEIF v_holder <=> p_session THEN
            SET v_won = v_token;
        ELSEIF v_holder IS NOT NULL AND v_holder_live THEN
            SET v_won = NULL;
        ELSE
            UPDATE simba_lease SET session_id = p_session, token = token + 1, acquired_at = {now} WHERE name = p_name;
            SET v_won = v_token + 1;
        END IF;
        COMMIT;
    END acquire;
    SELECT v_live, v_won;
END";

/// Whether the acquisition procedure exists in the current database.
const PROCEDURE_PRESENT: &str = "SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE() \
     AND routine_type = 'PROCEDURE' AND routine_name = 'simba_acquire_v1'";

/// ER_SP_ALREADY_EXISTS: another process created the procedure first.
const PROCEDURE_EXISTS: u16 = 1304;

/// The statements only MySQL runs, rendered once.
struct Own {
    keep_alive: Stmt,
    procedure: Stmt,
    /// `:1` name, `:2` session id: [`ACQUIRE_PROCEDURE`]'s answer.
    acquire: Stmt,
    /// `:1` name, `:2` session id. The fast path of acquisition (BENCHMARKS.md P2): ONE statement
    /// that takes a lease whose row exists and is released, for a live caller; the new token
    /// comes back as the reply's last insert id (`LAST_INSERT_ID(expr)`). An `UPDATE` reads
    /// the newest committed lease row under its exclusive lock, and InnoDB reads the
    /// subquery's session row with a shared lock (a current read, not the REPEATABLE READ
    /// snapshot, ADR 0002), so a caller that expired or closed meanwhile never wins. Any
    /// other case (no row yet, a holder, a dead holder whose session row must be locked, S3;
    /// a retry that already holds it) matches no row and goes to the procedure.
    take_free: Stmt,
}

static OWN: LazyLock<Own> = LazyLock::new(|| Own {
    keep_alive: MySqlDialect::render(KEEP_ALIVE),
    procedure: MySqlDialect::render(ACQUIRE_PROCEDURE),
    acquire: MySqlDialect::render("CALL simba_acquire_v1(:1, :2)"),
    take_free: MySqlDialect::render(
        "UPDATE simba_lease SET session_id = :2, token = LAST_INSERT_ID(token + 1), acquired_at = {now} \
         WHERE name = :1 AND session_id IS NULL \
         AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})",
    ),
});

/// The MySQL / MariaDB backend. Cheap to clone: clones share one connection pool.
///
/// Needs InnoDB; tested with MariaDB 10.11. Every node must use the same database (a primary,
/// not a replica): a replica promoted after an asynchronous failover may have lost recent
/// tokens (see the README's correctness section). MySQL 8's default authentication
/// (`caching_sha2_password`) over a connection without TLS needs sqlx's `mysql-rsa` feature,
/// or TLS through one of sqlx's TLS features.
#[derive(Clone, Debug)]
pub struct MySqlBackend {
    sql: SqlStore<MySqlDialect>,
    watch: ReleaseWatch,
    /// Whether [`Backend::job_store`] answers the jobs store (by default; [`MySqlBackend::without_job_store`]).
    jobs: bool,
}

/// How often the release watch reads the waited-for rows while a candidate waits.
const WATCH_TICK: Duration = Duration::from_millis(10);

/// The release watch's view of the database: it cannot tell cheaply whether anything
/// changed, so every look is one read of the waited-for rows, on the pool.
struct MySqlProbe {
    pool: MySqlPool,
    description: Arc<str>,
}

impl Probe for MySqlProbe {
    async fn changed(&mut self) -> BackendResult<bool> {
        Ok(true)
    }

    async fn free(&mut self, names: &[String]) -> BackendResult<Vec<String>> {
        let sql = release_watch::free_sql(MySqlDialect::NOW_MS, names.len());
        let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql));
        for name in names {
            query = query.bind(name.as_str());
        }
        query.fetch_all(&self.pool).await.map_err(|e| {
            BackendError::unavailable(
                format!("{}: release watch: read the waited-for leases failed", self.description),
                e,
            )
        })
    }
}

impl MySqlBackend {
    /// This backend with its jobs store (run history, pause, run now) switched on, which it
    /// is by default since its claim is one round trip (a stored procedure `CALL`,
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
    /// `url` is `mysql://user[:password]@host[:port]/database[?param=value...]` (or
    /// `mariadb://`), with the parameters sqlx accepts (`ssl-mode`, `socket`, ...). The
    /// database must exist.
    ///
    /// Fails within about 5 s when the server cannot be reached, with the URL (without its
    /// password) and the cause. When the tables are missing and the user may not create them,
    /// fails with [`BackendError::Misconfigured`] whose message is the schema to run by hand
    /// (also available from [`schema`](Self::schema)).
    ///
    /// Connections wait at most 5 s for a row lock (`innodb_lock_wait_timeout`), so a client
    /// paused mid-call cannot hold other nodes' connections for long.
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url)).await
    }

    /// [`connect`](Self::connect) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let normalised = server::check_url(url, &["mysql", "mariadb"], "mysql", "mysql://user@host:3306/database")?;
        server::check_tls_files(url)?;
        let options = MySqlConnectOptions::from_str(&normalised)
            .map_err(|e| BackendError::Misconfigured(format!("invalid MySQL URL {:?}: {e}", url.redacted())))?;
        let description = describe_options(&options);
        // One connection first, outside the pool: the pool retries refused connections until
        // its timeout and then reports only that it timed out, losing the cause.
        match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
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
        }
        let pool = MySqlPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(CONNECT_TIMEOUT)
            // No ping before every call: a renewal is one round trip (S1). After a server
            // restart the first call on a dead connection fails (the engine retries) and the
            // idle ones are closed with it (`discard_idle_after`).
            .test_before_acquire(false)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    let secs = LOCK_WAIT_MS / 1000;
                    conn.execute(AssertSqlSafe(format!("SET SESSION innodb_lock_wait_timeout = {secs}"))).await?;
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        Self::with_description(pool, description.into()).await
    }

    /// Wraps an existing pool and creates the schema if it is missing.
    ///
    /// The pool's connections must use a fixed-offset time zone (sqlx's default, `+00:00`);
    /// otherwise this fails with [`BackendError::Misconfigured`]. The other options are the
    /// caller's; [`connect`](Self::connect) documents the ones it sets.
    pub async fn from_pool(pool: MySqlPool) -> BackendResult<Self> {
        let description = describe_options(&pool.connect_options());
        Self::with_description(pool, description.into()).await
    }

    async fn with_description(pool: MySqlPool, description: Arc<str>) -> BackendResult<Self> {
        let probe = MySqlProbe { pool: pool.clone(), description: Arc::clone(&description) };
        let backend = MySqlBackend {
            sql: SqlStore::new(pool, description),
            watch: ReleaseWatch::new(probe, WATCH_TICK),
            jobs: true,
        };
        backend.create_schema().await?;
        tracing::debug!(backend = %backend.sql.description(), "MySQL backend ready");
        Ok(backend)
    }

    /// The schema as a script for the `mysql` (or `mariadb`) command-line client: three tables
    /// and the acquisition procedure (between `DELIMITER` lines, which only that client
    /// understands), for administrators who create it by hand; then grant `SELECT, INSERT,
    /// UPDATE, DELETE, EXECUTE` on the database to the user simba connects as.
    pub fn schema() -> String {
        let mut script = schema_script(&SCHEMA);
        script.push_str("DELIMITER //\n");
        script.push_str(OWN.procedure.sql());
        script.push_str(" //\nDELIMITER ;\n");
        script
    }

    /// The pool, for callers that want to read the tables (dashboards, tests).
    pub fn pool(&self) -> &MySqlPool {
        self.sql.pool()
    }

    /// Queries the release watch has sent since connect (reads of waited-for leases), for
    /// benchmarks: zero while no candidate of this backend waits.
    pub fn release_watch_queries(&self) -> u64 {
        self.watch.queries()
    }

    /// Creates the tables if any is missing; a user without the right to create them gets the
    /// schema to run by hand. Also checks the connection's time zone (see the module docs).
    async fn create_schema(&self) -> BackendResult<()> {
        let (present, time_zone, flush_at_commit): (i64, String, i64) = sqlx::query_as(SCHEMA_PRESENT)
            .fetch_one(self.pool())
            .await
            .map_err(self.sql.err("check for the schema"))?;
        if flush_at_commit == 0 {
            // A global setting: simba cannot raise it for its own connections.
            tracing::warn!(
                backend = %self.sql.description(),
                "innodb_flush_log_at_trx_commit = 0: a server crash can lose the last second of commits, and a \
                 lease's token can go backwards (T3); use 1"
            );
        }
        if !is_fixed_offset(&time_zone) {
            return Err(BackendError::Misconfigured(format!(
                "{}: the connection's time zone is {time_zone:?}; simba needs a fixed offset such as '+00:00' \
                 (sqlx's default), because a zone with daylight saving time turns the database clock back once a year",
                self.sql.description()
            )));
        }
        if usize::try_from(present).is_ok_and(|n| n != SCHEMA.len()) {
            for statement in SCHEMA {
                if let Err(e) = sqlx::query(statement).execute(self.pool()).await {
                    return Err(self.schema_error(e));
                }
            }
        }
        let procedure: i64 = sqlx::query_scalar(PROCEDURE_PRESENT)
            .fetch_one(self.pool())
            .await
            .map_err(self.sql.err("check for the schema"))?;
        if procedure == 0 {
            // Not a prepared statement: MySQL cannot prepare `CREATE PROCEDURE`.
            match sqlx::raw_sql(OWN.procedure.sql()).execute(self.pool()).await {
                Ok(_) => {}
                Err(e) if error_number(&e) == Some(PROCEDURE_EXISTS) => {}
                Err(e) => return Err(self.schema_error(e)),
            }
        }
        Ok(())
    }

    /// A failed schema statement: the schema to run by hand when the user may not create it.
    fn schema_error(&self, e: sqlx::Error) -> BackendError {
        if error_number(&e).is_some_and(|n| ACCESS_DENIED.contains(&n)) {
            let user = self.pool().connect_options().get_username().to_owned();
            return schema_missing(
                self.sql.description(),
                &user,
                &e.to_string(),
                &Self::schema(),
                &format!(
                    "GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON {}.* TO '{user}'@'%';",
                    self.pool().connect_options().get_database().unwrap_or("your_database")
                ),
            );
        }
        self.sql.err("create the schema")(e)
    }
}

fn describe_options(options: &MySqlConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(path) => path.display().to_string(),
        None => options.get_host().to_owned(),
    };
    describe("mysql", options.get_username(), &host, options.get_port(), options.get_database().unwrap_or(""))
}

/// A failed first connection: wrong credentials or a missing database are configuration
/// errors; anything else (refused, reset, DNS) is the server being unavailable.
fn connect_error(description: &str, e: sqlx::Error) -> BackendError {
    let (message, tls) = server::connect_message(description, &e);
    if tls {
        return BackendError::Misconfigured(message);
    }
    let number = e.as_database_error().and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>()).map(|d| d.number());
    match (&e, number) {
        // ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, ER_BAD_DB_ERROR.
        // An account created REQUIRE X509 (or SSL, SUBJECT, ISSUER) refuses a login without a
        // client certificate with the same error as a wrong password: say both.
        (_, Some(1045)) => BackendError::Misconfigured(format!(
            "{message}; check the user name and password, and if the account is created REQUIRE X509 a client \
             certificate is required: give ssl-cert and ssl-key (or [backend.tls] cert_file and key_file)"
        )),
        (_, Some(1044 | 1049)) | (sqlx::Error::Configuration(_) | sqlx::Error::Tls(_), _) => {
            BackendError::Misconfigured(message)
        }
        _ => BackendError::unavailable(message, e),
    }
}

/// `+HH:MM` / `-HH:MM` (or `UTC`): a time zone without daylight saving time.
fn is_fixed_offset(zone: &str) -> bool {
    let b = zone.as_bytes();
    zone.eq_ignore_ascii_case("utc")
        || (b.len() == 6
            && (b[0] == b'+' || b[0] == b'-')
            && b[1].is_ascii_digit()
            && b[2].is_ascii_digit()
            && b[3] == b':'
            && b[4].is_ascii_digit()
            && b[5].is_ascii_digit())
}

/// The keep-alive batch for `session` and the client's digest. The numbers are zero-padded to
/// 20 digits (a `u64` has at most 20) so that the request has the same size whatever they are.
fn keep_alive_sql(session: &SessionId, held: HeldDigest) -> String {
    OWN.keep_alive
        .sql()
        .replace("{id}", session.as_str())
        .replace("{count}", &format!("{:020}", held.count))
        .replace("{sum}", &format!("{:020}", held.token_sum))
}

/// How many times a transaction chosen as a deadlock victim is tried again.
const LOCK_RETRIES: u32 = 3;

/// Whether `e` is InnoDB giving up a transaction to a lock conflict (deadlock, SQLSTATE
/// 40001, or a lock wait timeout, error 1205): transient, and nothing was written.
fn is_lock_conflict(e: &BackendError) -> bool {
    let mut src = std::error::Error::source(e);
    while let Some(err) = src {
        if let Some(sqlx::Error::Database(db)) = err.downcast_ref::<sqlx::Error>() {
            let mysql = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>();
            return db.code().as_deref() == Some("40001")
                || mysql.is_some_and(|m| m.number() == 1205 || m.number() == 1213);
        }
        src = err.source();
    }
    false
}

impl MySqlBackend {
    async fn acquire_once(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let params = [Param::Text(name), Param::Text(session.as_str())];
        let args = super::args::<sqlx::MySql>(self.sql.description(), &OWN.take_free, &params)?;
        let done = sqlx::query_with(OWN.take_free.sql(), args)
            .execute(self.pool())
            .await
            .map_err(self.sql.err("take a free lease"))?;
        if done.rows_affected() == 1 {
            let token = done.last_insert_id();
            if token == 0 {
                return Err(BackendError::Protocol(format!(
                    "{}: a lease was taken but the server returned no token (LAST_INSERT_ID)",
                    self.sql.description()
                )));
            }
            return Ok(Acquire::Won(token));
        }
        // `fetch_all`: a `CALL` answers its result set, then a status of its own.
        let rows: Vec<(bool, Option<i64>)> =
            self.sql.fetch_all(&OWN.acquire, &[name.into(), session.as_str().into()], "acquire a lease").await?;
        match rows.first() {
            Some((false, _)) => Ok(Acquire::Expired),
            Some((true, Some(token))) => Ok(Acquire::Won(self.sql.non_negative("token", *token)?)),
            Some((true, None)) => Ok(Acquire::Held),
            None => Err(BackendError::Protocol(format!(
                "{}: simba_acquire_v1 returned no row; was the procedure replaced by another?",
                self.sql.description()
            ))),
        }
    }
}

impl Backend for MySqlBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        self.sql.open_session(ttl).await
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        if !is_generated_id(session) {
            // This backend never handed it out, so no such session exists.
            return Ok(KeepAlive::Expired);
        }
        // One round trip whatever the number of leases (S1). `fetch_all` reads every result
        // of the batch, leaving the connection ready for the next call.
        let rows = sqlx::raw_sql(AssertSqlSafe(keep_alive_sql(session, held)))
            .fetch_all(self.pool())
            .await
            .map_err(self.sql.err("renew a session"))?;
        let Some(row) = rows.first() else { return Ok(KeepAlive::Expired) };
        let remaining: i64 = row.try_get(0).map_err(self.sql.err("read a renewal"))?;
        let digest_matches: bool = row.try_get(1).map_err(self.sql.err("read a renewal"))?;
        Ok(KeepAlive::Alive {
            remaining: Duration::from_millis(self.sql.non_negative("remaining time", remaining)?),
            digest_matches,
        })
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        // InnoDB may pick this transaction as a deadlock victim (or time its lock wait out)
        // when sessions close and acquire at once; it wrote nothing then, so try again.
        let mut attempt = 0;
        let answer = loop {
            match self.acquire_once(session, name).await {
                Err(e) if attempt < LOCK_RETRIES && is_lock_conflict(&e) => attempt += 1,
                other => break other,
            }
        };
        self.watch.acquired(name, &answer);
        answer
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let released = self.sql.release(session, name, token).await?;
        if released {
            self.watch.released(name);
        }
        Ok(released)
    }

    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        Some(self.watch.subscribe())
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        // One transaction, which InnoDB may give up to a lock conflict as it may acquisition's.
        let mut attempt = 0;
        loop {
            match self.sql.close_session(session).await {
                Err(e) if attempt < LOCK_RETRIES && is_lock_conflict(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.sql.owned(session).await
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.sql.claim_slot(session, name, token, slot).await
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.sql.join_group(session, group).await
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.sql.leave_group(session, group).await
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.sql.members(group).await
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.sql.inspect().await
    }

    fn job_store(&self) -> Option<crate::backend::job_store::SharedJobStore> {
        self.jobs.then(|| {
            Arc::new(super::jobs::SqlJobStore::new(self.sql.clone())) as crate::backend::job_store::SharedJobStore
        })
    }

    fn describe(&self) -> String {
        self.sql.description().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_request_has_a_constant_size() {
        let id = SessionId::random();
        assert!(is_generated_id(&id));
        let small = keep_alive_sql(&id, HeldDigest { count: 1, token_sum: 1 });
        let large = keep_alive_sql(&id, HeldDigest { count: 500, token_sum: u64::MAX });
        assert_eq!(small.len(), large.len());
        assert!(large.contains("= 18446744073709551615"), "{large}");
        assert!(!is_generated_id(&SessionId::new("x'; DROP TABLE simba_lease; --")));
        assert!(!is_generated_id(&SessionId::new("ABCDEF0123456789ABCDEF0123456789")));
    }

    #[test]
    fn fixed_offsets() {
        for ok in ["+00:00", "-05:30", "UTC"] {
            assert!(is_fixed_offset(ok), "{ok}");
        }
        for bad in ["SYSTEM", "Europe/Paris", "+0:00", ""] {
            assert!(!is_fixed_offset(bad), "{bad}");
        }
    }
}
