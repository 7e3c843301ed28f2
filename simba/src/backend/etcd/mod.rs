//! The etcd backend (feature `etcd`, etcd v3 API through the `etcd-client` crate): a simba
//! session IS an etcd lease, a lease is a key attached to it, the fencing token is that key's
//! `create_revision`, and a watch on the lease keys broadcasts releases (ADR 0011).
//!
//! Keys, under the URL's prefix (default `simba`):
//!
//! | key | attached to | value | what |
//! | --- | --- | --- | --- |
//! | `{prefix}/session/{id}` | the session's lease | granted TTL (s) | one live session, for `inspect` |
//! | `{prefix}/lease/{name}` | the holder's lease | holder's session id | held lease; token = its `create_revision` |
//! | `{prefix}/member/{group}/{id}` | the member's lease | empty | one group membership |
//! | `{prefix}/slot/{name}` | nothing (kept) | last claimed cron slot (ordered hex) | cron slots of lease `name` |
//! | `{prefix}/schedules/{space}/...` | nothing (kept) | see `schedules.rs` | schedules stored as data (ADR 0020) |
//!
//! A session id is its etcd lease id in 16 hexadecimal digits (as `etcdctl lease list`
//! shows it), drawn at random by the client (63 bits) and refused by the server if it is in
//! use. When the lease expires or is revoked, etcd deletes every key attached to it in one
//! revision: leases, memberships and the session key go at once (S4), and never come back
//! (S3: a renewal of a revoked lease answers TTL 0). Expiry is on the server's clock (B2).
//!
//! Requests per call:
//!
//! | call | requests |
//! | --- | --- |
//! | `open_session` | 2: `LeaseGrant`, `Put` of the session key |
//! | `keep_alive` | 1 message on the session's `LeaseKeepAlive` stream, whatever it holds (S1) |
//! | `acquire` | 1 `Txn`: if the key's create revision is 0, put it with the session's lease, else read it |
//! | `release` | 1 `Txn`: delete if create revision = token and lease = the session's (T7) |
//! | `close_session` | 1 `LeaseRevoke` |
//! | `owned` | 1 `Range` of the lease keys (more pages past 1000 keys), only after a digest mismatch |
//! | `claim_slot` | 1 `Txn` (nested: the slot key absent, or older than the slot) |
//! | `join_group` / `leave_group` / `members` | 1 (`Put` / `Delete` / `Range`); a join under a revoked lease answers `Join::Expired` |
//!
//! The keep-alive sends no digest: the backend compares the engine's digest with its
//! mirror of what its sessions hold, kept up to date by the replies of its own calls
//! and by the watch on the lease keys (which sees other nodes' changes and keys deleted or
//! overwritten by hand). With several endpoints, each is checked every second and requests go
//! only to those that answer (see `endpoints.rs`). Tokens survive restarts (etcd's revision only grows) but not the
//! loss of the data directory.

mod endpoints;
mod inspect;
mod jobs;
mod mirror;
mod ops;
mod schedules;
mod session;
mod url;
mod watch;

use std::sync::Arc;
use std::time::Duration;

pub use etcd_client;
use etcd_client::{Client, LeaseGrantOptions, PutOptions};
use tokio::sync::broadcast;
use tokio::time::timeout;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::endpoints::Checker;
pub use self::inspect::ClusterHealth;
use self::mirror::Mirror;
use self::session::{EtcdSession, Renewed, Sessions, lease_of, session_id};
pub use self::url::DEFAULT_PREFIX;
use self::url::{CONNECT_TIMEOUT, ConnectSpec};
use self::watch::Watcher;
use super::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

/// How many released names a slow subscriber may fall behind before it skips some (it then
/// retries every lease it waits for, so nothing is lost).
const RELEASE_CAPACITY: usize = 1024;

/// The longest lease TTL etcd grants (its `MaxLeaseTTL`, about 285 years).
const MAX_TTL_SECS: i64 = 9_000_000_000;

/// Attempts at drawing a free random lease id (a collision of 63-bit ids never happens in
/// practice; the loop only makes the code total).
const OPEN_ATTEMPTS: usize = 3;

