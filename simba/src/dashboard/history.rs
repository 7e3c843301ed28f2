//! What the dashboard remembers between readings: the token history of every lease and who
//! held each partition since when. The stores keep only the present, so the history is what
//! this dashboard observed since it started, bounded in size. Pure: time is passed in.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use crate::backend::{SessionId, StoreSnapshot};

/// Entries kept per lease.
pub(crate) const HISTORY_PER_LEASE: usize = 32;
/// Leases tracked at most; beyond, the longest-free ones are forgotten.
pub(crate) const MAX_LEASES: usize = 10_000;
/// Changes kept in the cluster-wide feed.
pub(crate) const FEED_LEN: usize = 100;
/// Partitions shown per group at most (a lease `group.4000000000` must not allocate a map).
pub(crate) const MAX_PARTITIONS: usize = 4096;
/// How long a partition that changed hands stays highlighted.
pub(crate) const MOVE_HIGHLIGHT: Duration = Duration::from_secs(10);

/// A term as seen: its token and holder.
pub(crate) type Held = (u64, SessionId);

/// One observed state of a lease.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// When the dashboard saw it (its own clock).
    pub(crate) at: SystemTime,
    /// The term, or `None` once the lease was free.
    pub(crate) held: Option<Held>,
    /// Seen on the first reading: already so when the dashboard started.
    pub(crate) initial: bool,
}

/// A lease changing hands (or token), for the feed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub(crate) at: SystemTime,
    pub(crate) lease: String,
    pub(crate) from: Option<Held>,
    pub(crate) to: Option<Held>,
}

/// One partition of a group.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Cell {
    pub(crate) holder: Option<SessionId>,
    /// The last holder it had (through free gaps), and when it left that holder: set when a
    /// held partition is freed or taken by another session; `None` when unchanged since the
    /// first reading, or only ever taken while free (a group starting up is no rebalance).
    pub(crate) moved: Option<(SessionId, SystemTime)>,
    /// The last session that held it.
    last: Option<SessionId>,
}

#[derive(Debug, Default)]
struct LeaseTrack {
    current: Option<Held>,
    history: VecDeque<Entry>,
    touched: Option<SystemTime>,
}

/// The memory of the dashboard.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    readings: u64,
    leases: BTreeMap<String, LeaseTrack>,
    feed: VecDeque<Change>,
    groups: BTreeMap<String, Vec<Cell>>,
}

impl Tracker {
    /// Takes in one reading made at `now`.
    pub(crate) fn observe(&mut self, snapshot: &StoreSnapshot, now: SystemTime) {
        let initial = self.readings == 0;
        self.readings += 1;
        let mut seen: BTreeMap<&str, Held> = BTreeMap::new();
        for l in &snapshot.leases {
            seen.insert(&l.name, (l.token, l.session.clone()));
        }
        for (name, held) in &seen {
            let track = self.leases.entry((*name).to_owned()).or_default();
            if track.current.as_ref() != Some(held) {
                let from = track.current.replace(held.clone());
                push_bounded(
                    &mut track.history,
                    Entry { at: now, held: Some(held.clone()), initial },
                    HISTORY_PER_LEASE,
                );
                track.touched = Some(now);
                if !initial {
                    let change = Change { at: now, lease: (*name).to_owned(), from, to: Some(held.clone()) };
                    push_bounded(&mut self.feed, change, FEED_LEN);
                }
            }
        }
        for (name, track) in &mut self.leases {
            if track.current.is_some() && !seen.contains_key(name.as_str()) {
                let from = track.current.take();
                push_bounded(&mut track.history, Entry { at: now, held: None, initial }, HISTORY_PER_LEASE);
                track.touched = Some(now);
                push_bounded(&mut self.feed, Change { at: now, lease: name.clone(), from, to: None }, FEED_LEN);
            }
        }
        self.forget_old_leases();
        self.observe_groups(snapshot, now, initial);
    }

    fn forget_old_leases(&mut self) {
        let excess = self.leases.len().saturating_sub(MAX_LEASES);
        if excess == 0 {
            return;
        }
        let mut free: Vec<(Option<SystemTime>, String)> =
            self.leases.iter().filter(|(_, t)| t.current.is_none()).map(|(n, t)| (t.touched, n.clone())).collect();
        free.sort();
        for (_, name) in free.into_iter().take(excess) {
            self.leases.remove(&name);
        }
    }

