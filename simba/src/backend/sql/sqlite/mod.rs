//! The embedded SQLite backend (feature `sqlite`): sessions, leases and group memberships in
//! one database file that several processes on the same host share.
//!
//! Data model (rule B3, ADR 0002): four tables created on connect, `simba_session`,
//! `simba_lease`, `simba_lease_floor` and `simba_member`. Releasing a lease only clears its
//! `session_id`; an idle row is removed only after the token floor was raised to its token, and
//! a new row starts above the floor, so a lease's token never resets (T3). The calls all SQL backends run
//! alike are in the shared SQL module (ADR 0002); this module keeps connecting, the schema,
//! renewal and acquisition, as the hooks of the SQL backends' one `Backend` implementation.
//! All of SQLite's SQL is in this folder's `.sql` files, included by `dialect.rs`;
//! `tests.rs` and `jobs_tests.rs` test the backend and the jobs store on real files.
//!
//! Time is the database's clock (B2): every "now" is `unixepoch('subsec')`, in
//! milliseconds since the Unix epoch. The client's clock is never sent to the database.
//!
//! Releases (K2; BENCHMARKS.md P4): SQLite has no broadcast, so each backend instance runs one
//! release watch (`release_watch`) while one of its candidates waits: every 5 ms it reads
//! `PRAGMA data_version` on a connection of its own (it changes when another connection
//! commits; reading it is a look at the WAL index in shared memory, no file I/O), and only
//! when it changed reads the rows of the waited-for leases. Nothing runs while no candidate
//! waits; a release through this instance is sent without a query.
//!
//! Concurrency: every call that reads and then writes in several statements (open, renewal,
//! close) runs in a `BEGIN IMMEDIATE` transaction, which takes SQLite's single write lock
//! before the first read. Two processes can therefore never both see a lease as free and
//! both take it. Single-statement writes (`acquire`'s take, `release`, `claim_slot`, the
//! group calls) need no explicit transaction: SQLite takes the write lock when such a
//! statement starts, so its reads and its write are atomic.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
    SqliteTransaction,
};
use sqlx::{AssertSqlSafe, ConnectOptions};

use super::backend::{Releases, SqlBackend, StoreCache};
use super::dialect::Dialect;
use super::jobs::SqlJobStore;
use super::release_watch::{self, Probe, ReleaseWatch};
use super::{SqlStore, digest};
use crate::backend::job_store::SharedJobStore;
use crate::backend::{Acquire, BackendError, BackendResult, HeldDigest, KeepAlive, SessionId};
pub(crate) use dialect::SqliteDialect;
use dialect::{BEGIN_IMMEDIATE, OWN, SCHEMA, SCHEMA_PRESENT};

mod dialect;

/// How long a connection waits for another connection's write lock (`BEGIN IMMEDIATE`)
/// before the call fails. The engine times calls out on its own (D2); this only bounds how
/// long a dropped call keeps a pooled connection busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The page cache of each connection, in KiB (SQLite's default is 2,000 KiB).
const CACHE_KIB: u32 = 1024;

/// The pool's connections to a file (sqlx's default is 10).
const MAX_CONNECTIONS: u32 = 4;

/// The SQLite backend. Cheap to clone: clones share one connection pool.
///
/// Several processes may open the same file; they coordinate through SQLite's file locks.
/// The file must be on a local file system (SQLite's WAL mode does not work over network
/// file systems).
#[derive(Clone, Debug)]
pub struct SqliteBackend {
    sql: SqlStore<SqliteDialect>,
    watch: ReleaseWatch,
    /// The jobs store's connection for history records after their claim, opened at its first
    /// write: `synchronous = NORMAL` (ADR 0015, addendum). `None` for an in-memory database,
    /// which lives in the pool's one connection.
    records: Option<SqlitePool>,
    /// The jobs and schedule stores once built, shared by clones.
    stores: StoreCache,
}

/// How often the release watch looks at `PRAGMA data_version` while a candidate waits.
const WATCH_TICK: Duration = Duration::from_millis(5);

