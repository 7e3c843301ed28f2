//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: the application picks the
//! exporter (ADR 0007). With the feature `prometheus` and `[metrics] listen = "ADDR"` in
//! `simba.toml`, the runtime serves them itself on `http://ADDR/metrics`, beside the probes
//! `/livez` (200 while the process serves), `/readyz` (200 while the session is live, 503
//! otherwise) and `/healthz` (the same as `/readyz`), rule O1. Nothing listens by
//! default, and without a recorder every call below is a no-op.
//!
//! | name | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `simba_build_info` | gauge | `version`, `backend` | 1 per client: the crate version and the backend kind (`postgres`, `redis`, ...) |
//! | `simba_session_state` | gauge | `state` = opening, live, suspended, closed | 1 for the current state, 0 for the others |
//! | `simba_renewal_duration_seconds` | histogram | | round trip of each successful keep-alive |
//! | `simba_renewal_failures_total` | counter | | keep-alives that failed or timed out |
//! | `simba_terms_gained_total` | counter | `kind`, `lease` (see below) | terms won |
//! | `simba_terms_lost_total` | counter | `kind`, `lease` (see below), `reason` | terms ended, by [`RevokeReason`] |
//! | `simba_job_runs_total` | counter | `job` | scheduled runs started |
//! | `simba_job_failures_total` | counter | `job` | runs that returned an error |
//! | `simba_job_duration_seconds` | histogram | `job` | how long each run took (buckets up to a day) |
//! | `simba_job_lateness_seconds` | histogram | `job` | how late each run started after its slot (buckets up to a day) |
//! | `simba_partitions_held` | gauge | `group` | partitions of the group this process holds |
//! | `simba_job_slots_total` | counter | `job`, `outcome` | slots by how they ended (`ran`, `failed`, `declined`, `missed`, ...) |
//! | `simba_job_paused` | gauge | `job` | 1 while this node's claims find the job paused |
//! | `simba_job_next_slot_timestamp_seconds` | gauge | `job` | the holder's next slot of a scheduled job, unix seconds (0 on a node that does not hold it) |
//! | `simba_schedules_next_fire_timestamp_seconds` | gauge | `partition` | the earliest next slot of the schedules of a partition of `simba.schedules` on its holder, unix seconds (0 on a node that does not hold it, or when none is due) |
//! | `simba_alert_webhook_total` | counter | `result` | alerts handed to the alert webhook: `delivered`, `failed` (refused, or given up after its tries), `dropped` (its queue was full) |
//! | `simba_job_alerts_total` | counter | `job`, `kind` | alerts delivered to the application's hook (`failed`, `missed`, `late`) |
//! | `simba_job_records_lost_total` | counter | `job` | history records given up: the store did not take them before the end of their term plus a grace (each one is also a warning naming the slot) |
//! | `simba_job_registry_differences` | gauge | | differences between the live nodes' job registries at the last check |
//!
//! `reason` is `stopped`, `stepped_down`, `deadline_passed`, `session_expired` or
//! `taken_over`. The session gauge describes the last client whose state changed: run one
//! client per process (the runtime does).
//!
//! **Bounded labels** (rule O4). `kind` is `job` (the lease of a scheduled job the runtime
//! runs), `partition` (a partition of a group the runtime runs), `election` or `lock`. The
//! `lease` label follows [`LeaseLabels`] (`[metrics] lease_labels`): by default only the
//! leases of the runtime's jobs and groups carry it, since the code declares them and so
//! bounds them; a lock taken per order or per tenant is counted under `kind="lock"` alone.
//! `job` and `group` labels are always there: jobs and groups are named in code.
//!
//! **Series that go idle** (rule O5). Simba's own recorder (the one `[metrics] listen`
//! installs) drops a counter or histogram series that was not updated for
//! `[metrics] idle_timeout` (default [`DEFAULT_IDLE_TIMEOUT`], a day and two hours, so that a
//! daily job's series live from one run to the next, a 25-hour day included); gauges are
//! kept, they state a current value. A series that comes back starts again from zero, which
//! Prometheus reads as a counter reset. The timeout applies to every series of that recorder,
//! the application's own included.
//!
//! **Buckets** (rule O6). The job histograms have buckets from 1 ms to a day, the renewal
//! histogram from 1 ms to 60 s; they are set for those names only, so the application's own
//! histograms recorded through the same recorder keep the exporter's defaults.

