//! The slot arithmetic of schedules, pure: the wall clock and the time elapsed on the
//! monotonic clock are passed in, never read. A slot is named by its wall-clock instant (in
//! milliseconds, as the jobs store records it); cron slots are whole seconds in a time zone
//! (croner and chrono-tz handle DST), fixed-rate slots sit on a grid from the term's start.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// At most this many `missed` or `skipped_running` records are written for one gap.
pub const MAX_GAP_RECORDS: usize = 100;

/// How far [`next_slot`] and [`previous_slot`] step past a repeated local hour, second by
/// second: the largest DST shift (Antarctica/Troll's two hours) plus one hour.
const MAX_REPEAT_STEPS: i64 = 3 * 3600;

/// The first slot strictly after `after`, in UTC. Slots are instants: a local time that
/// occurs twice at a DST fall-back runs at its first occurrence only (croner), one skipped at
/// a spring-forward runs at the first valid instant after it.
///
/// Inside the repeated hour croner answers a local time's first occurrence, which can be
/// before `after` (America/St_Johns fell back at 00:01 local on 1 November 2009: after
/// 02:31 UTC, `0 6 * * * *` answered 01:36 UTC). Such an answer already ran or was missed, so
/// the search moves on a second at a time until it finds a slot after `after`: a schedule never
/// goes back in time.
pub fn next_slot(cron: &Cron, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Slots are whole seconds: croner keeps the sub-second part of its input.
    let after = after.with_nanosecond(0)?;
    (0..MAX_REPEAT_STEPS).find_map(|step| {
        let from = after + chrono::Duration::seconds(step);
        let next = cron.find_next_occurrence(&from.with_timezone(&tz), false).ok()?.with_timezone(&Utc);
        (next > after).then_some(next)
    })
}

/// The latest slot at or before `at`, in UTC (never after it, by the same search as
/// [`next_slot`], backwards).
pub fn previous_slot(cron: &Cron, tz: Tz, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = at.with_nanosecond(0)?;
    (0..MAX_REPEAT_STEPS).find_map(|step| {
        let from = at - chrono::Duration::seconds(step);
        let prev = cron.find_previous_occurrence(&from.with_timezone(&tz), true).ok()?.with_timezone(&Utc);
        (prev <= at).then_some(prev)
    })
}

/// The slots strictly between `from` and `to`, oldest first, at most the newest
/// [`MAX_GAP_RECORDS`].
pub fn slots_between(cron: &Cron, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut at = to - chrono::Duration::milliseconds(1);
    while out.len() < MAX_GAP_RECORDS {
        // `previous_slot` is at or before `at`, so before `to`.
        let Some(s) = previous_slot(cron, tz, at) else { break };
        if s <= from {
            break;
        }
        out.push(s);
        at = s - chrono::Duration::seconds(1);
    }
    out.reverse();
    out
}

/// At the start of a term, with the job's last claimed slot `last` (`None`: it never ran):
/// the slots nobody ran since (`missed`, oldest first), and the one slot to run for them when
/// the misfire policy is `run_once` (not itself reported missed). A job that never ran has
/// missed nothing; `run_once` then tries the latest slot at or before `now`.
pub fn term_start_gap(
    cron: &Cron,
    tz: Tz,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    run_once: bool,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let Some(last) = last else {
        return (Vec::new(), if run_once { previous_slot(cron, tz, now) } else { None });
    };
    let mut gap = slots_between(cron, tz, last, now + chrono::Duration::milliseconds(1));
    let catch_up = if run_once { gap.pop() } else { None };
    (gap, catch_up)
}

/// How long until wall-clock instant `t`, zero when it has passed.
pub fn until(t: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (t - now).to_std().unwrap_or(Duration::ZERO)
}

/// `period * k`, exact for any `k`.
pub fn grid(period: Duration, k: u128) -> Duration {
    let nanos = period.as_nanos().saturating_mul(k);
    Duration::new(u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX), (nanos % 1_000_000_000) as u32)
}

fn wall(start: DateTime<Utc>, offset: Duration) -> DateTime<Utc> {
    start + chrono::Duration::from_std(offset).unwrap_or_default()
}

/// Cron slots on one node during one term: never the same slot twice, even if the wall clock
/// steps back, and the slots that passed while a run was in flight are reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CronSlots {
    last: Option<DateTime<Utc>>,
    /// Before any slot is taken: the first slot is the first after this instant.
    start: Option<DateTime<Utc>>,
}

