//! What the pages and `GET /api/state` show: one reading joined with the dashboard's memory,
//! computed once per refresh and shared by every viewer.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::history::{Change, Entry, MOVE_HIGHLIGHT, Tracker, partition_of};
use super::jobs::JobsView;
use super::source::{NodeInfo, Reading};
use super::text::natural;
use crate::backend::SessionId;

/// Everything one page render needs.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// The data's origin, redacted.
    pub(crate) backend: String,
    /// When this model was made (the dashboard's clock).
    pub(crate) now: SystemTime,
    /// The last read's error, if the last read failed.
    pub(crate) error: Option<String>,
    /// When the last successful read was made.
    pub(crate) last_ok: Option<SystemTime>,
    /// Whether `POST` actions are enabled.
    pub(crate) actions: bool,
    /// The cluster as of the last successful read; `None` before the first.
    pub(crate) cluster: Option<Cluster>,
    /// The jobs as of the last successful read; `None` before the first.
    pub(crate) jobs: Option<JobsView>,
}

/// The cluster, as one reading showed it.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// The store's clock at the read (or the dashboard's, when `store_clock` is false).
    pub(crate) taken_at: SystemTime,
    pub(crate) store_clock: bool,
    /// When the dashboard made the read (its own clock: the history's times are on it).
    pub(crate) observed_at: SystemTime,
    pub(crate) sessions: Vec<SessionRow>,
    pub(crate) leases: Vec<LeaseRow>,
    pub(crate) groups: Vec<GroupView>,
    /// Recent lease changes, newest first.
    pub(crate) feed: Vec<Change>,
}

#[derive(Debug, Clone)]
pub(crate) struct SessionRow {
    pub(crate) id: SessionId,
    pub(crate) node: Option<NodeInfo>,
    pub(crate) age: Option<Duration>,
    pub(crate) remaining: Option<Duration>,
    /// Names of the leases it holds.
    pub(crate) leases: Vec<String>,
    /// Its colour on the pages (an index into a small palette).
    pub(crate) color: usize,
}

#[derive(Debug, Clone)]
pub(crate) struct LeaseRow {
    pub(crate) name: String,
    pub(crate) holder: SessionId,
    pub(crate) token: u64,
    pub(crate) held_for: Option<Duration>,
    /// Observed history, oldest first.
    pub(crate) history: Vec<Entry>,
}

/// Who holds a partition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Holder {
    Free,
    /// The member at this index of [`GroupView::members`].
    Member(usize),
    /// A session that is not a member (it left the group and is handing over).
    Other(SessionId),
}

#[derive(Debug, Clone)]
pub(crate) struct CellView {
    pub(crate) holder: Holder,
    /// The previous holder and when it left, while that is recent.
    pub(crate) moved: Option<(SessionId, SystemTime)>,
}

#[derive(Debug, Clone)]
pub(crate) struct MemberRow {
    pub(crate) id: SessionId,
    pub(crate) held: usize,
    pub(crate) color: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Balance {
    /// Every partition held by a member, counts within one of each other.
    Balanced,
    /// Partitions free or held by non-members: moving.
    Rebalancing { free: usize, others: usize },
    /// All held by members, but counts differ by more than one.
    Unbalanced { min: usize, max: usize },
}

#[derive(Debug, Clone)]
pub(crate) struct GroupView {
    pub(crate) name: String,
    pub(crate) members: Vec<MemberRow>,
    /// Index = partition.
    pub(crate) cells: Vec<CellView>,
    pub(crate) balance: Balance,
}

impl GroupView {
    pub(crate) fn spread(&self) -> (usize, usize) {
        let counts = self.members.iter().map(|m| m.held);
        (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0))
    }
}

/// Joins a reading with the tracker's memory (which has already observed it).
pub(crate) fn cluster(reading: &Reading, tracker: &Tracker, now: SystemTime) -> Cluster {
    let s = &reading.cluster;
    let taken_at = s.taken_at.unwrap_or(now);
    let colors: BTreeMap<&SessionId, usize> = s.sessions.iter().enumerate().map(|(i, x)| (&x.id, i)).collect();
    let color = |id: &SessionId| colors.get(id).copied().unwrap_or(usize::MAX);
    let mut held: BTreeMap<&SessionId, Vec<String>> = BTreeMap::new();
    for l in &s.leases {
        held.entry(&l.session).or_default().push(l.name.clone());
    }
    let sessions = s
        .sessions
        .iter()
        .map(|x| SessionRow {
            id: x.id.clone(),
            node: reading.nodes.get(&x.id).cloned(),
            age: x.age,
            remaining: x.remaining,
            leases: held.remove(&x.id).unwrap_or_default(),
            color: color(&x.id),
        })
        .collect();
    let mut leases: Vec<LeaseRow> = s
        .leases
        .iter()
        .map(|l| LeaseRow {
            name: l.name.clone(),
            holder: l.session.clone(),
            token: l.token,
            held_for: l.acquired_at.map(|at| taken_at.duration_since(at).unwrap_or_default()),
            history: tracker.history(&l.name).cloned().collect(),
        })
        .collect();
    leases.sort_by(|a, b| natural(&a.name).cmp(&natural(&b.name)));
    let groups = s
        .groups
        .iter()
        .map(|g| {
            let members: Vec<MemberRow> =
                g.members.iter().map(|m| MemberRow { id: m.clone(), held: 0, color: color(m) }).collect();
            group_view(&g.name, members, tracker, now)
        })
        .collect();
    Cluster {
        taken_at,
        store_clock: s.taken_at.is_some(),
        observed_at: now,
        sessions,
        leases,
        groups,
        feed: tracker.feed().cloned().collect(),
    }
}

