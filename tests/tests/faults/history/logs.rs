//! What the `simba-history-node` processes logged (the file format is in the binary's docs),
//! and the checks that read it: ledger fencing, failover times, partition shares, and whether
//! a stopped process held a SQLite file's write lock.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// A run of `slow` as its node logged it at the start.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub(super) mono: u128,
    pub(super) slot_ms: i64,
    pub(super) kind: String,
    pub(super) token: u64,
    pub(super) pid: u32,
    /// The node's name (the log file's).
    pub(super) node: &'static str,
}

/// An attempt of `flaky`.
#[derive(Debug, Clone)]
pub(super) struct Try {
    pub(super) slot_ms: i64,
    pub(super) attempt: u32,
    pub(super) pid: u32,
}

/// One write to the fenced ledger.
#[derive(Debug, Clone, Copy)]
pub(super) struct Write {
    pub(super) start: u128,
    pub(super) end: u128,
    pub(super) token: u64,
    pub(super) accepted: bool,
    pub(super) pid: u32,
}

/// Everything the nodes logged.
#[derive(Debug, Default)]
pub(super) struct Logs {
    pub(super) runs: Vec<Run>,
    pub(super) tries: Vec<Try>,
    pub(super) writes: Vec<Write>,
    pub(super) write_errors: Vec<String>,
    /// `(partition, token, pid)` -> ended.
    pub(super) parts: BTreeMap<(u32, u64, u32), bool>,
}

impl Logs {
    /// Reads `<name>.log` of each node name in `dir`.
    pub(super) fn read(dir: &Path, names: &[&'static str]) -> Logs {
        let mut l = Logs::default();
        for &node in names {
            let text = std::fs::read_to_string(dir.join(format!("{node}.log"))).unwrap_or_default();
            for line in text.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                let n = |i: usize| f.get(i).and_then(|s| s.parse::<u128>().ok()).unwrap_or(0);
                let pid = f.last().and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
                match f.first().copied() {
                    Some("run") if f.len() == 6 => l.runs.push(Run {
                        mono: n(1),
                        slot_ms: n(2) as i64,
                        kind: f[3].to_owned(),
                        token: n(4) as u64,
                        pid,
                        node,
                    }),
                    Some("try") if f.len() == 7 => {
                        l.tries.push(Try { slot_ms: n(2) as i64, attempt: n(4) as u32, pid })
                    }
                    Some("write") if f.len() == 6 => {
                        l.writes.push(Write { start: n(1), end: n(2), token: n(3) as u64, accepted: n(4) == 1, pid })
                    }
                    Some("write-error") => l.write_errors.push(format!("{node}: {line}")),
                    Some("part-start") => {
                        l.parts.insert((n(2) as u32, n(3) as u64, pid), false);
                    }
                    Some("part-end") => {
                        l.parts.insert((n(2) as u32, n(3) as u64, pid), true);
                    }
                    _ => {}
                }
            }
        }
        l.runs.sort_by_key(|r| r.mono);
        l.writes.sort_by_key(|w| w.start);
        l
    }

    /// Partitions held now per live pid, largest first, and whether no partition is held
    /// twice among them.
    pub(super) fn shares(&self, live: &[u32]) -> (Vec<usize>, bool) {
        let held: Vec<u32> = self
            .parts
            .iter()
            .filter(|((_, _, pid), ended)| !**ended && live.contains(pid))
            .map(|((p, _, _), _)| *p)
            .collect();
        let mut v: Vec<usize> =
            live.iter().map(|pid| self.parts.iter().filter(|((_, _, p), e)| p == pid && !**e).count()).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let distinct: std::collections::BTreeSet<u32> = held.iter().copied().collect();
        (v, distinct.len() == held.len())
    }

    /// The pid of the ledger's holder: the last accepted write's.
    pub(super) fn ledger_holder(&self) -> Option<u32> {
        self.writes.iter().filter(|w| w.accepted).max_by_key(|w| w.end).map(|w| w.pid)
    }

