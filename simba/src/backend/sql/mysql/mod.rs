//! The MySQL and MariaDB backend (feature `mysql`): sessions, leases and group memberships in
//! InnoDB tables of one database, shared by every node.
//!
//! Data model (rule B3, ADR 0002): the same tables as the SQLite and PostgreSQL backends,
//! `simba_session`, `simba_lease`, `simba_lease_floor` and `simba_member`, created on connect
//! with the floor's trigger. Releasing a lease only clears its `session_id`; an idle row is
//! removed only after the token floor was raised to its token, and a new row starts at the
//! floor, so a lease's token never resets (T3). Times are `BIGINT` milliseconds since the Unix epoch. Names and ids are
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
//! of transactions InnoDB gave up to a lock conflict, as the hooks of the SQL backends' one
//! `Backend` implementation. All of MySQL's SQL is in this folder's `.sql` files, included by
//! `dialect.rs`.
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
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, Executor, Row};

use super::backend::{Releases, SqlBackend, StoreCache};
use super::dialect::{Dialect, Param};
use super::release_watch::{self, Probe, ReleaseWatch};
use super::server::{self, CONNECT_TIMEOUT, LOCK_WAIT_MS, describe, schema_missing, schema_script};
use super::{SqlCalls, SqlStore, is_generated_id};
use crate::backend::job_store::SharedJobStore;
use crate::backend::{Acquire, BackendError, BackendResult, HeldDigest, KeepAlive, SessionId};
pub(crate) use dialect::MySqlDialect;
use dialect::{FLOOR_TRIGGER, OWN, PROCEDURE_PRESENT, SCHEMA, SCHEMA_PRESENT, TRIGGER_PRESENT, keep_alive_sql};

mod dialect;

/// Connections in the pool. The engine has at most one keep-alive and one acquisition per
/// election in flight; more calls wait for a connection.
const MAX_CONNECTIONS: u32 = 10;

/// MySQL error numbers for "you may not": ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR,
/// ER_PROCACCESS_DENIED_ERROR.
const ACCESS_DENIED: [u16; 3] = [1044, 1142, 1370];

/// The server's error number of a database error.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error().and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>()).map(|d| d.number())
}

/// ER_SP_ALREADY_EXISTS: another process created the procedure first.
const PROCEDURE_EXISTS: u16 = 1304;

/// ER_TRG_ALREADY_EXISTS: another process created the floor trigger first.
const TRIGGER_EXISTS: u16 = 1359;

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
    /// Whether [`Backend::job_store`](crate::backend::Backend::job_store) answers the jobs store (by default; [`MySqlBackend::without_job_store`]).
    jobs: bool,
    /// The jobs and schedule stores once built, shared by clones.
    stores: StoreCache,
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
        self.stores = StoreCache::default();
        self
    }

    /// This backend without its jobs store: the runtime then claims cron slots with the
    /// one-statement [`Backend::claim_slot`](crate::backend::Backend::claim_slot) and records no history, and pause, run-now and
    /// `simba history` answer that the backend has no jobs store. For a database where the
    /// jobs tables and routines may not be created and an administrator will not create them
    /// ([`BackendError::Misconfigured`] says what to run).
    pub fn without_job_store(mut self) -> Self {
        self.jobs = false;
        self.stores = StoreCache::default();
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
    /// paused mid-call cannot hold other nodes' connections for long, and run their
    /// transactions at `READ COMMITTED` (no gap locks, so concurrent claims cannot deadlock).
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
                    // READ COMMITTED, as on PostgreSQL: under InnoDB's default REPEATABLE READ,
                    // a claim's `DELETE` of the slot's record, absent, locks the gap where its
                    // `INSERT` then goes, and two claims of neighbouring jobs at one instant
                    // deadlock on that gap (the conformance suite's concurrent claims did). The
                    // statements lock the rows they decide on, so no step needs a snapshot.
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
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
    /// caller's; [`connect`](Self::connect) documents the ones it sets. Give the connections
    /// `READ COMMITTED` isolation as `connect` does: under `REPEATABLE READ`, claims of jobs
    /// whose records are neighbours in the index can deadlock on a gap lock, and one of them
    /// fails (the engine records the slot as a claim that got no answer).
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
            stores: StoreCache::default(),
        };
        backend.create_schema().await?;
        tracing::debug!(backend = %backend.sql.description(), "MySQL backend ready");
        Ok(backend)
    }

    /// The schema as a script for the `mysql` (or `mariadb`) command-line client: four tables,
    /// the token floor's trigger and the acquisition procedure (between `DELIMITER` lines, which only that client
    /// understands), for administrators who create it by hand; then grant `SELECT, INSERT,
    /// UPDATE, DELETE, EXECUTE` on the database to the user simba connects as.
    pub fn schema() -> String {
        let mut script = schema_script(&SCHEMA);
        script.push_str(FLOOR_TRIGGER);
        script.push_str(";\nDELIMITER //\n");
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
            for &statement in SCHEMA.iter() {
                if let Err(e) = sqlx::query(statement).execute(self.pool()).await {
                    return Err(self.schema_error(e));
                }
            }
        }
        let trigger: i64 = sqlx::query_scalar(TRIGGER_PRESENT)
            .fetch_one(self.pool())
            .await
            .map_err(self.sql.err("check for the schema"))?;
        if trigger == 0 {
            // Not a prepared statement: MySQL cannot prepare `CREATE TRIGGER`.
            match sqlx::raw_sql(FLOOR_TRIGGER).execute(self.pool()).await {
                Ok(_) => {}
                Err(e) if error_number(&e) == Some(TRIGGER_EXISTS) => {}
                Err(e) => return Err(self.schema_error(e)),
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
    /// One try of an acquisition.
    async fn try_acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
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

impl SqlBackend for MySqlBackend {
    type Store = SqlStore<MySqlDialect>;

    fn store(&self) -> &SqlStore<MySqlDialect> {
        &self.sql
    }

    async fn renew(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
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

    async fn acquire_once(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        // InnoDB may pick this transaction as a deadlock victim (or time its lock wait out)
        // when sessions close and acquire at once; it wrote nothing then, so try again.
        let mut attempt = 0;
        loop {
            match self.try_acquire(session, name).await {
                Err(e) if attempt < LOCK_RETRIES && is_lock_conflict(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    fn cache(&self) -> &StoreCache {
        &self.stores
    }

    fn releases(&self) -> Releases<'_> {
        Releases::Watch(&self.watch)
    }

    async fn close(&self, session: &SessionId) -> BackendResult<()> {
        // One transaction, which InnoDB may give up to a lock conflict as it may acquisition's.
        let mut attempt = 0;
        loop {
            match self.sql.close_session(session).await {
                Err(e) if attempt < LOCK_RETRIES && is_lock_conflict(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    fn jobs(&self) -> Option<SharedJobStore> {
        self.jobs.then(|| self.sql.job_store(None))
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
