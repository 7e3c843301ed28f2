//! Namespaces: several applications share one store without their lease,
//! group and job names colliding (ADR 0013).
//!
//! A [`Namespaced`] backend wraps any other backend and maps every name at the boundary:
//! lease `report` in namespace `billing-svc` is stored as `billing-svc~report`, group `g` as
//! `billing-svc~g`, job `g/3` as `billing-svc~g/3`. The separator [`SEPARATOR`] cannot occur
//! in a lease name (rule T1) nor in a job name, so a mapped name never equals a name of the
//! default namespace or of another namespace, and the stores' own statements, scripts and
//! paths stay exactly as they are. Every session opened in a namespace also joins the
//! namespace's marker group `billing-svc~` (an empty name after the separator, which no
//! lease or group can have), so that `simba status` in a namespace lists only its sessions,
//! idle candidates included, on every backend.
//!
//! The default namespace (no namespace) reads and writes exactly what it always did. A
//! [`Namespaced::default_view`] of a store hides what belongs to named namespaces from the
//! listings (`inspect`, `jobs`) and passes everything else through unchanged.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::job_store::{Claim, ClaimRequest, JobState, JobStore, RunRecord, SharedJobStore, Trigger, Triggered};
use super::{
    Acquire, Backend, BackendError, BackendResult, GroupInfo, HeldDigest, Join, KeepAlive, LeaseInfo, SessionGrant,
    SessionId, SharedBackend, StoreSnapshot,
};
use crate::Error;

/// The character between a namespace and a name in the store (`billing-svc~report`). It is
/// not in the lease-name alphabet `[A-Za-z0-9._:-]` nor `/` (the partition separator of job
/// names), so no name of any namespace can contain it.
pub const SEPARATOR: char = '~';

/// The longest stored lease or group name (namespace, separator and name), in characters:
/// the width of the SQL lease and group columns on MySQL (`VARCHAR(128)`), kept on every
/// backend so that a configuration that works on one works on all.
pub const MAX_STORED_NAME_LEN: usize = 128;

/// The longest stored job name (namespace, separator, name and partition suffix), in
/// characters: the width of the SQL jobs tables' `job` column on MySQL (`VARCHAR(160)`).
pub const MAX_STORED_JOB_LEN: usize = 160;

/// A valid namespace name: the lease-name rules (rule T1), 1 to 128 characters of
/// `[A-Za-z0-9._:-]`, not `.` or `..`.
///
/// ```
/// use simba::backend::namespace::Namespace;
///
/// assert_eq!(Namespace::new("billing-svc")?.as_str(), "billing-svc");
/// assert!(Namespace::new("billing/svc").is_err());
/// # Ok::<(), simba::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Checks `name` against the lease-name rules; the error says what is wrong.
    pub fn new(name: &str) -> Result<Namespace, Error> {
        match problem(name) {
            None => Ok(Namespace(name.into())),
            Some(message) => Err(crate::ConfigError::new(message).with_key("namespace").into()),
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `name` as this namespace stores it: `namespace~name`.
    pub fn map(&self, name: &str) -> String {
        format!("{}{SEPARATOR}{name}", self.0)
    }

    /// The name of this namespace that `stored` is, or `None` when `stored` belongs to
    /// another namespace (or is this namespace's marker group).
    pub fn unmap<'a>(&self, stored: &'a str) -> Option<&'a str> {
        stored.strip_prefix(&*self.0)?.strip_prefix(SEPARATOR).filter(|n| !n.is_empty())
    }

    /// The marker group every session of this namespace joins: `namespace~`.
    pub fn marker(&self) -> String {
        format!("{}{SEPARATOR}", self.0)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Namespace({})", self.0)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Namespace {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Namespace::new(s)
    }
}

/// Why `name` is not a valid namespace, as a sentence for an error message (what is wrong and
/// what a namespace may hold); `None` when it is one. [`Namespace::new`] refuses the same names.
pub fn problem(name: &str) -> Option<String> {
    crate::name_problem(name).map(|reason| {
        format!(
            "invalid namespace {name:?}: {reason} (a namespace follows the lease-name rules: 1 to 128 characters of \
             letters, digits, `.`, `_`, `:` and `-`, not `.` or `..`)"
        )
    })
}

