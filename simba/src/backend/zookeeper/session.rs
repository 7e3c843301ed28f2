//! One simba session is one ZooKeeper session (rule S2): its own [`zk::Client`], what the
//! backend knows about the lease nodes that session created, and the watchdog that closes it
//! once the engine stops renewing it.
//!
//! # What the backend remembers, and why that is enough (rule S1)
//!
//! Every lease node the session wins is recorded with its `czxid` (the token) and a one-shot
//! exists-watch set on the session's own connection. ZooKeeper delivers a watch event on a
//! connection before the reply to any request that connection sends after the change, and
//! the keep-alive's `sync` makes the connected server apply everything committed before it;
//! so when a keep-alive returns, every deletion or takeover of one of our nodes committed
//! before it has already fired its watch. A keep-alive therefore compares the
//! engine's digest with the digest of the recorded nodes whose watch has not fired: one
//! request, constant bytes, and O(1) local work while no watch fired (the watches wake a
//! shared flag; only then are they polled).
//!
//! A call whose outcome the backend could not observe (dropped by the engine's timeout, or
//! failed in transit after sending a create or delete) marks the record *uncertain*; the next
//! keep-alive then reports a mismatch, and [`owned`](crate::backend::Backend::owned) reads the
//! truth from the server (`getEphemerals`, then one stat per listed node the record does not
//! hold: a recorded node whose watch has not fired is unchanged) and updates the record.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use zookeeper_client as zk;

use crate::backend::{HeldDigest, SessionId};

/// The live sessions of one backend, by id.
pub(super) type SessionMap = Mutex<HashMap<SessionId, Arc<ZkSession>>>;

/// A one-shot watch on a lease node, as a future polled with the session's [`Dirty`] waker.
type WatchFuture = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Woken by every lease watch of one session when it fires: "some watch fired since the last
/// keep-alive looked".
#[derive(Default)]
struct Dirty(AtomicBool);

