//! Where the dashboard's data comes from: the seam between the pages and the stores.
//!
//! A [`Source`] answers one [`Reading`] per refresh: the cluster as
//! [`Backend::inspect`](crate::backend::Backend::inspect) sees it, what the serving node knows
//! about itself, and the jobs part (each job's state and its last [`HISTORY`] records, from the
//! backend's jobs store), read together under one timeout.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::Simba;
use crate::backend::health::chain;
use crate::backend::{BackendUrl, SessionId, SharedBackend, StoreSnapshot};
use crate::job::{JobSettings, Schedule};
use crate::job_store::{JobState, RunRecord, SharedJobStore};

/// How many records per job a reading holds (the jobs page's bar, the job page's table).
pub(crate) const HISTORY: usize = 50;

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One refresh's worth of data.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reading {
    /// Sessions, leases and groups, as the store lists them.
    pub(crate) cluster: StoreSnapshot,
    /// What is known of the node behind a session (today: the serving node itself).
    pub(crate) nodes: BTreeMap<SessionId, NodeInfo>,
    /// The jobs store's part.
    pub(crate) jobs: JobsRead,
    /// The jobs the serving process registered (empty for `simba dashboard`).
    pub(crate) registry: Vec<Registered>,
}

/// The jobs part of a reading.
#[derive(Debug, Clone, Default)]
pub(crate) enum JobsRead {
    /// The backend keeps no job history (it has no jobs store).
    #[default]
    NoStore,
    /// The store failed (the text holds no secret).
    Failed(String),
    /// Every job the store knows, ordered by name.
    Read(Vec<JobRead>),
}

/// One job as the store knows it.
#[derive(Debug, Clone)]
pub(crate) struct JobRead {
    pub(crate) state: JobState,
    /// Its newest records, newest first, at most [`HISTORY`].
    pub(crate) records: Vec<RunRecord>,
}

/// A job the serving process registered: what the store does not know (schedule, lease).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Registered {
    pub(crate) name: String,
    /// The lease (scheduled job) or the group whose lease `{group}.i` guards partition `i`.
    pub(crate) lease: String,
    /// `Some(n)` for a partitioned job.
    pub(crate) partitions: Option<u32>,
    /// `None`: a partition worker without a schedule.
    pub(crate) schedule: Option<Schedule>,
}

impl Registered {
    /// A job as its settings describe it (the serving runtime's plan, or what a node published).
    fn of(j: &JobSettings) -> Self {
        Registered {
            name: j.name.clone(),
            lease: j.lease.clone(),
            partitions: j.partitions,
            schedule: j.parsed_schedule(),
        }
    }
}

/// The jobs the serving runtime plans to run (its plan's settings, which leave disabled jobs
/// out), ordered by name.
pub(crate) fn registered(jobs: &[JobSettings]) -> Vec<Registered> {
    let mut out: Vec<Registered> = jobs.iter().map(Registered::of).collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The node behind a session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeInfo {
    /// A label for people: host name and process id.
    pub(crate) label: String,
    /// Whether it is the node serving this dashboard.
    pub(crate) this_node: bool,
}

/// A source of readings.
pub(crate) trait Source: Send + Sync + 'static {
    /// Reads once. The error is shown on the page as text, so it must hold no secret.
    fn read(&self) -> BoxFuture<'_, Result<Reading, String>>;
    /// What the page names as the data's origin (a redacted URL).
    fn describe(&self) -> String;
}

/// Reads a backend; with `own`, labels the serving runtime's own session.
pub(crate) struct BackendSource {
    backend: SharedBackend,
    store: Option<SharedJobStore>,
    shown: String,
    scrub: Vec<String>,
    timeout: Duration,
    own: Option<Simba>,
    registry: Vec<Registered>,
}

impl BackendSource {
    /// `url` is what the page shows, after redaction; the secrets it holds are also masked in
    /// error texts.
    pub(crate) fn new(backend: SharedBackend, url: &BackendUrl, timeout: Duration, own: Option<Simba>) -> Self {
        let store = backend.job_store();
        BackendSource {
            backend,
            store,
            shown: url.redacted().to_owned(),
            scrub: url.secrets(),
            timeout,
            own,
            registry: Vec::new(),
        }
    }

