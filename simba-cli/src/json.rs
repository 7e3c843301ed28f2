//! The typed shapes of the `--json` outputs of `jobs`, `history`, `pause`, `resume` and
//! `trigger`. Every top-level object carries `"schema": SCHEMA`, so a script can tell the
//! shape it parses: the number goes up when a field changes meaning or goes away (an added
//! field keeps it).

use serde::Serialize;
use simba::job::{NodeRegistry, RegistryReport, registry_versions};
use simba::job_store::{RunRecord, RunRecordJson};

use crate::output::Failure;

/// The version of every `--json` shape this build prints.
pub(crate) const SCHEMA: u32 = 1;

/// An instant (milliseconds since the epoch) as RFC 3339 in UTC with milliseconds, as every
/// `--json` output prints instants; `None` stays null.
pub(crate) fn time(ms: Option<i64>) -> Option<String> {
    simba::job_store::rfc3339_ms(ms)
}

/// One run record: the library's [`RunRecordJson`], the type the dashboard's `/api/jobs`
/// returns too, so a script reads both alike.
pub(crate) type Record<'a> = RunRecordJson<'a>;

/// `simba history JOB --json`.
#[derive(Debug, Serialize)]
pub(crate) struct History<'a> {
    schema: u32,
    job: &'a str,
    /// Newest first.
    records: Vec<Record<'a>>,
}

impl<'a> History<'a> {
    pub(crate) fn new(job: &'a str, records: &'a [RunRecord]) -> Self {
        History { schema: SCHEMA, job, records: records.iter().map(Record::from).collect() }
    }
}

/// `simba pause JOB --json` and `simba resume JOB --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Toggled<'a> {
    pub(crate) schema: u32,
    pub(crate) job: &'a str,
    pub(crate) paused: bool,
    pub(crate) changed: bool,
    pub(crate) message: &'a str,
}

/// `simba trigger JOB --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Triggered<'a> {
    pub(crate) schema: u32,
    pub(crate) job: &'a str,
    /// The store's request id, where it numbers them.
    pub(crate) request: Option<u64>,
    /// The request's key (given or generated); the run's record names it.
    pub(crate) request_key: &'a str,
    /// Whether the key named a request made before (nothing new was requested).
    pub(crate) known: bool,
    /// The request's manual slot.
    pub(crate) at: Option<String>,
    /// The error of a try that failed before a try with the same key was answered.
    pub(crate) retried_after: Option<&'a str>,
    pub(crate) message: &'a str,
}

/// `simba jobs --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Jobs<'a> {
    pub(crate) schema: u32,
    pub(crate) jobs: Vec<Job<'a>>,
    pub(crate) registry: Registry<'a>,
    /// How many schedules stored as data have a history (`schedule/<id>`; not in `jobs`:
    /// `simba schedules list --json` has them).
    pub(crate) schedule_histories: usize,
}

/// One job of `simba jobs --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Job<'a> {
    pub(crate) job: &'a str,
    pub(crate) kind: &'static str,
    pub(crate) schedule: Option<&'a str>,
    /// A cron schedule's time zone (UTC when it names none); null for fixed rates and workers.
    pub(crate) time_zone: Option<&'a str>,
    pub(crate) partitions: Option<u32>,
    pub(crate) paused: bool,
    pub(crate) holders: Vec<Holder<'a>>,
    pub(crate) next_fire: Option<String>,
    pub(crate) last_slot: Option<String>,
    pub(crate) last: Option<Record<'a>>,
    pub(crate) trigger_pending: Option<String>,
    pub(crate) failures_24h: usize,
    /// Slots recorded `missed` in the last 24 h.
    pub(crate) missed_24h: usize,
    /// Runs whose first attempt started more than `--late-after` after their slot, in the last 24 h.
    pub(crate) late_24h: usize,
    pub(crate) registry_differs: bool,
}

/// A lease holder of a job.
#[derive(Debug, Serialize)]
pub(crate) struct Holder<'a> {
    pub(crate) node: &'a str,
    pub(crate) session: &'a str,
    pub(crate) token: u64,
}

/// The live nodes' published registries, compared.
#[derive(Debug, Serialize)]
pub(crate) struct Registry<'a> {
    agree: bool,
    nodes: Vec<Node<'a>>,
    differences: &'a [String],
    unreadable: &'a [String],
    /// The simba versions the nodes run, when they differ or are known.
    versions: Option<String>,
}

/// One live node's registry.
#[derive(Debug, Serialize)]
struct Node<'a> {
    node: String,
    session: &'a str,
    version: &'a str,
    digest: &'a str,
    jobs: usize,
}

impl<'a> From<&'a RegistryReport> for Registry<'a> {
    fn from(r: &'a RegistryReport) -> Self {
        let node = |n: &'a NodeRegistry| Node {
            node: r.label(n),
            session: &n.session,
            version: &n.version,
            digest: &n.digest,
            jobs: n.jobs.len() + n.omitted,
        };
        Registry {
            agree: r.agrees() && r.unreadable.is_empty(),
            nodes: r.nodes.iter().map(node).collect(),
            differences: &r.differences,
            unreadable: &r.unreadable,
            versions: registry_versions(&r.nodes),
        }
    }
}

/// `value` as pretty JSON and a newline. Serializing these structs cannot fail (string keys,
/// no maps of other keys), so a failure is reported rather than printed as nothing.
pub(crate) fn pretty(value: &impl Serialize) -> Result<String, Failure> {
    serde_json::to_string_pretty(value).map(|s| s + "\n").map_err(encoding)
}

/// `value` as one line of JSON and a newline.
pub(crate) fn line(value: &impl Serialize) -> Result<String, Failure> {
    serde_json::to_string(value).map(|s| s + "\n").map_err(encoding)
}

fn encoding(e: serde_json::Error) -> Failure {
    Failure::refused(format!("cannot encode the JSON output: {e}"))
}
