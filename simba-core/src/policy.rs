//! Schedule policies (ADR 0020, rules J11-J14), pure: the state of a job's runs and the wall
//! clock are passed in, decisions come out. The job runner of the `simba` crate asks these
//! functions and does what they answer; a schedule stored as data will ask the same ones.
//!
//! - [`on_due`]: what a slot that comes due does while runs of the job are in flight (J11,
//!   the overlap policy); [`Runs`]: the bookkeeping of those runs that both shells share.
//! - [`term_start`]: which slots of a term's start gap are missed, older than the catch-up
//!   window, or caught up (J12, with the misfire policy of R5).
//! - [`jitter`]: how long after its instant a slot starts, the same on every node (J13).
//! - [`Bounds`]: the first and the last instant a job has slots at (J14).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::slots::{next_slot, term_start_gap};

/// What a slot that comes due does while a run of the same job is in flight (J11).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Overlap {
    /// The slot does not run (`skipped_running`), the behaviour before policies existed.
    #[default]
    Skip,
    /// At most one slot waits for the runs in flight and starts when they end; a slot that
    /// comes while one already waits is skipped.
    BufferOne,
    /// The slot starts beside the runs in flight (at most [`MAX_OVERLAPPING_RUNS`] at once).
    AllowAll,
    /// The runs in flight are cancelled (recorded `cancelled`), then the slot starts.
    CancelRunning,
}

impl Overlap {
    /// The policy named `name` (`skip`, `buffer_one`, `allow_all`, `cancel_running`: the
    /// rules crate's one parser, which the macros use too), or `None`.
    pub fn from_name(name: &str) -> Option<Overlap> {
        use simba_rules::overlap::Policy;
        Some(match simba_rules::overlap::parse(name)? {
            Policy::Skip => Overlap::Skip,
            Policy::BufferOne => Overlap::BufferOne,
            Policy::AllowAll => Overlap::AllowAll,
            Policy::CancelRunning => Overlap::CancelRunning,
        })
    }

    /// The policy's name, as `overlap = "..."` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::AllowAll => "allow_all",
            Overlap::CancelRunning => "cancel_running",
        }
    }
}

/// The most runs of one job `allow_all` lets overlap; a slot that comes due beyond them is
/// skipped, so a job whose runs hang cannot pile up without bound.
pub const MAX_OVERLAPPING_RUNS: usize = 100;

/// What a slot that came due does ([`on_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Claim it and start its run now.
    Start,
    /// It does not run: recorded `skipped_running` (R9).
    Skip,
    /// It waits for the runs in flight; it is claimed and starts when the last one ends.
    Buffer,
    /// Cancel the runs in flight (each recorded `cancelled`), then claim it and start it.
    CancelThenStart,
}

/// J11: what a slot that comes due does under `overlap`, with `running` runs of the job in
/// flight and a slot already waiting (`buffered`, `buffer_one` only).
pub fn on_due(overlap: Overlap, running: usize, buffered: bool) -> Due {
    if running == 0 && !buffered {
        return Due::Start;
    }
    match overlap {
        Overlap::Skip => Due::Skip,
        Overlap::BufferOne if buffered => Due::Skip,
        Overlap::BufferOne => Due::Buffer,
        Overlap::AllowAll if running < MAX_OVERLAPPING_RUNS => Due::Start,
        Overlap::AllowAll => Due::Skip,
        Overlap::CancelRunning => Due::CancelThenStart,
    }
}

/// J11: whether the waiting slot starts now that `running` runs are in flight.
pub fn start_buffered(running: usize, buffered: bool) -> bool {
    buffered && running == 0
}

