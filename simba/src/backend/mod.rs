//! The [`Backend`] trait: what the engine needs from a store, and the correctness contract of
//! every method.
//!
//! A backend only talks to its store. The engine owns all timing (deadlines, retries, timeouts):
//! a backend never sleeps, never retries and never reads the local clock to decide anything
//! about a session (rule B1). Time on the backend is the store's own clock (B2): a database's
//! `now()`, Redis key TTLs, the ZooKeeper server's session timeout.
//!
//! Implementations shipped with simba: [`MemoryBackend`](memory::MemoryBackend) (tests),
//! `SqliteBackend` (feature `sqlite`, embedded, no server), `PostgresBackend` (feature
//! `postgres`), `MySqlBackend` (feature `mysql`, MySQL and MariaDB), `RedisBackend` (feature
//! `redis`), `ZooKeeperBackend` (feature `zookeeper`) and `EtcdBackend` (feature `etcd`). Every implementation runs the
//! conformance suite in `simba::tck` (feature `tck`, rule B4) against a real server.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

pub use connect::{ConnectOptions, Connected, connect};
pub use health::{CheckOutcome, Health, HealthCheck, HealthFuture, HealthNotes, chain as error_chain};
pub use inspect::{GroupInfo, LeaseInfo, SessionInfo, StoreSnapshot};
pub use transport::{TransportWarning, listener_warning, transport_warnings};
pub use url::{BackendUrl, TlsFile, TlsFiles, TlsPem};

pub(crate) mod connect;
#[cfg(feature = "etcd")]
pub mod etcd;
pub(crate) mod health;
mod inspect;
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
mod job_codec;
pub(crate) mod job_store;
pub mod memory;
mod memory_schedules;
pub mod namespace;
#[cfg(feature = "redis")]
pub mod redis;
pub(crate) mod schedule_store;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "mysql")]
pub use sql::mysql;
#[cfg(feature = "postgres")]
pub use sql::postgres;
#[cfg(feature = "sqlite")]
pub use sql::sqlite;
#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
mod tls_provider;
mod transport;
#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
pub use tls_provider::install_tls_provider;
#[cfg(any(feature = "redis", feature = "zookeeper"))]
pub(crate) use tls_provider::require_process_provider;
mod url;
#[cfg(feature = "zookeeper")]
pub mod zookeeper;

/// The identity of one session instance (rule S2). Never reused: random 128-bit on SQL, Redis
/// and memory; the server's session id on ZooKeeper.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Wraps an identifier chosen by a backend.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        SessionId(id.into())
    }

    /// A fresh random 128-bit identifier, as 32 lowercase hexadecimal digits.
    pub fn random() -> Self {
        let v: u128 = rand::random();
        SessionId(format!("{v:032x}").into())
    }

    /// The identifier as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.0)
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`Backend::open_session`] granted.
#[derive(Debug, Clone)]
pub struct SessionGrant {
    /// The new session's id; never one the backend handed out before (S2).
    pub id: SessionId,
    /// How long the backend will keep the session without a renewal, measured by the backend.
    /// May be less than requested (rule D4: ZooKeeper caps it at `maxSessionTimeout`).
    pub remaining: Duration,
}

/// An order-independent summary of the leases a session believes it holds, sent with every
/// keep-alive so that the backend can say "nothing changed" in constant bytes (rule S1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct HeldDigest {
    /// How many leases.
    pub count: u64,
    /// The wrapping sum of their tokens.
    pub token_sum: u64,
}

impl HeldDigest {
    /// Adds one lease.
    pub fn add(&mut self, token: u64) {
        self.count += 1;
        self.token_sum = self.token_sum.wrapping_add(token);
    }

    /// The digest of a list of `(name, token)` pairs.
    pub fn of<'a>(leases: impl IntoIterator<Item = &'a (String, u64)>) -> Self {
        let mut d = HeldDigest::default();
        for (_, t) in leases {
            d.add(*t);
        }
        d
    }
}

/// The answer to a keep-alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// The session was renewed.
    Alive {
        /// Time left before the backend expires the session, measured by the backend after
        /// the renewal took effect.
        remaining: Duration,
        /// Whether the leases the backend lists for this session have the digest the client
        /// sent. When `false` the engine calls [`Backend::owned`] to find out what changed.
        digest_matches: bool,
    },
    /// The session has expired or was closed; it will never come back (rule S3).
    Expired,
}