/// The namespace a stored name belongs to: `Some("billing-svc")` for `billing-svc~report`,
/// `None` for a name of the default namespace.
pub fn namespace_of(stored: &str) -> Option<&str> {
    stored.split_once(SEPARATOR).map(|(ns, _)| ns)
}

/// A backend seen from one namespace: every lease, group and job name is mapped to
/// `namespace~name` on the way in and back on the way out, and listings show only the
/// namespace's records. With no namespace ([`Namespaced::default_view`]) names pass through
/// unchanged and listings hide the named namespaces' records.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), simba::Error> {
/// use simba::backend::memory::MemoryBackend;
/// use simba::backend::namespace::{Namespace, Namespaced};
/// use simba::{Simba, SimbaConfig};
///
/// let store = MemoryBackend::new();
/// let billing = Namespaced::new(store.clone(), Namespace::new("billing-svc")?);
/// let simba = Simba::new(billing, SimbaConfig::default())?;
/// let guard = simba.lock("nightly-report").acquire().await?;
/// assert_eq!(guard.term().name(), "nightly-report");
/// guard.release().await?;
/// simba.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Namespaced {
    inner: SharedBackend,
    namespace: Option<Namespace>,
}

impl fmt::Debug for Namespaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespaced")
            .field("backend", &self.inner.describe())
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Namespaced {
    /// `backend` seen from `namespace`.
    pub fn new<B: Backend>(backend: B, namespace: Namespace) -> Self {
        Namespaced { inner: Arc::new(backend), namespace: Some(namespace) }
    }

    /// `backend` seen from the default namespace: names unchanged, named namespaces hidden
    /// from the listings.
    pub fn default_view<B: Backend>(backend: B) -> Self {
        Namespaced { inner: Arc::new(backend), namespace: None }
    }

    /// A type-erased backend seen from `namespace` (`None`: the default view).
    pub(crate) fn shared(inner: SharedBackend, namespace: Option<Namespace>) -> Self {
        Namespaced { inner, namespace }
    }

    /// The same store seen from `namespace` (`None`: the default view), sharing this one's
    /// connection.
    pub fn view(&self, namespace: Option<Namespace>) -> Namespaced {
        Namespaced { inner: Arc::clone(&self.inner), namespace }
    }

    /// The namespaces present in the wrapped store, whatever this view's namespace (see
    /// [`list`]).
    pub async fn namespaces(&self) -> BackendResult<Vec<NamespaceInfo>> {
        list_shared(&self.inner).await
    }

    /// The namespace, `None` for the default one.
    pub fn namespace(&self) -> Option<&Namespace> {
        self.namespace.as_ref()
    }

    /// `name` as stored, checked against [`MAX_STORED_NAME_LEN`].
    fn map(&self, name: &str, limit: usize) -> BackendResult<String> {
        map_checked(self.namespace.as_ref(), name, limit)
    }

    /// The name of this view that `stored` is, if it is one.
    fn unmap<'a>(&self, stored: &'a str) -> Option<&'a str> {
        unmap(self.namespace.as_ref(), stored)
    }

    /// The snapshot of what this view sees in `raw`.
    fn filter(&self, raw: StoreSnapshot) -> StoreSnapshot {
        let in_any_namespace: std::collections::HashSet<&SessionId> =
            raw.groups.iter().filter(|g| g.name.ends_with(SEPARATOR)).flat_map(|g| g.members.iter()).collect();
        let mine: Option<std::collections::HashSet<&SessionId>> = self.namespace.as_ref().map(|ns| {
            let marker = ns.marker();
            raw.groups.iter().filter(|g| g.name == marker).flat_map(|g| g.members.iter()).collect()
        });
        let sessions = raw
            .sessions
            .iter()
            .filter(|s| match &mine {
                Some(m) => m.contains(&s.id),
                None => !in_any_namespace.contains(&s.id),
            })
            .cloned()
            .collect();
        let leases = raw
            .leases
            .iter()
            .filter_map(|l| Some(LeaseInfo { name: self.unmap(&l.name)?.to_owned(), ..l.clone() }))
            .collect();
        let groups = raw
            .groups
            .iter()
            .filter_map(|g| Some(GroupInfo { name: self.unmap(&g.name)?.to_owned(), members: g.members.clone() }))
            .collect();
        StoreSnapshot { taken_at: raw.taken_at, sessions, leases, groups }.normalized()
    }
}

