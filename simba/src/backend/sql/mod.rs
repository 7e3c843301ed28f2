//! The SQL backends (ADR 0002): SQLite, PostgreSQL and MySQL/MariaDB on one data model.
//!
//! Three tables, `simba_session`, `simba_lease` and `simba_member`; lease rows are never
//! deleted, so a lease's token never resets (T3); every "now" is the database's clock (B2).
//! What the three share lives here: [`SqlStore`] runs every call whose statement is the same
//! on all of them but for the dialect's spelling ([`dialect`]: placeholders, the clock, the
//! upserts, and the few statements a dialect writes its own way), that is opening a session,
//! release, close, `owned`, `claim_slot`, the group calls and `inspect`. Each dialect's
//! module keeps only what truly differs: connecting, the schema, renewal and acquisition.
//!
//! The files: this one holds [`SqlStore`] and its shared calls ([`SqlCalls`]); `backend.rs`
//! the one implementation of [`Backend`](super::Backend) for the three, over the hooks of
//! `SqlBackend`; `dialect.rs` the statement templates and their rendering; `jobs.rs` the
//! generic jobs store; `schedules.rs` the generic schedule store; `release_watch.rs` the
//! release watch of SQLite and MySQL; `server.rs` what PostgreSQL and MySQL share beyond
//! statements (URL checks, connection errors). Each
//! dialect is a folder, `sqlite/`, `postgres/`, `mysql/`, holding all of its SQL as `.sql`
//! files (lease schema, jobs schema, stored routines, its own statements) that its
//! `dialect.rs` includes at compile time, and its backend in `mod.rs`.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Type};

use super::inspect::{GroupInfo, LeaseInfo, SessionInfo, from_epoch_ms, ms};
use super::{BackendError, BackendResult, Join, SessionGrant, SessionId, StoreSnapshot};

mod backend;
mod batch;
pub(crate) mod dialect;
pub(crate) mod jobs;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "sqlite", feature = "mysql"))]
mod release_watch;
pub(crate) mod schedules;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod server;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use dialect::{Dialect, Param, Stmt};

/// How long a session's row (and its memberships) outlives its expiry before
/// `open_session` collects it. Only for tidiness and post-mortem reading: an expired row and
/// a missing row mean the same thing to every call.
pub(crate) const GC_GRACE_MS: i64 = 60_000;

/// Whether `id` has the form of the ids the SQL backends generate
/// ([`SessionId::random`](crate::backend::SessionId::random): 32 lowercase hexadecimal digits),
/// so that it can be written into SQL text as is (a statement sent unprepared, to save a
/// round trip).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn is_generated_id(id: &crate::backend::SessionId) -> bool {
    let s = id.as_str();
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The longest session lifetime stored, about 34 years, so that `now + ttl` stays far from
/// `i64::MAX` (SQLite silently turns an overflowing integer sum into a float).
const MAX_TTL_MS: i64 = 1 << 40;

/// A session lifetime in whole milliseconds (rounded down, so never more than asked),
/// capped at [`MAX_TTL_MS`].
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).map_or(MAX_TTL_MS, |ms| ms.min(MAX_TTL_MS))
}

/// A stored non-negative integer (token, count, remaining time) as `u64`.
pub(crate) fn non_negative(database: &str, what: &str, v: i64) -> BackendResult<u64> {
    u64::try_from(v).map_err(|_| BackendError::Protocol(format!("{database}: negative {what} in the database: {v}")))
}

/// The digest of a session's leases from the count and the sums of the low and high 32-bit
/// halves of their tokens, recombined with wrapping arithmetic exactly as
/// [`HeldDigest::add`](super::HeldDigest::add) does. Summing halves keeps the database's sums
/// exact and far from overflow (each half sum fits in 63 bits for up to 2^31 leases).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn digest(database: &str, count: i64, low: i64, high: i64) -> BackendResult<super::HeldDigest> {
    Ok(super::HeldDigest {
        count: non_negative(database, "lease count", count)?,
        token_sum: non_negative(database, "token sum", low)?
            .wrapping_add(non_negative(database, "token sum", high)?.wrapping_shl(32)),
    })
}

