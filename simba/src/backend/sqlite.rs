//! The embedded SQLite backend (feature `sqlite`): sessions, leases and group memberships in
//! one database file that several processes on the same host share.
//!
//! Data model (rule B3, ADR 0002): three tables created on connect, `simba_session`,
//! `simba_lease` and `simba_member`. Lease rows are never deleted, so a lease's token never
//! resets (T3); releasing a lease only clears its `session_id`.
//!
//! Time is the database's clock (B2): every "now" is computed inside SQL by `now_ms!`, in
//! milliseconds since the Unix epoch. The client's clock is never sent to the database.
//!
//! Concurrency: every call that reads and then writes in several statements runs in a
//! `BEGIN IMMEDIATE` transaction, which takes SQLite's single write lock before the first
//! read. Two processes can therefore never both see a lease as free and both take it.
//! Single-statement writes (`acquire`'s take, `release`, `claim_slot`, `leave_group`) need no
//! explicit transaction: SQLite takes the write lock when such a statement starts, so its
//! reads and its write are atomic.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteTransaction};

use super::inspect::SqlRows;
use super::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

/// The database's clock, in integer milliseconds since the Unix epoch (rule B2).
///
/// `unixepoch('subsec')` needs SQLite 3.42 or later; the bundled SQLite is newer. SQLite keeps
/// "now" constant within one statement, so several uses in one statement agree.
macro_rules! now_ms {
    () => {
        "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
    };
}

/// How long a session's row (and its memberships) outlives its expiry before
/// [`Backend::open_session`] collects it. Only for tidiness and post-mortem reading: an
/// expired row and a missing row mean the same thing to every call.
const GC_GRACE_MS: i64 = 60_000;

/// The longest session lifetime stored, about 34 years. Caps `now + ttl` well inside `i64`,
/// because SQLite silently turns an overflowing integer sum into a float.
const MAX_TTL_MS: i64 = 1 << 40;

/// How long a connection waits for another connection's write lock (`BEGIN IMMEDIATE`)
/// before the call fails. The engine times calls out on its own (D2); this only bounds how
/// long a dropped call keeps a pooled connection busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema, rule B3. Every statement is idempotent, so any number of processes may run it, at
/// any time. Times are integer milliseconds on the database's clock.
const SCHEMA: [&str; 4] = [
    "CREATE TABLE IF NOT EXISTS simba_session (
        id         TEXT    PRIMARY KEY,
        expires_at INTEGER NOT NULL,
        ttl_ms     INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    )",
    // `token` is the fencing token of the current or last term. The row is never deleted so
    // that the token never resets (T3); `session_id IS NULL` means released.
    "CREATE TABLE IF NOT EXISTS simba_lease (
        name        TEXT    PRIMARY KEY,
        session_id  TEXT    NULL,
        token       INTEGER NOT NULL,
        acquired_at INTEGER,
        last_slot   INTEGER NULL
    )",
    // Keep-alive digests and `owned` look leases up by holder.
    "CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id)",
    "CREATE TABLE IF NOT EXISTS simba_member (
        group_name TEXT    NOT NULL,
        session_id TEXT    NOT NULL,
        joined_at  INTEGER NOT NULL,
        PRIMARY KEY (group_name, session_id)
    )",
];

/// Takes SQLite's write lock before the first read of a read-then-write call.
const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";

// ---- open_session -------------------------------------------------------------------------
// Garbage collection of long-dead sessions. Lease rows are only released, never deleted.

const GC_LEASES: &str = concat!(
    "UPDATE simba_lease SET session_id = NULL WHERE session_id IN ",
    "(SELECT id FROM simba_session WHERE expires_at < ",
    now_ms!(),
    " - ?1)"
);
const GC_MEMBERS: &str = concat!(
    "DELETE FROM simba_member WHERE session_id IN ",
    "(SELECT id FROM simba_session WHERE expires_at < ",
    now_ms!(),
    " - ?1)"
);
const GC_SESSIONS: &str = concat!("DELETE FROM simba_session WHERE expires_at < ", now_ms!(), " - ?1");