/// J11: the runs of one job in one term as the overlap policy counts them, and the slots that
/// wait or were skipped beside them. One bookkeeping for code-defined jobs (the runner polls its
/// runs in place) and schedules stored as data (a partition's worker spawns them): the shell
/// starts, cancels and awaits what this answers, and tells it when a run starts and ends.
/// `S` is the shell's slot.
#[derive(Debug)]
pub struct Runs<S> {
    overlap: Overlap,
    running: usize,
    /// The slot waiting for the runs in flight (`buffer_one`), or the one that replaces them
    /// once they ended (`cancel_running`), with its instant.
    waiting: Option<(S, DateTime<Utc>)>,
    /// Slots skipped while runs were in flight, recorded once (R9) when the last one ends.
    skipped: Vec<DateTime<Utc>>,
    /// The newest slot that ran, which skipped slots passed behind.
    last_ran: Option<DateTime<Utc>>,
}

/// What the shell does with a slot that came due ([`Runs::due`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Step<S> {
    /// Claim it and start its run now (then [`Runs::started`]).
    Start(S),
    /// A run-now request that would be skipped: not claimed, it stays pending in the store.
    Wait,
    /// Skipped: recorded `skipped_running` with the others when the last run ends.
    Skipped,
    /// It waits: [`Runs::ended`] hands it back when the last run ended.
    Buffered,
    /// Cancel the runs in flight (each recorded `cancelled`); the slot waits for their end,
    /// when [`Runs::ended`] hands it back to start.
    Cancel,
}

/// What the shell does once the last run in flight ended ([`Runs::ended`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Quiet<S> {
    /// The slots skipped while runs were in flight, oldest first: one `skipped_running` record.
    pub skipped: Vec<DateTime<Utc>>,
    /// The newest slot that ran, which they passed behind (`None` when none was skipped).
    pub behind: Option<DateTime<Utc>>,
    /// The waiting slot, to claim and start now.
    pub next: Option<S>,
}

impl<S> Runs<S> {
    /// No run in flight, under `overlap`.
    pub fn new(overlap: Overlap) -> Self {
        Runs { overlap, running: 0, waiting: None, skipped: Vec::new(), last_ran: None }
    }

    /// The overlap policy it follows.
    pub fn overlap(&self) -> Overlap {
        self.overlap
    }

    /// How many runs are in flight.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Nothing in flight and nothing waiting.
    pub fn is_idle(&self) -> bool {
        self.running == 0 && self.waiting.is_none()
    }

    /// `slot`, at `at`, came due (`manual`: a run-now request): the step the shell takes
    /// ([`on_due`]). A slot that replaces another still waiting for cancelled runs to end
    /// leaves that one skipped.
    pub fn due(&mut self, slot: S, at: DateTime<Utc>, manual: bool) -> Step<S> {
        match on_due(self.overlap, self.running, self.waiting.is_some()) {
            Due::Start => Step::Start(slot),
            Due::Skip if manual => Step::Wait,
            Due::Skip => {
                self.skipped.push(at);
                Step::Skipped
            }
            Due::Buffer => {
                self.waiting = Some((slot, at));
                Step::Buffered
            }
            Due::CancelThenStart => {
                if let Some((_, old)) = self.waiting.replace((slot, at)) {
                    self.skipped.push(old);
                }
                Step::Cancel
            }
        }
    }

    /// The shell started a run (of a slot [`due`](Self::due) or [`ended`](Self::ended) handed it).
    pub fn started(&mut self) {
        self.running += 1;
    }

    /// A run of the slot at `at` ended (`ran`: false when its claim was refused). Once none is
    /// in flight: the skipped slots to record and, if `start_next` (false when the term is
    /// closing: the next holder finds the waiting slot unclaimed), the waiting one to start.
    pub fn ended(&mut self, at: DateTime<Utc>, ran: bool, start_next: bool) -> Option<Quiet<S>> {
        self.running = self.running.saturating_sub(1);
        if ran && self.last_ran.is_none_or(|l| l < at) {
            self.last_ran = Some(at);
        }
        if self.running > 0 {
            return None;
        }
        let skipped = std::mem::take(&mut self.skipped);
        let behind = if skipped.is_empty() { None } else { self.last_ran };
        let waiting = start_buffered(self.running, self.waiting.is_some()) && start_next;
        let next = if waiting { self.waiting.take().map(|(s, _)| s) } else { None };
        Some(Quiet { skipped, behind, next })
    }