/// Closes every idle pooled connection after `e`, when `e` says a connection broke.
///
/// Pools do not ping a connection before handing it out (a renewal is one round trip, S1),
/// so after a server restart every pooled connection is dead and would fail one call each.
/// A broken connection usually means all of them broke (restart, failover, network cut):
/// closing the idle ones at the first failure makes the next calls open fresh connections.
fn discard_idle_after<DB: Database>(pool: &Pool<DB>, e: &sqlx::Error, database: &str) {
    if !matches!(e, sqlx::Error::Io(_)) {
        return;
    }
    let mut idle = Vec::new();
    while let Some(mut conn) = pool.try_acquire() {
        conn.close_on_drop();
        idle.push(conn);
    }
    if !idle.is_empty() {
        tracing::debug!(backend = database, closed = idle.len(), "a connection broke; closing the idle ones too");
    }
}

/// A pool on one SQL database and the calls every dialect runs alike. Cheap to clone.
pub(crate) struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    /// `sqlite:<path>`, `postgres://user@host:port/database`, ..., for logs and error
    /// messages (no password).
    description: Arc<str>,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore { pool: self.pool.clone(), description: Arc::clone(&self.description), dialect: PhantomData }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore").field("database", &D::NAME).field("description", &self.description).finish()
    }
}