/// The answer to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// The session holds the lease with this fencing token.
    Won(u64),
    /// Another live session holds the lease.
    Held,
    /// The acquiring session has expired; nothing was acquired (rule S3).
    Expired,
}

/// The answer to a group join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// The session is a member of the group: it joined now, or had joined before (joining
    /// twice changes nothing).
    Joined,
    /// The joining session has expired or was closed; no membership was written (rule S3).
    Expired,
}

/// A failure to talk to the store. The engine treats every error as "the store did not
/// answer": it retries within the session's deadline and never infers ownership from it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store could not be reached or the call failed in transit.
    #[error("backend unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },
    /// The store answered something the backend cannot interpret.
    #[error("backend protocol error: {0}")]
    Protocol(String),
    /// The store refused the call because of how it is set up (permissions, schema,
    /// eviction policy, ...); retrying will not help.
    #[error("backend misconfigured: {0}")]
    Misconfigured(String),
}

impl BackendError {
    /// An [`Unavailable`](BackendError::Unavailable) error wrapping a driver error.
    pub fn unavailable(message: impl Into<String>, source: impl StdError + Send + Sync + 'static) -> Self {
        BackendError::Unavailable { message: message.into(), source: Some(Box::new(source)) }
    }
}

/// Result of a backend call.
pub type BackendResult<T> = Result<T, BackendError>;