    /// The newest slot that ran since the last call (`skip`: the loop reports the slots it
    /// passed behind it, R9).
    pub fn take_last_ran(&mut self) -> Option<DateTime<Utc>> {
        self.last_ran.take()
    }
}

/// The slots of a term's start gap, split by the catch-up window (J12) and the bounds (J14).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermStart {
    /// Older than the catch-up window: recorded `missed`, saying so. Oldest first.
    pub expired: Vec<DateTime<Utc>>,
    /// Within the window, not run: recorded `missed`. Oldest first.
    pub missed: Vec<DateTime<Utc>>,
    /// The one slot to run for them (misfire `run_once`, within the window), as `caught_up`.
    pub catch_up: Option<DateTime<Utc>>,
}

/// J12 (with R5's misfire rule, [`term_start_gap`]): at a term's start at wall-clock `now`,
/// with the job's last claimed slot `last`: the slots since then that nobody ran, those older
/// than `window` (at `now`) apart, and the slot to catch up under `run_once`, which must be
/// within the window (a job that never ran missed nothing: its catch-up slot out of the window
/// is dropped, not recorded). Slots outside `bounds` were never slots and are left out (J14).
pub fn term_start(
    cron: &Cron,
    tz: Tz,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    run_once: bool,
    window: Option<Duration>,
    bounds: &Bounds,
) -> TermStart {
    let (gap, catch_up) = term_start_gap(cron, tz, last, now, run_once);
    split_gap((gap, catch_up), last.is_some(), now, window, bounds)
}

/// J12 and J14 applied to a term's start gap (`gap`, oldest first, and the slot to catch up
/// under `run_once`) at wall-clock `now`: the slots outside `bounds` left out, those older than
/// `window` apart, and the catch-up slot kept only within the window. `ran_before`: whether
/// the job had run (one that never ran missed nothing, so its catch-up slot out of the window
/// is dropped, not recorded). One rule for code-defined jobs ([`term_start`]) and schedules
/// stored as data (`schedules::term_start_gap`).
pub fn split_gap(
    (gap, catch_up): (Vec<DateTime<Utc>>, Option<DateTime<Utc>>),
    ran_before: bool,
    now: DateTime<Utc>,
    window: Option<Duration>,
    bounds: &Bounds,
) -> TermStart {
    let oldest = window.and_then(|w| chrono::Duration::from_std(w).ok()).map(|w| now - w);
    let expired = |s: &DateTime<Utc>| oldest.is_some_and(|o| *s < o);
    let mut out = TermStart::default();
    // The catch-up slot out of the window was missed like the others, except for a job that
    // never ran, which missed nothing (R5).
    let dropped = catch_up.filter(|s| ran_before && expired(s));
    for s in gap.into_iter().chain(dropped).filter(|s| bounds.contains(*s)) {
        if expired(&s) { out.expired.push(s) } else { out.missed.push(s) }
    }
    out.catch_up = catch_up.filter(|s| !expired(s) && bounds.contains(*s));
    out
}

/// FNV-1a, 64 bits: a hash that is the same on every node, build and platform (the standard
/// library's hasher is seeded per process); one function for the jitter here and the
/// schedules' partitions. Frozen by tests: changing it moves every slot's start.
pub use crate::hash::fnv1a64;