    /// Also shows these registered jobs (schedule, time zone, next fire).
    pub(crate) fn with_registry(mut self, registry: Vec<Registered>) -> Self {
        self.registry = registry;
        self
    }

    /// The jobs part: every job's state, then each job's newest records.
    async fn read_jobs(&self) -> JobsRead {
        let Some(store) = &self.store else { return JobsRead::NoStore };
        let failed = |e: &dyn std::error::Error| {
            JobsRead::Failed(scrub(&format!("cannot read the jobs store: {}", chain(e)), &self.scrub))
        };
        let states = match store.jobs().await {
            Ok(s) => s,
            Err(e) => return failed(&e),
        };
        let reads = states.into_iter().map(|state| async move {
            let records = store.history(&state.job, HISTORY).await?;
            Ok::<_, crate::backend::BackendError>(JobRead { state, records })
        });
        match futures_util::future::try_join_all(reads).await {
            Ok(jobs) => JobsRead::Read(jobs),
            Err(e) => failed(&e),
        }
    }
}

impl Source for BackendSource {
    fn read(&self) -> BoxFuture<'_, Result<Reading, String>> {
        Box::pin(async move {
            let published = async {
                match &self.store {
                    Some(store) => store.registries().await.unwrap_or_default(),
                    None => Vec::new(),
                }
            };
            let all = futures_util::future::join3(self.backend.inspect(), self.read_jobs(), published);
            let (cluster, jobs, published) = match tokio::time::timeout(self.timeout, all).await {
                Ok((Ok(s), jobs, published)) => (s, jobs, crate::job::RegistryReport::from_published(&published)),
                Ok((Err(e), _, _)) => {
                    return Err(scrub(&format!("cannot read the backend: {}", chain(&e)), &self.scrub));
                }
                Err(_) => return Err(format!("cannot read the backend: no answer within {:?}", self.timeout)),
            };
            let mut nodes = BTreeMap::new();
            if let Some(id) = self.own.as_ref().and_then(|s| s.snapshot().session) {
                nodes.insert(id, NodeInfo { label: this_node_label(), this_node: true });
            }
            // The nodes' own names and jobs, as they published them (issue 12 item 5): what
            // `simba dashboard` knows of schedules without a registry of its own.
            for n in &published.nodes {
                nodes
                    .entry(SessionId::new(n.session.clone()))
                    .or_insert_with(|| NodeInfo { label: published.label(n), this_node: false });
            }
            let registry = if self.registry.is_empty() { registered_from(&published) } else { self.registry.clone() };
            Ok(Reading { cluster, nodes, jobs, registry })
        })
    }

    fn describe(&self) -> String {
        self.shown.clone()
    }
}

/// The jobs the live nodes published, each as the first node that has it describes it.
fn registered_from(report: &crate::job::RegistryReport) -> Vec<Registered> {
    let mut out: Vec<Registered> = Vec::new();
    for j in report.nodes.iter().flat_map(|n| n.jobs.iter()) {
        if !out.iter().any(|r| r.name == j.name) {
            out.push(Registered::of(j));
        }
    }
    out
}

/// `host pid N`, for the serving node.
fn this_node_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".to_owned());
    format!("{host} pid {}", std::process::id())
}

/// `text` with every secret replaced by `***`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |t, s| t.replace(s.as_str(), crate::secret::MASK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_of_a_url_are_scrubbed_from_errors() {
        let secrets_of = |url: &str| BackendUrl::new(url).secrets();
        let s = secrets_of("postgres://u:hunt%3Aer2@db/x?sslpassword=k3y&sslmode=require");
        assert_eq!(s, vec!["hunt%3Aer2".to_owned(), "hunt:er2".to_owned(), "k3y".to_owned()]);
        assert_eq!(scrub("auth failed for hunt:er2 with k3y", &s), "auth failed for *** with ***");
        assert!(secrets_of("sqlite://simba.db").is_empty());
    }
}