/// A store that keeps sessions, leases and group memberships.
///
/// Every method is one logical round trip to the store and is atomic there. The engine calls
/// them with a timeout (rule D2) and may drop a call's future at any point: an implementation
/// must leave the store consistent whether or not the call took effect.
///
/// # Contract
///
/// * Sessions expire on the store's clock `remaining` after their last successful renewal
///   (B2). An expired or closed session never comes back: keep-alive answers
///   [`KeepAlive::Expired`], acquisitions answer [`Acquire::Expired`] and joins answer
///   [`Join::Expired`] (S3).
/// * A session that is not renewed must end: where the store's own client keeps sessions alive
///   by itself (ZooKeeper's pings), the backend ends a session that had no successful
///   keep-alive for its granted lifetime, counted from the start of the last successful one.
///   On one clock this is always later than the engine's local deadline (D1), so it never ends
///   a session the engine still believes live; it only keeps a stalled engine from holding
///   leases forever.
/// * A lease is a record `name -> (session, token)`. Its token is positive and strictly
///   increases each time a session wins the lease, and never goes back (T3): on SQL, Redis and
///   memory it grows by exactly one while the record lives, and a record created after
///   [`remove_idle_leases`](Backend::remove_idle_leases) starts above the store's token floor
///   (B3); on ZooKeeper it is the lease node's `czxid`, on etcd the key's `create_revision`
///   (strictly increasing, not contiguous).
/// * A lease belongs to at most one live session at a time. It becomes free when released
///   with its token, when its session is closed, or when its session expires.
/// * Keep-alive costs the same round trips and request/reply bytes whatever the number of
///   leases the session holds (S1).
pub trait Backend: Send + Sync + 'static {
    /// Opens a new session that the store expires `ttl` after its last renewal (or sooner,
    /// if the store caps session lifetimes; the grant says how long).
    fn open_session(&self, ttl: Duration) -> impl Future<Output = BackendResult<SessionGrant>> + Send;

    /// Renews `session` for its granted lifetime, and compares the digest of the leases the
    /// store lists for it with `held`.
    fn keep_alive(
        &self,
        session: &SessionId,
        held: HeldDigest,
    ) -> impl Future<Output = BackendResult<KeepAlive>> + Send;

    /// Tries to make `session` the holder of lease `name`.
    ///
    /// Wins when the lease is free (never held, released, or its holder's session is closed
    /// or expired), incrementing the token. When `session` already holds it, answers
    /// [`Acquire::Won`] with the current token, unchanged (a retry after a lost reply).
    fn acquire(&self, session: &SessionId, name: &str) -> impl Future<Output = BackendResult<Acquire>> + Send;

    /// Frees lease `name` if, and only if, `session` holds it with `token` (T7). Returns
    /// whether it did. A backend that broadcasts releases publishes `name` when it did.
    fn release(&self, session: &SessionId, name: &str, token: u64) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Closes `session`: it expires at once, and every lease and group membership it held is
    /// freed (S4). Closing an unknown or expired session succeeds.
    fn close_session(&self, session: &SessionId) -> impl Future<Output = BackendResult<()>> + Send;

    /// The leases the store lists for `session`, as `(name, token)` pairs. Called only when a
    /// keep-alive digest did not match.
    fn owned(&self, session: &SessionId) -> impl Future<Output = BackendResult<Vec<(String, u64)>>> + Send;

    /// Records that `slot` of the job guarded by lease `name` has run, written with the
    /// term's fencing token: succeeds (`true`) only if `session` still holds `name` with
    /// `token` and no slot at or after `slot` was recorded before. Used to run each cron
    /// slot at most once across the cluster, whatever the nodes' wall clocks say.
    fn claim_slot(
        &self,
        session: &SessionId,
        name: &str,
        token: u64,
        slot: i64,
    ) -> impl Future<Output = BackendResult<bool>> + Send;

    /// Adds `session` to group `group`. Membership ends with the session.
    ///
    /// Answers [`Join::Joined`] when the session is live, whether it joined now or before
    /// (joining twice keeps one membership), and [`Join::Expired`] when the session has
    /// expired or was closed: nothing is written then, as an expired session never comes
    /// back (S3). Only a failure to talk to the store is an error.
    fn join_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<Join>> + Send;

    /// Removes `session` from group `group`.
    fn leave_group(&self, session: &SessionId, group: &str) -> impl Future<Output = BackendResult<()>> + Send;

    /// The live members of `group`, ordered by session id.
    fn members(&self, group: &str) -> impl Future<Output = BackendResult<Vec<SessionId>>> + Send;

    /// A read-only snapshot of the store, for operators (`simba status`, ADR 0007): live
    /// sessions with their age and remaining lifetime as the store measures them, held leases
    /// with holder, token and start of term, and groups with their live members.
    ///
    /// Contract: it opens no session and writes nothing that another call reads, so it
    /// never renews, expires or frees anything (a backend may still collect records that
    /// every other call already treats as gone). It lists only what the other calls would
    /// treat as live: no expired session, no lease whose holder expired, no member whose
    /// session expired. It need not be atomic across records. What a store cannot tell is
    /// `None` (ZooKeeper lists no session times and only the sessions that hold a lease or
    /// a membership; Redis records no session age and no term start). Lists are ordered as
    /// [`StoreSnapshot`] documents ([`StoreSnapshot::normalized`]).
    fn inspect(&self) -> impl Future<Output = BackendResult<StoreSnapshot>> + Send;

    /// Removes up to `limit` lease records whose name starts with `prefix`, that no live
    /// session holds, that carry no slot ledger (a job's `claim_slot` record stays), and that
    /// nobody acquired for at least `idle_for`; returns how many it removed (rule B3). In the
    /// same atomic step it raises the store's token floor to the highest token removed, and a
    /// record created later starts above that floor, so a name used again gets a token above
    /// every token it (or any other removed name) had before (T3). Stores whose lease records
    /// end with their term (ZooKeeper's nodes, etcd's keys: their tokens are the store's own
    /// global counters) keep none and remove nothing.
    fn remove_idle_leases(
        &self,
        prefix: &str,
        idle_for: Duration,
        limit: usize,
    ) -> impl Future<Output = BackendResult<usize>> + Send;

    /// A stream of names of released leases, where the store can broadcast them (K2);
    /// `None` where it cannot (the engine then relies on its next attempt).
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The store's jobs store (run history and job control), where the backend
    /// has one; `None` (the default) turns history and control off for jobs on this backend.
    fn job_store(&self) -> Option<self::job_store::SharedJobStore> {
        None
    }

    /// The store's schedule store (schedules stored as data, ADR 0020), where the backend has
    /// one; `None` (the default) where schedules are not supported by this store yet (rule A8:
    /// the API then says so, naming the store).
    fn schedule_store(&self) -> Option<self::schedule_store::SharedScheduleStore> {
        None
    }

    /// A short description for logs and errors (no secrets).
    fn describe(&self) -> String;
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe mirror of [`Backend`], implemented for every backend; type erasure happens
/// here once.
// The group and slot calls are used by the jobs runtime.
#[allow(dead_code)]
pub(crate) trait DynBackend: Send + Sync + 'static {
    fn open_session(&self, ttl: Duration) -> BoxFuture<'_, BackendResult<SessionGrant>>;
    fn keep_alive<'a>(&'a self, s: &'a SessionId, held: HeldDigest) -> BoxFuture<'a, BackendResult<KeepAlive>>;
    fn acquire<'a>(&'a self, s: &'a SessionId, name: &'a str) -> BoxFuture<'a, BackendResult<Acquire>>;
    fn release<'a>(&'a self, s: &'a SessionId, name: &'a str, token: u64) -> BoxFuture<'a, BackendResult<bool>>;
    fn close_session<'a>(&'a self, s: &'a SessionId) -> BoxFuture<'a, BackendResult<()>>;
    fn owned<'a>(&'a self, s: &'a SessionId) -> BoxFuture<'a, BackendResult<Vec<(String, u64)>>>;
    fn claim_slot<'a>(
        &'a self,
        s: &'a SessionId,
        name: &'a str,
        token: u64,
        slot: i64,
    ) -> BoxFuture<'a, BackendResult<bool>>;
    fn join_group<'a>(&'a self, s: &'a SessionId, group: &'a str) -> BoxFuture<'a, BackendResult<Join>>;
    fn leave_group<'a>(&'a self, s: &'a SessionId, group: &'a str) -> BoxFuture<'a, BackendResult<()>>;
    fn members<'a>(&'a self, group: &'a str) -> BoxFuture<'a, BackendResult<Vec<SessionId>>>;
    fn inspect(&self) -> BoxFuture<'_, BackendResult<StoreSnapshot>>;
    fn remove_idle_leases<'a>(
        &'a self,
        prefix: &'a str,
        idle_for: Duration,
        limit: usize,
    ) -> BoxFuture<'a, BackendResult<usize>>;
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>>;
    fn job_store(&self) -> Option<self::job_store::SharedJobStore>;
    fn schedule_store(&self) -> Option<self::schedule_store::SharedScheduleStore>;
    fn describe(&self) -> String;
}

