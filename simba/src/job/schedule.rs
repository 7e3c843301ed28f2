//! The scheduler: croner for cron slots (6 fields with seconds, any IANA time zone, DST
//! handled by croner and chrono-tz), Tokio timers for waiting, and the backend's fenced slot
//! record so that each cron slot runs at most once across the cluster (J5).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use tokio::time::{Instant, sleep_until};

use super::history::{Claimed, Recording};
use super::{JobFuture, Misfire, Schedule};
use crate::Term;
use crate::engine::Shared;
use crate::job_store::{Outcome, SlotKind};

/// A schedule as the runtime holds it (owned, so that `simba.toml` can override it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleSpec {
    /// A 6-field cron expression with seconds, in a time zone (UTC when `None`).
    Cron {
        /// The expression.
        expr: String,
        /// An IANA time zone name.
        time_zone: Option<String>,
    },
    /// A fixed rate on the monotonic clock.
    FixedRate(Duration),
}

impl From<Schedule> for ScheduleSpec {
    fn from(s: Schedule) -> Self {
        match s {
            Schedule::Cron { expr, time_zone } => {
                ScheduleSpec::Cron { expr: expr.to_owned(), time_zone: time_zone.map(str::to_owned) }
            }
            Schedule::FixedRate(d) => ScheduleSpec::FixedRate(d),
        }
    }
}

/// The croner parser with the settings of `simba_rules::cron`, the ones the macros check
/// cron strings with at compile time.
fn cron_parser() -> CronParser {
    use simba_rules::cron::{Field, SECONDS, YEAR};
    let seconds = match SECONDS {
        Field::Required => Seconds::Required,
        Field::Optional => Seconds::Optional,
        Field::Disallowed => Seconds::Disallowed,
    };
    let year = match YEAR {
        Field::Required => Year::Required,
        Field::Optional => Year::Optional,
        Field::Disallowed => Year::Disallowed,
    };
    CronParser::builder().seconds(seconds).year(year).build()
}

/// Parses a 6-field cron expression with seconds (the macros use the same parser).
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    cron_parser().parse(expr).map_err(|e| {
        format!("invalid cron expression {expr:?} (6 fields with seconds first, e.g. \"0 */5 * * * *\"): {e}")
    })
}

/// Parses an IANA time zone name.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name)
        .map_err(|_| format!("unknown time zone {name:?}: use an IANA name such as \"Europe/Berlin\" or \"UTC\""))
}

/// A validated schedule.
#[derive(Debug, Clone)]
pub(crate) enum Timer {
    Cron { cron: Box<Cron>, tz: Tz },
    Fixed(Duration),
}

impl Timer {
    pub(crate) fn new(spec: &ScheduleSpec) -> Result<Timer, String> {
        match spec {
            ScheduleSpec::Cron { expr, time_zone } => {
                let cron = parse_cron(expr)?;
                let tz = match time_zone {
                    Some(z) => parse_time_zone(z)?,
                    None => Tz::UTC,
                };
                Ok(Timer::Cron { cron: Box::new(cron), tz })
            }
            ScheduleSpec::FixedRate(d) if d.is_zero() => Err("fixed_rate must be greater than zero".into()),
            ScheduleSpec::FixedRate(d) => Ok(Timer::Fixed(*d)),
        }
    }
}

/// The first slot strictly after `after`, in UTC. Slots are instants: a local time that
/// occurs twice at a DST fall-back runs at its first occurrence only (croner), one skipped at
/// a spring-forward does not run.
pub(crate) fn next_slot(cron: &Cron, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Slots are whole seconds: croner keeps the sub-second part of its input.
    let after = after.with_nanosecond(0)?;
    cron.find_next_occurrence(&after.with_timezone(&tz), false).ok().map(|t| t.with_timezone(&Utc))
}

/// The latest slot at or before `at`, in UTC.
pub(crate) fn previous_slot(cron: &Cron, tz: Tz, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = at.with_nanosecond(0)?;
    cron.find_previous_occurrence(&at.with_timezone(&tz), true).ok().map(|t| t.with_timezone(&Utc))
}

/// `period * k`, exact for any `k`.
fn grid(period: Duration, k: u128) -> Duration {
    let nanos = period.as_nanos().saturating_mul(k);
    Duration::new((nanos / 1_000_000_000) as u64, (nanos % 1_000_000_000) as u32)
}

/// How long until wall-clock instant `t`, zero when it has passed.
fn until(t: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (t - now).to_std().unwrap_or(Duration::ZERO)
}

/// At most this many `missed` or `skipped_running` records are written for one gap.
const MAX_GAP_RECORDS: usize = 100;

