//! `simba status`: what the backend's snapshot says, as tables or JSON.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use simba::backend::{Backend, BackendUrl, StoreSnapshot};

use crate::json;
use crate::output::{EXIT_OK, Failure, Styling, finish};

/// A snapshot with what operators ask of it: leases per session, partitions per member.
pub(super) struct View {
    backend: String,
    /// The namespace the snapshot was read in; `None` for the default one.
    namespace: Option<String>,
    snapshot: StoreSnapshot,
    /// The store's clock, else the local one: the reference of "held for".
    now: SystemTime,
}

/// Where `status` and `watch` read: the backend, its URL, the namespace, the time limit.
pub(crate) struct Read<'a, B> {
    pub(crate) backend: &'a B,
    pub(crate) url: &'a BackendUrl,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) timeout: Duration,
}

impl<B: Backend> Read<'_, B> {
    /// One snapshot, as a view.
    pub(crate) async fn view(&self) -> Result<View, Failure> {
        View::read(self.backend, self.url, self.namespace, self.timeout).await
    }
}

/// `simba watch`: the status every `interval`, `count` times or until Ctrl-C. The screen is
/// cleared before each refresh only where `styling` allows it (a terminal); elsewhere the
/// refreshes follow each other, a blank line apart, and JSON is one object per line.
pub(crate) async fn watch<B: Backend>(
    read: &Read<'_, B>,
    interval: Duration,
    count: Option<u64>,
    json: bool,
    styling: Styling,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    let mut n = 0u64;
    loop {
        let view = read.view().await;
        let written = match &view {
            Ok(v) if json => write(v, true, out),
            Ok(v) if styling.redraw => write!(out, "\x1b[2J\x1b[H").and_then(|()| write(v, false, out)),
            Ok(v) if n > 0 => writeln!(out).and_then(|()| write(v, false, out)),
            Ok(v) => write(v, false, out),
            Err(e) => writeln!(err, "simba: {} (retrying)", e.message),
        };
        if let Err(e) = written.and_then(|()| out.flush()) {
            // A closed pipe ends the watch quietly; any other write failure is reported.
            return finish(Err(e));
        }
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(EXIT_OK);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(EXIT_OK),
        }
    }
}

struct GroupView<'a> {
    name: &'a str,
    /// Member, partitions it holds.
    members: Vec<(&'a str, usize)>,
    /// Partition leases held by a session that is not a member (handing over).
    others: usize,
}

impl View {
    pub(super) async fn read(
        backend: &impl Backend,
        url: &BackendUrl,
        namespace: Option<&str>,
        timeout: Duration,
    ) -> Result<View, Failure> {
        let shown = url.redacted().to_owned();
        let snapshot = match tokio::time::timeout(timeout, backend.inspect()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(Failure::unreachable(format!("cannot read the backend at {shown}: {}", super::chain(&e))));
            }
            Err(_) => {
                return Err(Failure::unreachable(format!(
                    "cannot read the backend at {shown}: no answer within {timeout:?}"
                )));
            }
        };
        let now = snapshot.taken_at.unwrap_or_else(SystemTime::now);
        Ok(View { backend: shown, namespace: namespace.map(str::to_owned), snapshot, now })
    }

    fn leases_of(&self, session: &str) -> usize {
        self.snapshot.leases.iter().filter(|l| l.session.as_str() == session).count()
    }

    fn held_for(&self, at: Option<SystemTime>) -> Option<Duration> {
        at.map(|at| self.now.duration_since(at).unwrap_or_default())
    }

    fn groups(&self) -> Vec<GroupView<'_>> {
        self.snapshot
            .groups
            .iter()
            .map(|g| {
                let prefix = format!("{}.", g.name);
                let mut held: BTreeMap<&str, usize> = BTreeMap::new();
                for l in &self.snapshot.leases {
                    let partition = l.name.strip_prefix(&prefix);
                    if partition.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
                        *held.entry(l.session.as_str()).or_default() += 1;
                    }
                }
                let members: Vec<(&str, usize)> =
                    g.members.iter().map(|m| (m.as_str(), held.remove(m.as_str()).unwrap_or(0))).collect();
                GroupView { name: &g.name, members, others: held.values().sum() }
            })
            .collect()
    }
}

impl GroupView<'_> {
    fn spread(&self) -> (usize, usize) {
        let counts = self.members.iter().map(|(_, n)| *n);
        (counts.clone().min().unwrap_or(0), counts.max().unwrap_or(0))
    }

    /// Balanced when every member holds its share: counts differ by at most one and no
    /// partition sits with a non-member.
    fn balanced(&self) -> bool {
        let (min, max) = self.spread();
        max - min <= 1 && self.others == 0
    }
}

