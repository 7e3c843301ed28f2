//! Schedules stored as data (ADR 0020), the pure part: what a schedule id may be, which
//! partition of the built-in group `simba.schedules` an id belongs to, whether a spec (cron in
//! a time zone, or a fixed rate) and a payload are acceptable, and when a spec fires. Every
//! store, the library's API and the `simba` tool check with these functions, so a schedule
//! refused by one is refused by all, with the same reason.
//!
//! The claim of a schedule's slot is the claim rule's [`Ask::ScheduleSlot`](crate::claim::Ask)
//! (rule A5): the schedule's own ledger, under its partition's lease and token.

use std::time::Duration;

use chrono::DateTime;
use chrono_tz::Tz;
use croner::Cron;

use crate::cron::{parse_cron, parse_time_zone};
use crate::policy::{Bounds, TermStart, split_gap};
use crate::slots::{MAX_GAP_RECORDS, next_slot, slots_between};

/// The longest schedule id, in characters (the lease-name rule's bound, T1).
pub const MAX_ID_LEN: usize = simba_rules::lease::MAX_NAME_LEN;

/// The largest payload a schedule carries, in bytes of its JSON text (rule A3).
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;

/// How many partitions `simba.schedules` has unless configured otherwise.
pub const DEFAULT_PARTITIONS: u32 = 64;

/// The most partitions `simba.schedules` may have: a node renews at most this many leases
/// for schedules, whatever their number.
pub const MAX_PARTITIONS: u32 = 4096;

/// The shortest fixed rate of a schedule, in milliseconds: cron slots are whole seconds, and
/// so is the finest fixed rate.
pub const MIN_FIXED_RATE_MS: u64 = 1000;

/// The longest fixed rate of a schedule, in milliseconds (366 days): a longer period is a
/// cron expression's job.
pub const MAX_FIXED_RATE_MS: u64 = 366 * 24 * 3600 * 1000;

/// What a schedule's job name starts with in the jobs store: the slot of schedule `id` is
/// recorded under the job name `schedule/<id>` ([`job_name`]).
pub const JOB_PREFIX: &str = "schedule/";

/// The job name under which schedule `id`'s slots are claimed and recorded (`schedule/<id>`).
pub fn job_name(id: &str) -> String {
    format!("{JOB_PREFIX}{id}")
}

/// Whether the job name `job` is a schedule's (`schedule/<id>`, or `<namespace>~schedule/<id>`
/// as a namespaced store sees it): its slots are claimed with
/// [`Ask::ScheduleSlot`](crate::claim::Ask), on the schedule's own ledger (rule A5). A
/// code-defined job's name cannot look like one: `/` and `~` are not in the lease-name
/// alphabet, and a job named `schedule` is refused by the runtime.
///
/// ```
/// use simba_core::schedules::is_schedule_job;
/// assert!(is_schedule_job("schedule/tenant-4711"));
/// assert!(is_schedule_job("billing-svc~schedule/tenant-4711"));
/// assert!(!is_schedule_job("billing/3") && !is_schedule_job("schedule") && !is_schedule_job("x~myschedule/1"));
/// ```
pub fn is_schedule_job(job: &str) -> bool {
    let Some((group, id)) = job.rsplit_once('/') else { return false };
    let group = group.rsplit_once('~').map_or(group, |(_, g)| g);
    !id.is_empty() && group == JOB_PREFIX.trim_end_matches('/')
}

/// Checks a schedule id (rule A1): the lease-name rule (T1), 1 to 128 characters of
/// `[A-Za-z0-9._:-]`, not `.` or `..`. The error names the id and says what is wrong.
///
/// ```
/// use simba_core::schedules::check_id;
/// assert!(check_id("tenant-4711.report").is_ok());
/// assert!(check_id("tenant/4711").is_err_and(|e| e.contains("tenant/4711")));
/// ```
pub fn check_id(id: &str) -> Result<(), String> {
    match simba_rules::lease::name_problem(id) {
        None => Ok(()),
        Some(problem) => Err(format!(
            "invalid schedule id {id:?}: schedule ids follow the lease-name rule ({}), and here {problem}",
            "1 to 128 characters of A-Z, a-z, 0-9, `.`, `_`, `:` and `-`"
        )),
    }
}

pub use crate::hash::fnv1a64;

/// The partition of `simba.schedules` that schedule `id` belongs to, with `partitions`
/// partitions (rule A2): `fnv1a64(id) mod partitions` (0 partitions counts as 1). Frozen: a
/// change would move every stored schedule to another partition.
pub fn partition_of(id: &str, partitions: u32) -> u32 {
    let p = u64::from(partitions.max(1));
    // The remainder is below `partitions`, a u32.
    u32::try_from(fnv1a64(id.as_bytes()) % p).unwrap_or(0)
}

