//! `inspect` on etcd: the session, lease and member keys read at one revision, and each
//! session's remaining TTL from `LeaseTimeToLive` (ADR 0007). etcd has no clock to tell and
//! records no times: no session age, no term start, no `taken_at`.

use std::time::Duration;

use futures_util::future::join_all;

use super::EtcdBackend;
use super::ops::{Read, holder};
use super::session::lease_of;
use crate::backend::{BackendResult, GroupInfo, LeaseInfo, SessionId, SessionInfo, StoreSnapshot};

impl EtcdBackend {
    pub(super) async fn inspect_store(&self) -> BackendResult<StoreSnapshot> {
        let k = &self.inner.keys;
        let (sessions, at) = self.read_prefix(&k.session, Read::KeysOnly, 0, "list sessions").await?;
        let (leases, _) = self.read_prefix(&k.lease, Read::Values, at, "list leases").await?;
        let (members, _) = self.read_prefix(&k.member, Read::KeysOnly, at, "list group members").await?;
        let name = |key: &[u8], prefix: &str| std::str::from_utf8(key).ok()?.strip_prefix(prefix).map(str::to_owned);
        let ids: Vec<SessionId> =
            sessions.iter().filter_map(|kv| name(kv.key(), &k.session)).map(SessionId::new).collect();
        // Each session's remaining time, read without renewing it (`None`: already expired,
        // about to be revoked).
        let remaining = join_all(ids.iter().map(|id| async move {
            let Some(lease) = lease_of(id) else { return Ok(None) };
            let mut leases = self.inner.client.lease_client();
            let ttl = leases.time_to_live(lease, None).await.map_err(|e| self.err("read a session's lease", &e))?;
            Ok(u64::try_from(ttl.ttl()).ok().map(Duration::from_secs))
        }))
        .await
        .into_iter()
        .collect::<BackendResult<Vec<_>>>()?;
        let sessions = ids
            .into_iter()
            .zip(remaining)
            .filter_map(|(id, remaining)| Some(SessionInfo { id, age: None, remaining: Some(remaining?) }))
            .collect();
        let leases = leases
            .iter()
            .filter_map(|kv| {
                let token = u64::try_from(kv.create_revision()).ok()?;
                Some(LeaseInfo { name: name(kv.key(), &k.lease)?, session: holder(kv), token, acquired_at: None })
            })
            .collect();
        let mut groups: Vec<GroupInfo> = Vec::new();
        for kv in &members {
            let Some((group, id)) =
                name(kv.key(), &k.member).and_then(|m| m.split_once('/').map(|(g, s)| (g.to_owned(), s.to_owned())))
            else {
                continue;
            };
            match groups.iter_mut().find(|g| g.name == group) {
                Some(g) => g.members.push(SessionId::new(id)),
                None => groups.push(GroupInfo { name: group, members: vec![SessionId::new(id)] }),
            }
        }
        Ok(StoreSnapshot { taken_at: None, sessions, leases, groups }.normalized())
    }
}

/// What `simba check` reports about an etcd cluster: its members, its leader as the member
/// that answered sees it, and the alarms raised (`NOSPACE`: the store refuses writes until
/// compacted and defragmented; `CORRUPT`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterHealth {
    /// How many members the cluster lists.
    pub members: usize,
    /// The leader's member id; `None` when the answering member knows no leader.
    pub leader: Option<u64>,
    /// The answering member's etcd version.
    pub version: String,
    /// Alarms raised on any member, as `ALARM on MEMBER` (hexadecimal member id).
    pub alarms: Vec<String>,
    /// Errors the answering member reports about itself.
    pub errors: Vec<String>,
}

impl ClusterHealth {
    /// A leader, no alarm, no error.
    pub fn healthy(&self) -> bool {
        self.leader.is_some() && self.alarms.is_empty() && self.errors.is_empty()
    }
}

impl EtcdBackend {
    /// The cluster's health: three reads (`MemberList`, `Status`, `Alarm`), nothing written.
    pub async fn cluster_health(&self) -> BackendResult<ClusterHealth> {
        use etcd_client::{AlarmAction, AlarmType};
        let mut c = self.inner.client.clone();
        let members = c.member_list().await.map_err(|e| self.err("list the cluster's members", &e))?;
        let status = c.status().await.map_err(|e| self.err("read the member's status", &e))?;
        let alarms = c.alarm(AlarmAction::Get, AlarmType::None, None).await.map_err(|e| self.err("read alarms", &e))?;
        Ok(ClusterHealth {
            members: members.members().len(),
            leader: Some(status.leader()).filter(|l| *l != 0),
            version: status.version().to_owned(),
            alarms: alarms
                .alarms()
                .iter()
                .map(|a| format!("{} on {:016x}", a.alarm().as_str_name(), a.member_id()))
                .collect(),
            errors: status.errors().to_vec(),
        })
    }
}

impl crate::backend::Health for EtcdBackend {
    /// A leader, and no alarm: a `NOSPACE` alarm refuses every write, renewals included.
    fn health_checks(&self, timeout: Duration) -> crate::backend::HealthFuture<'_> {
        use crate::backend::health::within;
        Box::pin(async move { vec![within(HEALTH, timeout, self.health_check()).await] })
    }

    fn health_notes(&self) -> crate::backend::HealthNotes {
        crate::backend::HealthNotes {
            schema: None,
            session_lifetime: "etcd lease TTL",
            session_lifetime_fix: "etcd grants whole seconds: make [session] lease_duration a whole number of seconds",
            no_clock: "not needed: etcd expires sessions by its own lease TTL and simba compares no clock with it \
                       (cron slots use the nodes' clocks)",
        }
    }
}

/// The name of etcd's health check.
const HEALTH: &str = "etcd cluster health";

impl EtcdBackend {
    /// [`cluster_health`](Self::cluster_health) as a check, saying what to do when it fails.
    async fn health_check(&self) -> crate::backend::HealthCheck {
        use crate::backend::{CheckOutcome, HealthCheck};
        let health = match self.cluster_health().await {
            Ok(h) => h,
            Err(e) => return HealthCheck::new(HEALTH, CheckOutcome::Fail, crate::backend::health::chain(&e)),
        };
        let members = format!("{} member{}", health.members, if health.members == 1 { "" } else { "s" });
        let detail = match (health.leader, health.healthy()) {
            (Some(leader), true) => format!("{members}, leader {leader:016x}, etcd {}, no alarms", health.version),
            (None, _) => format!("{members}, no leader: the cluster cannot renew sessions; check that a majority runs"),
            (Some(_), false) => format!(
                "{members}, alarms: {}{}; a NOSPACE alarm refuses every write (compact, defragment, then \
                 `etcdctl alarm disarm`)",
                health.alarms.join(", "),
                health.errors.iter().map(|e| format!("; {e}")).collect::<String>()
            ),
        };
        let outcome = if health.healthy() { CheckOutcome::Pass } else { CheckOutcome::Fail };
        HealthCheck::new(HEALTH, outcome, detail)
    }
}
