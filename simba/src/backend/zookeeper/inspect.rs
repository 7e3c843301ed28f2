//! `inspect` on ZooKeeper: lists the lease nodes (holder = `ephemeralOwner`, token =
//! `czxid`, term start = `ctime`, the server's clock) and the group member nodes (ADR 0007).
//! ZooKeeper does not list sessions to clients, so the sessions shown are the owners of
//! lease and member nodes, without times.

use zookeeper_client as zk;

use super::{GROUPS, LEASES, ZooKeeperBackend};
use crate::backend::inspect::from_epoch_ms;
use crate::backend::{BackendResult, GroupInfo, LeaseInfo, SessionId, SessionInfo, StoreSnapshot};

impl ZooKeeperBackend {
    pub(super) async fn inspect_store(&self) -> BackendResult<StoreSnapshot> {
        let client = self.inner.shared.get().await?;
        let children = |path: String| {
            let client = client.clone();
            async move {
                match client.list_children(&path).await {
                    Ok(c) => Ok(c),
                    Err(zk::Error::NoNode) => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            }
        };
        self.count(1);
        let names = children(LEASES.to_owned()).await.map_err(|e| self.err("list the lease nodes", e))?;
        // The stat reads are sent together (one round trip's latency for all of them).
        self.count(names.len());
        let stats =
            futures_util::future::join_all(names.iter().map(|n| client.check_stat(&format!("{LEASES}/{n}")))).await;
        let mut leases = Vec::new();
        for (name, stat) in names.into_iter().zip(stats) {
            match stat {
                Ok(Some(st)) if st.ephemeral_owner != 0 => leases.push(LeaseInfo {
                    name,
                    session: SessionId::new(zk::SessionId(st.ephemeral_owner).to_string()),
                    token: u64::try_from(st.czxid).unwrap_or(0),
                    acquired_at: from_epoch_ms(st.ctime),
                }),
                Ok(_) => {}
                Err(e) => return Err(self.err("read a lease node", e)),
            }
        }
        self.count(1);
        let group_names = children(GROUPS.to_owned()).await.map_err(|e| self.err("list the groups", e))?;
        self.count(group_names.len());
        let lists = futures_util::future::join_all(group_names.iter().map(|g| children(format!("{GROUPS}/{g}")))).await;
        let mut groups = Vec::new();
        for (name, members) in group_names.into_iter().zip(lists) {
            let members = members.map_err(|e| self.err("list the members of a group", e))?;
            groups.push(GroupInfo { name, members: members.into_iter().map(SessionId::new).collect() });
        }
        let owners = leases.iter().map(|l| l.session.clone()).chain(groups.iter().flat_map(|g| g.members.clone()));
        let sessions = owners.map(|id| SessionInfo { id, age: None, remaining: None }).collect();
        Ok(StoreSnapshot { taken_at: None, sessions, leases, groups }.normalized())
    }
}

impl crate::backend::Health for ZooKeeperBackend {
    /// The session lifetime check is named after the server setting that caps it.
    fn health_notes(&self) -> crate::backend::HealthNotes {
        crate::backend::HealthNotes {
            session_lifetime: "zookeeper maxSessionTimeout",
            ..crate::backend::HealthNotes::default()
        }
    }
}
