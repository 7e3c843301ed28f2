//! The ZooKeeper request sequences behind acquire, release, owned, claim_slot and join_group.
//! They return the driver's error; the `Backend` methods in `mod.rs` turn a terminated
//! session into the contract's "expired" answers and anything else into a `BackendError`.

use zookeeper_client as zk;

use super::session::ZkSession;
use super::{GROUPS, LEASES, SLOTS, ZooKeeperBackend, lease_path, member_path, slot_path};
use crate::backend::{Acquire, BackendError};

/// How many times `acquire` creates again when the node it found vanished before it was read.
const ACQUIRE_ATTEMPTS: usize = 3;

/// How many times `claim_slot` reads again after losing a race on the slot node.
const CLAIM_ATTEMPTS: usize = 4;

/// A failure of a call that can also find the store in a state it refuses.
pub(super) enum Failure {
    Zk(zk::Error),
    Backend(BackendError),
}

impl From<zk::Error> for Failure {
    fn from(e: zk::Error) -> Self {
        Failure::Zk(e)
    }
}

impl ZooKeeperBackend {
    /// Creates the lease node; on `NodeExists`, reads who owns it.
    pub(super) async fn try_acquire(&self, s: &ZkSession, name: &str) -> Result<Acquire, zk::Error> {
        let path = lease_path(name);
        for _ in 0..ACQUIRE_ATTEMPTS {
            self.count(1);
            match s.client.create(&path, s.id.as_str().as_bytes(), &self.inner.spec.ephemeral()).await {
                Ok((stat, _)) => {
                    let token = stat.czxid as u64;
                    self.track(s, name, token).await?;
                    tracing::debug!(session = %s.id, lease = name, token, "lease node created");
                    return Ok(Acquire::Won(token));
                }
                Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
            self.count(1);
            match s.client.check_stat(&path).await? {
                // Ours already: a retry after a lost reply. Answer the same token.
                Some(stat) if stat.ephemeral_owner == s.owner => {
                    let token = stat.czxid as u64;
                    if s.tracked(name) != Some(token) {
                        self.track(s, name, token).await?;
                    }
                    return Ok(Acquire::Won(token));
                }
                Some(_) => return Ok(Acquire::Held),
                // Deleted between our create and our read: create again.
                None => {}
            }
        }
        Ok(Acquire::Held)
    }

    /// Records `name` as held by `s` with `token` and watches its node (one request). Records
    /// nothing when the node is already gone or not ours with that token: the next keep-alive
    /// then reports the mismatch.
    async fn track(&self, s: &ZkSession, name: &str, token: u64) -> Result<(), zk::Error> {
        self.count(1);
        let (stat, watch) = s.client.check_and_watch_stat(&lease_path(name)).await?;
        if stat.is_some_and(|st| st.ephemeral_owner == s.owner && st.czxid as u64 == token) {
            s.track(name, token, watch);
        }
        Ok(())
    }

    /// Deletes the lease node if it is `s`'s with `token`.
    pub(super) async fn try_release(&self, s: &ZkSession, name: &str, token: u64) -> Result<bool, zk::Error> {
        let path = lease_path(name);
        self.count(1);
        let Some(stat) = s.client.check_stat(&path).await? else { return Ok(false) };
        if stat.ephemeral_owner != s.owner || stat.czxid as u64 != token {
            return Ok(false);
        }
        // The version pins the node just read, unless someone else deleted our ephemeral node
        // and created theirs in between (ADR 0005, "Release").
        self.count(1);
        match s.client.delete(&path, Some(stat.version)).await {
            Ok(()) => {
                s.untrack(name, token);
                tracing::debug!(session = %s.id, lease = name, token, "lease node deleted");
                Ok(true)
            }
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads what the server lists for `s` and rebuilds the record: `getEphemerals`, then one
    /// `exists` + watch per node, all sent before any reply is awaited.
    pub(super) async fn try_owned(&self, s: &ZkSession) -> Result<Vec<(String, u64)>, zk::Error> {
        self.count(1);
        let paths = s.client.list_ephemerals(LEASES).await?;
        let prefix = format!("{LEASES}/");
        let names: Vec<String> = paths
            .iter()
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|n| !n.contains('/'))
            .map(str::to_owned)
            .collect();
        // The listing's reply came after every watch event of a node changed before it: the
        // recorded nodes still listed are unchanged; only the others are read (S1: a
        // reconciliation after one uncertain call costs one listing and one read, not one read
        // per held lease).
        let (mut owned, unknown) = s.reconcile(names);
        self.count(unknown.len());
        let reads: Vec<_> = unknown.iter().map(|n| s.client.check_and_watch_stat(&lease_path(n))).collect();
        let replies = futures_util::future::join_all(reads).await;
        for (name, reply) in unknown.into_iter().zip(replies) {
            match reply? {
                (Some(stat), watch) if stat.ephemeral_owner == s.owner => {
                    let token = stat.czxid as u64;
                    s.track(&name, token, watch);
                    owned.push((name, token));
                }
                _ => {}
            }
        }
        owned.sort();
        Ok(owned)
    }

    /// Reads the lease node and the slot node together, then writes the slot with one `multi`:
    /// the lease node must still be at the version read, and the slot node too.
    pub(super) async fn try_claim_slot(
        &self,
        s: &ZkSession,
        name: &str,
        token: u64,
        slot: i64,
    ) -> Result<bool, Failure> {
        let (lease, slot_node) = (lease_path(name), slot_path(name));
        for _ in 0..CLAIM_ATTEMPTS {
            self.count(2);
            let (lease_stat, last) = tokio::join!(s.client.check_stat(&lease), s.client.get_data(&slot_node));
            let lease_stat = match lease_stat? {
                Some(st) if st.ephemeral_owner == s.owner && st.czxid as u64 == token => st,
                _ => return Ok(false),
            };
            let (last, version) = match last {
                Ok((data, stat)) => (Some(parse_slot(&data, name)?), Some(stat.version)),
                Err(zk::Error::NoNode) => (None, None),
                Err(e) => return Err(e.into()),
            };
            if last.is_some_and(|l| l >= slot) {
                return Ok(false);
            }
            let data = slot.to_string();
            let mut w = s.client.new_multi_writer();
            w.add_check_version(&lease, lease_stat.version)?;
            match version {
                Some(v) => w.add_set_data(&slot_node, data.as_bytes(), Some(v))?,
                None => w.add_create(&slot_node, data.as_bytes(), &self.inner.spec.persistent())?,
            }
            self.count(1);
            match w.commit().await {
                Ok(_) => return Ok(true),
                // The lease node changed: no longer ours with this token.
                Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => return Ok(false),
                // Another claim wrote the slot node first: read again.
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::BadVersion | zk::Error::NodeExists,
                    ..
                }) => {}
                Err(e) => return Err(zk::Error::from(e).into()),
            }
        }
        Ok(false)
    }

