//! The registry check: every node publishes, with its session, what jobs it
//! runs and with which effective settings (its [`NodeRegistry`]); `simba check`, `simba jobs`
//! and the runtime compare what the live nodes published and name every difference (a rolling
//! deploy that changed a schedule, a node still running old code, a job added at run time on
//! some nodes only).
//!
//! The comparison is by field, not by digest alone, so that two builds that encode the same
//! settings alike agree even if one of them publishes a field the other does not know (it
//! reads as its default). The digest is shown to tell registries apart at a glance.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Misfire, RunPolicy, Schedule};
use crate::backend::SessionId;
use crate::job_store::MAX_REGISTRY_BYTES;

/// What kind of job a [`JobSettings`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A scheduled job: one lease, run by its holder.
    #[default]
    Scheduled,
    /// A partitioned job: a group of partition leases spread over the nodes.
    Partitioned,
}

impl JobKind {
    /// `scheduled` or `partitioned`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Scheduled => "scheduled",
            JobKind::Partitioned => "partitioned",
        }
    }
}

/// One job's effective settings on one node: its registration with the `[jobs.NAME]` keys of
/// that node's `simba.toml` applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct JobSettings {
    /// The job's name.
    pub name: String,
    /// Scheduled or partitioned.
    pub kind: JobKind,
    /// The lease (scheduled) or the group (partitioned) that guards it.
    pub lease: String,
    /// The cron expression (`0 */5 * * * *`) or the fixed rate (`every 30s`); `None` for a
    /// partition worker that runs once per term.
    pub schedule: Option<String>,
    /// The cron expression's time zone (`None`: UTC).
    pub time_zone: Option<String>,
    /// How many partitions (partitioned jobs).
    pub partitions: Option<u32>,
    /// `skip` or `run_once`.
    pub misfire: String,
    /// How many times a failed run is retried.
    pub retry: u32,
    /// The first wait before a retry (`1s`).
    pub backoff: String,
    /// A run's time limit (`30s`), if any.
    pub timeout: Option<String>,
    /// The slot policies that differ from the defaults (J11-J14), as `simba.toml` writes
    /// them (`overlap = buffer_one, jitter = 30s`); `None`: all defaults (and what an older
    /// build publishes).
    pub policies: Option<String>,
}