fn group_view(name: &str, mut members: Vec<MemberRow>, tracker: &Tracker, now: SystemTime) -> GroupView {
    let mut cells = Vec::new();
    let (mut free, mut others) = (0, 0);
    for c in tracker.cells(name) {
        let holder = match &c.holder {
            None => {
                free += 1;
                Holder::Free
            }
            Some(id) => match members.iter().position(|m| &m.id == id) {
                Some(i) => {
                    members[i].held += 1;
                    Holder::Member(i)
                }
                None => {
                    others += 1;
                    Holder::Other(id.clone())
                }
            },
        };
        let recent = |at: &SystemTime| now.duration_since(*at).unwrap_or_default() < MOVE_HIGHLIGHT;
        let moved = c.moved.clone().filter(|(_, at)| recent(at));
        cells.push(CellView { holder, moved });
    }
    let mut g = GroupView { name: name.to_owned(), members, cells, balance: Balance::Balanced };
    let (min, max) = g.spread();
    g.balance = if free > 0 || others > 0 {
        Balance::Rebalancing { free, others }
    } else if max - min > 1 {
        Balance::Unbalanced { min, max }
    } else {
        Balance::Balanced
    };
    g
}

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}

fn epoch_ms(t: SystemTime) -> Value {
    ms(t.duration_since(SystemTime::UNIX_EPOCH).ok())
}

fn held_json(h: &Option<(u64, SessionId)>) -> Value {
    h.as_ref().map_or(Value::Null, |(t, s)| json!({"token": t, "session": s.as_str()}))
}

impl Model {
    /// `GET /api/state`: the same facts as `simba status --json`, plus what the dashboard
    /// observed (token history, partition map, recent changes).
    pub(crate) fn to_json(&self) -> Value {
        let cluster = self.cluster.as_ref().map(cluster_json);
        json!({
            "backend": self.backend,
            "now_ms": epoch_ms(self.now),
            "last_ok_ms": self.last_ok.map_or(Value::Null, epoch_ms),
            "error": self.error,
            "actions": self.actions,
            "cluster": cluster,
        })
    }
}

fn cluster_json(c: &Cluster) -> Value {
    let sessions: Vec<Value> = c
        .sessions
        .iter()
        .map(|s| {
            json!({"id": s.id.as_str(), "node": s.node.as_ref().map(|n| &n.label),
                   "this_node": s.node.as_ref().is_some_and(|n| n.this_node),
                   "age_ms": ms(s.age), "expires_in_ms": ms(s.remaining), "leases": s.leases})
        })
        .collect();
    let leases: Vec<Value> = c
        .leases
        .iter()
        .map(|l| {
            let history: Vec<Value> = l
                .history
                .iter()
                .map(|e| json!({"seen_at_ms": epoch_ms(e.at), "held": held_json(&e.held), "initial": e.initial}))
                .collect();
            json!({"name": l.name, "session": l.holder.as_str(), "token": l.token,
                   "held_for_ms": ms(l.held_for), "history": history})
        })
        .collect();
    let groups: Vec<Value> = c.groups.iter().map(group_json).collect();
    let feed: Vec<Value> = c
        .feed
        .iter()
        .map(|ch| json!({"at_ms": epoch_ms(ch.at), "lease": ch.lease, "from": held_json(&ch.from), "to": held_json(&ch.to)}))
        .collect();
    json!({"taken_at_ms": epoch_ms(c.taken_at), "store_clock": c.store_clock, "sessions": sessions,
           "leases": leases, "groups": groups, "changes": feed})
}

fn group_json(g: &GroupView) -> Value {
    let members: Vec<Value> =
        g.members.iter().map(|m| json!({"session": m.id.as_str(), "partitions": m.held})).collect();
    let partitions: Vec<Value> = g
        .cells
        .iter()
        .map(|c| {
            let holder = match &c.holder {
                Holder::Free => Value::Null,
                Holder::Member(i) => json!(g.members[*i].id.as_str()),
                Holder::Other(s) => json!(s.as_str()),
            };
            let moved = c.moved.as_ref().map(|(from, at)| json!({"from": from.as_str(), "at_ms": epoch_ms(*at)}));
            json!({"holder": holder, "moved": moved})
        })
        .collect();
    let (state, free, others) = match g.balance {
        Balance::Balanced => ("balanced", 0, 0),
        Balance::Rebalancing { free, others } => ("rebalancing", free, others),
        Balance::Unbalanced { .. } => ("unbalanced", 0, 0),
    };
    json!({"name": g.name, "members": members, "partitions": partitions, "balance": state,
           "balanced": g.balance == Balance::Balanced, "free": free, "with_non_members": others})
}

/// Leases named `group.N` of a known group count as partitions (per group); the rest are
/// listed by name.
pub(crate) fn split_partitions<'a>(leases: &'a [String], groups: &[GroupView]) -> (Vec<(String, usize)>, Vec<&'a str>) {
    let mut parts: BTreeMap<String, usize> = BTreeMap::new();
    let mut plain = Vec::new();
    for l in leases {
        match groups.iter().find(|g| partition_of(&g.name, l).is_some()) {
            Some(g) => *parts.entry(g.name.clone()).or_default() += 1,
            None => plain.push(l.as_str()),
        }
    }
    (parts.into_iter().collect(), plain)
}
