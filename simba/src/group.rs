//! Group membership (rule J6): the sessions that joined a group, for work divided among the
//! live nodes. Partitioned jobs are built on it; so can a service's own workers.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, sleep_until};

use crate::backend::{Join, SessionId};
use crate::engine::Shared;
use crate::term::SessionCell;
use crate::{Error, Simba};

/// Membership of one group: which live sessions joined it. Made by [`Simba::group`]; cheap to
/// clone (clones share the membership).
///
/// This client's session joins on the first [`members`](Group::members) and again with every
/// new session (a membership ends with the session that made it). Leases named `{group}.{i}`
/// count as the group's: their release wakes [`GroupWatch::changed`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), simba::Error> {
/// use simba::backend::memory::MemoryBackend;
/// use simba::{Simba, SimbaConfig};
///
/// let a = Simba::new(MemoryBackend::new(), SimbaConfig::default())?;
/// a.live().await?;
/// let group = a.group("billing");
/// let view = group.members().await?.expect("a live session");
/// assert_eq!(view.members, vec![view.me.clone()]);
/// group.leave().await;
/// a.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Group {
    shared: Arc<Shared>,
    name: Arc<str>,
    joined: Arc<Mutex<Option<SessionId>>>,
}

/// What [`Group::members`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// This client's session.
    pub me: SessionId,
    /// Every live member, this session included, sorted.
    pub members: Vec<SessionId>,
}

impl Group {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Self {
        Group { shared, name: name.into(), joined: Arc::default() }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn joined(&self) -> std::sync::MutexGuard<'_, Option<SessionId>> {
        self.joined.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins with the current session if it has not yet, then lists the live members.
    /// `Ok(None)` while no session is live, or when the session expired during the call (the
    /// next session joins). Each backend call is bounded by the renewal period (D2).
    pub async fn members(&self) -> Result<Option<Membership>, Error> {
        self.shared.ensure_open()?;
        crate::validate_name(&self.name)?;
        let Some(cell) = self.live_cell() else { return Ok(None) };
        let backend_err = |source| Error::Backend { op: "group", name: Some(self.name.to_string()), source };
        let to = cell.call_timeout(Instant::now());
        if self.joined().as_ref() != Some(&cell.id) {
            match tokio::time::timeout(to, self.shared.backend.join_group(&cell.id, &self.name)).await {
                Ok(Ok(Join::Joined)) => {
                    tracing::info!(group = %self.name, session = %cell.id, "joined the group");
                    *self.joined() = Some(cell.id.clone());
                }
                Ok(Ok(Join::Expired)) | Err(_) => return Ok(None),
                Ok(Err(e)) => return Err(backend_err(e)),
            }
        }
        match tokio::time::timeout(to, self.shared.backend.members(&self.name)).await {
            Ok(Ok(members)) => Ok(Some(Membership { me: cell.id.clone(), members })),
            Ok(Err(e)) => Err(backend_err(e)),
            Err(_) => Ok(None),
        }
    }

    /// Leaves the group, if the current session joined it (a session that ended left with
    /// it). Bounded to 2 s; a failure is logged, and the membership ends with the session.
    pub async fn leave(&self) {
        let joined = self.joined().take();
        let Some(id) = joined else { return };
        if self.shared.current_session().is_none_or(|c| c.id != id) {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(2), self.shared.backend.leave_group(&id, &self.name)).await {
            Ok(Ok(())) => tracing::info!(group = %self.name, "left the group"),
            Ok(Err(e)) => {
                tracing::warn!(group = %self.name, error = %e, "cannot leave the group; it ends with the session")
            }
            Err(_) => tracing::warn!(group = %self.name, "leaving the group timed out; it ends with the session"),
        }
    }

    /// A watch that wakes when it is time to look at the group again.
    pub fn watch(&self) -> GroupWatch {
        GroupWatch {
            shared: Arc::clone(&self.shared),
            prefix: format!("{}.", self.name),
            releases: self.shared.releases.subscribe(),
            session: self.shared.session.subscribe(),
            released: Vec::new(),
        }
    }

    fn live_cell(&self) -> Option<Arc<SessionCell>> {
        self.shared.current_session().filter(|c| c.is_live_at(Instant::now()))
    }
}

/// Wakes a group's worker: see [`changed`](GroupWatch::changed).
pub struct GroupWatch {
    shared: Arc<Shared>,
    prefix: String,
    releases: broadcast::Receiver<String>,
    session: watch::Receiver<Option<Arc<SessionCell>>>,
    /// The group's leases whose release was heard and not yet taken.
    released: Vec<String>,
}

impl GroupWatch {
    /// Resolves at the first of: a lease of the group (`{group}.{i}`) released on the backend
    /// (where it broadcasts releases), a new or ended session of this client, or the
    /// candidate delay (rule K1: half a renewal interval plus up to `retry_jitter`) since the call,
    /// so that members that joined or left are seen without a broadcast.
    pub async fn changed(&mut self) {
        let next = Instant::now() + self.shared.timing.candidate_delay(self.shared.unit_random());
        loop {
            tokio::select! {
                r = self.releases.recv() => match r {
                    Ok(n) if n.starts_with(&self.prefix) => {
                        self.released.push(n);
                        self.drain();
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
                r = self.session.changed() => {
                    if r.is_err() {
                        // The client closed: nothing will change any more but the time.
                        sleep_until(next).await;
                    }
                    return;
                }
                _ = sleep_until(next) => return,
            }
        }
    }

    /// The group's lease names (`{group}.{i}`) whose release [`changed`](Self::changed) heard
    /// since the last call, oldest first: likely free, so a member under its share tries them
    /// first (J6). Empty on backends without a release broadcast, or when releases were
    /// missed (a lagging receiver); a hint, never a promise that the lease is free.
    pub fn take_released(&mut self) -> Vec<String> {
        self.drain();
        std::mem::take(&mut self.released)
    }

    /// Takes the releases already queued, so that a burst of them (a member leaving) wakes
    /// one round, not one per release.
    fn drain(&mut self) {
        while let Ok(n) = self.releases.try_recv() {
            if n.starts_with(&self.prefix) {
                self.released.push(n);
            }
        }
    }
}

impl Simba {
    /// Membership of group `name` (rule J6). Nothing happens until
    /// [`Group::members`] is called.
    pub fn group(&self, name: impl Into<String>) -> Group {
        Group::new(Arc::clone(&self.shared), name.into())
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("name", &self.name).field("joined", &*self.joined()).finish()
    }
}