fn humanize(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn misfire_name(m: Misfire) -> String {
    m.name().to_owned()
}

/// A schedule as published: the cron expression (or `every 30s`) and its time zone, the text
/// [`JobSettings::parsed_schedule`] reads back.
fn schedule_parts(spec: Option<&Schedule>) -> (Option<String>, Option<String>) {
    match spec {
        Some(Schedule::Cron { expr, time_zone }) => (Some(expr.to_string()), time_zone.as_deref().map(str::to_owned)),
        Some(Schedule::FixedRate(d)) => (Some(format!("every {}", humanize(*d))), None),
        None => (None, None),
    }
}

impl JobSettings {
    /// A scheduled job's settings, as a node publishes them for `spec`, `misfire` and `policy`
    /// (what the runtime builds for each job it runs; tools and tests build a registry with it).
    pub fn scheduled(name: &str, lease: &str, spec: &Schedule, misfire: Misfire, policy: &RunPolicy) -> Self {
        let (schedule, time_zone) = schedule_parts(Some(spec));
        JobSettings {
            name: name.to_owned(),
            kind: JobKind::Scheduled,
            lease: lease.to_owned(),
            schedule,
            time_zone,
            partitions: None,
            misfire: misfire_name(misfire),
            retry: policy.attempts.saturating_sub(1),
            backoff: humanize(policy.backoff),
            timeout: policy.timeout.map(humanize),
            policies: None,
        }
    }

    /// A partitioned job's settings, as a node publishes them (see [`JobSettings::scheduled`]).
    pub fn partitioned(
        name: &str,
        group: &str,
        partitions: u32,
        spec: Option<&Schedule>,
        misfire: Misfire,
        policy: &RunPolicy,
    ) -> Self {
        let (schedule, time_zone) = schedule_parts(spec);
        JobSettings {
            name: name.to_owned(),
            kind: JobKind::Partitioned,
            lease: group.to_owned(),
            schedule,
            time_zone,
            partitions: Some(partitions),
            misfire: misfire_name(misfire),
            retry: policy.attempts.saturating_sub(1),
            backoff: humanize(policy.backoff),
            timeout: policy.timeout.map(humanize),
            policies: None,
        }
    }

    /// These settings with the slot policies `p` (J11-J14), as the node runs them.
    pub fn with_policies(mut self, p: &super::Policies) -> Self {
        let mut parts = Vec::new();
        if p.overlap != super::Overlap::Skip {
            parts.push(format!("overlap = {}", p.overlap.as_str()));
        }
        if let Some(w) = p.catch_up_window {
            parts.push(format!("catch_up_window = {}", humanize(w)));
        }
        if let Some(j) = p.jitter {
            parts.push(format!("jitter = {}", humanize(j)));
        }
        let at = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        parts.extend(p.start.map(|t| format!("start = {}", at(t))));
        parts.extend(p.end.map(|t| format!("end = {}", at(t))));
        self.policies = (!parts.is_empty()).then(|| parts.join(", "));
        self
    }

    /// The schedule as the scheduler reads it (`None`: a worker without a schedule, or text
    /// this build cannot read).
    pub fn parsed_schedule(&self) -> Option<Schedule> {
        let text = self.schedule.as_deref()?;
        match text.strip_prefix("every ") {
            Some(d) => humantime::parse_duration(d).ok().map(Schedule::FixedRate),
            None => {
                Some(Schedule::Cron { expr: text.to_owned().into(), time_zone: self.time_zone.clone().map(Into::into) })
            }
        }
    }

    /// The settings as `(field, value)` pairs, in the order differences are told.
    fn fields(&self) -> [(&'static str, String); 10] {
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        [
            ("kind", self.kind.as_str().to_owned()),
            (if self.kind == JobKind::Partitioned { "group" } else { "lease" }, self.lease.clone()),
            ("schedule", self.schedule.clone().unwrap_or_else(|| "once per term".to_owned())),
            ("time zone", self.time_zone.clone().unwrap_or_else(|| "UTC".to_owned())),
            ("partitions", self.partitions.map_or_else(|| "-".to_owned(), |p| p.to_string())),
            ("misfire", self.misfire.clone()),
            ("retry", self.retry.to_string()),
            ("backoff", self.backoff.clone()),
            ("timeout", opt(&self.timeout)),
            ("policies", self.policies.clone().unwrap_or_else(|| "defaults".to_owned())),
        ]
    }
}

/// What one node published: its name, the simba version it runs, and its jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct NodeRegistry {
    /// The publishing session (filled in from the store's key, not stored in the body).
    #[serde(skip)]
    pub session: String,
    /// The node's name (`SIMBA_NODE`, or `host:pid`).
    pub node: String,
    /// The simba version the node runs.
    pub version: String,
    /// A digest of `jobs` (16 hex digits), to tell registries apart at a glance.
    pub digest: String,
    /// The jobs, by name. Empty when `omitted` is set.
    pub jobs: Vec<JobSettings>,
    /// How many jobs were left out because the list was larger than the store takes
    /// ([`MAX_REGISTRY_BYTES`]); only the digest compares then.
    pub omitted: usize,
    /// The handlers of schedules stored as data the node runs, sorted (empty: it runs no
    /// schedules, or it is an older build that does not publish them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub handlers: Vec<String>,
}

impl NodeRegistry {
    /// The registry of node `node` running `jobs` (sorted by name here).
    pub fn new(node: impl Into<String>, mut jobs: Vec<JobSettings>) -> Self {
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        let digest = digest(&jobs);
        NodeRegistry {
            session: String::new(),
            node: node.into(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            digest,
            jobs,
            omitted: 0,
            handlers: Vec::new(),
        }
    }

    /// This registry with the node's schedule handlers (rule A12: the check names a handler
    /// some nodes lack).
    #[must_use]
    pub fn with_handlers(mut self, mut handlers: Vec<String>) -> Self {
        handlers.sort();
        handlers.dedup();
        self.handlers = handlers;
        self
    }

    /// The text a session publishes: JSON, at most [`MAX_REGISTRY_BYTES`] (a longer job list
    /// is left out and only the digest is published).
    pub fn encode(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        if text.len() <= MAX_REGISTRY_BYTES {
            return text;
        }
        let short = NodeRegistry { jobs: Vec::new(), omitted: self.jobs.len(), ..self.clone() };
        serde_json::to_string(&short).unwrap_or_default()
    }

    /// Reads what `session` published; text that is not a registry is reported as an error
    /// naming the session.
    pub fn decode(session: &SessionId, text: &str) -> Result<Self, String> {
        let mut r: NodeRegistry = serde_json::from_str(text)
            .map_err(|e| format!("session {session} published a job registry that cannot be read: {e}"))?;
        r.session = session.as_str().to_owned();
        Ok(r)
    }
}

/// FNV-1a over the canonical JSON of `jobs` (sorted by name): stable across builds and
/// platforms, unlike `std`'s hasher.
fn digest(jobs: &[JobSettings]) -> String {
    let text = serde_json::to_string(jobs).unwrap_or_default();
    format!("{:016x}", simba_core::schedules::fnv1a64(text.as_bytes()))
}

/// The registries of the live nodes and how they differ.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryReport {
    /// What each live session published, by session id.
    pub nodes: Vec<NodeRegistry>,
    /// Every difference, one sentence each (empty: the nodes agree).
    pub differences: Vec<String>,
    /// Entries that could not be read (a foreign or damaged value), one sentence each.
    pub unreadable: Vec<String>,
}

impl RegistryReport {
    /// Reads and compares what the store answered ([`JobStore::registries`](crate::job_store::JobStore::registries)).
    pub fn from_published(published: &[(SessionId, String)]) -> Self {
        let mut nodes = Vec::new();
        let mut unreadable = Vec::new();
        for (session, text) in published {
            match NodeRegistry::decode(session, text) {
                Ok(r) => nodes.push(r),
                Err(e) => unreadable.push(e),
            }
        }
        let differences = compare(&nodes);
        RegistryReport { nodes, differences, unreadable }
    }

    /// Whether every live node published the same jobs with the same settings.
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }

    /// How the nodes' labels read in the differences: the node name, with the session's first
    /// 8 characters when two sessions share a name.
    pub fn label(&self, node: &NodeRegistry) -> String {
        label(&self.nodes, node)
    }

    /// The settings of `job` as the first node that has it published them (where nodes
    /// differ, [`differences`](Self::differences) tells how).
    pub fn settings(&self, job: &str) -> Option<&JobSettings> {
        // The settings most nodes have (ties: the node first by name), so that a table of
        // jobs shows what the cluster mostly runs while a deploy rolls.
        let mut having: Vec<(&NodeRegistry, &JobSettings)> =
            self.nodes.iter().filter_map(|n| n.jobs.iter().find(|j| j.name == job).map(|j| (n, j))).collect();
        having.sort_by(|a, b| a.0.node.cmp(&b.0.node));
        let mut best: Option<(&JobSettings, usize)> = None;
        for (_, s) in &having {
            let n = having.iter().filter(|(_, o)| o == s).count();
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((s, n));
            }
        }
        best.map(|(s, _)| s)
    }

    /// The names of the jobs whose settings or presence differ between nodes.
    pub fn differing_jobs(&self) -> BTreeSet<String> {
        differing_jobs(&self.nodes)
    }
}