/// Checks a partition count: 1 to [`MAX_PARTITIONS`].
pub fn check_partitions(partitions: u32) -> Result<(), String> {
    if (1..=MAX_PARTITIONS).contains(&partitions) {
        Ok(())
    } else {
        Err(format!("`[schedules] partitions` must be 1 to {MAX_PARTITIONS}, not {partitions}"))
    }
}

/// Checks a payload's size in bytes (rule A3): at most [`MAX_PAYLOAD_BYTES`].
pub fn check_payload_size(bytes: usize) -> Result<(), String> {
    if bytes <= MAX_PAYLOAD_BYTES {
        Ok(())
    } else {
        Err(format!(
            "the payload has {bytes} bytes, more than the {MAX_PAYLOAD_BYTES} a schedule may carry: keep large data \
             in your own store and put its key in the payload"
        ))
    }
}

/// When a schedule fires, as written by its owner: a cron expression in an IANA time zone,
/// or a fixed rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spec<'a> {
    /// A 6-field cron expression with seconds, in `time_zone`.
    Cron {
        /// The expression (`"0 0 9 * * MON"`).
        expr: &'a str,
        /// The IANA time zone (`"Europe/Berlin"`, `"UTC"`).
        time_zone: &'a str,
    },
    /// Every `period_ms` milliseconds, on the grid of multiples of the period since the Unix
    /// epoch, so every node computes the same slots whoever holds the partition.
    FixedRate {
        /// The period in milliseconds.
        period_ms: u64,
    },
}

/// A checked [`Spec`]: the cron expression parsed and the time zone looked up.
#[derive(Debug, Clone)]
pub enum Fires {
    /// Cron slots in a time zone ([`next_slot`]).
    Cron {
        /// The parsed expression.
        cron: Box<Cron>,
        /// The time zone.
        tz: Tz,
    },
    /// The fixed-rate grid from the Unix epoch.
    FixedRate {
        /// The period in milliseconds.
        period_ms: i64,
    },
}

/// Checks a spec (rule A3) with the one cron parser ([`parse_cron`]) and time-zone lookup
/// ([`parse_time_zone`]): the error says what is wrong and what would be right.
pub fn check_spec(spec: Spec<'_>) -> Result<Fires, String> {
    match spec {
        Spec::Cron { expr, time_zone } => {
            let cron = parse_cron(expr)?;
            let tz = parse_time_zone(time_zone)?;
            // An expression of dates that never come (`0 0 0 30 2 *`) parses but never fires:
            // one search from the epoch says so (not `next_slot`, which would repeat a failed
            // search second by second).
            let epoch = DateTime::UNIX_EPOCH.with_timezone(&tz);
            if cron.find_next_occurrence(&epoch, false).is_err() {
                return Err(format!("the cron expression {expr:?} has no slot: it names dates that never come"));
            }
            Ok(Fires::Cron { cron: Box::new(cron), tz })
        }
        Spec::FixedRate { period_ms } if !(MIN_FIXED_RATE_MS..=MAX_FIXED_RATE_MS).contains(&period_ms) => Err(format!(
            "a fixed rate must be 1 s to 366 days ({MIN_FIXED_RATE_MS} to {MAX_FIXED_RATE_MS} ms), not {period_ms} ms"
        )),
        Spec::FixedRate { period_ms } => {
            Ok(Fires::FixedRate { period_ms: i64::try_from(period_ms).unwrap_or(i64::MAX) })
        }
    }
}

impl Fires {
    /// The first slot strictly after `after_ms` (unix milliseconds), in unix milliseconds;
    /// `None` when there is none (or it is out of range).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Fires::Cron { cron, tz } => {
                let after = DateTime::from_timestamp_millis(after_ms)?;
                next_slot(cron, *tz, after).map(|t| t.timestamp_millis())
            }
            Fires::FixedRate { period_ms } => after_ms.div_euclid(*period_ms).checked_add(1)?.checked_mul(*period_ms),
        }
    }

    /// The next `count` slots after `after_ms`, oldest first (fewer when the spec has no more).
    pub fn next(&self, after_ms: i64, count: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(count.min(1000));
        let mut at = after_ms;
        while out.len() < count {
            let Some(next) = self.next_after(at) else { break };
            out.push(next);
            at = next;
        }
        out
    }

    /// The slots strictly after `from_ms` and at or before `to_ms`, oldest first, at most the
    /// newest [`MAX_GAP_RECORDS`].
    pub fn between(&self, from_ms: i64, to_ms: i64) -> Vec<i64> {
        match self {
            Fires::Cron { cron, tz } => {
                let (Some(from), Some(to)) = (
                    DateTime::from_timestamp_millis(from_ms),
                    DateTime::from_timestamp_millis(to_ms.saturating_add(1)),
                ) else {
                    return Vec::new();
                };
                slots_between(cron, *tz, from, to).into_iter().map(|t| t.timestamp_millis()).collect()
            }
            Fires::FixedRate { period_ms } => {
                let (first, last) = (from_ms.div_euclid(*period_ms) + 1, to_ms.div_euclid(*period_ms));
                let first = first.max(last.saturating_sub(MAX_GAP_RECORDS as i64 - 1));
                (first..=last).filter_map(|k| k.checked_mul(*period_ms)).collect()
            }
        }
    }
}