impl<D: Dialect> SqlStore<D> {
    /// A store on `pool`, described as `description` in logs and errors.
    pub(crate) fn new(pool: Pool<D::Db>, description: Arc<str>) -> Self {
        SqlStore { pool, description, dialect: PhantomData }
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// The description: URL without password.
    pub(crate) fn description(&self) -> &Arc<str> {
        &self.description
    }

    /// Maps a driver error to [`BackendError::Unavailable`], naming the call and the
    /// database; after a broken connection closes the idle ones where the dialect wants it.
    pub(crate) fn err(&self, what: &'static str) -> impl FnOnce(sqlx::Error) -> BackendError + '_ {
        move |e| {
            if D::DISCARD_IDLE {
                discard_idle_after(&self.pool, &e, &self.description);
            }
            BackendError::unavailable(format!("{}: {what} failed", self.description), e)
        }
    }

    /// A stored non-negative integer as `u64`, or a protocol error naming the database.
    pub(crate) fn non_negative(&self, what: &str, v: i64) -> BackendResult<u64> {
        non_negative(&self.description, what, v)
    }
}

/// The driver's arguments for `stmt`, or a protocol error (a value the driver cannot encode).
fn args<DB: Database>(description: &str, stmt: &Stmt, params: &[Param<'_>]) -> BackendResult<DB::Arguments>
where
    for<'a> &'a str: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
{
    stmt.args::<DB>(params)
        .map_err(|e| BackendError::Protocol(format!("{description}: cannot encode an argument: {e}")))
}

// What the shared calls need of a driver; every sqlx driver of simba has it.
impl<D: Dialect> SqlStore<D>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    <D::Db as Database>::Arguments: IntoArguments<D::Db>,
    for<'a> &'a str: Encode<'a, D::Db> + Type<D::Db>,
    for<'a> i64: Encode<'a, D::Db> + Type<D::Db> + Decode<'a, D::Db>,
    for<'a> String: Type<D::Db> + Decode<'a, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    /// Runs `stmt` on the pool; returns the rows it affected.
    pub(crate) async fn execute(
        &self,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<u64> {
        let args = args::<D::Db>(&self.description, stmt, params)?;
        let done = sqlx::query_with(stmt.sql(), args).execute(&self.pool).await.map_err(self.err(what))?;
        Ok(D::rows_affected(&done))
    }

    /// Runs `stmt` on the pool; returns its rows.
    pub(crate) async fn fetch_all<O>(
        &self,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<Vec<O>>
    where
        O: for<'r> FromRow<'r, <D::Db as Database>::Row> + Send + Unpin,
    {
        let args = args::<D::Db>(&self.description, stmt, params)?;
        sqlx::query_as_with(stmt.sql(), args).fetch_all(&self.pool).await.map_err(self.err(what))
    }

    /// Runs `stmt` on the pool; returns its one row.
    pub(crate) async fn fetch_one<O>(
        &self,
        stmt: &'static Stmt,
        params: &[Param<'_>],
        what: &'static str,
    ) -> BackendResult<O>
    where
        O: for<'r> FromRow<'r, <D::Db as Database>::Row> + Send + Unpin,
    {
        let args = args::<D::Db>(&self.description, stmt, params)?;
        sqlx::query_as_with(stmt.sql(), args).fetch_one(&self.pool).await.map_err(self.err(what))
    }

    /// Runs `steps` in order, in one transaction when `in_transaction` (begun with
    /// [`Dialect::BEGIN`]), else one by one on the pool.
    async fn run(
        &self,
        steps: &[(&'static Stmt, &[Param<'_>])],
        in_transaction: bool,
        what: &'static str,
    ) -> BackendResult<()> {
        if !in_transaction {
            for (stmt, params) in steps {
                self.execute(stmt, params, what).await?;
            }
            return Ok(());
        }
        let mut tx = dialect::begin::<D>(&self.pool).await.map_err(self.err(what))?;
        for (stmt, params) in steps {
            let args = args::<D::Db>(&self.description, stmt, params)?;
            sqlx::query_with(stmt.sql(), args).execute(&mut *tx).await.map_err(self.err(what))?;
        }
        tx.commit().await.map_err(self.err(what))
    }
}

/// The calls every SQL backend runs alike, on its [`SqlStore`]: the generic
/// [`Backend`](super::Backend) implementation ([`backend`]) sends them here. A trait rather
/// than inherent methods so that the generic code names them without repeating what they need
/// of the driver.
pub(crate) trait SqlCalls: Send + Sync + 'static {
    /// [`Backend::open_session`](super::Backend::open_session).
    fn open_session(&self, ttl: Duration) -> impl Future<Output = BackendResult<SessionGrant>> + Send;
    /// [`Backend::release`](super::Backend::release).
    fn release(&self, session: &SessionId, name: &str, token: u64) -> impl Future<Output = BackendResult<bool>> + Send;
    /// [`Backend::close_session`](super::Backend::close_session).
    fn close_session(&self, session: &SessionId) -> impl Future<Output = BackendResult<()>> + Send;
    /// [`Backend::owned`](super::Backend::owned).
    fn owned(&self, session: &SessionId) -> impl Future<Output = BackendResult<Vec<(String, u64)>>> + Send;
    /// [`Backend::claim_slot`](super::Backend::claim_slot).
    fn claim_slot(
        &self,
        session: &SessionId,
        name: &str,
        token: u64,
        slot: i64,
    ) -> impl Future<Output = BackendResult<bool>> + Send;
    /// [`Backend::join_group`](super::Backend::join_group).
    fn join_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<Join>> + Send;
    /// [`Backend::leave_group`](super::Backend::leave_group).
    fn leave_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<()>> + Send;
    /// [`Backend::members`](super::Backend::members).
    fn members(&self, group: &str) -> impl Future<Output = BackendResult<Vec<SessionId>>> + Send;
    /// [`Backend::inspect`](super::Backend::inspect).
    fn inspect(&self) -> impl Future<Output = BackendResult<StoreSnapshot>> + Send;
    /// [`Backend::remove_idle_leases`](super::Backend::remove_idle_leases).
    fn remove_idle_leases(
        &self,
        prefix: &str,
        idle_for: Duration,
        limit: usize,
    ) -> impl Future<Output = BackendResult<usize>> + Send;
    /// The description: URL without password.
    fn described(&self) -> &str;
    /// The jobs store on this database, answering
    /// [`JobStore::subscribe_control`](super::job_store::JobStore::subscribe_control) with
    /// receivers of `control` where the database broadcasts control changes.
    fn job_store(&self, control: Option<tokio::sync::broadcast::Sender<String>>) -> super::job_store::SharedJobStore;
    /// The schedule store on this database, answering
    /// [`ScheduleStore::subscribe_changes`](super::schedule_store::ScheduleStore::subscribe_changes)
    /// with receivers of `changes` where the database broadcasts them.
    fn schedule_store(
        &self,
        changes: Option<tokio::sync::broadcast::Sender<String>>,
    ) -> super::schedule_store::SharedScheduleStore;
}

// What the shared calls and the jobs store need of a driver; every sqlx driver of simba has it.
impl<D: schedules::ScheduleDialect> SqlCalls for SqlStore<D>
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
    /// [`Backend::open_session`](super::Backend::open_session): collects long-dead sessions,
    /// then inserts a new one whose lifetime runs on the database's clock.
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let s = D::statements();
        let id = SessionId::random();
        let ttl = ttl_ms(ttl);
        let grace = [Param::Int(GC_GRACE_MS)];
        let insert = [Param::Text(id.as_str()), Param::Int(ttl)];
        let mut steps: Vec<(&'static Stmt, &[Param<'_>])> = s.collect.iter().map(|c| (c, &grace[..])).collect();
        steps.push((&s.insert_session, &insert));
        self.run(&steps, D::OPEN_IN_TRANSACTION, "open a session").await?;
        Ok(SessionGrant { id, remaining: Duration::from_millis(self.non_negative("ttl", ttl)?) })
    }

    /// [`Backend::release`](super::Backend::release), with [`Dialect::RELEASE`].
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        // A token beyond i64 was never issued, so it holds nothing.
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let params = [Param::Text(name), Param::Text(session.as_str()), Param::Int(token)];
        Ok(self.execute(&D::statements().release, &params, "release a lease").await? == 1)
    }