use std::time::Duration;

use metrics::{Label, counter, gauge, histogram};

use crate::{RevokeReason, SessionStatus};

/// Metric names, for exporters and dashboards.
pub mod names {
    /// Gauge, labels `version` and `backend`: 1 per client.
    pub const BUILD_INFO: &str = "simba_build_info";
    /// Gauge, label `state`: 1 for the session's current state.
    pub const SESSION_STATE: &str = "simba_session_state";
    /// Histogram (seconds): round trip of each successful keep-alive.
    pub const RENEWAL_DURATION: &str = "simba_renewal_duration_seconds";
    /// Counter: failed or timed-out keep-alives.
    pub const RENEWAL_FAILURES: &str = "simba_renewal_failures_total";
    /// Counter, labels `kind` and (see [`LeaseLabels`](super::LeaseLabels)) `lease`: terms won.
    pub const TERMS_GAINED: &str = "simba_terms_gained_total";
    /// Counter, labels `kind`, `reason` and (see [`LeaseLabels`](super::LeaseLabels)) `lease`:
    /// terms ended.
    pub const TERMS_LOST: &str = "simba_terms_lost_total";
    /// Counter, label `job`: scheduled runs started.
    pub const JOB_RUNS: &str = "simba_job_runs_total";
    /// Counter, label `job`: runs that returned an error.
    pub const JOB_FAILURES: &str = "simba_job_failures_total";
    /// Histogram (seconds), label `job`: run duration.
    pub const JOB_DURATION: &str = "simba_job_duration_seconds";
    /// Histogram (seconds), label `job`: start of a run after its slot.
    pub const JOB_LATENESS: &str = "simba_job_lateness_seconds";
    /// Gauge, label `group`: partitions held by this process.
    pub const PARTITIONS_HELD: &str = "simba_partitions_held";
    /// Counter, labels `job` and `outcome`: slots by how they ended.
    pub const JOB_SLOTS: &str = "simba_job_slots_total";
    /// Counter, labels `job` and `result`: slot claims by the store's answer (`claimed`,
    /// `paused`, `already_claimed`, `not_holder`, `failed`, `timed_out`).
    pub const JOB_CLAIMS: &str = "simba_job_claims_total";
    /// Gauge, label `job`: 1 while the job is paused, as this node's claims see it.
    pub const JOB_PAUSED: &str = "simba_job_paused";
    /// Counter, label `job`: history records given up because the store did not take them in
    /// time (each one is also logged with its slot).
    pub const JOB_RECORDS_LOST: &str = "simba_job_records_lost_total";
    /// Gauge, label `job`: the next slot of a scheduled job on its holder, unix seconds; 0 on a
    /// node whose term of it ended (the holder's series is the one above 0).
    pub const JOB_NEXT_SLOT: &str = "simba_job_next_slot_timestamp_seconds";
    /// Gauge, label `partition` (of `simba.schedules`, bounded by `[schedules] partitions`):
    /// the earliest next slot of the partition's schedules on its holder, unix seconds; 0 on a
    /// node that does not hold it, or when none of its schedules has a next slot. A holder
    /// whose value stays in the past is behind.
    pub const SCHEDULES_NEXT_FIRE: &str = "simba_schedules_next_fire_timestamp_seconds";
    /// Counter, labels `job` (the job's metric name: the group's for partitions and
    /// schedules) and `kind`: alerts delivered to the application's hook.
    pub const JOB_ALERTS: &str = "simba_job_alerts_total";
    /// Counter, label `result` (`delivered`, `failed`: given up after its tries or refused,
    /// `dropped`: the queue was full): alerts handed to the alert webhook (feature `webhook`).
    pub const ALERT_WEBHOOK: &str = "simba_alert_webhook_total";
    /// Gauge: how many differences this node saw between the live nodes' job registries at
    /// its last check (0: they agree).
    pub const REGISTRY_DIFFERENCES: &str = "simba_job_registry_differences";
}

