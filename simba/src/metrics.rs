//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: the application picks the
//! exporter (ADR 0007). With the feature `prometheus` and `[metrics] listen = "ADDR"` in
//! `simba.toml`, the runtime serves them itself on `http://ADDR/metrics`, beside the probes
//! `/livez` (200 while the process serves), `/readyz` (200 while the session is live, 503
//! otherwise) and `/healthz` (the same as `/readyz`), rule O1. Nothing listens by
//! default, and without a recorder every call below is a no-op.
//!
//! | name | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `simba_session_state` | gauge | `state` = opening, live, suspended, closed | 1 for the current state, 0 for the others |
//! | `simba_renewal_duration_seconds` | histogram | | round trip of each successful keep-alive |
//! | `simba_renewal_failures_total` | counter | | keep-alives that failed or timed out |
//! | `simba_terms_gained_total` | counter | `lease` | terms won (elections, locks, partitions) |
//! | `simba_terms_lost_total` | counter | `lease`, `reason` | terms ended, by [`RevokeReason`] |
//! | `simba_job_runs_total` | counter | `job` | scheduled runs started |
//! | `simba_job_failures_total` | counter | `job` | runs that returned an error |
//! | `simba_job_duration_seconds` | histogram | `job` | how long each run took |
//! | `simba_job_lateness_seconds` | histogram | `job` | how late each run started after its slot |
//! | `simba_partitions_held` | gauge | `group` | partitions of the group this process holds |
//! | `simba_job_slots_total` | counter | `job`, `outcome` | slots by how they ended (`ran`, `failed`, `declined`, `missed`, ...) |
//! | `simba_job_paused` | gauge | `job` | 1 while this node's claims find the job paused |
//! | `simba_job_records_lost_total` | counter | `job` | history records given up: the store did not take them before the end of their term plus a grace (each one is also a warning naming the slot) |
//!
//! `reason` is `stopped`, `stepped_down`, `deadline_passed`, `session_expired` or
//! `taken_over`. The session gauge describes the last client whose state changed: run one
//! client per process (the runtime does).

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use crate::{RevokeReason, SessionStatus};

/// Metric names, for exporters and dashboards.
pub mod names {
    /// Gauge, label `state`: 1 for the session's current state.
    pub const SESSION_STATE: &str = "simba_session_state";
    /// Histogram (seconds): round trip of each successful keep-alive.
    pub const RENEWAL_DURATION: &str = "simba_renewal_duration_seconds";
    /// Counter: failed or timed-out keep-alives.
    pub const RENEWAL_FAILURES: &str = "simba_renewal_failures_total";
    /// Counter, label `lease`: terms won.
    pub const TERMS_GAINED: &str = "simba_terms_gained_total";
    /// Counter, labels `lease` and `reason`: terms ended.
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
    /// Gauge, label `job`: 1 while the job is paused, as this node's claims see it.
    pub const JOB_PAUSED: &str = "simba_job_paused";
    /// Counter, label `job`: history records given up because the store did not take them in
    /// time (each one is also logged with its slot).
    pub const JOB_RECORDS_LOST: &str = "simba_job_records_lost_total";
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

pub(crate) fn term_gained(lease: &str) {
    counter!(names::TERMS_GAINED, "lease" => lease.to_owned()).increment(1);
}

pub(crate) fn term_lost(lease: &str, reason: RevokeReason) {
    counter!(names::TERMS_LOST, "lease" => lease.to_owned(), "reason" => reason_label(reason)).increment(1);
}

pub(crate) fn job_started(job: &str, lateness: Duration) {
    counter!(names::JOB_RUNS, "job" => job.to_owned()).increment(1);
    histogram!(names::JOB_LATENESS, "job" => job.to_owned()).record(lateness.as_secs_f64());
}

pub(crate) fn job_slot(job: &str, outcome: crate::job_store::Outcome) {
    counter!(names::JOB_SLOTS, "job" => job.to_owned(), "outcome" => outcome.as_str()).increment(1);
}

pub(crate) fn job_record_lost(job: &str) {
    counter!(names::JOB_RECORDS_LOST, "job" => job.to_owned()).increment(1);
}

pub(crate) fn registry_differences(n: usize) {
    gauge!(names::REGISTRY_DIFFERENCES).set(n as f64);
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

#[cfg(feature = "prometheus")]
mod endpoint;
#[cfg(feature = "prometheus")]
pub(crate) use endpoint::recorder;
#[cfg(feature = "prometheus")]
pub use endpoint::{MetricsServer, serve};
