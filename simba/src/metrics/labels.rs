//! Which labels a term's counters carry (rule O4): its `kind` always, its `lease` name only
//! where the names are bounded.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use metrics::Label;

/// Which terms carry their lease name as the `lease` label of `simba_terms_gained_total` and
/// `simba_terms_lost_total` (`[metrics] lease_labels` in `simba.toml`, rule O4). Every term
/// carries its `kind` (`job`, `partition`, `election`, `lock`).
///
/// A label value is a series the exporter keeps: a service that locks per order or per
/// tenant would add one series per name it ever used. The default labels only the names the
/// runtime's code declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeaseLabels {
    /// `"none"`: no `lease` label; terms are counted by `kind` alone.
    None,
    /// `"jobs"` (the default): the leases of the runtime's scheduled jobs (`kind="job"`) and of
    /// its groups' partitions (`kind="partition"`) carry their name: jobs and groups are named
    /// in code, so they are bounded. Elections and locks are counted by `kind` alone.
    #[default]
    Jobs,
    /// `"all"`: every lease carries its name. Only for a node whose lease names are few and
    /// fixed; with per-request lock names, the series grow until they go idle (rule O5).
    All,
}

impl LeaseLabels {
    /// The value as written in `simba.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseLabels::None => "none",
            LeaseLabels::Jobs => "jobs",
            LeaseLabels::All => "all",
        }
    }
}

impl FromStr for LeaseLabels {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(LeaseLabels::None),
            "jobs" => Ok(LeaseLabels::Jobs),
            "all" => Ok(LeaseLabels::All),
            _ => Err(format!(
                "unknown value {s:?}: write \"none\" (kind only), \"jobs\" (the default: the runtime's jobs and \
                 partitions by name) or \"all\" (every lease by name)"
            )),
        }
    }
}

/// What a lease is used for, as the `kind` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    /// The lease of a scheduled job the runtime runs.
    Job,
    /// A partition of a group the runtime runs.
    Partition,
    /// An election the application started.
    Election,
    /// A lock the application took.
    Lock,
}

impl LeaseKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Job => "job",
            LeaseKind::Partition => "partition",
            LeaseKind::Election => "election",
            LeaseKind::Lock => "lock",
        }
    }
}

/// The labels one term's counters carry, decided once when the term starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseLabel {
    kind: LeaseKind,
    lease: Option<Arc<str>>,
}

impl Default for LeaseLabel {
    fn default() -> Self {
        LeaseLabel { kind: LeaseKind::Lock, lease: None }
    }
}

impl LeaseLabel {
    /// `kind`, then `lease` when this term carries its name.
    pub(crate) fn labels(&self) -> Vec<Label> {
        let mut labels = vec![Label::new("kind", self.kind.as_str())];
        if let Some(lease) = &self.lease {
            labels.push(Label::new("lease", lease.to_string()));
        }
        labels
    }
}

/// The one decision (rule O4): a term of `lease`, declared by the runtime as `declared` (or
/// not), held by an election or not, under `policy`.
pub(crate) fn lease_label(
    policy: LeaseLabels,
    lease: &Arc<str>,
    declared: Option<LeaseKind>,
    election: bool,
) -> LeaseLabel {
    let kind = declared.unwrap_or(if election { LeaseKind::Election } else { LeaseKind::Lock });
    let named = match policy {
        LeaseLabels::None => false,
        LeaseLabels::Jobs => declared.is_some(),
        LeaseLabels::All => true,
    };
    LeaseLabel { kind, lease: named.then(|| Arc::clone(lease)) }
}

/// A client's labelling of terms: its policy, and the lease names the runtime declared for
/// its jobs and groups (bounded by the code that declares them).
#[derive(Debug, Default)]
pub(crate) struct LeaseMetrics {
    policy: LeaseLabels,
    declared: Mutex<HashMap<Arc<str>, LeaseKind>>,
}

impl LeaseMetrics {
    pub(crate) fn new(policy: LeaseLabels) -> Self {
        LeaseMetrics { policy, declared: Mutex::default() }
    }

    /// Declares `lease` as the lease of a job or a partition the runtime runs.
    pub(crate) fn declare(&self, lease: &str, kind: LeaseKind) {
        self.declared.lock().unwrap_or_else(PoisonError::into_inner).insert(lease.into(), kind);
    }

    /// Forgets a declared lease (a job removed at run time).
    pub(crate) fn forget(&self, lease: &str) {
        self.declared.lock().unwrap_or_else(PoisonError::into_inner).remove(lease);
    }

    /// The labels of a term of `lease` starting now.
    pub(crate) fn label(&self, lease: &Arc<str>, election: bool) -> LeaseLabel {
        let declared = self.declared.lock().unwrap_or_else(PoisonError::into_inner).get(lease).copied();
        lease_label(self.policy, lease, declared, election)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(l: &LeaseLabel) -> Vec<(String, String)> {
        l.labels().iter().map(|l| (l.key().to_owned(), l.value().to_owned())).collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn o4_only_declared_leases_carry_their_name_by_default() {
        let order: Arc<str> = "order-81723".into();
        let job: Arc<str> = "nightly".into();
        let l = lease_label(LeaseLabels::default(), &order, None, false);
        assert_eq!(names(&l), pairs(&[("kind", "lock")]));
        let l = lease_label(LeaseLabels::default(), &order, None, true);
        assert_eq!(names(&l), pairs(&[("kind", "election")]));
        let l = lease_label(LeaseLabels::default(), &job, Some(LeaseKind::Job), true);
        assert_eq!(names(&l), pairs(&[("kind", "job"), ("lease", "nightly")]));
        let l = lease_label(LeaseLabels::None, &job, Some(LeaseKind::Partition), false);
        assert_eq!(names(&l), pairs(&[("kind", "partition")]));
        let l = lease_label(LeaseLabels::All, &order, None, false);
        assert_eq!(names(&l), pairs(&[("kind", "lock"), ("lease", "order-81723")]));

        let m = LeaseMetrics::new(LeaseLabels::Jobs);
        m.declare("grp.3", LeaseKind::Partition);
        assert_eq!(names(&m.label(&"grp.3".into(), false)), pairs(&[("kind", "partition"), ("lease", "grp.3")]));
        m.forget("grp.3");
        assert_eq!(names(&m.label(&"grp.3".into(), false)), pairs(&[("kind", "lock")]));
    }

    #[test]
    fn o4_lease_labels_read_from_text() {
        for p in [LeaseLabels::None, LeaseLabels::Jobs, LeaseLabels::All] {
            assert_eq!(p.as_str().parse::<LeaseLabels>(), Ok(p));
        }
        let e = "some".parse::<LeaseLabels>().expect_err("unknown");
        assert!(e.contains("\"none\"") && e.contains("\"jobs\"") && e.contains("\"all\""), "{e}");
    }
}