/// `12.3s`, `4m05s`, `2h10m`; `-` when unknown.
pub(super) fn human(d: Option<Duration>) -> String {
    let Some(d) = d else { return "-".to_owned() };
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// A table with left-aligned columns separated by two spaces.
fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

pub(super) fn write(view: &View, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    if json {
        let value = serde_json::to_string(&to_json(view)).map_err(std::io::Error::other)?;
        return writeln!(out, "{value}");
    }
    let s = &view.snapshot;
    let clock = match s.taken_at {
        Some(_) => "the backend's clock",
        None => "this machine's clock (the backend does not tell its own)",
    };
    match &view.namespace {
        Some(ns) => writeln!(out, "backend: {}  namespace: {ns}  (times on {clock})", view.backend)?,
        None => writeln!(out, "backend: {}  (times on {clock})", view.backend)?,
    }
    writeln!(out)?;
    writeln!(out, "SESSIONS ({})", s.sessions.len())?;
    let rows: Vec<Vec<String>> = s
        .sessions
        .iter()
        .map(|x| vec![x.id.to_string(), human(x.age), human(x.remaining), view.leases_of(x.id.as_str()).to_string()])
        .collect();
    table(out, &["ID", "AGE", "EXPIRES IN", "LEASES"], &rows)?;
    writeln!(out)?;
    writeln!(out, "LEASES ({})", s.leases.len())?;
    let rows: Vec<Vec<String>> = s
        .leases
        .iter()
        .map(|l| vec![l.name.clone(), l.session.to_string(), l.token.to_string(), human(view.held_for(l.acquired_at))])
        .collect();
    table(out, &["NAME", "HOLDER", "TOKEN", "HELD FOR"], &rows)?;
    let groups = view.groups();
    writeln!(out)?;
    writeln!(out, "GROUPS ({})", groups.len())?;
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let width = distinct_prefix(g.members.iter().map(|(m, _)| *m));
            let per: Vec<String> = g.members.iter().map(|(m, n)| format!("{}={n}", prefix(m, width))).collect();
            let (min, max) = g.spread();
            let balance = if g.balanced() { "balanced" } else { "unbalanced" };
            let mut balance = format!("{balance} ({min}..{max} per member)");
            if g.others > 0 {
                balance.push_str(&format!(", {} with non-members", g.others));
            }
            vec![g.name.to_owned(), g.members.len().to_string(), per.join(" "), balance]
        })
        .collect();
    table(out, &["GROUP", "MEMBERS", "PARTITIONS PER MEMBER", "BALANCE"], &rows)
}

/// The first `n` characters of a session id.
fn prefix(id: &str, n: usize) -> &str {
    id.char_indices().nth(n).map_or(id, |(i, _)| &id[..i])
}

/// The shortest prefix length, at least 8, that tells all `ids` apart (ZooKeeper's session ids
/// share their first characters, random ids do not).
fn distinct_prefix<'a>(ids: impl Iterator<Item = &'a str> + Clone) -> usize {
    let longest = ids.clone().map(|id| id.chars().count()).max().unwrap_or(0);
    (8..longest)
        .find(|&n| {
            let mut seen = std::collections::HashSet::new();
            ids.clone().all(|id| seen.insert(prefix(id, n)))
        })
        .unwrap_or(longest)
}

/// `simba status --json`, and each line of `simba watch --json`: times in milliseconds.
#[derive(Serialize)]
struct StatusJson<'a> {
    schema: u32,
    backend: &'a str,
    /// `None` for the default namespace.
    namespace: Option<&'a str>,
    /// The store's clock at the snapshot (epoch ms), where it tells it.
    taken_at_ms: Option<u64>,
    sessions: Vec<SessionJson<'a>>,
    leases: Vec<LeaseJson<'a>>,
    groups: Vec<GroupJson<'a>>,
}

#[derive(Serialize)]
struct SessionJson<'a> {
    id: &'a str,
    age_ms: Option<u64>,
    expires_in_ms: Option<u64>,
    leases: usize,
}

#[derive(Serialize)]
struct LeaseJson<'a> {
    name: &'a str,
    session: &'a str,
    token: u64,
    acquired_at_ms: Option<u64>,
    held_for_ms: Option<u64>,
}

#[derive(Serialize)]
struct GroupJson<'a> {
    name: &'a str,
    members: Vec<MemberJson<'a>>,
    partitions_with_non_members: usize,
    balanced: bool,
}

#[derive(Serialize)]
struct MemberJson<'a> {
    session: &'a str,
    partitions: usize,
}

fn ms(d: Option<Duration>) -> Option<u64> {
    d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn epoch_ms(t: Option<SystemTime>) -> Option<u64> {
    ms(t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()))
}

fn to_json(view: &View) -> StatusJson<'_> {
    let s = &view.snapshot;
    let sessions = s
        .sessions
        .iter()
        .map(|x| SessionJson {
            id: x.id.as_str(),
            age_ms: ms(x.age),
            expires_in_ms: ms(x.remaining),
            leases: view.leases_of(x.id.as_str()),
        })
        .collect();
    let leases = s
        .leases
        .iter()
        .map(|l| LeaseJson {
            name: &l.name,
            session: l.session.as_str(),
            token: l.token,
            acquired_at_ms: epoch_ms(l.acquired_at),
            held_for_ms: ms(view.held_for(l.acquired_at)),
        })
        .collect();
    let groups = view
        .groups()
        .into_iter()
        .map(|g| GroupJson {
            name: g.name,
            balanced: g.balanced(),
            partitions_with_non_members: g.others,
            members: g.members.iter().map(|(m, n)| MemberJson { session: m, partitions: *n }).collect(),
        })
        .collect();
    StatusJson {
        schema: json::SCHEMA,
        backend: &view.backend,
        namespace: view.namespace.as_deref(),
        taken_at_ms: epoch_ms(s.taken_at),
        sessions,
        leases,
        groups,
    }
}

#[cfg(test)]
mod tests {
    use super::{distinct_prefix, prefix};

    #[test]
    fn member_labels_are_distinct() {
        let random = ["1468c271f09684e8", "283c0a3a8e8a650e"];
        assert_eq!(distinct_prefix(random.iter().copied()), 8);
        // ZooKeeper session ids of one server share their first characters.
        let zk = ["0x1000016b507001d", "0x1000016b507001f"];
        let n = distinct_prefix(zk.iter().copied());
        assert_ne!(prefix(zk[0], n), prefix(zk[1], n));
        assert_eq!(n, 17);
        assert_eq!(distinct_prefix(std::iter::empty()), 0);
    }
}