/// Key names (see the module documentation).
struct Keys {
    session: String,
    lease: String,
    member: String,
    slot: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Keys {
            session: format!("{prefix}/session/"),
            lease: format!("{prefix}/lease/"),
            member: format!("{prefix}/member/"),
            slot: format!("{prefix}/slot/"),
        }
    }
    fn session(&self, id: &SessionId) -> String {
        format!("{}{id}", self.session)
    }
    fn lease(&self, name: &str) -> String {
        format!("{}{name}", self.lease)
    }
    fn member(&self, group: &str, id: &SessionId) -> String {
        format!("{}{group}/{id}", self.member)
    }
    fn group(&self, group: &str) -> String {
        format!("{}{group}/", self.member)
    }
    fn slot(&self, name: &str) -> String {
        format!("{}{name}", self.slot)
    }
}

/// The etcd backend. Cheap to clone: clones share one gRPC channel (one HTTP/2 connection per
/// endpoint), the sessions' keep-alive streams and one watch.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use simba::backend::etcd::EtcdBackend;
/// use simba::{Simba, SimbaConfig};
///
/// let backend = EtcdBackend::connect("etcd://127.0.0.1:2379,127.0.0.1:22379").await?;
/// let simba = Simba::new(backend, SimbaConfig::default())?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    spec: ConnectSpec,
    description: Arc<str>,
    keys: Keys,
    sessions: Sessions,
    mirror: Arc<Mirror>,
    releases: broadcast::Sender<String>,
    /// The sender of the schedule changes' watch, once somebody subscribed.
    schedule_changes: std::sync::Mutex<Option<broadcast::Sender<String>>>,
    /// What stops the watch tasks (cancelled when the last clone drops).
    stop: CancellationToken,
    /// Stops the watch task when the last clone drops.
    _stop_on_drop: DropGuard,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend").field("url", &self.inner.description).finish_non_exhaustive()
    }
}