    fn observe_groups(&mut self, snapshot: &StoreSnapshot, now: SystemTime, initial: bool) {
        self.groups.retain(|name, _| snapshot.groups.iter().any(|g| &g.name == name));
        for g in &snapshot.groups {
            let mut holders: BTreeMap<usize, &SessionId> = BTreeMap::new();
            for l in &snapshot.leases {
                if let Some(i) = partition_of(&g.name, &l.name) {
                    holders.insert(i, &l.session);
                }
            }
            let cells = self.groups.entry(g.name.clone()).or_default();
            // The number of partitions is not stored: it is at least one more than the
            // highest partition ever seen held.
            if let Some((&highest, _)) = holders.last_key_value()
                && highest >= cells.len()
            {
                cells.resize(highest + 1, Cell::default());
            }
            for (i, cell) in cells.iter_mut().enumerate() {
                let holder = holders.get(&i).map(|s| (*s).clone());
                if initial {
                    cell.last.clone_from(&holder);
                    cell.holder = holder;
                    continue;
                }
                if cell.holder == holder {
                    continue;
                }
                cell.moved = match (&holder, &cell.last) {
                    // Freed: highlighted until someone takes it.
                    (None, Some(last)) => Some((last.clone(), now)),
                    // Taken from (or after) another session.
                    (Some(new), Some(last)) if new != last => Some((last.clone(), now)),
                    // Taken back by its last holder: the move it was part of still shows.
                    (Some(_), Some(_)) => cell.moved.clone(),
                    (_, None) => None,
                };
                if holder.is_some() {
                    cell.last.clone_from(&holder);
                }
                cell.holder = holder;
            }
        }
    }

    /// The observed history of `lease`, oldest first.
    pub(crate) fn history(&self, lease: &str) -> impl Iterator<Item = &Entry> {
        self.leases.get(lease).into_iter().flat_map(|t| t.history.iter())
    }

    /// Recent changes across the cluster, newest first.
    pub(crate) fn feed(&self) -> impl Iterator<Item = &Change> {
        self.feed.iter().rev()
    }

    /// The partitions of `group` as observed (index = partition).
    pub(crate) fn cells(&self, group: &str) -> &[Cell] {
        self.groups.get(group).map_or(&[], Vec::as_slice)
    }

    /// How many leases are remembered.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.leases.len()
    }
}

/// The partition `lease` is of `group` (`group.7` is partition 7), if any.
pub(crate) fn partition_of(group: &str, lease: &str) -> Option<usize> {
    let digits = lease.strip_prefix(group)?.strip_prefix('.')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse::<usize>().ok().filter(|i| *i < MAX_PARTITIONS)
}