/// The slots of a schedule that nobody ran while no node held its partition (rule A14), at
/// the start of a term at wall-clock `now_ms`: those after `floor_ms` (the later of the slot
/// claimed last and the schedule's last write: a slot of an older spec, or one that passed
/// while the schedule was paused, was never this schedule's slot) and at or before `now_ms`,
/// oldest first, at most [`MAX_GAP_RECORDS`]; under misfire `run_once` the newest of them runs
/// instead of being reported missed (R5); split by the catch-up window and the bounds as a
/// code-defined job's gap is ([`split_gap`], J12, J14).
pub fn term_start_gap(
    fires: &Fires,
    (floor_ms, now_ms): (i64, i64),
    run_once: bool,
    window: Option<Duration>,
    bounds: &Bounds,
) -> TermStart {
    let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH);
    let mut gap: Vec<_> = fires.between(floor_ms, now_ms).into_iter().map(at).collect();
    let catch_up = if run_once { gap.pop() } else { None };
    split_gap((gap, catch_up), true, at(now_ms), window, bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A1: ids follow the lease-name rule; the error names the id and the rule.
    #[test]
    fn a1_ids_follow_the_lease_name_rule() {
        for id in ["a", "tenant-4711.report", "A-b_c:d.e", &"x".repeat(MAX_ID_LEN)] {
            assert_eq!(check_id(id), Ok(()), "{id:?}");
        }
        for id in ["", ".", "..", "tenant/4711", "ns~id", "sp ace", "é", &"x".repeat(MAX_ID_LEN + 1)] {
            let e = check_id(id).expect_err(id);
            assert!(e.contains(&format!("{id:?}")) && e.contains("lease-name rule"), "{e}");
        }
        assert_eq!(job_name("tenant-4711.report"), "schedule/tenant-4711.report");
    }

    /// A14: the gap of a term's start holds the slots after the floor and at or before now,
    /// newest `MAX_GAP_RECORDS` only; `run_once` runs the newest instead of reporting it; the
    /// catch-up window and the bounds split it as a code-defined job's (J12, J14).
    #[test]
    fn a14_term_start_gap_of_a_schedule() {
        let ms = |v: &[DateTime<chrono::Utc>]| v.iter().map(|t| t.timestamp_millis()).collect::<Vec<_>>();
        let gap = |f: &Fires, floor, now, once, window, bounds: &Bounds| {
            let t = term_start_gap(f, (floor, now), once, window, bounds);
            (ms(&t.expired), ms(&t.missed), t.catch_up.map(|c| c.timestamp_millis()))
        };
        let none = Bounds::default();
        let every_10s = check_spec(Spec::FixedRate { period_ms: 10_000 }).expect("valid");
        assert_eq!(
            gap(&every_10s, 15_000, 50_000, false, None, &none),
            (vec![], vec![20_000, 30_000, 40_000, 50_000], None)
        );
        assert_eq!(gap(&every_10s, 20_000, 49_999, true, None, &none), (vec![], vec![30_000], Some(40_000)));
        assert_eq!(
            gap(&every_10s, 50_000, 50_000, true, None, &none),
            (vec![], vec![], None),
            "nothing after the floor"
        );
        let window = Some(Duration::from_secs(15));
        assert_eq!(
            gap(&every_10s, 0, 50_000, true, window, &none),
            (vec![10_000, 20_000, 30_000], vec![40_000], Some(50_000))
        );
        let bounds =
            Bounds { start: DateTime::from_timestamp_millis(30_000), end: DateTime::from_timestamp_millis(40_000) };
        assert_eq!(gap(&every_10s, 0, 50_000, false, None, &bounds), (vec![], vec![30_000, 40_000], None));
        let many = term_start_gap(&every_10s, (0, 10_000 * 1_000), false, None, &none).missed;
        assert_eq!(
            (many.len(), ms(&many[..1]), ms(&many[MAX_GAP_RECORDS - 1..])),
            (MAX_GAP_RECORDS, vec![9_010_000], vec![10_000_000])
        );
        let daily = check_spec(Spec::Cron { expr: "0 0 9 * * *", time_zone: "Europe/Berlin" }).expect("valid");
        let day = 86_400_000;
        // 9:00 in Berlin in winter is 08:00 UTC; the floor at 07:00 UTC of day 0.
        let got = gap(&daily, 7 * 3_600_000, 2 * day + 8 * 3_600_000, true, None, &none);
        assert_eq!(got, (vec![], vec![8 * 3_600_000, day + 8 * 3_600_000], Some(2 * day + 8 * 3_600_000)));
    }

    /// A2: the partition of an id is `fnv1a64(id) mod P`, frozen on exact values (the FNV-1a
    /// test vectors, then ids at 64 and 7 partitions): changing it would move every schedule.
    #[test]
    fn a2_partition_of_is_frozen() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64(b"tenant-4711.report"), 0x8353_5415_dc21_f6f1);
        let at_64: Vec<u32> =
            ["a", "foobar", "tenant-4711.report", "report", "billing.3", "x"].map(|id| partition_of(id, 64)).to_vec();
        assert_eq!(at_64, [12, 40, 49, 11, 63, 7]);
        let at_7: Vec<u32> =
            ["a", "foobar", "tenant-4711.report", "report", "billing.3", "x"].map(|id| partition_of(id, 7)).to_vec();
        assert_eq!(at_7, [5, 6, 4, 1, 6, 3]);
        assert_eq!(partition_of("report", 1), 0);
        assert_eq!(partition_of("report", 0), 0, "0 partitions counts as 1");
    }

    /// A2: ids spread evenly enough over the partitions for the rebalance to spread the load.
    #[test]
    fn a2_ids_spread_over_the_partitions() {
        let mut counts = [0u32; 64];
        for i in 0..64_000 {
            counts[partition_of(&format!("tenant-{i}.report"), 64) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().copied(), counts.iter().max().copied());
        assert!(min > Some(850) && max < Some(1150), "{min:?}..{max:?}");
        assert_eq!(check_partitions(64), Ok(()));
        assert!(check_partitions(0).is_err() && check_partitions(MAX_PARTITIONS + 1).is_err());
    }

    /// A3: a cron spec is checked with the one parser and time-zone lookup; a fixed rate is 1 s
    /// to 366 days; an expression that never fires is refused.
    #[test]
    fn a3_specs_are_checked_with_the_one_parser() {
        assert!(check_spec(Spec::Cron { expr: "0 0 9 * * MON", time_zone: "Europe/Berlin" }).is_ok());
        let e = check_spec(Spec::Cron { expr: "0 9 * * MON", time_zone: "UTC" }).expect_err("5 fields");
        assert!(e.contains("6 fields"), "{e}");
        let e = check_spec(Spec::Cron { expr: "0 0 9 * * *", time_zone: "Mars/Olympus" }).expect_err("zone");
        assert!(e.contains("Mars/Olympus") && e.contains("IANA"), "{e}");
        let e = check_spec(Spec::Cron { expr: "0 0 0 30 2 *", time_zone: "UTC" }).expect_err("never");
        assert!(e.contains("no slot"), "{e}");
        assert!(check_spec(Spec::FixedRate { period_ms: 1000 }).is_ok());
        for bad in [0, 999, MAX_FIXED_RATE_MS + 1] {
            let e = check_spec(Spec::FixedRate { period_ms: bad }).expect_err("range");
            assert!(e.contains(&format!("not {bad} ms")), "{e}");
        }
    }

    /// A3: the payload bound is 16 KiB of JSON text, inclusive.
    #[test]
    fn a3_payload_bound() {
        assert_eq!(check_payload_size(MAX_PAYLOAD_BYTES), Ok(()));
        let e = check_payload_size(MAX_PAYLOAD_BYTES + 1).expect_err("over");
        assert!(e.contains("16385 bytes") && e.contains("16384"), "{e}");
    }

    /// A4: next fires: cron slots in the zone (DST included, through `next_slot`), fixed-rate
    /// slots on the grid from the epoch, whatever instant one asks from.
    #[test]
    fn a4_next_fires() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).map(|d| d.timestamp_millis()).unwrap_or_default();
        let berlin = check_spec(Spec::Cron { expr: "0 30 2 * * *", time_zone: "Europe/Berlin" }).expect("spec");
        assert_eq!(
            berlin.next(t("2026-03-28T12:00:00Z"), 2),
            [t("2026-03-29T01:00:00Z"), t("2026-03-30T00:30:00Z")],
            "the missing 02:30 runs at 03:00 CEST"
        );
        let every_90s = check_spec(Spec::FixedRate { period_ms: 90_000 }).expect("spec");
        assert_eq!(every_90s.next(1_000, 3), [90_000, 180_000, 270_000]);
        assert_eq!(every_90s.next_after(90_000), Some(180_000), "strictly after");
        assert_eq!(every_90s.next_after(-1), Some(0));
        assert_eq!(every_90s.next_after(i64::MAX - 1), None);
    }
}