    /// [`Backend::close_session`](super::Backend::close_session), with [`Dialect::CLOSE`]:
    /// leases, memberships and the session go together (S4).
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let params = [Param::Text(session.as_str())];
        let steps: Vec<_> = D::statements().close.iter().map(|c| (c, &params[..])).collect();
        self.run(&steps, steps.len() > 1, "close a session").await
    }

    /// [`Backend::owned`](super::Backend::owned).
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let rows: Vec<(String, i64)> =
            self.fetch_all(&D::statements().owned, &[session.as_str().into()], "list a session's leases").await?;
        rows.into_iter().map(|(name, token)| Ok((name, self.non_negative("token", token)?))).collect()
    }

    /// [`Backend::claim_slot`](super::Backend::claim_slot).
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let params = [Param::Text(name), Param::Text(session.as_str()), Param::Int(token), Param::Int(slot)];
        Ok(self.execute(&D::statements().claim_slot, &params, "claim a slot").await? == 1)
    }

    /// [`Backend::join_group`](super::Backend::join_group): one statement that writes the
    /// membership only for a live session.
    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let params = [Param::Text(group), Param::Text(session.as_str())];
        let joined = self.execute(&D::statements().join, &params, "join a group").await?;
        Ok(if joined == 0 { Join::Expired } else { Join::Joined })
    }

    /// [`Backend::leave_group`](super::Backend::leave_group).
    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let params = [Param::Text(group), Param::Text(session.as_str())];
        self.execute(&D::statements().leave, &params, "leave a group").await.map(|_| ())
    }

    /// [`Backend::members`](super::Backend::members).
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let ids: Vec<(String,)> =
            self.fetch_all(&D::statements().members, &[group.into()], "list group members").await?;
        Ok(ids.into_iter().map(|(id,)| SessionId::new(id)).collect())
    }

    /// [`Backend::inspect`](super::Backend::inspect): the database's clock, then three reads
    /// relative to it.
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        let s = D::statements();
        let (now_ms,): (i64,) = self.fetch_one(&s.now, &[], "read the clock").await?;
        let now = [Param::Int(now_ms)];
        let sessions = self.fetch_all(&s.inspect[0], &now, "list sessions").await?;
        let leases = self.fetch_all(&s.inspect[1], &now, "list leases").await?;
        let members = self.fetch_all(&s.inspect[2], &now, "list group members").await?;
        Ok(SqlRows { now_ms, sessions, leases, members }.into_snapshot())
    }

    /// [`Backend::remove_idle_leases`](super::Backend::remove_idle_leases), with
    /// [`Dialect::REMOVE_IDLE`](dialect::Dialect::REMOVE_IDLE): the floor's row ensured on its
    /// own, then the raise and the delete in one transaction.
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        const WHAT: &str = "remove idle leases";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        if limit == 0 {
            return Ok(0);
        }
        let [ensure, raise, delete] = &D::statements().remove_idle;
        self.execute(ensure, &[], WHAT).await?;
        let params = [Param::Text(prefix), Param::Int(ttl_ms(idle_for)), Param::Int(limit)];
        let mut tx = dialect::begin::<D>(&self.pool).await.map_err(self.err(WHAT))?;
        let raised = args::<D::Db>(&self.description, raise, &params)?;
        sqlx::query_with(raise.sql(), raised).execute(&mut *tx).await.map_err(self.err(WHAT))?;
        let deleted = args::<D::Db>(&self.description, delete, &params)?;
        let done = sqlx::query_with(delete.sql(), deleted).execute(&mut *tx).await.map_err(self.err(WHAT))?;
        tx.commit().await.map_err(self.err(WHAT))?;
        Ok(usize::try_from(D::rows_affected(&done)).unwrap_or(usize::MAX))
    }

    fn described(&self) -> &str {
        &self.description
    }

    fn job_store(&self, control: Option<tokio::sync::broadcast::Sender<String>>) -> super::job_store::SharedJobStore {
        let store = jobs::SqlJobStore::new(self.clone());
        crate::backend::job_store::SharedJobStore::new(match control {
            Some(control) => store.with_control(control),
            None => store,
        })
    }

    fn schedule_store(
        &self,
        changes: Option<tokio::sync::broadcast::Sender<String>>,
    ) -> super::schedule_store::SharedScheduleStore {
        let store = schedules::SqlScheduleStore::new(self.clone());
        super::schedule_store::SharedScheduleStore::new(match changes {
            Some(changes) => store.with_changes(changes),
            None => store,
        })
    }
}