/// The release watch's view of the file: `PRAGMA data_version` on a connection of its own,
/// then a read of the waited-for rows on that connection (a reader in WAL mode blocks nobody).
/// An in-memory database has only the pool's one connection, which sees no other
/// connection's commits: there every look reads.
struct SqliteProbe {
    pool: SqlitePool,
    conn: Option<SqliteConnection>,
    version: Option<i64>,
    in_memory: bool,
    description: Arc<str>,
}

impl SqliteProbe {
    fn failed(&mut self, what: &str, e: sqlx::Error) -> BackendError {
        // Reopen at the next look.
        self.conn = None;
        self.version = None;
        BackendError::unavailable(format!("{}: release watch: {what} failed", self.description), e)
    }
}

impl Probe for SqliteProbe {
    async fn changed(&mut self) -> BackendResult<bool> {
        if self.in_memory {
            return Ok(true);
        }
        if self.conn.is_none() {
            match self.pool.connect_options().connect().await {
                Ok(c) => self.conn = Some(c),
                Err(e) => return Err(self.failed("open a connection", e)),
            }
        }
        let Some(conn) = self.conn.as_mut() else { return Ok(true) };
        match sqlx::query_scalar::<_, i64>("PRAGMA data_version").fetch_one(&mut *conn).await {
            Ok(v) => Ok(self.version.replace(v) != Some(v)),
            Err(e) => Err(self.failed("read data_version", e)),
        }
    }

    async fn free(&mut self, names: &[String]) -> BackendResult<Vec<String>> {
        let sql = release_watch::free_sql(SqliteDialect::NOW_MS, names.len());
        let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(sql));
        for name in names {
            query = query.bind(name.as_str());
        }
        let rows = match self.conn.as_mut() {
            Some(conn) => query.fetch_all(&mut *conn).await,
            None => query.fetch_all(&self.pool).await,
        };
        rows.map_err(|e| self.failed("read the waited-for leases", e))
    }
}