/// `?1` id, `?2` ttl in ms.
const INSERT_SESSION: &str = concat!(
    "INSERT INTO simba_session (id, expires_at, ttl_ms, created_at) VALUES (?1, ",
    now_ms!(),
    " + ?2, ?2, ",
    now_ms!(),
    ")"
);

// ---- keep_alive ---------------------------------------------------------------------------

/// Renews a live session; an expired one is left alone and never comes back (S3). Returns
/// the remaining lifetime measured by the database after the renewal.
const RENEW_SESSION: &str = concat!(
    "UPDATE simba_session SET expires_at = ",
    now_ms!(),
    " + ttl_ms WHERE id = ?1 AND expires_at > ",
    now_ms!(),
    " RETURNING expires_at - ",
    now_ms!()
);

/// The digest of the leases listed for a session: count and wrapping sum of tokens. The sum
/// is split in 32-bit halves so that SQLite's `SUM` (which fails on integer overflow) cannot
/// overflow; the halves are recombined with wrapping arithmetic in Rust. The server work is
/// O(leases held) through the `session_id` index, but it is one statement and a
/// constant-size reply (S1).
const DIGEST: &str = "SELECT COUNT(*), COALESCE(SUM(token & 4294967295), 0), COALESCE(SUM(token >> 32), 0) \
     FROM simba_lease WHERE session_id = ?1";

// ---- acquire ------------------------------------------------------------------------------

/// `?1` session id. Returns a row if, and only if, the session is live.
const SESSION_LIVE: &str = concat!("SELECT 1 FROM simba_session WHERE id = ?1 AND expires_at > ", now_ms!());

/// `?1` name, `?2` session id. One statement, so one write lock and one commit: creates the
/// lease with token 1, or takes it over when it is released or its holder's session is
/// missing or expired, incrementing the token; only for a live caller (the `SELECT`'s `WHERE`,
/// which also lets SQLite parse the upsert after a `SELECT`). Returns the new token only when
/// this statement won the lease; `last_slot` is kept across terms so that a cron slot never
/// runs twice.
const TAKE_LEASE: &str = concat!(
    "INSERT INTO simba_lease (name, session_id, token, acquired_at, last_slot) SELECT ?1, ?2, 1, ",
    now_ms!(),
    ", NULL WHERE EXISTS (SELECT 1 FROM simba_session WHERE id = ?2 AND expires_at > ",
    now_ms!(),
    ") ON CONFLICT (name) DO UPDATE SET session_id = excluded.session_id, ",
    "token = simba_lease.token + 1, acquired_at = excluded.acquired_at ",
    "WHERE simba_lease.session_id IS NULL OR NOT EXISTS (SELECT 1 FROM simba_session s ",
    "WHERE s.id = simba_lease.session_id AND s.expires_at > ",
    now_ms!(),
    ") RETURNING token"
);

/// `?1` name, `?2` session id, read after [`TAKE_LEASE`] took nothing: whether the caller is
/// live, and the lease's holder and token. Not atomic with the take, and need not be: when
/// the caller holds the lease now it held it then (nobody else gives it a lease), and any
/// other answer is a refusal, which is never unsafe.
const AFTER_REFUSAL: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = ?2 AND expires_at > ",
    now_ms!(),
    "), lease.session_id, lease.token FROM (SELECT 1) one LEFT JOIN simba_lease lease ON lease.name = ?1"
);

// ---- release / close ----------------------------------------------------------------------

/// `?1` name, `?2` session id, `?3` token: frees the lease only for the term that holds it (T7).
const RELEASE: &str = "UPDATE simba_lease SET session_id = NULL WHERE name = ?1 AND session_id = ?2 AND token = ?3";

const CLOSE_LEASES: &str = "UPDATE simba_lease SET session_id = NULL WHERE session_id = ?1";
const CLOSE_MEMBERS: &str = "DELETE FROM simba_member WHERE session_id = ?1";
const CLOSE_SESSION: &str = "DELETE FROM simba_session WHERE id = ?1";

// ---- owned / claim_slot -------------------------------------------------------------------