impl EtcdBackend {
    /// Connects to `etcd://[user:password@]host:port[,host:port...][/prefix]`, reads the
    /// prefix once (which checks reachability, credentials and permissions) and starts the
    /// watch on the lease keys.
    ///
    /// With `user:password@` the client authenticates (etcd's simple or JWT tokens, renewed
    /// when the server forgets them). With `?tls=true&ca_file=CA[&cert_file=CERT&key_file=KEY]`
    /// it talks TLS (rustls), trusting only that CA (PEM files); a client certificate alone
    /// authenticates as the user its common name names when the server runs with
    /// `--client-cert-auth`. `/prefix` (default `simba`) puts every key under that prefix, for
    /// several namespaces on one cluster.
    ///
    /// Fails within 5 s, naming the URL (never the password) and the cause: unreachable
    /// servers as [`BackendError::Unavailable`], wrong credentials, missing permissions, an
    /// untrusted certificate or a malformed URL as [`BackendError::Misconfigured`].
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url)).await
    }

    /// [`connect`](Self::connect) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let spec = ConnectSpec::parse(url)?;
        let description: Arc<str> = spec.describe().into();
        match timeout(CONNECT_TIMEOUT, Self::start(spec)).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Unavailable {
                message: format!(
                    "cannot connect to etcd at {description}: no answer within {CONNECT_TIMEOUT:?}; check that the \
                     servers run and are reachable"
                ),
                source: None,
            }),
        }
    }

    async fn start(spec: ConnectSpec) -> BackendResult<Self> {
        let description: Arc<str> = spec.describe().into();
        let (client, checker) = Self::channel(&spec).await?;
        let keys = Keys::new(&spec.prefix);
        let mirror = Arc::new(Mirror::default());
        let (releases, _) = broadcast::channel(RELEASE_CAPACITY);
        let stop = CancellationToken::new();
        let watcher = Watcher {
            client: client.clone(),
            prefix: keys.lease.clone(),
            mirror: Arc::clone(&mirror),
            releases: releases.clone(),
            stop: stop.clone(),
            description: Arc::clone(&description),
        };
        // The first read proves the servers answer and that we may read the prefix.
        let now = match watcher.revision().await {
            Ok(now) => now,
            Err(e) => return Err(spec.connect_error("read the key prefix", &e).await),
        };
        let first = match watcher.open(now).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(BackendError::Protocol(format!("{description}: revision {now} is compacted"))),
            Err(e) => return Err(spec.error("watch the lease keys", &e)),
        };
        mirror.watching(Some(now), false);
        tokio::spawn(watcher.run(first));
        if let Some(checker) = checker {
            tokio::spawn(checker.run(client.clone(), stop.clone(), description.to_string()));
        }
        tracing::debug!(backend = %description, prefix = %spec.prefix, "etcd backend ready");
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                client,
                spec,
                description,
                keys,
                sessions: Sessions::default(),
                mirror,
                releases,
                schedule_changes: std::sync::Mutex::new(None),
                stop: stop.clone(),
                _stop_on_drop: stop.drop_guard(),
            }),
        })
    }

    /// The balanced client: over every endpoint, or with several, over those that answer a
    /// first check (and a checker that keeps the channel to the endpoints that answer).
    async fn channel(spec: &ConnectSpec) -> BackendResult<(Client, Option<Checker>)> {
        let urls = spec.endpoint_urls();
        if urls.len() == 1 {
            return match spec.client(&urls).await {
                Ok(client) => Ok((client, None)),
                Err(e) => Err(spec.connect_error("connect", &e).await),
            };
        }
        let mut checker = Checker::new(spec.clone());
        let health = checker.check().await;
        let live = checker.live(&health);
        if live.is_empty() {
            // Every endpoint failed: the first one's cause says what is wrong.
            let cause = health.into_iter().find_map(Result::err);
            return Err(cause.map_or_else(
                || BackendError::Protocol(format!("{}: no endpoint", spec.describe())),
                |e| spec.error("connect to any endpoint", &e),
            ));
        }
        let client = spec.client(&live).await.map_err(|e| spec.error("connect", &e))?;
        Ok((client, Some(checker)))
    }

    /// The key prefix in use.
    pub fn prefix(&self) -> &str {
        &self.inner.spec.prefix
    }

    /// The key of lease `name` (its `create_revision` is the token), for operators and tests.
    pub fn lease_key(&self, name: &str) -> String {
        self.inner.keys.lease(name)
    }

    /// The etcd lease id behind `session` (`None` for an id this backend did not make).
    pub fn etcd_lease(session: &SessionId) -> Option<i64> {
        lease_of(session)
    }

    /// The underlying `etcd-client` client (for operators' tools and tests).
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    fn kv(&self) -> etcd_client::KvClient {
        self.inner.client.kv_client()
    }

    fn err(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        self.inner.spec.error(what, e)
    }

    /// The session of `id` this backend keeps (made from the id alone for a session another
    /// backend instance opened: its TTL is then read from the server).
    async fn session(&self, id: &SessionId, lease: i64) -> BackendResult<Option<Arc<EtcdSession>>> {
        if let Some(s) = self.inner.sessions.get(lease) {
            return Ok(Some(s));
        }
        let mut leases = self.inner.client.lease_client();
        let ttl = leases.time_to_live(lease, None).await.map_err(|e| self.err("read a session's lease", &e))?;
        let Ok(granted) = u64::try_from(ttl.granted_ttl()) else { return Ok(None) };
        if ttl.ttl() < 0 {
            return Ok(None);
        }
        tracing::debug!(session = %id, "renewing a session another backend instance opened");
        let s = EtcdSession::new(lease, Duration::from_secs(granted));
        self.inner.sessions.insert(Arc::clone(&s));
        Ok(Some(s))
    }

    fn forget(&self, lease: i64) {
        self.inner.sessions.remove(lease);
        self.inner.mirror.close(lease);
    }
}

/// Whether etcd refused a call because the lease it names does not exist (expired, revoked).
fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains("requested lease not found"))
}

/// A random positive 63-bit lease id.
fn random_lease_id() -> i64 {
    (rand::random::<u64>() >> 1).max(1) as i64
}