fn label(all: &[NodeRegistry], n: &NodeRegistry) -> String {
    let shared = all.iter().filter(|o| o.node == n.node).count() > 1;
    if shared { format!("{} ({})", n.node, n.session.chars().take(8).collect::<String>()) } else { n.node.clone() }
}

/// Labels in name order, so that a difference reads the same whatever the session ids.
fn join_labels(labels: &[String]) -> String {
    let mut sorted = labels.to_vec();
    sorted.sort();
    sorted.join(", ")
}

fn differing_jobs(nodes: &[NodeRegistry]) -> BTreeSet<String> {
    let listed: Vec<&NodeRegistry> = nodes.iter().filter(|n| n.omitted == 0).collect();
    let names: BTreeSet<&str> = listed.iter().flat_map(|n| n.jobs.iter().map(|j| j.name.as_str())).collect();
    names
        .into_iter()
        .filter(|name| {
            let mut seen = listed.iter().map(|n| n.jobs.iter().find(|j| j.name == *name));
            let first = seen.next().flatten();
            seen.any(|s| s != first) || listed.iter().any(|n| !n.jobs.iter().any(|j| j.name == *name))
        })
        .map(str::to_owned)
        .collect()
}

/// Every difference between `nodes`, one sentence each: a job some nodes lack, a setting with
/// different values, a node whose list was too large to publish (by digest), and different
/// simba versions (told, never a difference on its own).
pub fn compare(nodes: &[NodeRegistry]) -> Vec<String> {
    let mut out = Vec::new();
    let listed: Vec<&NodeRegistry> = nodes.iter().filter(|n| n.omitted == 0).collect();
    for name in differing_jobs(nodes) {
        let having: Vec<&NodeRegistry> =
            listed.iter().copied().filter(|n| n.jobs.iter().any(|j| j.name == name)).collect();
        let lacking: Vec<String> =
            listed.iter().filter(|n| !n.jobs.iter().any(|j| j.name == name)).map(|n| label(nodes, n)).collect();
        if !lacking.is_empty() {
            let on: Vec<String> = having.iter().map(|n| label(nodes, n)).collect();
            out.push(format!("job `{name}` runs on {} but not on {}", join_labels(&on), join_labels(&lacking)));
        }
        let settings: Vec<(String, [(&str, String); 10])> = having
            .iter()
            .filter_map(|n| n.jobs.iter().find(|j| j.name == name).map(|j| (label(nodes, n), j.fields())))
            .collect();
        for i in 0..10 {
            let mut by_value: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (who, fields) in &settings {
                by_value.entry(fields[i].1.as_str()).or_default().push(who.clone());
            }
            if by_value.len() > 1 {
                let field = settings.first().map_or("setting", |(_, f)| f[i].0);
                let told: Vec<String> =
                    by_value.iter().map(|(v, who)| format!("`{v}` on {}", join_labels(who))).collect();
                out.push(format!("job `{name}` {field}: {}", told.join("; ")));
            }
        }
    }
    out.extend(missing_handlers(nodes));
    let omitted: Vec<&NodeRegistry> = nodes.iter().filter(|n| n.omitted > 0).collect();
    let digests: BTreeSet<&str> = nodes.iter().map(|n| n.digest.as_str()).collect();
    if !omitted.is_empty() && digests.len() > 1 {
        for n in omitted {
            out.push(format!(
                "node {} runs {} jobs (too many to publish in full) with digest {}, which differs from another node's",
                label(nodes, n),
                n.omitted,
                n.digest
            ));
        }
    }
    out
}