    /// Creates the member node (and the group's node when missing).
    pub(super) async fn try_join(&self, s: &ZkSession, group: &str) -> Result<(), Failure> {
        let path = member_path(group, &s.id);
        for _ in 0..2 {
            self.count(1);
            match s.client.create(&path, b"", &self.inner.spec.ephemeral()).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => {
                    self.count(1);
                    match s.client.check_stat(&path).await? {
                        Some(st) if st.ephemeral_owner == s.owner => return Ok(()),
                        Some(_) => {
                            return Err(Failure::Backend(BackendError::Protocol(format!(
                                "{}: {path} belongs to another ZooKeeper session; delete it",
                                self.inner.description
                            ))));
                        }
                        // Left meanwhile: join again.
                        None => {}
                    }
                }
                Err(zk::Error::NoNode) => {
                    self.count(1);
                    match s.client.create(&format!("{GROUPS}/{group}"), b"", &self.inner.spec.persistent()).await {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Failure::Backend(BackendError::Protocol(format!(
            "{}: cannot join group `{group}`: its node keeps vanishing",
            self.inner.description
        ))))
    }
}

fn parse_slot(data: &[u8], name: &str) -> Result<i64, Failure> {
    std::str::from_utf8(data).ok().and_then(|s| s.trim().parse().ok()).ok_or_else(|| {
        Failure::Backend(BackendError::Protocol(format!(
            "{SLOTS}/{name} holds {:?}, not a slot number; delete the node to reset the lease's cron slots",
            String::from_utf8_lossy(data)
        )))
    })
}