    /// The ledger's failover after a fault on `pid` at `at` (host monotonic ns): `None` when
    /// `pid` did not hold the ledger then (no accepted write of its own in the 600 ms before),
    /// else the time to the end of the first accepted write of a newer term (`Err` with the
    /// victim's token if there was none).
    pub(super) fn ledger_failover(&self, pid: u32, at: u128) -> Option<Result<Duration, u64>> {
        let window = Duration::from_millis(600).as_nanos();
        let last = self.writes.iter().filter(|w| w.accepted && w.pid == pid && w.end <= at && w.end + window >= at);
        let token = last.map(|w| w.token).max()?;
        Some(
            self.writes
                .iter()
                .filter(|w| w.accepted && w.token > token && w.end > at)
                .map(|w| w.end)
                .min()
                .map(|end| Duration::from_nanos((end - at) as u64))
                .ok_or(token),
        )
    }

    /// The cron job's failover after a fault on `pid` at `at`: `None` when `pid` did not run
    /// `slow`'s last scheduled slot before `at`, else the time to the first run of a newer
    /// term (`Err` with the victim's token if there was none).
    pub(super) fn cron_failover(&self, pid: u32, at: u128) -> Option<Result<Duration, u64>> {
        let last = self.runs.iter().filter(|r| r.kind == "scheduled" && r.mono <= at).max_by_key(|r| r.mono)?;
        if last.pid != pid {
            return None;
        }
        Some(
            self.runs
                .iter()
                .filter(|r| r.token > last.token && r.mono > at)
                .map(|r| r.mono)
                .min()
                .map(|m| Duration::from_nanos((m - at) as u64))
                .ok_or(last.token),
        )
    }

    /// The fencing checks: a write refused while its token was the newest the ledger had
    /// accepted (a current holder refused), and an accepted write of a token below one the
    /// ledger had already accepted (a stale holder let through). Empty when both hold.
    pub(super) fn fencing_violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let accepted: Vec<&Write> = self.writes.iter().filter(|w| w.accepted).collect();
        for w in &self.writes {
            if w.accepted {
                // Stale: a higher token was accepted (its write ended) before this one began.
                if let Some(newer) = accepted.iter().find(|a| a.token > w.token && a.end < w.start) {
                    out.push(format!("accepted a stale write {w:?} after {newer:?}"));
                }
            } else if !accepted.iter().any(|a| a.token > w.token && a.start < w.end) {
                out.push(format!("refused write {w:?} of a current holder: no higher token was written before it"));
            }
        }
        out
    }
}

/// Whether process `pid` holds the write lock of the SQLite database `db` in WAL mode: a POSIX
/// write lock on byte 120 (`WAL_WRITE_LOCK`) of its `-shm` file, as `/proc/locks` lists it. A
/// process stopped while it holds it stalls every other process's writes to the file, renewals
/// included, until it runs again (the documented SQLite case).
pub(super) fn holds_wal_write_lock(pid: u32, db: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(format!("{}-shm", db.display())) else { return false };
    let ino = meta.ino().to_string();
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `N: POSIX ADVISORY WRITE pid maj:min:inode start end`; a waiter's line has `->`.
        f.len() == 8
            && f[1] == "POSIX"
            && f[3] == "WRITE"
            && f[4] == pid.to_string()
            && f[5].rsplit(':').next() == Some(ino.as_str())
            && f[6].parse::<u64>().is_ok_and(|s| s <= 120)
            && (f[7] == "EOF" || f[7].parse::<u64>().is_ok_and(|e| e >= 120))
    })
}

/// Waits (at most 2 s) until process `pid` is stopped (`T` in `/proc/PID/stat`).
pub(super) async fn stopped(pid: u32) -> bool {
    for _ in 0..200 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last `)`.
        if stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) == Some("T") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}
