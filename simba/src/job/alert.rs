//! Alerts (rule R12 of docs/SPEC.md): a hook the application registers
//! ([`RuntimeBuilder::on_alert`](crate::runtime::RuntimeBuilder::on_alert)) hears of a run that
//! failed after its retries, a slot missed, and a run that started later than a threshold. Each
//! is delivered once per slot, by the node that recorded it: a `failed` or `missed` alert only
//! once its record took effect in the store (the write that changed the slot's record, not a
//! retry that found it written, nor another node's record of the same slot), a `late` alert at
//! the start of the slot's first attempt, which the claim lets one node make.
//!
//! The hook runs on the job's record writer (or its run's task, for `late`): it must return
//! quickly, handing the alert to a channel or a task of its own for anything slow (a webhook,
//! a pager). A hook that panics is caught and logged; the records go on.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::job_store::{Outcome, RunRecord};

/// What an [`Alert`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlertKind {
    /// A run failed (or timed out) after its last attempt: the slot's record is final.
    Failed,
    /// A slot did not run: no node held the job when it came, its claim got no answer, or the
    /// holder lacks a schedule's handler (the record's reason says which).
    Missed,
    /// A run started later after its slot than the runtime's threshold
    /// ([`RuntimeBuilder::alert_late_after`](crate::runtime::RuntimeBuilder::alert_late_after)).
    Late,
}

impl AlertKind {
    /// The kind's name: `failed`, `missed`, `late`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Failed => "failed",
            AlertKind::Missed => "missed",
            AlertKind::Late => "late",
        }
    }
}

/// One alert: what happened to which slot of which job, on which node and term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Alert {
    /// What happened.
    pub kind: AlertKind,
    /// The job (`schedule/<id>` for a schedule stored as data; `group.partition` for a
    /// partition of a group).
    pub job: String,
    /// The slot's instant.
    pub slot: DateTime<Utc>,
    /// The outcome recorded (`running` for a late start).
    pub outcome: Outcome,
    /// The node that recorded it.
    pub node: String,
    /// The fencing token of the term that recorded it.
    pub token: u64,
    /// The record's error or reason, when it has one.
    pub reason: Option<String>,
    /// How late the run started after its slot (a `late` alert only).
    pub lateness: Option<Duration>,
}

impl Alert {
    /// The alert a record that took effect raises, if any: `failed` and `timed_out` after the
    /// last attempt, `missed`.
    pub(crate) fn of_record(r: &RunRecord) -> Option<Alert> {
        let kind = match r.outcome {
            Outcome::Failed | Outcome::TimedOut => AlertKind::Failed,
            Outcome::Missed => AlertKind::Missed,
            _ => return None,
        };
        Some(Alert {
            kind,
            job: r.job.clone(),
            slot: DateTime::from_timestamp_millis(r.slot_ms).unwrap_or(DateTime::UNIX_EPOCH),
            outcome: r.outcome,
            node: r.node.clone(),
            token: r.token,
            reason: r.error.clone(),
            lateness: None,
        })
    }
}

/// The hook's type: called with each alert.
pub type AlertFn = dyn Fn(&Alert) + Send + Sync;

/// The runtime's alert hook and the lateness threshold. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Alerts {
    hook: Arc<AlertFn>,
    late_after: Option<Duration>,
}

impl Alerts {
    pub(crate) fn new(hook: Arc<AlertFn>, late_after: Option<Duration>) -> Self {
        Alerts { hook, late_after }
    }

    /// Delivers `alert` to the hook, counted under the job's metric name `metric`; a panic in
    /// the hook is caught and logged.
    pub(crate) fn deliver(&self, alert: &Alert, metric: &str) {
        let hook = &self.hook;
        let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(alert)));
        crate::metrics::job_alert(metric, alert.kind.as_str());
        if delivered.is_err() {
            tracing::warn!(job = %alert.job, kind = alert.kind.as_str(), "the alert hook panicked; the alert is dropped");
        }
    }

    /// A `late` alert for a run of `job` whose first attempt starts `lateness` after its slot,
    /// when that is past the threshold.
    pub(crate) fn late(&self, (job, metric): (&str, &str), slot: DateTime<Utc>, lateness: Duration, term: (&str, u64)) {
        let Some(after) = self.late_after else { return };
        if lateness <= after {
            return;
        }
        let (node, token) = term;
        let alert = Alert {
            kind: AlertKind::Late,
            job: job.to_owned(),
            slot,
            outcome: Outcome::Running,
            node: node.to_owned(),
            token,
            reason: Some(format!(
                "started {} after its slot (the threshold is {})",
                humantime::format_duration(round_ms(lateness)),
                humantime::format_duration(after)
            )),
            lateness: Some(lateness),
        };
        self.deliver(&alert, metric);
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts").field("late_after", &self.late_after).finish_non_exhaustive()
    }
}