impl CronSlots {
    /// Slots after `last` (the caught-up slot of the term's start, if any); without one, the
    /// first slot after the wall clock at the first [`next`](Self::next).
    pub fn after(last: Option<DateTime<Utc>>) -> Self {
        CronSlots { last, start: None }
    }

    /// Slots of a term whose misfire gap ([`term_start_gap`]) was read at wall-clock `start`:
    /// after `caught_up` when the term began with a catch-up run, otherwise from the first
    /// slot after `start`, even if it passed while the term started (reading the gap takes a
    /// store round trip). The gap holds the slots up to `start`, so no slot falls between
    /// the gap and the first wait; a slot that passed meanwhile is due at once.
    pub fn at_term_start(start: DateTime<Utc>, caught_up: Option<DateTime<Utc>>) -> Self {
        CronSlots { last: caught_up, start: Some(start) }
    }

    /// At wall-clock `now`: the slots that passed since the last one taken, unrun
    /// (`skipped_running`, oldest first, at most [`MAX_GAP_RECORDS`]), and the next slot to
    /// wait for (`None`: the expression has no further slot).
    pub fn next(&self, cron: &Cron, tz: Tz, now: DateTime<Utc>) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
        match (self.last, self.start) {
            (Some(l), _) => (slots_between(cron, tz, l, now), next_slot(cron, tz, l.max(now))),
            (None, Some(start)) => (Vec::new(), next_slot(cron, tz, start)),
            (None, None) => (Vec::new(), next_slot(cron, tz, now)),
        }
    }

    /// `slot` came: it is taken, whatever its claim answers.
    pub fn take(&mut self, slot: DateTime<Utc>) {
        self.last = Some(slot);
    }
}

/// Fixed-rate slots during one term: slot `k` is due `k * period` after the term's start on
/// the monotonic clock (no drift accumulates, sub-second periods stay exact) and is named by
/// the wall clock at the start plus as much, kept above the last slot claimed (by any term),
/// so claimed slots grow across terms even if this node's wall clock is behind the previous
/// holder's. Slots that pass during a long run are skipped (`skipped_running`); the next run
/// is on the grid again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedRateSlots {
    period: Duration,
    start_wall: DateTime<Utc>,
    last_ms: i64,
    k: u128,
}

impl FixedRateSlots {
    /// The grid of `period` from a term that started at wall-clock `start_wall`, after the
    /// job's last claimed slot `last_claimed_ms`, if known.
    pub fn new(period: Duration, start_wall: DateTime<Utc>, last_claimed_ms: Option<i64>) -> Self {
        FixedRateSlots { period, start_wall, last_ms: last_claimed_ms.unwrap_or(i64::MIN), k: 1 }
    }

    /// When the next slot is due, as an offset from the term's start on the monotonic clock.
    pub fn due(&self) -> Duration {
        grid(self.period, self.k)
    }

    /// The due slot's name: its wall-clock instant in milliseconds (above every slot claimed
    /// before) and that instant.
    pub fn name(&mut self) -> (i64, DateTime<Utc>) {
        let grid_wall = wall(self.start_wall, grid(self.period, self.k));
        let ms = grid_wall.timestamp_millis().max(self.last_ms.saturating_add(1));
        self.last_ms = ms;
        (ms, DateTime::from_timestamp_millis(ms).unwrap_or(grid_wall))
    }