impl Backend for EtcdBackend {
    /// Grants an etcd lease of `ttl` in whole seconds, rounded down (at least 1 s); the server
    /// raises a TTL below its minimum (1.5 election timeouts, rounded up: 2 s with etcd's
    /// defaults), and the grant is what the server says (D4).
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(MAX_TTL_SECS).clamp(1, MAX_TTL_SECS);
        let mut leases = self.inner.client.lease_client();
        let mut granted = None;
        for _ in 0..OPEN_ATTEMPTS {
            let options = LeaseGrantOptions::new().with_id(random_lease_id());
            match leases.grant(secs, Some(options)).await {
                Ok(g) => {
                    granted = Some(g);
                    break;
                }
                Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("lease already exists") => {}
                Err(e) => return Err(self.err("grant a lease", &e)),
            }
        }
        let Some(g) = granted else {
            return Err(BackendError::Protocol(format!(
                "{}: {OPEN_ATTEMPTS} random lease ids in a row were in use",
                self.inner.description
            )));
        };
        let (lease, ttl) = (g.id(), Duration::from_secs(g.ttl().unsigned_abs()));
        let id = session_id(lease);
        let put = PutOptions::new().with_lease(lease);
        if let Err(e) = self.kv().put(self.inner.keys.session(&id), ttl.as_secs().to_string(), Some(put)).await {
            // Nothing half-started: the lease would otherwise live out its TTL.
            let _ = leases.revoke(lease).await;
            return Err(self.err("record a session", &e));
        }
        self.inner.mirror.open(lease);
        self.inner.sessions.insert(EtcdSession::new(lease, ttl));
        Ok(SessionGrant { id, remaining: ttl })
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let Some(lease) = lease_of(session) else { return Ok(KeepAlive::Expired) };
        let Some(s) = self.session(session, lease).await? else { return Ok(KeepAlive::Expired) };
        match s.renew(&self.inner.client).await {
            Ok(Renewed::Alive(remaining)) => {
                Ok(KeepAlive::Alive { remaining, digest_matches: self.inner.mirror.digest_matches(lease, held) })
            }
            Ok(Renewed::Gone) => {
                self.forget(lease);
                Ok(KeepAlive::Expired)
            }
            Err(e) => Err(self.err("renew the session", &e)),
        }
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let Some(lease) = lease_of(session) else { return Ok(Acquire::Expired) };
        self.try_acquire(session, lease, name).await
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let Some(lease) = lease_of(session) else { return Ok(false) };
        self.try_release(lease, name, token).await
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let Some(lease) = lease_of(session) else { return Ok(()) };
        // Revoking deletes every key attached to the lease, in one revision.
        match self.inner.client.lease_client().revoke(lease).await {
            Ok(_) => {}
            Err(e) if lease_not_found(&e) => {}
            Err(e) => return Err(self.err("close the session", &e)),
        }
        self.forget(lease);
        Ok(())
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let Some(lease) = lease_of(session) else { return Ok(Vec::new()) };
        self.list_owned(lease).await
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let Some(lease) = lease_of(session) else { return Ok(false) };
        self.try_claim_slot(lease, name, token, slot).await
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let Some(lease) = lease_of(session) else { return Ok(Join::Expired) };
        let put = PutOptions::new().with_lease(lease);
        match self.kv().put(self.inner.keys.member(group, session), "", Some(put)).await {
            Ok(_) => Ok(Join::Joined),
            // A put under a revoked lease writes nothing (S3).
            Err(e) if lease_not_found(&e) => {
                self.forget(lease);
                Ok(Join::Expired)
            }
            Err(e) => Err(self.err(&format!("join group `{group}`"), &e)),
        }
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        match self.kv().delete(self.inner.keys.member(group, session), None).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.err(&format!("leave group `{group}`"), &e)),
        }
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.list_members(group).await
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.inspect_store().await
    }

    /// Nothing to remove: a lease key is attached to its holder's etcd lease and deleted with
    /// its term (release, revoke or expiry), and its token is the key's `create_revision`, the
    /// cluster's own counter; the slot ledger's keys are kept, as on every store.
    async fn remove_idle_leases(&self, _prefix: &str, _idle_for: Duration, _limit: usize) -> BackendResult<usize> {
        Ok(0)
    }

    fn job_store(&self) -> Option<crate::backend::job_store::SharedJobStore> {
        Some(crate::backend::job_store::SharedJobStore::new(jobs::EtcdJobStore::new(self.clone())))
    }

    /// A new store per call, as for the jobs store: it holds a clone of this backend, so
    /// keeping it in the backend would make a cycle that never drops (nor stops the watch).
    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        Some(crate::backend::schedule_store::SharedScheduleStore::new(schedules::EtcdScheduleStore::new(self.clone())))
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.releases.subscribe())
    }

    fn describe(&self) -> String {
        self.inner.description.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout() {
        let k = Keys::new("simba");
        let id = SessionId::new("0f39a2311d3b5106");
        assert_eq!(k.session(&id), "simba/session/0f39a2311d3b5106");
        assert_eq!(k.lease("billing.3"), "simba/lease/billing.3");
        assert_eq!(k.member("billing", &id), "simba/member/billing/0f39a2311d3b5106");
        assert_eq!(k.group("billing"), "simba/member/billing/");
        assert_eq!(k.slot("report"), "simba/slot/report");
    }

    #[test]
    fn lease_ids_are_positive() {
        for _ in 0..1000 {
            assert!(random_lease_id() > 0);
        }
    }
}