impl SqliteBackend {
    /// Opens (creating it if missing) the database at `url` and creates the schema.
    ///
    /// Accepts `sqlite://path/to/file.db`, `sqlite:///absolute/path.db`, `sqlite:file.db`
    /// and `sqlite::memory:` (a private database that lives as long as this backend, for
    /// tests). The file is put in WAL mode, so readers do not block the writer, and
    /// connections wait up to 5 s for another process's write lock.
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url)).await
    }

    /// [`connect`](Self::connect) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let options = SqliteConnectOptions::from_str(url.secret_text())
            .map_err(|e| {
                BackendError::Misconfigured(format!(
                    "invalid SQLite URL {:?} (expected sqlite://path/to/file.db or sqlite::memory:): {e}",
                    url.redacted()
                ))
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT)
            // Each connection keeps its own page cache (2 MiB by default), which fills as the
            // lease table grows: with the pool's connections that was most of a node's memory
            // growth over an hour (issue 16 item 7). The operating system caches the file too.
            .pragma("cache_size", format!("-{CACHE_KIB}"));
        let description = describe_options(&options);
        if !is_in_memory(&options) {
            create_private(options.get_filename(), &description)?;
        }
        // One writer at a time is all SQLite allows; a few connections serve the readers.
        let mut pool_options = SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS);
        if is_in_memory(&options) {
            // An in-memory database is shared between pooled connections through SQLite's
            // shared cache, whose table locks fail at once instead of waiting for the busy
            // timeout. One connection serialises calls, as the file's write lock would. The
            // database vanishes with its last connection, so the pool must never retire it.
            pool_options = pool_options.min_connections(1).max_connections(1).idle_timeout(None).max_lifetime(None);
        }
        // Switching a new file to WAL mode needs an exclusive lock that SQLite's busy timeout
        // does not wait for: processes opening a fresh file at once can get "database is
        // locked" (SQLITE_BUSY). Once the file is in WAL mode (a persistent setting) opening it
        // never needs that lock again, so retry within the busy timeout.
        let started = tokio::time::Instant::now();
        let pool = loop {
            match pool_options.clone().connect_with(options.clone()).await {
                Ok(pool) => break pool,
                Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    let pause = Duration::from_millis(10 + rand::random::<u64>() % 40);
                    tracing::debug!(backend = %description, retry_in = ?pause, "database is locked while opening; retrying");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => {
                    return Err(BackendError::unavailable(
                        format!(
                            "cannot open SQLite database {description}: check that its directory exists and is writable"
                        ),
                        e,
                    ));
                }
            }
        };
        Self::with_description(pool, description.into()).await
    }

    /// Wraps an existing pool and creates the schema.
    ///
    /// The caller chose the pool's options; for several processes on one file they should
    /// include a busy timeout (and preferably WAL mode), as [`connect`](Self::connect) sets.
    pub async fn from_pool(pool: SqlitePool) -> BackendResult<Self> {
        let description = describe_options(&pool.connect_options());
        Self::with_description(pool, description.into()).await
    }

    async fn with_description(pool: SqlitePool, description: Arc<str>) -> BackendResult<Self> {
        let probe = SqliteProbe {
            pool: pool.clone(),
            conn: None,
            version: None,
            in_memory: is_in_memory(&pool.connect_options()),
            description: Arc::clone(&description),
        };
        let records = (!is_in_memory(&pool.connect_options())).then(|| records_pool(&pool.connect_options()));
        let backend = SqliteBackend {
            sql: SqlStore::new(pool, description),
            watch: ReleaseWatch::new(probe, WATCH_TICK),
            records,
            stores: StoreCache::default(),
        };
        backend.create_schema().await?;
        tracing::debug!(backend = %backend.sql.description(), "SQLite backend ready");
        Ok(backend)
    }

    /// Creates the tables if they do not exist, in one transaction so that a concurrent
    /// process never sees half a schema. A read of `sqlite_master` first: when every table
    /// and index exists (every process after the first, every `simba` command), nothing takes
    /// the file's write lock, so a process starts while another holds it.
    async fn create_schema(&self) -> BackendResult<()> {
        let present: i64 =
            sqlx::query_scalar(SCHEMA_PRESENT).fetch_one(self.pool()).await.map_err(self.sql.err("read the schema"))?;
        if usize::try_from(present).is_ok_and(|n| n >= SCHEMA.len()) {
            return Ok(());
        }
        let mut tx = self.begin_immediate("create the schema").await?;
        for &statement in SCHEMA.iter() {
            sqlx::query(statement).execute(&mut *tx).await.map_err(self.sql.err("create the schema"))?;
        }
        tx.commit().await.map_err(self.sql.err("commit the schema"))
    }

    /// The pool, for callers that want to read the tables (dashboards, tests).
    pub fn pool(&self) -> &SqlitePool {
        self.sql.pool()
    }

    /// Queries the release watch has sent since connect (`PRAGMA data_version` looks and reads
    /// of waited-for leases), for benchmarks: zero while no candidate of this backend waits.
    pub fn release_watch_queries(&self) -> u64 {
        self.watch.queries()
    }

    async fn begin_immediate(&self, what: &'static str) -> BackendResult<SqliteTransaction<'static>> {
        self.pool().begin_with(BEGIN_IMMEDIATE).await.map_err(self.sql.err(what))
    }
}

/// The pool of history writes after their claim (`finish_run`, `append` and their trims): one
/// connection, opened at its first use, with the lease pool's options but `synchronous =
/// NORMAL`. In WAL mode such a commit appends to the WAL without syncing it, so it holds the
/// file's write lock for microseconds instead of a disk sync, which every node's renewal
/// waited behind (BENCHMARKS.md P12). What a power loss can take: the history records
/// committed after the last synced commit of any connection (a renewal, a claim, an
/// acquisition: each syncs the whole WAL, these frames included), never a lease, a token or a
/// claim, which stay `FULL` (ADR 0015, addendum).
fn records_pool(options: &SqliteConnectOptions) -> SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options.clone().synchronous(SqliteSynchronous::Normal))
}

/// SQLITE_BUSY (5) and its extended codes (BUSY_RECOVERY 261, BUSY_SNAPSHOT 517, BUSY_TIMEOUT 773).
fn is_busy(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| matches!(c.as_ref(), "5" | "261" | "517" | "773"))
}