const STATES: [(SessionStatus, &str); 4] = [
    (SessionStatus::Opening, "opening"),
    (SessionStatus::Live, "live"),
    (SessionStatus::Suspended, "suspended"),
    (SessionStatus::Closed, "closed"),
];

/// The label of a revoke reason.
pub fn reason_label(reason: RevokeReason) -> &'static str {
    reason.as_str()
}

pub(crate) fn session_state(status: SessionStatus) {
    for (s, label) in STATES {
        gauge!(names::SESSION_STATE, "state" => label).set(if s == status { 1.0 } else { 0.0 });
    }
}

pub(crate) fn renewal(took: Duration) {
    histogram!(names::RENEWAL_DURATION).record(took.as_secs_f64());
}

pub(crate) fn renewal_failed() {
    counter!(names::RENEWAL_FAILURES).increment(1);
}

pub(crate) fn term_gained(lease: &LeaseLabel) {
    counter!(names::TERMS_GAINED, lease.labels()).increment(1);
}

pub(crate) fn term_lost(lease: &LeaseLabel, reason: RevokeReason) {
    let mut labels = lease.labels();
    labels.push(Label::new("reason", reason_label(reason)));
    counter!(names::TERMS_LOST, labels).increment(1);
}

/// `simba_build_info{version, backend} 1` for a client on the backend described as
/// `backend` (its [`describe`](crate::backend::Backend::describe)).
pub(crate) fn build_info(backend: &str) {
    gauge!(names::BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "backend" => backend_kind(backend)).set(1.0);
}

/// The kind of a backend from its description: the scheme of `postgres://host/db`, the first
/// word otherwise (`memory`), at most 32 characters, so the label never carries a host.
fn backend_kind(described: &str) -> String {
    let kind: String =
        described.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(32).collect();
    if kind.is_empty() { "other".to_owned() } else { kind.to_ascii_lowercase() }
}

pub(crate) fn job_started(job: &str, lateness: Duration) {
    counter!(names::JOB_RUNS, "job" => job.to_owned()).increment(1);
    histogram!(names::JOB_LATENESS, "job" => job.to_owned()).record(lateness.as_secs_f64());
}

pub(crate) fn job_slot(job: &str, outcome: crate::job_store::Outcome) {
    counter!(names::JOB_SLOTS, "job" => job.to_owned(), "outcome" => outcome.as_str()).increment(1);
}

/// How the store answered a slot's claim (the `result` label of
/// [`JOB_CLAIMS`](names::JOB_CLAIMS)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClaimResult {
    Claimed,
    Paused,
    AlreadyClaimed,
    NotHolder,
    Failed,
    TimedOut,
}

impl ClaimResult {
    fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Paused => "paused",
            Self::AlreadyClaimed => "already_claimed",
            Self::NotHolder => "not_holder",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
        }
    }
}

pub(crate) fn job_claim(job: &str, result: ClaimResult) {
    counter!(names::JOB_CLAIMS, "job" => job.to_owned(), "result" => result.as_str()).increment(1);
}

pub(crate) fn job_alert(job: &str, kind: &'static str) {
    counter!(names::JOB_ALERTS, "job" => job.to_owned(), "kind" => kind).increment(1);
}

#[cfg(feature = "webhook")]
pub(crate) fn alert_webhook(result: &'static str) {
    counter!(names::ALERT_WEBHOOK, "result" => result).increment(1);
}

pub(crate) fn job_record_lost(job: &str) {
    counter!(names::JOB_RECORDS_LOST, "job" => job.to_owned()).increment(1);
}