/// J13: how long after its instant slot `slot_ms` of job `job` starts: a whole number of
/// milliseconds from 0 to `max`, fixed by a hash of the job's name and the slot (every node
/// computes the same instant), and always less than `until_next` (the time from this slot to
/// the next one), so a jittered slot never starts after the next slot's instant.
pub fn jitter(job: &str, slot_ms: i64, max: Duration, until_next: Option<Duration>) -> Duration {
    let cap = until_next.map_or(u128::MAX, |d| d.as_millis().saturating_sub(1));
    let bound = max.as_millis().min(cap);
    if bound == 0 {
        return Duration::ZERO;
    }
    let mut bytes = Vec::with_capacity(job.len() + 9);
    bytes.extend_from_slice(job.as_bytes());
    // A separator no job name holds, so `ab` + slot never hashes as `a` + another slot.
    bytes.push(0xff);
    bytes.extend_from_slice(&slot_ms.to_be_bytes());
    let ms = u128::from(fnv1a64(&bytes)) % (bound + 1);
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// J14: the instants a job has slots between, both included: none before `start`, none after
/// `end`. A slot outside is not a slot: it neither runs nor is recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// The first instant a slot may be at.
    pub start: Option<DateTime<Utc>>,
    /// The last instant a slot may be at.
    pub end: Option<DateTime<Utc>>,
}

impl Bounds {
    /// Whether `slot` is within the bounds.
    pub fn contains(&self, slot: DateTime<Utc>) -> bool {
        self.start.is_none_or(|s| slot >= s) && self.end.is_none_or(|e| slot <= e)
    }

    /// Whether every slot at or after `slot` is past the end.
    pub fn ended(&self, slot: DateTime<Utc>) -> bool {
        self.end.is_some_and(|e| slot > e)
    }

    /// The cron slot to wait for instead of `next`: the first slot at or after the start when
    /// `next` is before it, `None` when it is past the end.
    pub fn next_cron(&self, cron: &Cron, tz: Tz, next: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        let next = match (next, self.start) {
            (Some(n), Some(s)) if n < s => next_slot(cron, tz, s - chrono::Duration::milliseconds(1)),
            (n, _) => n,
        }?;
        (!self.ended(next)).then_some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn cron(expr: &str) -> Cron {
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Required)
            .build()
            .parse(expr)
            .expect("cron")
    }

    /// J11: with nothing in flight every policy starts the slot; with a run in flight skip
    /// skips, buffer_one buffers one slot and skips the next, allow_all starts up to the cap,
    /// cancel_running cancels; a buffered slot starts when the last run ends.
    #[test]
    fn j11_overlap_decisions() {
        use Overlap::*;
        for o in [Skip, BufferOne, AllowAll, CancelRunning] {
            assert_eq!(on_due(o, 0, false), Due::Start, "{o:?}");
        }
        assert_eq!(on_due(Skip, 1, false), Due::Skip);
        assert_eq!(on_due(BufferOne, 1, false), Due::Buffer);
        assert_eq!(on_due(BufferOne, 1, true), Due::Skip, "one waits at most");
        assert_eq!(on_due(BufferOne, 0, true), Due::Skip, "the waiting slot goes first");
        assert_eq!(on_due(AllowAll, 3, false), Due::Start);
        assert_eq!(on_due(AllowAll, MAX_OVERLAPPING_RUNS - 1, false), Due::Start);
        assert_eq!(on_due(AllowAll, MAX_OVERLAPPING_RUNS, false), Due::Skip);
        assert_eq!(on_due(CancelRunning, 1, false), Due::CancelThenStart);
        assert!(start_buffered(0, true));
        assert!(!start_buffered(1, true) && !start_buffered(0, false));
        let names: Vec<&str> = [Skip, BufferOne, AllowAll, CancelRunning].iter().map(|o| o.as_str()).collect();
        assert_eq!(names, ["skip", "buffer_one", "allow_all", "cancel_running"]);
        for o in [Skip, BufferOne, AllowAll, CancelRunning] {
            assert_eq!(Overlap::from_name(o.as_str()), Some(o), "the name reads back");
        }
        assert_eq!(Overlap::from_name("replace"), None);
    }

