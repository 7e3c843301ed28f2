//! The PostgreSQL backend (feature `postgres`): sessions, leases and group memberships in
//! tables of one database, shared by every node; releases broadcast with `LISTEN`/`NOTIFY`.
//!
//! Data model (rule B3, ADR 0002): the same tables as the SQLite backend, `simba_session`,
//! `simba_lease`, `simba_lease_floor` and `simba_member`, created on connect with the floor's
//! trigger. Releasing a lease only clears its `session_id`; an idle row is removed only after the
//! token floor was raised to its token, and a new row starts above the floor, so a lease's token
//! never resets (T3). Times are `BIGINT` milliseconds since the Unix epoch. The calls all SQL
//! backends run alike are in the shared SQL module (ADR 0002); this module keeps connecting,
//! the schema, opening a session (with the collection of dead sessions), renewal, acquisition
//! and the release listener, and its own spelling of release and close (one statement each,
//! with `NOTIFY`), as the hooks of the SQL backends' one `Backend` implementation. All of
//! PostgreSQL's SQL is in this folder's `.sql` files, included by `dialect.rs`; the listener
//! is in `listen.rs`.
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
//! [`subscribe_releases`](crate::backend::Backend::subscribe_releases); the task ends with the backend's last
//! clone. A notification lost while reconnecting only delays a candidate to its next attempt.
//!
//! Job control: the jobs store's pause, resume and run-now routine notifies
//! [`CONTROL_CHANNEL`] with the job's name, and the same listener, on the same connection,
//! forwards those names to the jobs store's
//! [`subscribe_control`](crate::backend::job_store::JobStore::subscribe_control), so a holder hears a
//! run-now request when it commits rather than at its next poll of the control version. After
//! the listener reconnects it sends an empty name, once it listens again: the changes made
//! while it was away were not notified to it, so a subscriber reads the control version again.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::backend::{Releases, SqlBackend, StoreCache};
use super::server::{self, CONNECT_TIMEOUT, LOCK_WAIT_MS, describe, schema_missing, schema_script};
use super::{SqlCalls, SqlStore, digest};
use crate::backend::job_store::SharedJobStore;
use crate::backend::{Acquire, BackendError, BackendResult, HeldDigest, KeepAlive, SessionGrant, SessionId};
pub(crate) use dialect::PgDialect;
use dialect::{OWN, SCHEMA_LOCK, SCHEMA_PRESENT, SYNCHRONOUS_COMMIT, open_statement, schema};

mod dialect;
mod listen;

/// The channel that `release` and `close_session` notify with the freed lease's name.
pub const RELEASE_CHANNEL: &str = "simba_released";

/// The channel that the jobs store's control routine (pause, resume, run now) notifies with
/// the job's name.
pub const CONTROL_CHANNEL: &str = "simba_job_control";

/// The channel that a schedule store's write notifies, at its commit, with the space (the
/// namespace, `""` for the default one) whose change counters moved (rule A11).
pub const SCHEDULES_CHANNEL: &str = "simba_schedules";

/// Capacity of the release broadcast; a subscriber that falls further behind skips names
/// (and then relies on its next attempt).
const RELEASE_BUFFER: usize = 1024;

/// Connections in the pool. The engine has at most one keep-alive and one acquisition per
/// election in flight; more calls wait for a connection.
const MAX_CONNECTIONS: u32 = 10;

/// The PostgreSQL backend. Cheap to clone: clones share one connection pool and one release
/// listener, which stops when the last clone is dropped.
///
/// Needs PostgreSQL 9.5 or later (`ON CONFLICT`); tested with 15. Every node must use the same
/// database (a primary, not a replica): a replica promoted after an asynchronous failover may
/// have lost recent tokens (see the README's correctness section).
#[derive(Clone, Debug)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
    /// Whether [`Backend::job_store`](crate::backend::Backend::job_store) answers the jobs store (by default; [`PostgresBackend::without_job_store`]).
    jobs: bool,
    /// The jobs and schedule stores once built, shared by clones.
    stores: StoreCache,
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
    /// The spaces whose schedules changed ([`SCHEDULES_CHANNEL`]).
    schedules: broadcast::Sender<String>,
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
        let (schedules, _) = broadcast::channel(RELEASE_BUFFER);
        let stop = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(listen::forward_releases(
            (*pool.connect_options()).clone(),
            listen::Channels { releases: releases.clone(), controls: controls.clone(), schedules: schedules.clone() },
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
                schedules,
                _listener: stop.drop_guard(),
            }),
            jobs: true,
            stores: StoreCache::default(),
        })
    }

    /// The schema as an SQL script (four tables, the acquisition function, the token floor's
    /// function and trigger), for administrators who create it by hand (then grant `SELECT,
    /// INSERT, UPDATE, DELETE` on the tables and `EXECUTE` on `simba_acquire_v1(text, text)` to
    /// the user simba connects as).
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
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON simba_session, simba_lease, simba_lease_floor, simba_member TO \"{user}\";\n\
                         GRANT EXECUTE ON FUNCTION simba_acquire_v1(text, text) TO \"{user}\";"
                    ),
                ));
            }
            return Err(failed("create the schema")(e));
        }
    }
    tx.commit().await.map_err(failed("commit the schema"))
}

impl SqlBackend for PostgresBackend {
    type Store = SqlStore<PgDialect>;

    fn store(&self) -> &SqlStore<PgDialect> {
        &self.inner.sql
    }

    async fn renew(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
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

    async fn acquire_once(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
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

    fn cache(&self) -> &StoreCache {
        &self.stores
    }

    fn releases(&self) -> Releases<'_> {
        Releases::Broadcast(&self.inner.releases)
    }

    async fn open(&self, ttl: Duration) -> BackendResult<SessionGrant> {
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

    fn jobs(&self) -> Option<SharedJobStore> {
        self.jobs.then(|| self.inner.sql.job_store(Some(self.inner.controls.clone())))
    }

    fn schedules(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        Some(self.inner.sql.schedule_store(Some(self.inner.schedules.clone())))
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