impl<B: Backend> DynBackend for B {
    fn open_session(&self, ttl: Duration) -> BoxFuture<'_, BackendResult<SessionGrant>> {
        Box::pin(Backend::open_session(self, ttl))
    }
    fn keep_alive<'a>(&'a self, s: &'a SessionId, held: HeldDigest) -> BoxFuture<'a, BackendResult<KeepAlive>> {
        Box::pin(Backend::keep_alive(self, s, held))
    }
    fn acquire<'a>(&'a self, s: &'a SessionId, name: &'a str) -> BoxFuture<'a, BackendResult<Acquire>> {
        Box::pin(Backend::acquire(self, s, name))
    }
    fn release<'a>(&'a self, s: &'a SessionId, name: &'a str, token: u64) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(Backend::release(self, s, name, token))
    }
    fn close_session<'a>(&'a self, s: &'a SessionId) -> BoxFuture<'a, BackendResult<()>> {
        Box::pin(Backend::close_session(self, s))
    }
    fn owned<'a>(&'a self, s: &'a SessionId) -> BoxFuture<'a, BackendResult<Vec<(String, u64)>>> {
        Box::pin(Backend::owned(self, s))
    }
    fn claim_slot<'a>(
        &'a self,
        s: &'a SessionId,
        name: &'a str,
        token: u64,
        slot: i64,
    ) -> BoxFuture<'a, BackendResult<bool>> {
        Box::pin(Backend::claim_slot(self, s, name, token, slot))
    }
    fn join_group<'a>(&'a self, s: &'a SessionId, group: &'a str) -> BoxFuture<'a, BackendResult<Join>> {
        Box::pin(Backend::join_group(self, s, group))
    }
    fn leave_group<'a>(&'a self, s: &'a SessionId, group: &'a str) -> BoxFuture<'a, BackendResult<()>> {
        Box::pin(Backend::leave_group(self, s, group))
    }
    fn members<'a>(&'a self, group: &'a str) -> BoxFuture<'a, BackendResult<Vec<SessionId>>> {
        Box::pin(Backend::members(self, group))
    }
    fn inspect(&self) -> BoxFuture<'_, BackendResult<StoreSnapshot>> {
        Box::pin(Backend::inspect(self))
    }
    fn remove_idle_leases<'a>(
        &'a self,
        prefix: &'a str,
        idle_for: Duration,
        limit: usize,
    ) -> BoxFuture<'a, BackendResult<usize>> {
        Box::pin(Backend::remove_idle_leases(self, prefix, idle_for, limit))
    }
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Backend::subscribe_releases(self)
    }
    fn job_store(&self) -> Option<self::job_store::SharedJobStore> {
        Backend::job_store(self)
    }
    fn schedule_store(&self) -> Option<self::schedule_store::SharedScheduleStore> {
        Backend::schedule_store(self)
    }
    fn describe(&self) -> String {
        Backend::describe(self)
    }
}

/// A type-erased backend, as the engine holds it.
pub(crate) type SharedBackend = Arc<dyn DynBackend>;