/// `?1` session id. Nothing for an expired session: its leases are free for others.
const OWNED: &str = concat!(
    "SELECT name, token FROM simba_lease WHERE session_id = ?1 AND EXISTS ",
    "(SELECT 1 FROM simba_session WHERE id = ?1 AND expires_at > ",
    now_ms!(),
    ") ORDER BY name"
);

/// `?1` name, `?2` session id, `?3` token, `?4` slot. One statement, so the holder check and
/// the monotonic write of `last_slot` are atomic.
const CLAIM_SLOT: &str = concat!(
    "UPDATE simba_lease SET last_slot = ?4 WHERE name = ?1 AND session_id = ?2 AND token = ?3 ",
    "AND (last_slot IS NULL OR last_slot < ?4) AND EXISTS ",
    "(SELECT 1 FROM simba_session WHERE id = ?2 AND expires_at > ",
    now_ms!(),
    ")"
);

// ---- groups -------------------------------------------------------------------------------

/// `?1` group, `?2` session id. Joining twice keeps the first `joined_at`.
const JOIN_GROUP: &str =
    concat!("INSERT OR IGNORE INTO simba_member (group_name, session_id, joined_at) VALUES (?1, ?2, ", now_ms!(), ")");
const LEAVE_GROUP: &str = "DELETE FROM simba_member WHERE group_name = ?1 AND session_id = ?2";

/// `?1` group. Members whose session expired are hidden (membership ends with the session);
/// their rows are collected later. `ORDER BY` on TEXT uses the BINARY collation, the same
/// byte order as [`SessionId`]'s `Ord`.
const MEMBERS: &str = concat!(
    "SELECT m.session_id FROM simba_member m JOIN simba_session s ON s.id = m.session_id ",
    "WHERE m.group_name = ?1 AND s.expires_at > ",
    now_ms!(),
    " ORDER BY m.session_id"
);

/// The SQLite backend. Cheap to clone: clones share one connection pool.
///
/// Several processes may open the same file; they coordinate through SQLite's file locks.
/// The file must be on a local file system (SQLite's WAL mode does not work over network
/// file systems).
#[derive(Clone, Debug)]
pub struct SqliteBackend {
    pool: SqlitePool,
    /// `sqlite:<path>` or `sqlite::memory:`, for logs and error messages.
    description: Arc<str>,
}

impl SqliteBackend {
    /// Opens (creating it if missing) the database at `url` and creates the schema.
    ///
    /// Accepts `sqlite://path/to/file.db`, `sqlite:///absolute/path.db`, `sqlite:file.db`
    /// and `sqlite::memory:` (a private database that lives as long as this backend, for
    /// tests). The file is put in WAL mode, so readers do not block the writer, and
    /// connections wait up to 5 s for another process's write lock.
    pub async fn connect(url: &str) -> BackendResult<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| {
                BackendError::Misconfigured(format!(
                    "invalid SQLite URL {:?} (expected sqlite://path/to/file.db or sqlite::memory:): {e}",
                    crate::secret::redact_url(url)
                ))
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(BUSY_TIMEOUT);
        let description = describe_options(&options);
        if !is_in_memory(&options) {
            create_private(options.get_filename(), &description)?;
        }
        let mut pool_options = SqlitePoolOptions::new();
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
        let backend = SqliteBackend { pool, description };
        backend.create_schema().await?;
        tracing::debug!(backend = %backend.description, "SQLite backend ready");
        Ok(backend)
    }

    /// Creates the tables if they do not exist, in one transaction so that a concurrent
    /// process never sees half a schema.
    async fn create_schema(&self) -> BackendResult<()> {
        let mut tx = self.begin_immediate("create the schema").await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&mut *tx).await.map_err(self.err("create the schema"))?;
        }
        tx.commit().await.map_err(self.err("commit the schema"))
    }

    /// The pool, for callers that want to read the tables (dashboards, tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn begin_immediate(&self, what: &'static str) -> BackendResult<SqliteTransaction<'static>> {
        self.pool.begin_with(BEGIN_IMMEDIATE).await.map_err(self.err(what))
    }

    /// Maps a driver error to [`BackendError::Unavailable`], naming the call and the database.
    fn err(&self, what: &'static str) -> impl FnOnce(sqlx::Error) -> BackendError + '_ {
        move |e| BackendError::unavailable(format!("{}: {what} failed", self.description), e)
    }
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

/// A session lifetime in whole milliseconds (rounded down, so never more than asked),
/// capped at [`MAX_TTL_MS`].
fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).map_or(MAX_TTL_MS, |ms| ms.min(MAX_TTL_MS))
}