fn map_checked(namespace: Option<&Namespace>, name: &str, limit: usize) -> BackendResult<String> {
    let Some(ns) = namespace else { return Ok(name.to_owned()) };
    let stored = ns.map(name);
    if stored.chars().count() > limit {
        return Err(BackendError::Misconfigured(format!(
            "`{name}` in namespace `{ns}` is stored as `{stored}`, {} characters: longer than the {limit} a store \
             keeps; use a shorter namespace or name",
            stored.chars().count()
        )));
    }
    Ok(stored)
}

fn unmap<'a>(namespace: Option<&Namespace>, stored: &'a str) -> Option<&'a str> {
    match namespace {
        Some(ns) => ns.unmap(stored),
        None => (!stored.contains(SEPARATOR)).then_some(stored),
    }
}

/// A receiver of the names in `rx` that belong to `namespace`, unmapped (and of the empty
/// name, which belongs to every namespace), fed by a task that ends when `rx` closes, or at the
/// first name it would pass on once every receiver is gone. `None` outside a Tokio runtime.
fn forward(mut rx: broadcast::Receiver<String>, namespace: Option<Namespace>) -> Option<broadcast::Receiver<String>> {
    let handle = tokio::runtime::Handle::try_current().ok()?;
    let (tx, out) = broadcast::channel(1024);
    handle.spawn(async move {
        loop {
            match rx.recv().await {
                // An empty name names no job: a store's "read the control version again" (after
                // its listener reconnected), meant for every namespace.
                Ok(name) if name.is_empty() => {
                    if tx.send(name).is_err() {
                        break;
                    }
                }
                Ok(name) => {
                    if let Some(n) = unmap(namespace.as_ref(), &name)
                        && tx.send(n.to_owned()).is_err()
                    {
                        break;
                    }
                }
                // A lost notice only delays a waiter until its next attempt (K2).
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::debug!(lost = n, "namespace forwarder lagged behind the store's broadcast");
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    Some(out)
}

impl Backend for Namespaced {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let grant = self.inner.open_session(ttl).await?;
        if let Some(ns) = &self.namespace {
            // The marker membership is what lists the session under its namespace; without it
            // the session would show in the default namespace, so a failed join gives it up.
            match self.inner.join_group(&grant.id, &ns.marker()).await {
                Ok(Join::Joined) => {}
                Ok(Join::Expired) => {
                    return Err(BackendError::Protocol(format!(
                        "session {} expired before it could join namespace `{ns}`",
                        grant.id
                    )));
                }
                Err(e) => {
                    if let Err(close) = self.inner.close_session(&grant.id).await {
                        tracing::debug!(session = %grant.id, error = %close, "closing a session that could not join its namespace failed; it will expire");
                    }
                    return Err(e);
                }
            }
        }
        Ok(grant)
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        self.inner.keep_alive(session, held).await
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let stored = self.map(name, MAX_STORED_NAME_LEN)?;
        self.inner.acquire(session, &stored).await
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let stored = self.map(name, MAX_STORED_NAME_LEN)?;
        self.inner.release(session, &stored, token).await
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.inner.close_session(session).await
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let owned = self.inner.owned(session).await?;
        Ok(owned.into_iter().filter_map(|(n, t)| Some((self.unmap(&n)?.to_owned(), t))).collect())
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let stored = self.map(name, MAX_STORED_NAME_LEN)?;
        self.inner.claim_slot(session, &stored, token, slot).await
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let stored = self.map(group, MAX_STORED_NAME_LEN)?;
        self.inner.join_group(session, &stored).await
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let stored = self.map(group, MAX_STORED_NAME_LEN)?;
        self.inner.leave_group(session, &stored).await
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let stored = self.map(group, MAX_STORED_NAME_LEN)?;
        self.inner.members(&stored).await
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        Ok(self.filter(self.inner.inspect().await?))
    }

    /// Within the namespace's names; the default namespace's prefix covers the whole store
    /// (the floor is the store's, so every namespace's tokens stay increasing either way).
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        let stored = match &self.namespace {
            Some(ns) => ns.map(prefix),
            None => prefix.to_owned(),
        };
        self.inner.remove_idle_leases(&stored, idle_for, limit).await
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        forward(self.inner.subscribe_releases()?, self.namespace.clone())
    }

    fn job_store(&self) -> Option<SharedJobStore> {
        let inner = self.inner.job_store()?;
        Some(crate::backend::job_store::SharedJobStore::new(NamespacedJobs {
            inner,
            namespace: self.namespace.clone(),
        }))
    }

    /// The inner store seen from this namespace's space (rule A8: ids, partition counts,
    /// change counters and audit trails are per namespace).
    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        let inner = self.inner.schedule_store()?;
        Some(match &self.namespace {
            Some(ns) => inner.in_space(ns.as_str()),
            None => inner,
        })
    }

    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} (namespace {ns})", self.inner.describe()),
            None => self.inner.describe(),
        }
    }
}