/// Runs `run` on `timer` for as long as `term` is valid, one run at a time (J5). Returns when
/// the term is cancelled (the election then hands over, H1) or ends.
///
/// Every slot goes through [`Recording::claim`] (one store round trip: fenced, monotonic,
/// pause-aware, and writing the `running` record) and ends with a record of its outcome
/// (issue 12). A pending run-now request runs as a `manual` slot at the start of the term and
/// whenever the control version moves.
pub(crate) async fn run_scheduled(
    shared: Arc<Shared>,
    mut rec: Recording,
    timer: Timer,
    misfire: Misfire,
    term: Term,
    run: impl Fn(Term) -> JobFuture,
) -> Result<(), crate::BoxError> {
    manual(&shared, &rec, &term, &run).await;
    match timer {
        Timer::Fixed(period) => {
            // Slots at start + k * period on the monotonic clock: no drift accumulates and
            // sub-second periods stay exact. Slots that pass during a long run are skipped
            // (recorded `skipped_running`); the next run is on the grid again.
            let start = Instant::now();
            let start_wall = rec.now();
            // Claimed slots must grow across terms even if this node's wall clock is behind
            // the previous holder's: start after the last claimed one.
            let mut last_ms = match rec.last_slot_ms(&term).await {
                Ok(last) => last.unwrap_or(i64::MIN),
                Err(e) => {
                    tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; the store still refuses a claim of any slot at or before the last one claimed");
                    i64::MIN
                }
            };
            let mut k: u128 = 1;
            loop {
                let slot = start + grid(period, k);
                loop {
                    tokio::select! {
                        _ = term.cancelled() => return Ok(()),
                        _ = sleep_until(slot) => break,
                        _ = rec.control_changed() => manual(&shared, &rec, &term, &run).await,
                    }
                }
                if !term.is_valid() {
                    return Ok(());
                }
                let grid_wall = start_wall + chrono::Duration::from_std(grid(period, k)).unwrap_or_default();
                let slot_ms = grid_wall.timestamp_millis().max(last_ms.saturating_add(1));
                last_ms = slot_ms;
                let slot_wall = DateTime::from_timestamp_millis(slot_ms).unwrap_or(grid_wall);
                if let Claimed::Run(r) = rec.claim(&shared, &term, slot_ms, SlotKind::Scheduled, false).await {
                    rec.execute(&shared, &term, r, slot_wall, SlotKind::Scheduled, &run).await;
                }
                let elapsed = start.elapsed().as_nanos();
                let next = (k + 1).max(elapsed.div_ceil(period.as_nanos().max(1)));
                for skipped in (k + 1).max(next.saturating_sub(MAX_GAP_RECORDS as u128))..next {
                    let at = start_wall + chrono::Duration::from_std(grid(period, skipped)).unwrap_or_default();
                    rec.append(at, Outcome::SkippedRunning, &term);
                }
                k = next;
            }
        }
        Timer::Cron { cron, tz } => {
            let now = rec.now();
            let (gap, catch_up) = gap_at_term_start(&rec, &term, &cron, tz, now, misfire).await;
            for s in gap {
                rec.append(s, Outcome::Missed, &term);
            }
            if let Some(slot) = catch_up
                && term.is_valid()
                && let Claimed::Run(r) =
                    rec.claim(&shared, &term, slot.timestamp_millis(), SlotKind::CaughtUp, true).await
            {
                rec.execute(&shared, &term, r, slot, SlotKind::CaughtUp, &run).await;
            }
            let mut last: Option<DateTime<Utc>> = catch_up;
            loop {
                let now = rec.now();
                // Never the same slot twice on this node, even if the wall clock steps back.
                let after = last.map_or(now, |l| l.max(now));
                if let Some(l) = last {
                    // Slots that passed while the previous run was in flight.
                    for s in slots_between(&cron, tz, l, now).into_iter().rev().take(MAX_GAP_RECORDS).rev() {
                        rec.append(s, Outcome::SkippedRunning, &term);
                    }
                }
                let Some(slot) = next_slot(&cron, tz, after) else {
                    tracing::warn!(job = %rec.metric, "the cron expression has no further slot; the job will not run again");
                    term.cancelled().await;
                    return Ok(());
                };
                // Sleep on the monotonic clock, then re-check the wall clock: it may have
                // been adjusted while we slept.
                loop {
                    let wait = until(slot, rec.now());
                    if wait.is_zero() {
                        break;
                    }
                    tokio::select! {
                        _ = term.cancelled() => return Ok(()),
                        _ = sleep_until(Instant::now() + wait) => {}
                        _ = rec.control_changed() => manual(&shared, &rec, &term, &run).await,
                    }
                }
                last = Some(slot);
                if !term.is_valid() {
                    return Ok(());
                }
                // The slot runs at most once across the cluster: claim it with the term's
                // token; a slot claimed by another term (another node, or a node whose wall
                // clock is behind) is skipped.
                if let Claimed::Run(r) =
                    rec.claim(&shared, &term, slot.timestamp_millis(), SlotKind::Scheduled, true).await
                {
                    rec.execute(&shared, &term, r, slot, SlotKind::Scheduled, &run).await;
                }
            }
        }
    }
}