/// A stored non-negative integer (token, count, remaining time) as `u64`.
fn non_negative(what: &str, v: i64) -> BackendResult<u64> {
    u64::try_from(v).map_err(|_| BackendError::Protocol(format!("negative {what} in the SQLite database: {v}")))
}

impl Backend for SqliteBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let id = SessionId::random();
        let ttl = ttl_ms(ttl);
        let mut tx = self.begin_immediate("open a session").await?;
        for gc in [GC_LEASES, GC_MEMBERS, GC_SESSIONS] {
            sqlx::query(gc).bind(GC_GRACE_MS).execute(&mut *tx).await.map_err(self.err("collect expired sessions"))?;
        }
        sqlx::query(INSERT_SESSION)
            .bind(id.as_str())
            .bind(ttl)
            .execute(&mut *tx)
            .await
            .map_err(self.err("insert a session"))?;
        tx.commit().await.map_err(self.err("commit a new session"))?;
        Ok(SessionGrant { id, remaining: Duration::from_millis(non_negative("ttl", ttl)?) })
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        // One transaction, two statements whatever the number of leases (S1): the renewal
        // and the digest see the same state.
        let mut tx = self.begin_immediate("renew a session").await?;
        let remaining: Option<i64> = sqlx::query_scalar(RENEW_SESSION)
            .bind(session.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.err("renew a session"))?;
        let Some(remaining) = remaining else {
            tx.rollback().await.map_err(self.err("end a renewal"))?;
            return Ok(KeepAlive::Expired);
        };
        let (count, low, high): (i64, i64, i64) = sqlx::query_as(DIGEST)
            .bind(session.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(self.err("digest a session's leases"))?;
        tx.commit().await.map_err(self.err("commit a renewal"))?;
        let listed = HeldDigest {
            count: non_negative("lease count", count)?,
            token_sum: non_negative("token sum", low)?.wrapping_add(non_negative("token sum", high)?.wrapping_shl(32)),
        };
        Ok(KeepAlive::Alive {
            remaining: Duration::from_millis(non_negative("remaining time", remaining)?),
            digest_matches: listed == held,
        })
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        // The common answer, a win, is one statement (P2 in BENCHMARKS.md): SQLite takes the
        // write lock when a writing statement starts, so its reads and its write are atomic.
        let won: Option<i64> = sqlx::query_scalar(TAKE_LEASE)
            .bind(name)
            .bind(session.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(self.err("take a lease"))?;
        if let Some(token) = won {
            return Ok(Acquire::Won(non_negative("token", token)?));
        }
        let (live, holder, token): (bool, Option<String>, Option<i64>) = sqlx::query_as(AFTER_REFUSAL)
            .bind(name)
            .bind(session.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(self.err("read a lease holder"))?;
        Ok(match (holder, token) {
            _ if !live => Acquire::Expired,
            // A retry after a lost reply: same term, same token.
            (Some(holder), Some(token)) if holder == session.as_str() => Acquire::Won(non_negative("token", token)?),
            _ => Acquire::Held,
        })
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        // A token beyond i64 was never issued, so it holds nothing.
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let done = sqlx::query(RELEASE)
            .bind(name)
            .bind(session.as_str())
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(self.err("release a lease"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        // One transaction: leases, memberships and the session go together (S4).
        let mut tx = self.begin_immediate("close a session").await?;
        for statement in [CLOSE_LEASES, CLOSE_MEMBERS, CLOSE_SESSION] {
            sqlx::query(statement)
                .bind(session.as_str())
                .execute(&mut *tx)
                .await
                .map_err(self.err("close a session"))?;
        }
        tx.commit().await.map_err(self.err("commit a session close"))
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(OWNED)
            .bind(session.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(self.err("list a session's leases"))?;
        rows.into_iter().map(|(name, token)| Ok((name, non_negative("token", token)?))).collect()
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let done = sqlx::query(CLAIM_SLOT)
            .bind(name)
            .bind(session.as_str())
            .bind(token)
            .bind(slot)
            .execute(&self.pool)
            .await
            .map_err(self.err("claim a slot"))?;
        Ok(done.rows_affected() == 1)
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let mut tx = self.begin_immediate("join a group").await?;
        let live = sqlx::query(SESSION_LIVE)
            .bind(session.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(self.err("check a session"))?;
        if live.is_none() {
            tx.rollback().await.map_err(self.err("end a group join"))?;
            // The trait has no "expired" answer for joins; a membership row for a dead
            // session would never be listed anyway, so refuse it loudly.
            return Err(BackendError::Protocol(format!(
                "{}: cannot join group {group:?}: session {session} has expired or was closed",
                self.description
            )));
        }
        sqlx::query(JOIN_GROUP)
            .bind(group)
            .bind(session.as_str())
            .execute(&mut *tx)
            .await
            .map_err(self.err("join a group"))?;
        tx.commit().await.map_err(self.err("commit a group join"))
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        sqlx::query(LEAVE_GROUP)
            .bind(group)
            .bind(session.as_str())
            .execute(&self.pool)
            .await
            .map_err(self.err("leave a group"))?;
        Ok(())
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let ids: Vec<String> = sqlx::query_scalar(MEMBERS)
            .bind(group)
            .fetch_all(&self.pool)
            .await
            .map_err(self.err("list group members"))?;
        Ok(ids.into_iter().map(SessionId::new).collect())
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        const Q: [&str; 3] = super::inspect::sql_inspect_queries!("?1");
        let pool = &self.pool;
        let now_ms: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
            .fetch_one(pool)
            .await
            .map_err(self.err("read the clock"))?;
        let sessions = sqlx::query_as(Q[0]).bind(now_ms).fetch_all(pool).await.map_err(self.err("list sessions"))?;
        let leases = sqlx::query_as(Q[1]).bind(now_ms).fetch_all(pool).await.map_err(self.err("list leases"))?;
        let members =
            sqlx::query_as(Q[2]).bind(now_ms).fetch_all(pool).await.map_err(self.err("list group members"))?;
        Ok(SqlRows { now_ms, sessions, leases, members }.into_snapshot())
    }

    fn describe(&self) -> String {
        self.description.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A database file under the temp directory with a random name, removed (with its WAL
    /// and shared-memory files) on drop.
    struct TempDb {
        path: PathBuf,
    }

    impl TempDb {
        fn new() -> Self {
            let name = format!("simba-sqlite-test-{:032x}.db", rand::random::<u128>());
            TempDb { path: std::env::temp_dir().join(name) }
        }

        fn url(&self) -> String {
            format!("sqlite://{}", self.path.display())
        }

        async fn backend(&self) -> SqliteBackend {
            SqliteBackend::connect(&self.url()).await.unwrap()
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = self.path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }

    const TTL: Duration = Duration::from_secs(30);

    /// Several processes starting at once on a fresh file: each opens it and switches it to
    /// WAL mode, which takes an exclusive lock the busy timeout does not wait for. Every open
    /// must succeed (before the retry, about 1 start in 20 of three processes failed with
    /// "database is locked").
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_first_opens_of_a_fresh_file_succeed() {
        for _ in 0..20 {
            let db = TempDb::new();
            let url = db.url();
            let opens: Vec<_> = (0..6)
                .map(|_| {
                    let url = url.clone();
                    tokio::spawn(async move { SqliteBackend::connect(&url).await.map(|_| ()) })
                })
                .collect();
            for open in opens {
                open.await.unwrap().unwrap();
            }
        }
    }

    #[tokio::test]
    async fn token_increments_across_terms() {
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap();
        assert_eq!(s.remaining, TTL);
        for expected in 1..=3 {
            assert_eq!(b.acquire(&s.id, "job").await.unwrap(), Acquire::Won(expected));
            assert!(b.release(&s.id, "job", expected).await.unwrap());
        }
        // The row survives release; its session_id is cleared.
        let (holder, token): (Option<String>, i64) =
            sqlx::query_as("SELECT session_id, token FROM simba_lease").fetch_one(b.pool()).await.unwrap();
        assert_eq!((holder, token), (None, 3));
    }

    #[tokio::test]
    async fn held_until_holder_closes() {
        let db = TempDb::new();
        let b = db.backend().await;
        let a = b.open_session(TTL).await.unwrap().id;
        let c = b.open_session(TTL).await.unwrap().id;
        assert_ne!(a, c);
        b.join_group(&a, "g").await.unwrap();
        assert_eq!(b.acquire(&a, "x").await.unwrap(), Acquire::Won(1));
        assert_eq!(b.acquire(&c, "x").await.unwrap(), Acquire::Held);
        b.close_session(&a).await.unwrap();
        assert_eq!(b.acquire(&c, "x").await.unwrap(), Acquire::Won(2));
        assert!(b.members("g").await.unwrap().is_empty());
        // A closed session never comes back (S3), and closing it again succeeds.
        assert_eq!(b.keep_alive(&a, HeldDigest::default()).await.unwrap(), KeepAlive::Expired);
        assert_eq!(b.acquire(&a, "y").await.unwrap(), Acquire::Expired);
        b.close_session(&a).await.unwrap();
        b.close_session(&SessionId::new("unknown")).await.unwrap();
    }

    #[tokio::test]
    async fn expired_session_never_comes_back() {
        let db = TempDb::new();
        let b = db.backend().await;
        let short = b.open_session(Duration::from_millis(200)).await.unwrap().id;
        let other = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&short, "x").await.unwrap(), Acquire::Won(1));
        b.join_group(&short, "g").await.unwrap();
        assert_eq!(b.members("g").await.unwrap(), vec![short.clone()]);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut digest = HeldDigest::default();
        digest.add(1);
        assert_eq!(b.keep_alive(&short, digest).await.unwrap(), KeepAlive::Expired);
        assert_eq!(b.acquire(&short, "y").await.unwrap(), Acquire::Expired);
        assert!(b.owned(&short).await.unwrap().is_empty());
        assert!(b.members("g").await.unwrap().is_empty());
        assert!(matches!(b.join_group(&short, "g").await, Err(BackendError::Protocol(_))));
        assert!(!b.claim_slot(&short, "x", 1, 10).await.unwrap());
        assert_eq!(b.acquire(&other, "x").await.unwrap(), Acquire::Won(2));
        // The expired session's late release cannot free the new term (T7).
        assert!(!b.release(&short, "x", 1).await.unwrap());
        assert_eq!(b.owned(&other).await.unwrap(), vec![("x".to_owned(), 2)]);
    }

    #[tokio::test]
    async fn reacquire_is_idempotent_and_release_needs_the_token() {
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
        assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
        assert!(!b.release(&s, "x", 2).await.unwrap());
        assert!(!b.release(&s, "x", u64::MAX).await.unwrap());
        assert!(!b.release(&s, "nope", 1).await.unwrap());
        assert_eq!(b.owned(&s).await.unwrap(), vec![("x".to_owned(), 1)]);
        assert!(b.release(&s, "x", 1).await.unwrap());
        assert!(!b.release(&s, "x", 1).await.unwrap());
        assert!(b.owned(&s).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn keep_alive_digest() {
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        let other = b.open_session(TTL).await.unwrap().id;
        match b.keep_alive(&s, HeldDigest::default()).await.unwrap() {
            KeepAlive::Alive { remaining, digest_matches } => {
                assert!(digest_matches);
                assert!(remaining <= TTL && remaining > TTL - Duration::from_secs(1), "{remaining:?}");
            }
            KeepAlive::Expired => panic!("expired"),
        }
        // b: token 1 then 2 (two terms); a: token 1; c: token 1, held by the other session.
        assert_eq!(b.acquire(&s, "b").await.unwrap(), Acquire::Won(1));
        assert!(b.release(&s, "b", 1).await.unwrap());
        assert_eq!(b.acquire(&s, "b").await.unwrap(), Acquire::Won(2));
        assert_eq!(b.acquire(&s, "a").await.unwrap(), Acquire::Won(1));
        assert_eq!(b.acquire(&other, "c").await.unwrap(), Acquire::Won(1));
        let held = HeldDigest::of(&[("a".to_owned(), 1), ("b".to_owned(), 2)]);
        let alive = |digest_matches| KeepAlive::Alive { remaining: TTL, digest_matches };
        let ka = |d| {
            let b = b.clone();
            let s = s.clone();
            async move {
                match b.keep_alive(&s, d).await.unwrap() {
                    KeepAlive::Alive { digest_matches, .. } => alive(digest_matches),
                    KeepAlive::Expired => KeepAlive::Expired,
                }
            }
        };
        assert_eq!(ka(held).await, alive(true));
        assert_eq!(ka(HeldDigest::of(&[("a".to_owned(), 1)])).await, alive(false));
        assert_eq!(ka(HeldDigest::of(&[("a".to_owned(), 1), ("b".to_owned(), 1)])).await, alive(false));
        assert_eq!(ka(HeldDigest::default()).await, alive(false));
    }

    #[tokio::test]
    async fn digest_sum_wraps_like_held_digest() {
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        let big = i64::MAX - 1;
        for name in ["p", "q", "r"] {
            sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES (?1, ?2, ?3)")
                .bind(name)
                .bind(s.as_str())
                .bind(big)
                .execute(b.pool())
                .await
                .unwrap();
        }
        let t = big as u64;
        let held = HeldDigest::of(&[("p".to_owned(), t), ("q".to_owned(), t), ("r".to_owned(), t)]);
        let KeepAlive::Alive { digest_matches, .. } = b.keep_alive(&s, held).await.unwrap() else { panic!("expired") };
        assert!(digest_matches);
    }

    #[tokio::test]
    async fn claim_slot_is_monotonic_and_fenced() {
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        let other = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&s, "cron").await.unwrap(), Acquire::Won(1));
        assert!(b.claim_slot(&s, "cron", 1, 100).await.unwrap());
        assert!(!b.claim_slot(&s, "cron", 1, 100).await.unwrap());
        assert!(!b.claim_slot(&s, "cron", 1, 99).await.unwrap());
        assert!(!b.claim_slot(&s, "cron", 2, 101).await.unwrap());
        assert!(!b.claim_slot(&other, "cron", 1, 101).await.unwrap());
        assert!(b.claim_slot(&s, "cron", 1, 101).await.unwrap());
        // The next term keeps the record: an old slot cannot run again.
        b.close_session(&s).await.unwrap();
        assert_eq!(b.acquire(&other, "cron").await.unwrap(), Acquire::Won(2));
        assert!(!b.claim_slot(&other, "cron", 2, 101).await.unwrap());
        assert!(b.claim_slot(&other, "cron", 2, 102).await.unwrap());
    }

    #[tokio::test]
    async fn schema_creation_is_idempotent() {
        let db = TempDb::new();
        let first = db.backend().await;
        let s = first.open_session(TTL).await.unwrap().id;
        assert_eq!(first.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
        let second = db.backend().await;
        second.create_schema().await.unwrap();
        assert_eq!(second.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
        assert_eq!(second.describe(), format!("sqlite:{}", db.path.display()));
        let pooled = SqliteBackend::from_pool(first.pool().clone()).await.unwrap();
        assert_eq!(pooled.describe(), second.describe());
    }

    #[tokio::test]
    async fn groups() {
        let db = TempDb::new();
        let b = db.backend().await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let s = b.open_session(TTL).await.unwrap().id;
            b.join_group(&s, "g").await.unwrap();
            b.join_group(&s, "g").await.unwrap();
            ids.push(s);
        }
        ids.sort();
        assert_eq!(b.members("g").await.unwrap(), ids);
        assert!(b.members("h").await.unwrap().is_empty());
        b.leave_group(&ids[1], "g").await.unwrap();
        b.leave_group(&ids[1], "g").await.unwrap();
        assert_eq!(b.members("g").await.unwrap(), vec![ids[0].clone(), ids[2].clone()]);
    }

    #[tokio::test]
    async fn in_memory_and_bad_paths() {
        let b = SqliteBackend::connect("sqlite::memory:").await.unwrap();
        assert_eq!(b.describe(), "sqlite::memory:");
        let s = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));

        let missing =
            std::env::temp_dir().join(format!("simba-missing-{:032x}", rand::random::<u128>())).join("db.sqlite");
        let err = SqliteBackend::connect(&format!("sqlite://{}", missing.display())).await.unwrap_err();
        assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
    }

    /// Safe defaults (issue 8): the file simba creates, and its WAL and shared-memory files,
    /// are readable and writable by their owner only, whatever the umask allows.
    #[cfg(unix)]
    #[tokio::test]
    async fn new_database_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let db = TempDb::new();
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
        let mut checked = 0;
        for suffix in ["", "-wal", "-shm"] {
            let mut p = db.path.clone().into_os_string();
            p.push(suffix);
            if let Ok(meta) = std::fs::metadata(&p) {
                assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{p:?}");
                checked += 1;
            }
        }
        assert!(checked >= 2, "the database and its WAL file exist");
    }

    #[tokio::test]
    async fn open_session_collects_long_dead_sessions_but_not_leases() {
        let db = TempDb::new();
        let b = db.backend().await;
        let dead = b.open_session(TTL).await.unwrap().id;
        assert_eq!(b.acquire(&dead, "x").await.unwrap(), Acquire::Won(1));
        b.join_group(&dead, "g").await.unwrap();
        // Age the session past the grace period on the database's clock.
        sqlx::query("UPDATE simba_session SET expires_at = expires_at - 1000000 WHERE id = ?1")
            .bind(dead.as_str())
            .execute(b.pool())
            .await
            .unwrap();
        let live = b.open_session(TTL).await.unwrap().id;
        let sessions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_session").fetch_one(b.pool()).await.unwrap();
        let members: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_member").fetch_one(b.pool()).await.unwrap();
        let leases: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(b.pool()).await.unwrap();
        assert_eq!((sessions, members, leases), (1, 0, 1));
        assert_eq!(b.keep_alive(&dead, HeldDigest::default()).await.unwrap(), KeepAlive::Expired);
        assert_eq!(b.acquire(&live, "x").await.unwrap(), Acquire::Won(2));
    }

    /// Two pools on one file (as two processes would be) contend for one lease; at no
    /// instant do both hold it, and the tokens of all terms are exactly 1..=wins.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_pools_never_both_win() {
        const ATTEMPTS: usize = 200;
        let db = TempDb::new();
        let holders = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        // Both pools and sessions are ready before either starts, so they really overlap.
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let b = db.backend().await;
            let s = b.open_session(TTL).await.unwrap().id;
            let holders = holders.clone();
            let overlaps = overlaps.clone();
            let start = start.clone();
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let mut tokens = Vec::new();
                let mut held = 0;
                for _ in 0..ATTEMPTS {
                    match b.acquire(&s, "contended").await.unwrap() {
                        Acquire::Won(token) => {
                            if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            // Hold the lease for a moment so that the other pool tries
                            // while it is taken.
                            tokio::time::sleep(Duration::from_micros(500)).await;
                            holders.fetch_sub(1, Ordering::SeqCst);
                            assert!(b.release(&s, "contended", token).await.unwrap());
                            tokens.push(token);
                        }
                        Acquire::Held => held += 1,
                        Acquire::Expired => panic!("session expired"),
                    }
                    // Pace the attempts so that neither pool finishes (or starves the
                    // other) before the other starts.
                    tokio::time::sleep(Duration::from_micros(300)).await;
                }
                (tokens, held)
            }));
        }
        let mut tokens = Vec::new();
        let mut held = 0;
        for t in tasks {
            let (won, lost) = t.await.unwrap();
            tokens.extend(won);
            held += lost;
        }
        // The pools did contend: some attempts found the lease taken.
        assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        tokens.sort_unstable();
        let expected: Vec<u64> = (1..=tokens.len() as u64).collect();
        assert_eq!(tokens, expected);
    }
}
