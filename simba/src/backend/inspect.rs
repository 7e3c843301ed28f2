//! What [`Backend::inspect`](super::Backend::inspect) returns: a read-only picture of the
//! sessions, leases and group memberships a store holds, for operators (`simba status`).

use std::time::{Duration, SystemTime};

use super::SessionId;

/// A read-only picture of a store: its live sessions, held leases and groups.
///
/// Taken without opening a session and without writing, so it never changes what it shows.
/// It is not one atomic read on every store (see each backend's notes in ADR 0007): a lease
/// may be listed under a session that expired a moment later.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreSnapshot {
    /// The store's clock when the snapshot was taken, where the store tells it (SQL
    /// databases, Redis); `None` on memory and ZooKeeper.
    pub taken_at: Option<SystemTime>,
    /// Live sessions, ordered by id.
    pub sessions: Vec<SessionInfo>,
    /// Held leases (free ones are left out), ordered by name.
    pub leases: Vec<LeaseInfo>,
    /// Groups with at least one live member, ordered by name.
    pub groups: Vec<GroupInfo>,
}

/// One live session, as the store sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// The session's id.
    pub id: SessionId,
    /// How long ago it was opened, on the store's clock, where the store records it.
    pub age: Option<Duration>,
    /// How long the store will keep it without a renewal, where the store tells it.
    pub remaining: Option<Duration>,
}

/// One held lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseInfo {
    /// The lease's name.
    pub name: String,
    /// The session that holds it.
    pub session: SessionId,
    /// The fencing token of the current term.
    pub token: u64,
    /// When the current term started, on the store's clock, where the store records it.
    pub acquired_at: Option<SystemTime>,
}

/// One group and its live members.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInfo {
    /// The group's name.
    pub name: String,
    /// Live members, ordered by session id.
    pub members: Vec<SessionId>,
}

impl StoreSnapshot {
    /// Sorts every list as documented and drops groups left without members.
    pub fn normalized(mut self) -> Self {
        self.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        self.sessions.dedup_by(|a, b| a.id == b.id);
        self.leases.sort_by(|a, b| a.name.cmp(&b.name));
        for g in &mut self.groups {
            g.members.sort();
            g.members.dedup();
        }
        self.groups.retain(|g| !g.members.is_empty());
        self.groups.sort_by(|a, b| a.name.cmp(&b.name));
        self
    }

    /// The session with this id, if listed.
    pub fn session(&self, id: &SessionId) -> Option<&SessionInfo> {
        self.sessions.iter().find(|s| &s.id == id)
    }

    /// The lease with this name, if held.
    pub fn lease(&self, name: &str) -> Option<&LeaseInfo> {
        self.leases.iter().find(|l| l.name == name)
    }

    /// The live members of group `name` (empty if none).
    pub fn members(&self, name: &str) -> &[SessionId] {
        self.groups.iter().find(|g| g.name == name).map_or(&[], |g| g.members.as_slice())
    }
}

/// Milliseconds since the Unix epoch (a store's clock) as a `SystemTime`.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "zookeeper"))]
pub(crate) fn from_epoch_ms(ms: i64) -> Option<SystemTime> {
    u64::try_from(ms).ok().map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// A non-negative millisecond count as a `Duration` (negative values clamp to zero).
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub(crate) fn ms(v: i64) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}