/// A12: every handler that some nodes running schedules have and others lack, one sentence
/// each (nodes that run no schedules, or publish no handlers, take no part).
fn missing_handlers(nodes: &[NodeRegistry]) -> Vec<String> {
    let running: Vec<&NodeRegistry> = nodes.iter().filter(|n| !n.handlers.is_empty()).collect();
    let names: BTreeSet<&str> = running.iter().flat_map(|n| n.handlers.iter().map(String::as_str)).collect();
    let mut out = Vec::new();
    for name in names {
        let (having, lacking): (Vec<&&NodeRegistry>, Vec<&&NodeRegistry>) =
            running.iter().partition(|n| n.handlers.iter().any(|h| h == name));
        if lacking.is_empty() {
            continue;
        }
        let on: Vec<String> = having.iter().map(|n| label(nodes, n)).collect();
        let off: Vec<String> = lacking.iter().map(|n| label(nodes, n)).collect();
        out.push(format!(
            "handler `{name}` is registered on {} but not on {}: its schedules' slots are recorded missed \
             (no_handler) while those nodes hold their partitions",
            join_labels(&on),
            join_labels(&off)
        ));
    }
    out
}

/// The simba versions the nodes run, when they differ: `0.3.0 on a, b; 0.4.0 on c`.
pub fn versions(nodes: &[NodeRegistry]) -> Option<String> {
    let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for n in nodes {
        by.entry(n.version.as_str()).or_default().push(label(nodes, n));
    }
    (by.len() > 1)
        .then(|| by.iter().map(|(v, who)| format!("{v} on {}", join_labels(who))).collect::<Vec<_>>().join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(name: &str, expr: &str) -> JobSettings {
        let spec = Schedule::Cron { expr: expr.to_owned().into(), time_zone: None };
        JobSettings::scheduled(name, name, &spec, Misfire::Skip, &RunPolicy::default())
    }

    fn node(name: &str, session: &str, jobs: Vec<JobSettings>) -> NodeRegistry {
        let mut n = NodeRegistry::new(name, jobs);
        n.session = session.to_owned();
        n
    }

    /// Item 5: the same jobs agree (same digest); a changed schedule, a missing job and a
    /// changed retry are each named with the nodes on each side.
    #[test]
    fn item5_differences_are_named_with_their_nodes() {
        let a = node("a", "s1", vec![cron("report", "0 * * * * *"), cron("sweep", "*/5 * * * * *")]);
        let b = node("b", "s2", vec![cron("sweep", "*/5 * * * * *"), cron("report", "0 * * * * *")]);
        assert_eq!(a.digest, b.digest, "order of registration does not matter");
        assert!(compare(&[a.clone(), b.clone()]).is_empty());
        let mut retried = cron("sweep", "*/5 * * * * *");
        retried.retry = 3;
        let c = node("c", "s3", vec![cron("report", "30 * * * * *"), retried]);
        let d = node(
            "d",
            "s4",
            vec![cron("report", "0 * * * * *"), cron("sweep", "*/5 * * * * *"), cron("extra", "0 0 * * * *")],
        );
        let diffs = compare(&[a, b, c, d]);
        assert_eq!(
            diffs,
            vec![
                "job `extra` runs on d but not on a, b, c".to_owned(),
                "job `report` schedule: `0 * * * * *` on a, b, d; `30 * * * * *` on c".to_owned(),
                "job `sweep` retry: `0` on a, b, d; `3` on c".to_owned(),
            ]
        );
    }

    /// A12: the check names a handler that some nodes running schedules have and others lack
    /// (a rolling deploy); a node that runs no schedules takes no part, and the handlers
    /// survive the encoding (an older build's registry has none).
    #[test]
    fn a12_the_registry_check_names_a_missing_handler() {
        let jobs = || vec![cron("report", "0 * * * * *")];
        let new = node("a", "s1", jobs()).with_handlers(vec!["report".into(), "invoice".into()]);
        let old = node("b", "s2", jobs()).with_handlers(vec!["report".into()]);
        let none = node("c", "s3", jobs());
        assert_eq!(new.handlers, ["invoice", "report"], "sorted");
        let back = NodeRegistry::decode(&SessionId::new("s1"), &new.encode()).expect("decodes");
        assert_eq!(back.handlers, new.handlers);
        assert!(!none.encode().contains("handlers"), "published only when there are some");
        assert_eq!(
            compare(&[new.clone(), old, none.clone()]),
            vec![
                "handler `invoice` is registered on a but not on b: its schedules' slots are recorded missed \
                 (no_handler) while those nodes hold their partitions"
                    .to_owned()
            ]
        );
        assert!(compare(&[new, none]).is_empty(), "a node without schedules lacks nothing");
    }

    /// Item 5: a registry survives its encoding; a field this build does not know is ignored
    /// and a field it lacks reads as its default (an older or newer node still compares).
    #[test]
    fn item5_registry_round_trips_and_tolerates_other_builds() {
        let spec = Schedule::FixedRate(Duration::from_millis(1500));
        let policy = RunPolicy { attempts: 3, backoff: Duration::from_secs(2), timeout: Some(Duration::from_secs(30)) };
        let j = JobSettings::partitioned("billing", "billing", 8, Some(&spec), Misfire::RunOnce, &policy);
        assert_eq!(j.schedule.as_deref(), Some("every 1s 500ms"));
        assert_eq!(j.parsed_schedule(), Some(spec.clone()));
        let cron = Schedule::cron_in("0 0 9 * * *", "Europe/Berlin");
        let c = JobSettings::scheduled("r", "r", &cron, Misfire::Skip, &RunPolicy::default());
        assert_eq!((c.parsed_schedule(), c.time_zone.as_deref()), (Some(cron), Some("Europe/Berlin")));
        assert_eq!((j.retry, j.backoff.as_str(), j.timeout.as_deref()), (2, "2s", Some("30s")));
        let n = NodeRegistry::new("a", vec![j]);
        let text = n.encode();
        let back = NodeRegistry::decode(&SessionId::new("s"), &text).expect("decode");
        assert_eq!(
            (back.jobs.clone(), back.digest.clone(), back.session.as_str()),
            (n.jobs.clone(), n.digest.clone(), "s")
        );
        let newer = text.replacen("\"jobs\":[{", "\"jobs\":[{\"future_field\":7,", 1);
        assert_eq!(NodeRegistry::decode(&SessionId::new("s"), &newer).expect("newer").jobs, n.jobs);
        let err = NodeRegistry::decode(&SessionId::new("s9"), "not json").expect_err("garbage");
        assert!(err.contains("session s9") && err.contains("cannot be read"), "{err}");
    }

    /// Item 5: a job list too large for the store is published as its digest only, and then
    /// compares by digest.
    #[test]
    fn item5_a_registry_too_large_is_published_as_its_digest() {
        let many: Vec<JobSettings> = (0..4000).map(|i| cron(&format!("job-number-{i:05}"), "0 * * * * *")).collect();
        let big = NodeRegistry::new("a", many.clone());
        let text = big.encode();
        assert!(text.len() <= MAX_REGISTRY_BYTES, "{} bytes", text.len());
        let a = NodeRegistry::decode(&SessionId::new("s1"), &text).expect("decode");
        assert_eq!((a.jobs.len(), a.omitted, a.digest.as_str()), (0, 4000, big.digest.as_str()));
        let mut fewer = many;
        fewer.pop();
        let b = node("b", "s2", fewer);
        let diffs = compare(&[a.clone(), b]);
        assert_eq!(diffs.len(), 1, "{diffs:?}");
        assert!(diffs[0].starts_with("node a runs 4000 jobs (too many to publish in full)"), "{diffs:?}");
        assert!(compare(&[a.clone(), a]).is_empty());
    }

    /// Item 5: two sessions of one node name are told apart by their session.
    #[test]
    fn item5_labels_and_versions() {
        let a = node("host:1", "aaaaaaaa1111", vec![cron("r", "0 * * * * *")]);
        let mut b = node("host:1", "bbbbbbbb2222", vec![]);
        b.version = "0.0.1".to_owned();
        let diffs = compare(&[a.clone(), b.clone()]);
        assert_eq!(diffs, vec!["job `r` runs on host:1 (aaaaaaaa) but not on host:1 (bbbbbbbb)".to_owned()]);
        let v = versions(&[a, b]).expect("versions differ");
        assert!(v.contains("0.0.1 on host:1 (bbbbbbbb)"), "{v}");
    }
}