/// A jobs store seen from one namespace (see [`Namespaced`]).
struct NamespacedJobs {
    inner: SharedJobStore,
    namespace: Option<Namespace>,
}

impl NamespacedJobs {
    fn map(&self, job: &str) -> BackendResult<String> {
        map_checked(self.namespace.as_ref(), job, MAX_STORED_JOB_LEN)
    }

    /// `record` with its job name as stored.
    fn map_record(&self, record: &RunRecord) -> BackendResult<RunRecord> {
        Ok(RunRecord { job: self.map(&record.job)?, ..record.clone() })
    }

    /// `record` with its job name as this view names it (records are only read back under
    /// names this view mapped, so the name is always this namespace's).
    fn unmap_record(&self, mut record: RunRecord) -> RunRecord {
        if let Some(n) = unmap(self.namespace.as_ref(), &record.job) {
            record.job = n.to_owned();
        }
        record
    }

    fn unmap_state(&self, mut state: JobState) -> Option<JobState> {
        state.job = unmap(self.namespace.as_ref(), &state.job)?.to_owned();
        state.last = state.last.map(|r| self.unmap_record(r));
        Some(state)
    }
}

impl JobStore for NamespacedJobs {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        let lease = map_checked(self.namespace.as_ref(), req.lease, MAX_STORED_NAME_LEN)?;
        let job = self.map(req.job)?;
        let claim = self.inner.claim_run(ClaimRequest { lease: &lease, job: &job, ..req }).await?;
        Ok(match claim {
            Claim::Claimed(r) => Claim::Claimed(self.unmap_record(r)),
            other => other,
        })
    }

    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        let stored = self.map_record(record)?;
        self.inner.finish_run(&stored).await
    }

    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let stored = self.map_record(record)?;
        self.inner.append(&stored).await
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        let stored = self.map(job)?;
        let records = self.inner.history(&stored, limit).await?;
        Ok(records.into_iter().map(|r| self.unmap_record(r)).collect())
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        let stored = self.map(job)?;
        Ok(self.inner.job(&stored).await?.and_then(|s| self.unmap_state(s)))
    }

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        let all = self.inner.jobs().await?;
        let mut mine: Vec<JobState> = all.into_iter().filter_map(|s| self.unmap_state(s)).collect();
        mine.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(mine)
    }

    async fn pending_requests(&self, prefix: &str) -> BackendResult<Vec<String>> {
        let stored = match &self.namespace {
            Some(ns) => ns.map(prefix),
            None => prefix.to_owned(),
        };
        let names = self.inner.pending_requests(&stored).await?;
        Ok(names.iter().filter_map(|n| unmap(self.namespace.as_ref(), n)).map(str::to_owned).collect())
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        let stored = self.map(job)?;
        self.inner.set_paused(&stored, paused).await
    }

    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        let stored = self.map(job)?;
        self.inner.trigger_with(&stored, ask).await
    }

    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        match &self.namespace {
            Some(ns) => self.inner.publish_registry(session, &format!("{ns}{SEPARATOR}{registry}")).await,
            None => self.inner.publish_registry(session, registry).await,
        }
    }

    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        // A registry published in a namespace is stored as `namespace~text` (sessions are not
        // mapped, so the text tells); the default view keeps the texts without such a prefix.
        let all = self.inner.registries().await?;
        Ok(all
            .into_iter()
            .filter_map(|(session, text)| {
                let tagged = text
                    .split_once(SEPARATOR)
                    .filter(|(ns, _)| Namespace::new(ns).is_ok())
                    .map(|(ns, rest)| (ns.to_owned(), rest.to_owned()));
                match (&self.namespace, tagged) {
                    (Some(mine), Some((ns, rest))) if ns == mine.as_str() => Some((session, rest)),
                    (None, None) => Some((session, text)),
                    _ => None,
                }
            })
            .collect())
    }

    async fn control_version(&self) -> BackendResult<u64> {
        // One version for the whole store: a change in another namespace makes this one's
        // nodes re-read their jobs' control once, which changes nothing (ADR 0013).
        self.inner.control_version().await
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        forward(self.inner.subscribe_control()?, self.namespace.clone())
    }

    fn retention(&self) -> usize {
        self.inner.retention()
    }

    fn keeping(&self, records: usize) -> SharedJobStore {
        crate::backend::job_store::SharedJobStore::new(NamespacedJobs {
            inner: self.inner.keeping(records),
            namespace: self.namespace.clone(),
        })
    }

    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} (namespace {ns})", self.inner.describe()),
            None => self.inner.describe(),
        }
    }
}