/// Creates the database file readable and writable by its owner only (0600), if it does not
/// exist yet: it holds the leases, and whoever can write it can forge one (ADR 0008). SQLite
/// gives its `-wal` and `-shm` files the same permissions. An existing file is left as it is.
fn create_private(path: &std::path::Path, description: &str) -> BackendResult<()> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(BackendError::unavailable(
            format!("cannot create SQLite database {description}: check that its directory exists and is writable"),
            e,
        )),
    }
}

/// `true` for the in-memory databases that `SqliteConnectOptions` parses `:memory:` into.
fn is_in_memory(options: &SqliteConnectOptions) -> bool {
    let name = options.get_filename().to_string_lossy();
    name == ":memory:" || name.starts_with("file:sqlx-in-memory-")
}

fn describe_options(options: &SqliteConnectOptions) -> String {
    if is_in_memory(options) {
        "sqlite::memory:".to_owned()
    } else {
        format!("sqlite:{}", options.get_filename().display())
    }
}

impl SqlBackend for SqliteBackend {
    type Store = SqlStore<SqliteDialect>;

    fn store(&self) -> &SqlStore<SqliteDialect> {
        &self.sql
    }

    async fn renew(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        // One transaction, two statements whatever the number of leases (S1): the renewal
        // and the digest see the same state.
        let mut tx = self.begin_immediate("renew a session").await?;
        let remaining: Option<i64> = sqlx::query_scalar(OWN.renew.sql())
            .bind(session.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.sql.err("renew a session"))?;
        let Some(remaining) = remaining else {
            tx.rollback().await.map_err(self.sql.err("end a renewal"))?;
            return Ok(KeepAlive::Expired);
        };
        let (count, low, high): (i64, i64, i64) = sqlx::query_as(OWN.digest.sql())
            .bind(session.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(self.sql.err("digest a session's leases"))?;
        tx.commit().await.map_err(self.sql.err("commit a renewal"))?;
        Ok(KeepAlive::Alive {
            remaining: Duration::from_millis(self.sql.non_negative("remaining time", remaining)?),
            digest_matches: digest(self.sql.description(), count, low, high)? == held,
        })
    }

    async fn acquire_once(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        // The common answer, a win, is one statement (P2 in BENCHMARKS.md): SQLite takes the
        // write lock when a writing statement starts, so its reads and its write are atomic.
        // `fetch_all`, not `fetch_optional`: in autocommit the statement commits when it is
        // stepped to its end, and `fetch_optional` stops at the returned row, dropping the
        // commit's error (SQLITE_FULL on a full disk reported a win that was never stored:
        // `faults::storage::sqlite_full_disk_clear_error_no_corruption_recovery`).
        let won: Vec<i64> = sqlx::query_scalar(OWN.take.sql())
            .bind(name)
            .bind(session.as_str())
            .fetch_all(self.pool())
            .await
            .map_err(self.sql.err("take a lease"))?;
        if let Some(&token) = won.first() {
            return Ok(Acquire::Won(self.sql.non_negative("token", token)?));
        }
        let (live, holder, token): (bool, Option<String>, Option<i64>) = sqlx::query_as(OWN.after_refusal.sql())
            .bind(name)
            .bind(session.as_str())
            .fetch_one(self.pool())
            .await
            .map_err(self.sql.err("read a lease holder"))?;
        Ok(match (holder, token) {
            _ if !live => Acquire::Expired,
            // A retry after a lost reply: same term, same token.
            (Some(holder), Some(token)) if holder == session.as_str() => {
                Acquire::Won(self.sql.non_negative("token", token)?)
            }
            _ => Acquire::Held,
        })
    }

    fn cache(&self) -> &StoreCache {
        &self.stores
    }

    fn releases(&self) -> Releases<'_> {
        Releases::Watch(&self.watch)
    }

    /// The jobs store, its history records after the claim written through [`records_pool`].
    fn jobs(&self) -> Option<SharedJobStore> {
        let store = SqlJobStore::new(self.sql.clone());
        Some(SharedJobStore::new(match &self.records {
            Some(records) => store.with_record_pool(records.clone()),
            None => store,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::print_stderr)] // The figures are printed for the report; no time is asserted.
mod jobs_tests;