pub(crate) fn registry_differences(n: usize) {
    gauge!(names::REGISTRY_DIFFERENCES).set(n as f64);
}

/// The holder's next slot of scheduled job `job` (`None`: its term ended here, or it has none).
pub(crate) fn job_next_slot(job: &str, at: Option<chrono::DateTime<chrono::Utc>>) {
    let secs = at.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0);
    gauge!(names::JOB_NEXT_SLOT, "job" => job.to_owned()).set(secs);
}

/// The earliest next slot of partition `partition`'s schedules on this node, unix
/// milliseconds (`None`: not held here, or none due).
pub(crate) fn schedules_next_fire(partition: u32, at_ms: Option<i64>) {
    let secs = at_ms.map_or(0.0, |ms| ms as f64 / 1000.0);
    gauge!(names::SCHEDULES_NEXT_FIRE, "partition" => partition.to_string()).set(secs);
}

pub(crate) fn job_paused(job: &str, paused: bool) {
    gauge!(names::JOB_PAUSED, "job" => job.to_owned()).set(if paused { 1.0 } else { 0.0 });
}

pub(crate) fn job_finished(job: &str, took: Duration, failed: bool) {
    histogram!(names::JOB_DURATION, "job" => job.to_owned()).record(took.as_secs_f64());
    if failed {
        counter!(names::JOB_FAILURES, "job" => job.to_owned()).increment(1);
    }
}

/// Counts one partition of a group as held while it lives (also when its task is dropped).
pub(crate) struct PartitionHeld(String);

impl PartitionHeld {
    pub(crate) fn new(group: &str) -> Self {
        gauge!(names::PARTITIONS_HELD, "group" => group.to_owned()).increment(1.0);
        PartitionHeld(group.to_owned())
    }
}

impl Drop for PartitionHeld {
    fn drop(&mut self) {
        gauge!(names::PARTITIONS_HELD, "group" => self.0.clone()).decrement(1.0);
    }
}

/// The default `[metrics] idle_timeout`: a day and two hours, so that the series of a daily
/// job live from one run to the next (a 25-hour day included).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(26 * 3600);

/// How Simba labels its terms and how its own Prometheus recorder keeps series: the
/// `[metrics]` table of `simba.toml` besides `listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSettings {
    /// `[metrics] lease_labels` (rule O4): which terms carry their lease name.
    pub lease_labels: LeaseLabels,
    /// `[metrics] idle_timeout` (rule O5): a counter or histogram series of Simba's own
    /// recorder that was not updated for this long is dropped; `None` (`"off"`): kept
    /// forever. Applies only when Simba installs the recorder (`[metrics] listen`).
    pub idle_timeout: Option<Duration>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings { lease_labels: LeaseLabels::default(), idle_timeout: Some(DEFAULT_IDLE_TIMEOUT) }
    }
}

impl MetricsSettings {
    /// With `lease_labels`.
    #[must_use]
    pub fn lease_labels(mut self, lease_labels: LeaseLabels) -> Self {
        self.lease_labels = lease_labels;
        self
    }

    /// With `idle_timeout` (`None`: series never go idle).
    #[must_use]
    pub fn idle_timeout(mut self, idle_timeout: Option<Duration>) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }
}

mod labels;
pub use labels::LeaseLabels;
#[cfg(test)]
pub(crate) use labels::lease_label;
pub(crate) use labels::{LeaseKind, LeaseLabel, LeaseMetrics};

#[cfg(feature = "prometheus")]
mod endpoint;
#[cfg(all(test, feature = "prometheus"))]
mod tests;
#[cfg(all(feature = "prometheus", feature = "dashboard"))]
pub(crate) use endpoint::recorder;
#[cfg(feature = "prometheus")]
pub(crate) use endpoint::recorder_with;
#[cfg(feature = "prometheus")]
pub use endpoint::{MAX_CONNECTIONS, MetricsServer, REQUEST_DEADLINE, serve};
