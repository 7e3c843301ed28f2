//! The ZooKeeper backend (feature `zookeeper`): a simba session IS a ZooKeeper session, leases
//! are ephemeral nodes and the fencing token is the lease node's `czxid` (ADR 0005).
//!
//! Data model, under the URL's chroot (created if missing):
//!
//! | node | kind | what |
//! | --- | --- | --- |
//! | `/simba/leases/{name}` | ephemeral, created by the holder's session | held lease; token = `czxid` |
//! | `/simba/slots/{name}` | persistent | last cron slot claimed under lease `name` (decimal) |
//! | `/simba/groups/{group}/{session}` | ephemeral | one group membership |
//!
//! The jobs store's nodes are described in `jobs.rs`, the schedule store's (`/simba/schedules`)
//! in `schedules/`.
//!
//! A lease node is this session's only when its `ephemeralOwner` is this session: a node of
//! the same name created by anyone else is never treated as ours (Curator's two-leaders bug,
//! apache/curator#1211). Tokens are strictly increasing but not contiguous (T3): every write
//! on the ensemble takes a zxid. They survive server restarts (the zxid epoch only grows).
//!
//! Requests per call (ZooKeeper requests, not counting the driver's own pings):
//!
//! | call | requests |
//! | --- | --- |
//! | `open_session` | one connection handshake |
//! | `keep_alive` | 1 (`sync`), whatever the number of leases (S1) |
//! | `acquire` | won: 2 (`create`, then `exists` + watch); held: 2 (`create`, `exists`) |
//! | `release` | 2 (`exists` to check `czxid` and owner, `delete` with version) |
//! | `close_session` | 1 (`closeSession`: the server deletes every ephemeral node at once) |
//! | `owned` | 1 + k (`getEphemerals`, then one `exists` + watch per listed node not in the record), only after a mismatch |
//! | `claim_slot` | 3 (`exists` + `getData` sent together, then one `multi`) |
//! | `join_group` / `leave_group` / `members` | 1 (`create` / `delete` / `getChildren`) |
//!
//! Expiry (B2) is the server's session timeout: the driver pings on its own, and the backend
//! closes a session that the engine stopped renewing for its granted lifetime, so that a hung
//! or crashed engine does not hold its leases forever (see `session.rs`).

mod inspect;
mod jobs;
mod ops;
mod schedules;
mod session;
mod shared;
mod url;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;
pub use zookeeper_client;
use zookeeper_client as zk;

use self::session::{SessionMap, ZkSession};
use self::shared::{SHARED_SESSION_TIMEOUT, SharedClient, watch_releases};
use self::url::ConnectSpec;
use super::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};

const LEASES: &str = "/simba/leases";
const SLOTS: &str = "/simba/slots";
const GROUPS: &str = "/simba/groups";

/// How long `close_session` waits for the server to confirm the close.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

fn lease_path(name: &str) -> String {
    format!("{LEASES}/{name}")
}

fn slot_path(name: &str) -> String {
    format!("{SLOTS}/{name}")
}

fn member_path(group: &str, session: &SessionId) -> String {
    format!("{GROUPS}/{group}/{session}")
}

/// The ZooKeeper session is over for good: expired or closed on the server, or refused.
fn session_gone(e: &zk::Error) -> bool {
    matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed | zk::Error::SessionMoved)
}

/// The ZooKeeper backend. Cheap to clone: clones share the sessions, the shared connection and
/// the release watch.
///
/// Each [`open_session`](Backend::open_session) opens its own ZooKeeper connection, whose
/// session timeout is the requested lifetime (the server clamps it between its
/// `minSessionTimeout` and `maxSessionTimeout`; the grant says what it got, rule D4).
/// Dropping the last clone closes every session it opened.
#[derive(Clone)]
pub struct ZooKeeperBackend {
    inner: Arc<Inner>,
}

struct Inner {
    spec: ConnectSpec,
    description: String,
    sessions: Arc<SessionMap>,
    shared: Arc<SharedClient>,
    releases: broadcast::Sender<String>,
    watch_task: tokio::task::AbortHandle,
    /// ZooKeeper requests sent by this backend's calls (rule S1 evidence).
    requests: AtomicU64,
    /// What the schedule stores of this backend share (`schedule_store` builds a handle per
    /// call: a store kept here would hold the backend, a cycle that never drops it).
    schedules: Arc<schedules::State>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watch_task.abort();
    }
}