/// What one namespace holds in a store, as [`list`] finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// The namespace; `None` for the default one.
    pub name: Option<String>,
    /// Its live sessions.
    pub sessions: usize,
    /// Its held leases.
    pub leases: usize,
    /// Its groups with live members.
    pub groups: usize,
    /// The jobs its jobs store knows.
    pub jobs: usize,
}

/// The namespaces present in the store behind `backend` (seen without any namespace): those
/// with a live session, a held lease, a group with members or a known job. The default
/// namespace comes first when it has any of these; the others follow ordered by name.
pub async fn list<B: Backend>(backend: &B) -> BackendResult<Vec<NamespaceInfo>> {
    let snapshot = backend.inspect().await?;
    let jobs = match backend.job_store() {
        Some(store) => store.jobs().await?,
        None => Vec::new(),
    };
    Ok(tally(&snapshot, &jobs))
}

/// [`list`] on a type-erased backend.
pub(crate) async fn list_shared(backend: &SharedBackend) -> BackendResult<Vec<NamespaceInfo>> {
    let snapshot = backend.inspect().await?;
    let jobs = match backend.job_store() {
        Some(store) => store.jobs().await?,
        None => Vec::new(),
    };
    Ok(tally(&snapshot, &jobs))
}

/// The namespaces of a raw snapshot and job list (see [`list`]).
pub(crate) fn tally(snapshot: &StoreSnapshot, jobs: &[JobState]) -> Vec<NamespaceInfo> {
    use std::collections::{BTreeMap, HashSet};
    let mut by: BTreeMap<Option<String>, NamespaceInfo> = BTreeMap::new();
    fn entry<'m>(by: &'m mut BTreeMap<Option<String>, NamespaceInfo>, ns: Option<&str>) -> &'m mut NamespaceInfo {
        let key = ns.map(str::to_owned);
        by.entry(key.clone()).or_insert_with(|| NamespaceInfo { name: key, ..NamespaceInfo::default() })
    }
    let mut marked: HashSet<&SessionId> = HashSet::new();
    for g in &snapshot.groups {
        match g.name.strip_suffix(SEPARATOR) {
            Some(ns) if !ns.contains(SEPARATOR) => {
                entry(&mut by, Some(ns)).sessions += g.members.len();
                marked.extend(g.members.iter());
            }
            _ => entry(&mut by, namespace_of(&g.name)).groups += 1,
        }
    }
    let unmarked = snapshot.sessions.iter().filter(|s| !marked.contains(&s.id)).count();
    if unmarked > 0 {
        entry(&mut by, None).sessions += unmarked;
    }
    for l in &snapshot.leases {
        entry(&mut by, namespace_of(&l.name)).leases += 1;
    }
    for j in jobs {
        entry(&mut by, namespace_of(&j.job)).jobs += 1;
    }
    // `None` sorts first in a BTreeMap of options.
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    /// A namespace that breaks the lease-name rules is refused, with the
    /// rule in the message.
    #[test]
    fn issue12_6_bad_namespace_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "a~b", "a b", "é", &"x".repeat(129)] {
            let e = Namespace::new(bad).expect_err(bad).to_string();
            assert!(e.contains("invalid namespace") && e.contains("lease-name rules"), "{bad:?}: {e}");
        }
        for good in ["billing-svc", "a", "team.a:prod_1", &"x".repeat(128)] {
            assert_eq!(Namespace::new(good).map(|n| n.as_str().to_owned()).ok().as_deref(), Some(good));
        }
    }

    /// Mapping is a bijection between a namespace's names and its stored
    /// names, and no stored name of one namespace is a name of another or of the default.
    #[test]
    fn issue12_6_mapping_round_trips_and_never_collides() {
        let a = Namespace::new("a").unwrap_or_else(|e| panic!("{e}"));
        let ab = Namespace::new("a.b").unwrap_or_else(|e| panic!("{e}"));
        for name in ["report", "g/3", "b~x"] {
            assert_eq!(a.unmap(&a.map(name)), Some(name));
        }
        assert_eq!(a.unmap(&ab.map("x")), None);
        assert_eq!(ab.unmap(&a.map("b~x")), None, "a~b~x is a's name `b~x`, not a.b's");
        assert_eq!(a.unmap(&a.marker()), None, "the marker group is no name");
        assert!(crate::name_problem(&a.map("report")).is_some(), "a stored name is never a default-namespace name");
        assert_eq!(unmap(None, "report"), Some("report"));
        assert_eq!(unmap(None, &a.map("report")), None);
        assert_eq!(namespace_of(&a.map("g/3")), Some("a"));
    }

    /// The default view hears the default namespace's releases only, a
    /// namespace its own, under the name its nodes use.
    #[tokio::test]
    async fn issue12_6_default_view_hears_no_namespaced_release() {
        let store = MemoryBackend::new();
        let ns = Namespace::new("a").unwrap_or_else(|e| panic!("{e}"));
        let (plain, named) = (Namespaced::default_view(store.clone()), Namespaced::new(store.clone(), ns));
        let (mut rx_plain, mut rx_named) = match (plain.subscribe_releases(), named.subscribe_releases()) {
            (Some(p), Some(n)) => (p, n),
            _ => panic!("the memory store broadcasts releases"),
        };
        let (sn, sp) =
            (named.open_session(Duration::from_secs(5)).await, plain.open_session(Duration::from_secs(5)).await);
        let (sn, sp) = (sn.unwrap_or_else(|e| panic!("{e}")).id, sp.unwrap_or_else(|e| panic!("{e}")).id);
        for (b, s) in [(&named, &sn), (&plain, &sp)] {
            let Ok(Acquire::Won(t)) = b.acquire(s, "x").await else { panic!("both win `x`") };
            assert!(b.release(s, "x", t).await.unwrap_or_else(|e| panic!("{e}")));
        }
        let within = Duration::from_secs(5);
        let heard = tokio::time::timeout(within, rx_named.recv()).await;
        assert_eq!(heard.ok().and_then(Result::ok).as_deref(), Some("x"));
        let heard = tokio::time::timeout(within, rx_plain.recv()).await;
        assert_eq!(heard.ok().and_then(Result::ok).as_deref(), Some("x"), "the default view heard `a~x` first");
        let extra = tokio::time::timeout(Duration::from_millis(200), rx_named.recv()).await;
        assert!(extra.is_err(), "the namespace heard the default namespace's release: {extra:?}");
    }

    /// A stored name longer than a store keeps is refused before the call.
    #[tokio::test]
    async fn issue12_6_too_long_stored_names_are_refused() {
        let ns = Namespace::new(&"n".repeat(100)).unwrap_or_else(|e| panic!("{e}"));
        let b = Namespaced::new(MemoryBackend::new(), ns);
        let s = b.open_session(Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
        let e = b.acquire(&s.id, &"x".repeat(40)).await.expect_err("141 characters");
        assert!(e.to_string().contains("use a shorter namespace or name"), "{e}");
        assert!(matches!(b.acquire(&s.id, &"x".repeat(27)).await, Ok(Acquire::Won(_))));
    }
}