/// Rows read by `inspect`: sessions `(id, age_ms, remaining_ms)`, leases `(name, session,
/// token, acquired_at_ms)`, members `(group, session)`, all relative to the database's
/// `now_ms`.
struct SqlRows {
    now_ms: i64,
    sessions: Vec<(String, i64, i64)>,
    leases: Vec<(String, String, i64, Option<i64>)>,
    members: Vec<(String, String)>,
}

impl SqlRows {
    fn into_snapshot(self) -> StoreSnapshot {
        let sessions = self
            .sessions
            .into_iter()
            .map(|(id, age, rem)| SessionInfo { id: SessionId::new(id), age: Some(ms(age)), remaining: Some(ms(rem)) })
            .collect();
        let leases = self
            .leases
            .into_iter()
            .map(|(name, s, token, at)| LeaseInfo {
                name,
                session: SessionId::new(s),
                token: u64::try_from(token).unwrap_or(0),
                acquired_at: at.and_then(from_epoch_ms),
            })
            .collect();
        let mut groups: Vec<GroupInfo> = Vec::new();
        for (g, s) in self.members {
            match groups.iter_mut().find(|x| x.name == g) {
                Some(x) => x.members.push(SessionId::new(s)),
                None => groups.push(GroupInfo { name: g, members: vec![SessionId::new(s)] }),
            }
        }
        StoreSnapshot { taken_at: from_epoch_ms(self.now_ms), sessions, leases, groups }.normalized()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn digest_wraps_like_held_digest() {
        let t = (i64::MAX - 1) as u64;
        let mut expected = crate::backend::HeldDigest::default();
        for _ in 0..3 {
            expected.add(t);
        }
        let low = 3 * (t & 0xffff_ffff) as i64;
        let high = 3 * (t >> 32) as i64;
        assert_eq!(digest("db", 3, low, high).unwrap(), expected);
        assert!(digest("db", -1, 0, 0).is_err());
    }

    #[test]
    fn ttl_is_capped_and_rounded_down() {
        assert_eq!(ttl_ms(Duration::from_micros(1500)), 1);
        assert_eq!(ttl_ms(Duration::MAX), MAX_TTL_MS);
    }
}