fn push_bounded<T>(q: &mut VecDeque<T>, item: T, max: usize) {
    if q.len() == max {
        q.pop_front();
    }
    q.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{GroupInfo, LeaseInfo};

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn snap(leases: &[(&str, &str, u64)], groups: &[(&str, &[&str])]) -> StoreSnapshot {
        StoreSnapshot {
            taken_at: None,
            sessions: Vec::new(),
            leases: leases
                .iter()
                .map(|(n, s, t)| LeaseInfo {
                    name: (*n).to_owned(),
                    session: SessionId::new(*s),
                    token: *t,
                    acquired_at: None,
                })
                .collect(),
            groups: groups
                .iter()
                .map(|(n, m)| GroupInfo {
                    name: (*n).to_owned(),
                    members: m.iter().map(|s| SessionId::new(*s)).collect(),
                })
                .collect(),
        }
        .normalized()
    }

    fn held(t: u64, s: &str) -> Option<Held> {
        Some((t, SessionId::new(s)))
    }

    #[test]
    fn token_history_follows_terms_and_frees() {
        let mut t = Tracker::default();
        t.observe(&snap(&[("job", "a", 3)], &[]), at(0));
        t.observe(&snap(&[("job", "a", 3)], &[]), at(1));
        t.observe(&snap(&[], &[]), at(2));
        t.observe(&snap(&[("job", "b", 4)], &[]), at(3));
        let h: Vec<(Option<Held>, bool)> = t.history("job").map(|e| (e.held.clone(), e.initial)).collect();
        assert_eq!(h, vec![(held(3, "a"), true), (None, false), (held(4, "b"), false)]);
        let feed: Vec<(Option<Held>, Option<Held>)> = t.feed().map(|c| (c.from.clone(), c.to.clone())).collect();
        assert_eq!(
            feed,
            vec![(None, held(4, "b")), (held(3, "a"), None)],
            "newest first, the first reading is no change"
        );
    }

    #[test]
    fn history_is_bounded() {
        let mut t = Tracker::default();
        for i in 0..(HISTORY_PER_LEASE as u64 * 2) {
            t.observe(&snap(&[("job", "a", i + 1)], &[]), at(i));
        }
        assert_eq!(t.history("job").count(), HISTORY_PER_LEASE);
        assert_eq!(t.history("job").last().and_then(|e| e.held.clone()), held(HISTORY_PER_LEASE as u64 * 2, "a"));
        assert_eq!(t.feed().count(), FEED_LEN.min(HISTORY_PER_LEASE * 2 - 1));
        // Many leases, then all free: the free ones are forgotten beyond MAX_LEASES.
        let mut t = Tracker::default();
        let names: Vec<String> = (0..(MAX_LEASES + 50)).map(|i| format!("l{i}")).collect();
        let many: Vec<(&str, &str, u64)> = names.iter().map(|n| (n.as_str(), "a", 1)).collect();
        t.observe(&snap(&many, &[]), at(0));
        assert_eq!(t.tracked(), MAX_LEASES + 50, "held leases are never forgotten");
        t.observe(&snap(&[], &[]), at(1));
        assert_eq!(t.tracked(), MAX_LEASES);
        assert_eq!(t.feed().count(), FEED_LEN);
    }

    #[test]
    fn partitions_record_moves_after_the_first_reading() {
        let mut t = Tracker::default();
        let g: &[(&str, &[&str])] = &[("parts", &["a", "b"])];
        t.observe(&snap(&[("parts.0", "a", 1), ("parts.1", "a", 1), ("parts.3", "b", 1), ("other", "a", 1)], g), at(0));
        let cells = t.cells("parts");
        assert_eq!(cells.len(), 4, "partitions 0..=3 seen");
        assert_eq!(cells[2].holder, None, "partition 2 free from the start");
        assert!(cells.iter().all(|c| c.moved.is_none()), "nothing moved on the first reading");
        // Partition 1 moves a -> b; partition 2 is taken while free (no move); 3 is freed.
        t.observe(&snap(&[("parts.0", "a", 1), ("parts.1", "b", 2), ("parts.2", "a", 1)], g), at(5));
        let cells = t.cells("parts");
        assert_eq!(cells[1].holder, Some(SessionId::new("b")));
        assert_eq!(cells[1].moved, Some((SessionId::new("a"), at(5))));
        assert_eq!(cells[0].moved, None);
        assert_eq!(cells[2].moved, None, "taken while never held: no move");
        assert_eq!(cells[3].moved, Some((SessionId::new("b"), at(5))), "freed");
        // A partition freed by a crash, then taken by a survivor: a move from the dead holder.
        t.observe(
            &snap(&[("parts.0", "a", 1), ("parts.1", "b", 2), ("parts.2", "a", 1), ("parts.3", "a", 2)], g),
            at(7),
        );
        assert_eq!(t.cells("parts")[3].moved, Some((SessionId::new("b"), at(7))));
        assert_eq!(t.cells("parts")[3].holder, Some(SessionId::new("a")));
        t.observe(&snap(&[], &[]), at(6));
        assert!(t.cells("parts").is_empty(), "a group without members is gone");
    }

    #[test]
    fn partition_names() {
        assert_eq!(partition_of("parts", "parts.12"), Some(12));
        assert_eq!(partition_of("parts", "parts.0"), Some(0));
        assert_eq!(partition_of("parts", "parts.012"), None);
        assert_eq!(partition_of("parts", "parts."), None);
        assert_eq!(partition_of("parts", "partsx.1"), None);
        assert_eq!(partition_of("parts", "parts.1.2"), None);
        assert_eq!(partition_of("parts", "parts.4000000000"), None);
    }
}