    /// J11: the bookkeeping of runs in flight. buffer_one: one slot waits and starts when the
    /// last run ends, the next is skipped and recorded behind the newest that ran; skip: slots
    /// skipped while a run lasts are handed back once, with the slot they passed behind;
    /// cancel_running: the new slot waits for the cancelled runs, a second one replaces it (the
    /// first skipped); a closing term leaves the waiting slot; a manual request waits, unrecorded.
    #[test]
    fn j11_runs_in_flight_bookkeeping() {
        let t = |s: u32| utc(&format!("2026-12-02T10:00:{s:02}Z"));
        let mut r = Runs::new(Overlap::BufferOne);
        assert_eq!(r.due(1, t(1), false), Step::Start(1));
        r.started();
        assert_eq!(r.due(2, t(2), false), Step::Buffered);
        assert_eq!(r.due(3, t(3), false), Step::Skipped);
        assert!(!r.is_idle());
        let q = r.ended(t(1), true, true);
        assert_eq!(q, Some(Quiet { skipped: vec![t(3)], behind: Some(t(1)), next: Some(2) }));
        r.started();
        assert_eq!(r.ended(t(2), true, true), Some(Quiet { skipped: vec![], behind: None, next: None }));
        assert!(r.is_idle());

        let mut r = Runs::new(Overlap::Skip);
        assert_eq!(r.due("a", t(1), false), Step::Start("a"));
        r.started();
        assert_eq!(r.due("b", t(2), false), Step::Skipped);
        assert_eq!(r.due("m", t(2), true), Step::Wait, "a run-now request waits, unrecorded");
        assert_eq!(
            r.ended(t(1), false, true),
            Some(Quiet { skipped: vec![t(2)], behind: None, next: None }),
            "refused: nothing ran"
        );
        assert_eq!(r.take_last_ran(), None);

        let mut r = Runs::new(Overlap::AllowAll);
        for i in 0..3 {
            assert_eq!(r.due(i, t(i), false), Step::Start(i));
            r.started();
        }
        assert_eq!((r.running(), r.ended(t(0), true, true)), (3, None), "two still in flight");

        let mut r = Runs::new(Overlap::CancelRunning);
        r.started();
        assert_eq!(r.due(5, t(5), false), Step::Cancel);
        assert_eq!(r.due(6, t(6), false), Step::Cancel, "a newer slot replaces the waiting one");
        assert_eq!(r.ended(t(4), true, true), Some(Quiet { skipped: vec![t(5)], behind: Some(t(4)), next: Some(6) }));

        let mut r = Runs::new(Overlap::BufferOne);
        r.started();
        assert_eq!(r.due(2, t(2), false), Step::Buffered);
        assert_eq!(r.ended(t(1), true, false).map(|q| q.next), Some(None), "closing: the waiting slot is left");
        assert_eq!(r.take_last_ran(), Some(t(1)));
    }

    /// J12: at a term's start at 10:10:30, last claimed 10:00, one slot a minute, a window of
    /// 5 minutes: 10:01-10:05 are older than 10:05:30 (expired), 10:06-10:10 are in the window;
    /// run_once runs 10:10; a window shorter than the time since the newest slot leaves
    /// nothing to catch up.
    #[test]
    fn j12_catch_up_window_splits_the_gap() {
        let c = cron("0 * * * * *");
        let (now, last) = (utc("2026-12-02T10:10:30Z"), Some(utc("2026-12-02T10:00:00Z")));
        let all = Bounds::default();
        let minute = |m: u32| utc(&format!("2026-12-02T10:{m:02}:00Z"));
        let window = Some(Duration::from_secs(300));
        let t = term_start(&c, Tz::UTC, last, now, true, window, &all);
        assert_eq!(t.expired, (1..=5).map(minute).collect::<Vec<_>>());
        assert_eq!(t.missed, (6..=9).map(minute).collect::<Vec<_>>());
        assert_eq!(t.catch_up, Some(minute(10)));
        let t = term_start(&c, Tz::UTC, last, now, false, window, &all);
        assert_eq!((t.expired.len(), t.missed.len(), t.catch_up), (5, 5, None), "skip: all missed");
        let t = term_start(&c, Tz::UTC, last, now, true, Some(Duration::from_secs(20)), &all);
        assert_eq!((t.expired.len(), t.missed, t.catch_up), (10, vec![], None), "10:10 is 30 s old");
        let t = term_start(&c, Tz::UTC, last, now, true, None, &all);
        assert_eq!((t.expired.len(), t.missed.len(), t.catch_up), (0, 9, Some(minute(10))), "no window: R5");
        // A job that never ran: run_once tries the latest slot, within the window only.
        let t = term_start(&c, Tz::UTC, None, now, true, Some(Duration::from_secs(20)), &all);
        assert_eq!(t, TermStart::default());
        // Bounds: slots before the start were never slots.
        let b = Bounds { start: Some(minute(8)), end: None };
        let t = term_start(&c, Tz::UTC, last, now, true, window, &b);
        assert_eq!((t.expired, t.missed, t.catch_up), (vec![], vec![minute(8), minute(9)], Some(minute(10))));
    }