impl std::fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend").field("url", &self.inner.description).finish_non_exhaustive()
    }
}

impl ZooKeeperBackend {
    /// Connects to `zk://[user:password@]host:port[,host:port...][/chroot]`, creates the
    /// chroot and the `/simba` directories if missing, and starts watching lease releases (K2).
    ///
    /// With `user:password@`, every connection authenticates with ZooKeeper's `digest` scheme
    /// and every node simba creates gets the ACL "all for this user, read for anyone": other
    /// clients can read the leases but not create, change or delete them (ADR 0008). With
    /// `?tls=true&ca_file=CA[&cert_file=CERT&key_file=KEY]` it talks TLS to the servers'
    /// `secureClientPort`, trusting only that CA (PEM files); the driver builds its TLS
    /// configuration from the process's rustls provider, which the application installs
    /// ([`install_tls_provider`](crate::backend::install_tls_provider), ADR 0017): without one
    /// this fails with [`BackendError::Misconfigured`] saying so.
    ///
    /// Fails within 5 s, naming the URL and the cause, when no server answers.
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url)).await
    }

    /// [`connect`](Self::connect) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let spec = ConnectSpec::parse(url)?;
        let description = spec.describe();
        let setup_err = |what: &str, e: zk::Error| match e {
            zk::Error::NoAuth => BackendError::Misconfigured(format!(
                "{description}: cannot {what}: not authorized; grant this client all permissions on the chroot{}",
                if spec.secured() {
                    " (the nodes belong to another digest user: check the user and password in the URL)"
                } else {
                    " (the nodes were created with credentials: add user:password@ to the URL)"
                }
            )),
            e => BackendError::unavailable(format!("{description}: cannot {what}"), e),
        };
        let client = match spec.chroot() {
            None => spec.connect(SHARED_SESSION_TIMEOUT).await?,
            Some(chroot) => {
                let root = spec.connect_unrooted(SHARED_SESSION_TIMEOUT).await?;
                root.mkdir(chroot, &spec.persistent()).await.map_err(|e| setup_err("create the chroot", e))?;
                root.chroot(chroot.to_owned())
                    .map_err(|_| BackendError::Misconfigured(format!("{description}: invalid chroot {chroot:?}")))?
            }
        };
        for dir in [LEASES, SLOTS, GROUPS] {
            client.mkdir(dir, &spec.persistent()).await.map_err(|e| setup_err(&format!("create {dir}"), e))?;
            if spec.secured() {
                // Directories made before credentials were configured: close them now, or
                // anyone could delete a lease node (deleting needs DELETE on the parent).
                client
                    .set_acl(dir, spec.secured_acl(), None)
                    .await
                    .map_err(|e| setup_err(&format!("restrict the ACL of {dir}"), e))?;
            }
        }
        let watch = client
            .watch(LEASES, zk::AddWatchMode::PersistentRecursive)
            .await
            .map_err(|e| setup_err("watch lease releases (needs ZooKeeper 3.6 or later)", e))?;
        let shared = Arc::new(SharedClient { spec: spec.clone(), client: tokio::sync::Mutex::new(Some(client)) });
        let (releases, _) = broadcast::channel(1024);
        let task = tokio::spawn(watch_releases(Arc::clone(&shared), releases.clone(), watch, description.clone()));
        tracing::debug!(backend = %description, "ZooKeeper backend ready");
        Ok(ZooKeeperBackend {
            inner: Arc::new(Inner {
                spec,
                description,
                sessions: Arc::default(),
                shared,
                releases,
                watch_task: task.abort_handle(),
                requests: AtomicU64::new(0),
                schedules: Arc::default(),
            }),
        })
    }

    /// How many ZooKeeper requests this backend's calls sent so far (not the driver's pings
    /// or connection handshakes). Rule S1 evidence: a keep-alive adds 1, whatever the number
    /// of leases.
    #[cfg(feature = "tck")]
    pub fn requests_sent(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Test hook: the ZooKeeper session (id and password) behind a live `session`, so that a
    /// fault test can end it on the server from another connection, as an expiry would.
    #[cfg(feature = "tck")]
    pub fn zookeeper_session(&self, session: &SessionId) -> Option<zk::SessionInfo> {
        self.live(session).map(|s| s.client.session().clone())
    }

    fn count(&self, n: usize) {
        self.inner.requests.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn err(&self, what: &str, e: zk::Error) -> BackendError {
        match e {
            zk::Error::NoAuth => BackendError::Misconfigured(format!(
                "{}: {what}: not authorized; grant this client all permissions on the chroot",
                self.inner.description
            )),
            zk::Error::BadArguments(_) => BackendError::Protocol(format!("{}: {what}: {e}", self.inner.description)),
            e => BackendError::unavailable(format!("{}: {what} failed", self.inner.description), e),
        }
    }

    /// The session if the backend still has it open and its connection is not terminated.
    fn live(&self, id: &SessionId) -> Option<Arc<ZkSession>> {
        let s = self.inner.sessions.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned()?;
        if s.is_closed() || s.client.state().is_terminated() {
            self.forget(&s);
            return None;
        }
        Some(s)
    }

    /// [`live`](Self::live), failing fast while the driver is reconnecting (a request would
    /// wait for the new connection, past the engine's timeout).
    fn connected(&self, id: &SessionId, what: &str) -> BackendResult<Option<Arc<ZkSession>>> {
        let Some(s) = self.live(id) else { return Ok(None) };
        self.fail_if_disconnected(&s.client, what)?;
        Ok(Some(s))
    }

    /// Fails at once, rather than queueing the call, while `client`'s driver reconnects.
    pub(crate) fn fail_if_disconnected(&self, client: &zk::Client, what: &str) -> BackendResult<()> {
        if client.state() == zk::SessionState::Disconnected {
            return Err(BackendError::Unavailable {
                message: format!(
                    "{}: cannot {what}: disconnected from ZooKeeper, the driver is reconnecting",
                    self.inner.description
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// Closes `s` on the backend side: no call uses it again, and its connection closes (the
    /// server deletes its ephemeral nodes) once the last in-flight call drops it.
    fn forget(&self, s: &Arc<ZkSession>) {
        s.close();
        let mut map = self.inner.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(&s.id).is_some_and(|m| Arc::ptr_eq(m, s)) {
            map.remove(&s.id);
        }
    }
}

impl Backend for ZooKeeperBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let started = Instant::now();
        let client = self.inner.spec.connect(ttl).await?;
        let negotiated = client.session_timeout();
        // Never more than asked: the watchdog closes the session `granted` after a renewal.
        let granted = negotiated.min(ttl);
        let s = ZkSession::new(client, granted, started);
        if negotiated < ttl {
            tracing::debug!(session = %s.id, requested = ?ttl, ?negotiated, "the server capped the session timeout (maxSessionTimeout)");
        }
        s.spawn_watchdog(Arc::downgrade(&self.inner.sessions));
        let id = s.id.clone();
        self.inner.sessions.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), s);
        Ok(SessionGrant { id, remaining: granted })
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let Some(s) = self.connected(session, "renew the session")? else { return Ok(KeepAlive::Expired) };
        let started = Instant::now();
        // Any request resets the server's session timer. `sync` is small and constant, and
        // goes through the leader: on an ensemble it proves the leader reachable, and our
        // server has applied every change committed before it, so the watches of lease nodes
        // changed before this renewal have fired when it returns.
        self.count(1);
        match s.client.sync(LEASES).await {
            Ok(()) => {}
            Err(e) if session_gone(&e) => {
                self.forget(&s);
                return Ok(KeepAlive::Expired);
            }
            Err(e) => return Err(self.err("renew the session", e)),
        }
        if !s.renew(started) {
            return Ok(KeepAlive::Expired);
        }
        // Watch events are delivered before the reply, so the record is up to date.
        Ok(KeepAlive::Alive { remaining: s.granted, digest_matches: s.digest_matches(held) })
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let Some(s) = self.connected(session, "acquire a lease")? else { return Ok(Acquire::Expired) };
        let pending = s.uncertain_unless_settled();
        match self.try_acquire(&s, name).await {
            Ok(answer) => {
                pending.settled();
                Ok(answer)
            }
            Err(e) if session_gone(&e) => {
                self.forget(&s);
                Ok(Acquire::Expired)
            }
            Err(e) => Err(self.err(&format!("acquire `{name}`"), e)),
        }
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let Some(s) = self.connected(session, "release a lease")? else { return Ok(false) };
        let pending = s.uncertain_unless_settled();
        match self.try_release(&s, name, token).await {
            Ok(released) => {
                pending.settled();
                Ok(released)
            }
            Err(e) if session_gone(&e) => {
                self.forget(&s);
                Ok(false)
            }
            Err(e) => Err(self.err(&format!("release `{name}` (token {token})"), e)),
        }
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let s = self.inner.sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(session);
        let Some(s) = s else { return Ok(()) };
        s.close();
        let mut state = s.client.state_watcher();
        // Dropping the last clone of the client sends `closeSession`; the server deletes the
        // session's ephemeral nodes before answering, so wait for that answer.
        drop(s);
        self.count(1);
        let closed = tokio::time::timeout(CLOSE_WAIT, async {
            while !state.peek_state().is_terminated() {
                state.changed().await;
            }
        })
        .await;
        if closed.is_err() {
            tracing::debug!(%session, "closeSession not confirmed yet; the server expires the session on its own");
        }
        Ok(())
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let Some(s) = self.connected(session, "list owned leases")? else { return Ok(Vec::new()) };
        // Calls that become uncertain from now on are covered by the next check, not this one.
        s.clear_uncertain();
        match self.try_owned(&s).await {
            Ok(owned) => Ok(owned),
            Err(e) if session_gone(&e) => {
                self.forget(&s);
                Ok(Vec::new())
            }
            Err(e) => {
                s.mark_uncertain();
                Err(self.err("list owned leases", e))
            }
        }
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let Some(s) = self.connected(session, "record a cron slot")? else { return Ok(false) };
        match self.try_claim_slot(&s, name, token, slot).await {
            Ok(claimed) => Ok(claimed),
            Err(ops::Failure::Zk(e)) if session_gone(&e) => {
                self.forget(&s);
                Ok(false)
            }
            Err(ops::Failure::Zk(e)) => Err(self.err(&format!("record slot {slot} of `{name}`"), e)),
            Err(ops::Failure::Backend(e)) => Err(e),
        }
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let Some(s) = self.connected(session, "join a group")? else { return Ok(Join::Expired) };
        match self.try_join(&s, group).await {
            Ok(()) => Ok(Join::Joined),
            Err(ops::Failure::Zk(e)) if session_gone(&e) => {
                self.forget(&s);
                Ok(Join::Expired)
            }
            Err(ops::Failure::Zk(e)) => Err(self.err(&format!("join group `{group}`"), e)),
            Err(ops::Failure::Backend(e)) => Err(e),
        }
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        // A closed session is in no group any more: its member node went with it.
        let Some(s) = self.connected(session, "leave a group")? else { return Ok(()) };
        self.count(1);
        match s.client.delete(&member_path(group, &s.id), None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) if session_gone(&e) => {
                self.forget(&s);
                Ok(())
            }
            Err(e) => Err(self.err(&format!("leave group `{group}`"), e)),
        }
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let client = self.inner.shared.get().await?;
        self.count(1);
        match client.list_children(&format!("{GROUPS}/{group}")).await {
            Ok(children) => {
                let mut members: Vec<SessionId> = children.into_iter().map(SessionId::new).collect();
                members.sort();
                Ok(members)
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.err(&format!("list the members of group `{group}`"), e)),
        }
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.inspect_store().await
    }

    /// Nothing to remove: a lease is an ephemeral node, deleted with its term (release, close
    /// or expiry), and its token is the node's `czxid`, the ensemble's own counter; the slot
    /// ledger's nodes (`/simba/slots/{name}`) are kept, as on every store.
    async fn remove_idle_leases(&self, _prefix: &str, _idle_for: Duration, _limit: usize) -> BackendResult<usize> {
        Ok(0)
    }

    fn job_store(&self) -> Option<crate::backend::job_store::SharedJobStore> {
        Some(crate::backend::job_store::SharedJobStore::new(jobs::ZkJobStore::new(self.clone())))
    }

    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        let store = schedules::ZkScheduleStore::new(self.clone(), Arc::clone(&self.inner.schedules));
        Some(crate::backend::schedule_store::SharedScheduleStore::new(store))
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.inner.releases.subscribe())
    }

    fn describe(&self) -> String {
        self.inner.description.clone()
    }
}