/// Runs a pending run-now request, if the store has one for this job.
async fn manual(shared: &Shared, rec: &Recording, term: &Term, run: &impl Fn(Term) -> JobFuture) {
    if rec.store.is_none() || !term.is_valid() {
        return;
    }
    let now = rec.now();
    if let Claimed::Run(r) = rec.claim(shared, term, now.timestamp_millis(), SlotKind::Manual, true).await {
        tracing::info!(job = %rec.job, token = term.token(), "running the job now, as requested");
        rec.execute(shared, term, r, now, SlotKind::Manual, run).await;
    }
}

/// The slots strictly between `from` and `to`, oldest first, at most the newest
/// [`MAX_GAP_RECORDS`].
fn slots_between(cron: &Cron, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
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

/// At the start of a term: the slots nobody ran since the last claimed one (`missed`), and
/// the slot to run once for them under [`Misfire::RunOnce`] (not itself reported missed).
/// Without a store (or history for this job) there is no gap to see; `RunOnce` then tries
/// the latest slot, which the slot claim refuses if it already ran.
async fn gap_at_term_start(
    rec: &Recording,
    term: &Term,
    cron: &Cron,
    tz: Tz,
    now: DateTime<Utc>,
    misfire: Misfire,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let latest = previous_slot(cron, tz, now);
    if rec.store.is_none() {
        return (Vec::new(), if misfire == Misfire::RunOnce { latest } else { None });
    }
    let last = match rec.last_slot_ms(term).await {
        Ok(last) => last.and_then(DateTime::from_timestamp_millis),
        Err(e) => {
            tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; not looking for missed slots");
            return (Vec::new(), None);
        }
    };
    let Some(last) = last else {
        // A job that never ran has missed nothing; `RunOnce` still runs the latest slot.
        return (Vec::new(), if misfire == Misfire::RunOnce { latest } else { None });
    };
    let mut gap = slots_between(cron, tz, last, now + chrono::Duration::milliseconds(1));
    let catch_up = match misfire {
        Misfire::RunOnce => gap.pop(),
        Misfire::Skip => None,
    };
    (gap, catch_up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).map(|d| d.with_timezone(&Utc)).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn cron_needs_six_fields() {
        assert!(parse_cron("0 */5 * * * *").is_ok());
        assert!(parse_cron("*/5 * * * *").is_err());
        assert!(parse_cron("0 0 0 1 1 * 2030").is_err());
        assert!(parse_cron("nonsense").expect_err("bad").contains("6 fields"));
    }

    #[test]
    fn every_second_slots() {
        let cron = parse_cron("* * * * * *").expect("cron");
        let t = utc("2026-11-30T10:00:00.400Z");
        assert_eq!(next_slot(&cron, Tz::UTC, t), Some(utc("2026-11-30T10:00:01Z")));
        assert_eq!(previous_slot(&cron, Tz::UTC, t), Some(utc("2026-11-30T10:00:00Z")));
    }

    /// DST spring forward in Berlin (2026-03-29, 02:00 -> 03:00): a daily 02:30 slot does not
    /// exist that day; it runs once, at the first valid instant (03:00 CEST), then at 02:30
    /// CEST on the following days.
    #[test]
    fn dst_spring_forward() {
        let cron = parse_cron("0 30 2 * * *").expect("cron");
        let tz = chrono_tz::Europe::Berlin;
        let s0 = next_slot(&cron, tz, utc("2026-03-27T12:00:00Z")).expect("slot");
        assert_eq!(s0, utc("2026-03-28T01:30:00Z"), "02:30 CET on the 28th");
        let s1 = next_slot(&cron, tz, s0).expect("slot");
        assert_eq!(s1, utc("2026-03-29T01:00:00Z"), "the missing 02:30 runs at 03:00 CEST");
        let s2 = next_slot(&cron, tz, s1).expect("slot");
        assert_eq!(s2, utc("2026-03-30T00:30:00Z"), "02:30 CEST on the 30th");
    }

    /// DST fall back in Berlin (2026-10-25, 03:00 -> 02:00): 02:30 happens twice; a daily
    /// 02:30 job runs once that day.
    #[test]
    fn dst_fall_back_runs_once() {
        let cron = parse_cron("0 30 2 * * *").expect("cron");
        let tz = chrono_tz::Europe::Berlin;
        let s1 = next_slot(&cron, tz, utc("2026-10-24T12:00:00Z")).expect("slot");
        let s2 = next_slot(&cron, tz, s1).expect("slot");
        let s3 = next_slot(&cron, tz, s2).expect("slot");
        assert_eq!(s1, utc("2026-10-25T00:30:00Z"), "first 02:30 (CEST)");
        assert_eq!(s2, utc("2026-10-26T01:30:00Z"), "the second 02:30 (CET) is not a new slot: next day");
        assert_eq!(s3, utc("2026-10-27T01:30:00Z"));
    }

    #[test]
    fn time_zone_names() {
        assert!(parse_time_zone("Europe/Berlin").is_ok());
        assert!(parse_time_zone("Mars/Olympus").expect_err("bad").contains("IANA"));
        let _ = Utc.timestamp_opt(0, 0);
    }
}