impl Wake for Dirty {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

/// A lease node this session created, believed still to be there.
struct Held {
    token: u64,
    watch: WatchFuture,
}

#[derive(Default)]
struct Leases {
    held: HashMap<String, Held>,
    /// The digest of `held`, kept up to date by [`Leases::insert`] and [`Leases::remove`] so
    /// that a keep-alive compares in O(1) however many leases are held.
    digest: HeldDigest,
    /// A create or delete by this session may have taken effect unobserved.
    uncertain: bool,
}

impl Leases {
    fn insert(&mut self, name: String, held: Held) {
        self.digest.add(held.token);
        if let Some(old) = self.held.insert(name, held) {
            self.subtract(old.token);
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(old) = self.held.remove(name) {
            self.subtract(old.token);
        }
    }

    fn subtract(&mut self, token: u64) {
        self.digest.count -= 1;
        self.digest.token_sum = self.digest.token_sum.wrapping_sub(token);
    }
}

/// The engine-facing life of the session: until when the engine renewed it, and whether the
/// backend closed it. One lock, so that a renewal and the watchdog's decision never interleave.
struct Life {
    renew_by: Instant,
    closed: bool,
}

/// One simba session: one ZooKeeper session and what the backend knows about it.
pub(super) struct ZkSession {
    pub(super) id: SessionId,
    /// The ZooKeeper session id, as lease nodes' `ephemeralOwner` shows it.
    pub(super) owner: i64,
    /// The session's connection. Dropping the last clone closes the ZooKeeper session, which
    /// deletes its ephemeral nodes (leases, memberships) on the server.
    pub(super) client: zk::Client,
    /// What every keep-alive answers as `remaining`: the negotiated session timeout, or the
    /// requested lifetime if the server granted more.
    pub(super) granted: Duration,
    life: Mutex<Life>,
    leases: Mutex<Leases>,
    dirty: Arc<Dirty>,
    waker: Waker,
    watchdog: OnceLock<tokio::task::AbortHandle>,
}

impl Drop for ZkSession {
    fn drop(&mut self) {
        if let Some(h) = self.watchdog.get() {
            h.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ZkSession {
    /// A session whose open call started at `started`; the engine must renew it within
    /// `granted` of that instant.
    pub(super) fn new(client: zk::Client, granted: Duration, started: Instant) -> Arc<Self> {
        let zk_id = client.session_id();
        let dirty = Arc::new(Dirty::default());
        Arc::new(ZkSession {
            // The server's own spelling (`0x...`), as in its logs and `cons` output.
            id: SessionId::new(zk_id.to_string()),
            owner: zk_id.0,
            client,
            granted,
            life: Mutex::new(Life { renew_by: started + granted, closed: false }),
            leases: Mutex::default(),
            waker: Waker::from(Arc::clone(&dirty)),
            dirty,
            watchdog: OnceLock::new(),
        })
    }

    /// Whether the backend closed the session (explicitly or by the watchdog).
    pub(super) fn is_closed(&self) -> bool {
        lock(&self.life).closed
    }

    /// Records a successful renewal whose call started at `started`. `false` if the session
    /// was closed meanwhile: the renewal must then answer `Expired`.
    pub(super) fn renew(&self, started: Instant) -> bool {
        let mut life = lock(&self.life);
        if life.closed {
            return false;
        }
        life.renew_by = life.renew_by.max(started + self.granted);
        true
    }

    /// Marks the session closed; `true` if it was open.
    pub(super) fn close(&self) -> bool {
        !std::mem::replace(&mut lock(&self.life).closed, true)
    }

    /// Starts the watchdog: when the engine has not renewed the session for its granted
    /// lifetime, measured from the start of the last successful renewal, the session is
    /// closed and removed from `sessions`.
    ///
    /// The driver keeps a ZooKeeper session alive on its own (it pings every few seconds), so
    /// without this a crashed or hung engine would hold its leases for as long as the process
    /// lives. The engine's local deadline for the same renewal is earlier on the same clock
    /// (`sent_at + remaining * (1 - drift) - margin`, with `sent_at` before the call started),
    /// so this never ends a session the engine still believes live (rule D6).
    pub(super) fn spawn_watchdog(self: &Arc<Self>, sessions: Weak<SessionMap>) {
        let weak = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            loop {
                let Some(due) = weak.upgrade().map(|s| lock(&s.life).renew_by) else { return };
                sleep_until(due).await;
                let Some(s) = weak.upgrade() else { return };
                {
                    let mut life = lock(&s.life);
                    if life.closed {
                        return;
                    }
                    if Instant::now() < life.renew_by {
                        continue;
                    }
                    life.closed = true;
                }
                tracing::warn!(
                    session = %s.id,
                    granted = ?s.granted,
                    "no renewal within the granted lifetime; closing the ZooKeeper session so that its leases go to others"
                );
                if let Some(map) = sessions.upgrade() {
                    let mut map = lock(&map);
                    if map.get(&s.id).is_some_and(|m| Arc::ptr_eq(m, &s)) {
                        map.remove(&s.id);
                    }
                }
                return;
            }
        });
        let _ = self.watchdog.set(task.abort_handle());
    }

    /// Records that this session holds `name` with `token`, watched by `watch` (set after the
    /// node was seen with this token and owner). A watch that already fired records nothing:
    /// the node changed since, and the next keep-alive will say so.
    pub(super) fn track(&self, name: &str, token: u64, watch: zk::OneshotWatcher) {
        let mut watch: WatchFuture = Box::pin(watch.changed());
        let mut cx = Context::from_waker(&self.waker);
        // The first poll registers the waker.
        if watch.as_mut().poll(&mut cx).is_ready() {
            lock(&self.leases).remove(name);
            return;
        }
        lock(&self.leases).insert(name.to_owned(), Held { token, watch });
    }

    /// The token recorded for `name`, if its watch has not fired.
    pub(super) fn tracked(&self, name: &str) -> Option<u64> {
        let mut leases = lock(&self.leases);
        self.sweep(&mut leases);
        leases.held.get(name).map(|h| h.token)
    }

    /// Forgets `name` if it is recorded with `token` (after a release).
    pub(super) fn untrack(&self, name: &str, token: u64) {
        let mut leases = lock(&self.leases);
        if leases.held.get(name).is_some_and(|h| h.token == token) {
            leases.remove(name);
        }
    }

    /// Brings the record in line with `listed`, the names of the lease nodes the server lists
    /// as this session's ephemerals (see `owned`); call it after that listing's reply, so that
    /// every watch of a node changed before the listing has fired. Drops the records of nodes
    /// not listed, and returns the recorded nodes that are listed, with their tokens (their
    /// watch has not fired: they are the nodes this session created), and the listed names
    /// without a record, which the caller must read.
    pub(super) fn reconcile(&self, listed: Vec<String>) -> (Vec<(String, u64)>, Vec<String>) {
        let mut leases = lock(&self.leases);
        self.sweep(&mut leases);
        let listed: std::collections::HashSet<String> = listed.into_iter().collect();
        let gone: Vec<String> = leases.held.keys().filter(|n| !listed.contains(*n)).cloned().collect();
        for name in &gone {
            leases.remove(name);
        }
        let mut known = Vec::with_capacity(leases.held.len());
        let mut unknown = Vec::new();
        for name in listed {
            match leases.held.get(&name) {
                Some(h) => {
                    let token = h.token;
                    known.push((name, token));
                }
                None => unknown.push(name),
            }
        }
        (known, unknown)
    }

    /// The next keep-alive will report a mismatch, whatever the digest.
    pub(super) fn mark_uncertain(&self) {
        lock(&self.leases).uncertain = true;
    }

    /// Clears the uncertainty before the server is read again; a call that becomes
    /// uncertain after this sets it again.
    pub(super) fn clear_uncertain(&self) {
        lock(&self.leases).uncertain = false;
    }

    /// A guard that marks the record uncertain unless [`Uncertain::settled`] is called: for
    /// calls whose create or delete may take effect without the backend observing it (the
    /// engine may drop any call, rule D2).
    pub(super) fn uncertain_unless_settled(&self) -> Uncertain<'_> {
        Uncertain { session: self, armed: true }
    }

    /// Whether the recorded leases have digest `held`, with no watch fired and nothing
    /// uncertain.
    pub(super) fn digest_matches(&self, held: HeldDigest) -> bool {
        let mut leases = lock(&self.leases);
        self.sweep(&mut leases);
        !leases.uncertain && leases.digest == held
    }

    /// Drops the records whose watch fired. O(1) while no watch fired since the last sweep.
    fn sweep(&self, leases: &mut Leases) {
        // Cleared before polling: a watch firing during the sweep sets it again.
        if !self.dirty.0.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut cx = Context::from_waker(&self.waker);
        let mut fired = Vec::new();
        for (name, h) in &mut leases.held {
            if let Poll::Ready(event) = h.watch.as_mut().poll(&mut cx) {
                tracing::debug!(session = %self.id, lease = %name, token = h.token, event = ?event.event_type, "lease node changed");
                fired.push(name.clone());
            }
        }
        for name in &fired {
            leases.remove(name);
        }
    }
}

/// See [`ZkSession::uncertain_unless_settled`].
pub(super) struct Uncertain<'a> {
    session: &'a ZkSession,
    armed: bool,
}

impl Uncertain<'_> {
    /// The call's effect is known (it took effect and was recorded, or it certainly did not).
    pub(super) fn settled(mut self) {
        self.armed = false;
    }
}

impl Drop for Uncertain<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.session.mark_uncertain();
        }
    }
}