    /// The due slot's run ended `elapsed` after the term's start: moves to the next slot on
    /// the grid still ahead, and returns the slots passed meanwhile (`skipped_running`, oldest
    /// first, at most the newest [`MAX_GAP_RECORDS`]).
    pub fn advance(&mut self, elapsed: Duration) -> Vec<DateTime<Utc>> {
        let next = (self.k + 1).max(elapsed.as_nanos().div_ceil(self.period.as_nanos().max(1)));
        let first = (self.k + 1).max(next.saturating_sub(MAX_GAP_RECORDS as u128));
        let skipped = (first..next).map(|i| wall(self.start_wall, grid(self.period, i))).collect();
        self.k = next;
        skipped
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Fixed rate: slots on the grid, named by the wall clock at the start plus the offset;
    /// a slow run skips the slots it overran (reported), and the grid holds afterwards.
    #[test]
    fn fixed_rate_grid_names_and_skips() {
        let start = utc("2026-12-02T10:00:00Z");
        let mut s = FixedRateSlots::new(ms(250), start, None);
        assert_eq!(s.due(), ms(250));
        assert_eq!(s.name(), (start.timestamp_millis() + 250, utc("2026-12-02T10:00:00.250Z")));
        assert_eq!(
            s.advance(ms(260)),
            Vec::<DateTime<Utc>>::new(),
            "a quick run: the next slot is the next on the grid"
        );
        assert_eq!(s.due(), ms(500));
        s.name();
        // The run took until 1.3 s: slots 750 and 1000 and 1250 passed; the next is at 1500.
        assert_eq!(
            s.advance(ms(1_300)),
            vec![utc("2026-12-02T10:00:00.750Z"), utc("2026-12-02T10:00:01Z"), utc("2026-12-02T10:00:01.250Z")]
        );
        assert_eq!(s.due(), ms(1_500));
    }

    /// Fixed rate: a node whose wall clock is behind the previous holder's names its slots
    /// above the last claimed one, so claimed slots grow across terms.
    #[test]
    fn fixed_rate_names_stay_above_the_last_claimed() {
        let start = utc("2026-12-02T10:00:00Z");
        let last = start.timestamp_millis() + 5_000;
        let mut s = FixedRateSlots::new(ms(1_000), start, Some(last));
        assert_eq!(s.name().0, last + 1);
        s.advance(ms(1_000));
        assert_eq!(s.name().0, last + 2);
        s.advance(ms(2_000));
        s.advance(ms(3_000));
        s.advance(ms(4_000));
        s.advance(ms(5_000));
        assert_eq!(s.due(), ms(6_000));
        assert_eq!(s.name().0, start.timestamp_millis() + 6_000, "back on the wall-clock grid once past it");
    }

    /// Fixed rate: a gap of more than MAX_GAP_RECORDS slots reports the newest only.
    #[test]
    fn fixed_rate_skips_are_bounded() {
        let start = utc("2026-12-02T10:00:00Z");
        let mut s = FixedRateSlots::new(ms(10), start, None);
        let skipped = s.advance(ms(10_000));
        assert_eq!(skipped.len(), MAX_GAP_RECORDS);
        assert_eq!(skipped.last().copied(), Some(utc("2026-12-02T10:00:09.990Z")));
        assert_eq!(s.due(), ms(10_000));
    }

    /// Cron: never the same slot twice on a node, even when the wall clock steps back; the
    /// slots that passed during a run are reported.
    #[test]
    fn cron_slots_never_repeat_and_report_overruns() {
        let c = cron("* * * * * *");
        let mut s = CronSlots::after(None);
        let (skipped, next) = s.next(&c, Tz::UTC, utc("2026-12-02T10:00:00.400Z"));
        assert_eq!((skipped, next), (Vec::new(), Some(utc("2026-12-02T10:00:01Z"))));
        s.take(utc("2026-12-02T10:00:01Z"));
        // The wall clock stepped back half a minute: the next slot is still after the last.
        assert_eq!(s.next(&c, Tz::UTC, utc("2026-12-02T09:59:30Z")).1, Some(utc("2026-12-02T10:00:02Z")));
        // The run took until 10:00:03.5: 02 and 03 passed unrun.
        let (skipped, next) = s.next(&c, Tz::UTC, utc("2026-12-02T10:00:03.500Z"));
        assert_eq!(skipped, vec![utc("2026-12-02T10:00:02Z"), utc("2026-12-02T10:00:03Z")]);
        assert_eq!(next, Some(utc("2026-12-02T10:00:04Z")));
    }

    /// J1, J5 (every slot accounted for once): the misfire gap is read at the term's start
    /// and reaching the slot loop takes a store round trip; a slot that passes meanwhile is
    /// neither in the gap nor skipped, it is the first slot to run (due at once). The
    /// history fault test saw it lost: gap read at 10:00:11.9 (slots up to 11 missed), the
    /// loop started at 12.1 and waited for 13.
    #[test]
    fn j1_no_slot_falls_between_the_term_start_gap_and_the_first_wait() {
        let c = cron("* * * * * *");
        let start = utc("2026-12-02T10:00:11.900Z");
        let last = Some(utc("2026-12-02T10:00:08Z"));
        let (gap, caught_up) = term_start_gap(&c, Tz::UTC, last, start, false);
        assert_eq!(gap, vec![utc("2026-12-02T10:00:09Z"), utc("2026-12-02T10:00:10Z"), utc("2026-12-02T10:00:11Z")]);
        let mut s = CronSlots::at_term_start(start, caught_up);
        let (skipped, next) = s.next(&c, Tz::UTC, utc("2026-12-02T10:00:12.100Z"));
        assert_eq!((skipped, next), (Vec::new(), Some(utc("2026-12-02T10:00:12Z"))), "12 passed meanwhile: due now");
        s.take(utc("2026-12-02T10:00:12Z"));
        assert_eq!(
            s.next(&c, Tz::UTC, utc("2026-12-02T10:00:12.200Z")),
            (Vec::new(), Some(utc("2026-12-02T10:00:13Z")))
        );
        // The old start, from the loop's own clock, lost slot 12.
        assert_eq!(
            CronSlots::after(None).next(&c, Tz::UTC, utc("2026-12-02T10:00:12.100Z")).1,
            Some(utc("2026-12-02T10:00:13Z"))
        );
        // With a catch-up run the slots after it are counted from it, as before.
        let (gap, caught_up) = term_start_gap(&c, Tz::UTC, last, start, true);
        assert_eq!((gap.len(), caught_up), (2, Some(utc("2026-12-02T10:00:11Z"))));
        let (skipped, next) =
            CronSlots::at_term_start(start, caught_up).next(&c, Tz::UTC, utc("2026-12-02T10:00:12.100Z"));
        assert_eq!((skipped, next), (vec![utc("2026-12-02T10:00:12Z")], Some(utc("2026-12-02T10:00:13Z"))));
    }

    /// Misfire at a term's start: the slots since the last claimed are missed; run_once runs
    /// the newest of them instead of reporting it; a job that never ran missed nothing.
    #[test]
    fn term_start_gap_and_misfire() {
        let c = cron("0 * * * * *");
        let now = utc("2026-12-02T10:03:30Z");
        let last = Some(utc("2026-12-02T10:00:00Z"));
        let missed = vec![utc("2026-12-02T10:01:00Z"), utc("2026-12-02T10:02:00Z"), utc("2026-12-02T10:03:00Z")];
        assert_eq!(term_start_gap(&c, Tz::UTC, last, now, false), (missed.clone(), None));
        assert_eq!(term_start_gap(&c, Tz::UTC, last, now, true), (missed[..2].to_vec(), Some(missed[2])));
        assert_eq!(term_start_gap(&c, Tz::UTC, None, now, false), (vec![], None));
        assert_eq!(term_start_gap(&c, Tz::UTC, None, now, true), (vec![], Some(missed[2])));
        assert_eq!(term_start_gap(&c, Tz::UTC, Some(utc("2026-12-02T10:03:00Z")), now, true), (vec![], None));
    }

    #[test]
    fn every_second_slots() {
        let c = cron("* * * * * *");
        let t = utc("2026-11-30T10:00:00.400Z");
        assert_eq!(next_slot(&c, Tz::UTC, t), Some(utc("2026-11-30T10:00:01Z")));
        assert_eq!(previous_slot(&c, Tz::UTC, t), Some(utc("2026-11-30T10:00:00Z")));
        assert_eq!(until(utc("2026-11-30T10:00:01Z"), t), ms(600));
        assert_eq!(until(t, utc("2026-11-30T10:00:01Z")), Duration::ZERO);
    }

    /// A schedule never goes back in time: in St John's repeated hour of 1 November 2009
    /// (00:01 NDT fell back to 23:01 NST, 02:31 UTC), the next `0 6 * * * *` after 02:31 UTC is
    /// 00:06 NST, 03:36 UTC; croner alone answers 23:06 NDT, 01:36 UTC. 23:06 NST, the local
    /// time's second occurrence, is skipped, as every repeated local time is.
    #[test]
    fn next_slot_after_a_fall_back_at_an_odd_hour_is_later() {
        let cron = cron("0 6 * * * *");
        let tz: Tz = "America/St_Johns".parse().expect("a zone");
        let after = DateTime::<Utc>::from_timestamp(1_257_042_660, 0).expect("2009-11-01 02:31 UTC");
        let next = next_slot(&cron, tz, after).expect("a next slot");
        assert_eq!(next.to_rfc3339(), "2009-11-01T03:36:00+00:00");
        let prev = previous_slot(&cron, tz, after).expect("a previous slot");
        assert!(prev <= after, "{prev} is after {after}");
    }
}