    /// J13: frozen values (a change moves every jittered slot on every node); bounded by the
    /// maximum and below the time to the next slot; spread over the range.
    #[test]
    fn j13_jitter_is_a_frozen_hash_bounded_by_max_and_the_next_slot() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let max = Duration::from_secs(10);
        let slot = 1_780_000_000_000;
        assert_eq!(jitter("report", slot, max, None), jitter("report", slot, max, None), "the same on every call");
        let frozen: Vec<u64> =
            (0..4).map(|i| jitter("report", slot + i * 60_000, max, None).as_millis() as u64).collect();
        assert_eq!(frozen, FROZEN);
        assert_eq!(jitter("report", slot, Duration::ZERO, None), Duration::ZERO);
        assert_eq!(jitter("report", slot, max, Some(Duration::from_millis(1))), Duration::ZERO);
        for i in 0..1000 {
            let j = jitter("report", slot + i * 1000, max, Some(Duration::from_secs(2)));
            assert!(j < Duration::from_secs(2), "{j:?}: never at or past the next slot");
            assert!(jitter("x", slot + i, max, None) <= max);
        }
        let spread: std::collections::BTreeSet<u64> =
            (0..1000).map(|i| jitter("report", slot + i * 1000, max, None).as_secs()).collect();
        assert_eq!(spread.len(), 10, "every second of 0..10 s is used: {spread:?}");
        assert_ne!(jitter("report", slot, max, None), jitter("reports", slot, max, None));
    }

    /// The jitter of `report`'s four slots from 1_780_000_000_000 a minute apart, at most 10 s.
    const FROZEN: [u64; 4] = [7082, 641, 383, 1451];

    /// J14: no slot before the start, none after the end; the next cron slot moves to the
    /// first at or after the start, and there is none past the end.
    #[test]
    fn j14_bounds() {
        let c = cron("0 * * * * *");
        let b = Bounds { start: Some(utc("2026-12-02T10:00:30Z")), end: Some(utc("2026-12-02T10:03:00Z")) };
        assert!(!b.contains(utc("2026-12-02T10:00:00Z")));
        assert!(b.contains(utc("2026-12-02T10:01:00Z")) && b.contains(utc("2026-12-02T10:03:00Z")));
        assert!(!b.contains(utc("2026-12-02T10:04:00Z")) && b.ended(utc("2026-12-02T10:04:00Z")));
        let next = |n: &str| b.next_cron(&c, Tz::UTC, Some(utc(n)));
        assert_eq!(next("2026-12-02T09:00:00Z"), Some(utc("2026-12-02T10:01:00Z")), "the first after the start");
        assert_eq!(next("2026-12-02T10:02:00Z"), Some(utc("2026-12-02T10:02:00Z")));
        assert_eq!(next("2026-12-02T10:04:00Z"), None, "past the end");
        assert_eq!(b.next_cron(&c, Tz::UTC, None), None);
        let exact = Bounds { start: Some(utc("2026-12-02T10:00:00Z")), end: None };
        assert_eq!(
            exact.next_cron(&c, Tz::UTC, Some(utc("2026-12-02T09:00:00Z"))),
            Some(utc("2026-12-02T10:00:00Z")),
            "a start on a slot includes it"
        );
        assert!(Bounds::default().contains(utc("1970-01-01T00:00:00Z")));
    }
}
