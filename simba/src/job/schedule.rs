//! The scheduler: croner for cron slots (6 fields with seconds, any IANA time zone, DST
//! handled by croner and chrono-tz), Tokio timers for waiting, and the backend's fenced slot
//! record so that each cron slot runs at most once across the cluster (J5): the slot runner
//! (`runner.rs`) claims each slot these loops hand it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use simba_core::slots::{CronSlots, FixedRateSlots, term_start_gap, until};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::history::Recording;
use super::runner::{Slot, SlotRunner};
use super::{JobFuture, Misfire, Schedule};
use crate::job_store::{Outcome, SlotKind};
use crate::{Simba, Term};

// One parser for code-defined jobs and stored schedules: the core's (`simba_core::cron`).
pub use simba_core::cron::{parse_cron, parse_time_zone};

/// A validated [`Schedule`]: the cron expression parsed and the time zone looked up, once,
/// before the job starts (the scheduler's form of the one schedule type, not a second one).
#[derive(Debug, Clone)]
pub(crate) enum Timer {
    Cron { cron: Box<Cron>, tz: Tz },
    Fixed(Duration),
}

impl Timer {
    pub(crate) fn new(spec: &Schedule) -> Result<Timer, String> {
        match spec {
            Schedule::Cron { expr, time_zone } => {
                let cron = parse_cron(expr)?;
                let tz = match time_zone {
                    Some(z) => parse_time_zone(z)?,
                    None => Tz::UTC,
                };
                Ok(Timer::Cron { cron: Box::new(cron), tz })
            }
            Schedule::FixedRate(d) if d.is_zero() => Err("fixed_rate must be greater than zero".into()),
            Schedule::FixedRate(d) => Ok(Timer::Fixed(*d)),
        }
    }
}

/// Runs `run` on `timer` for as long as `term` is valid, one run at a time (J5). Returns when
/// the term is cancelled (the election then hands over, H1) or ends.
///
/// Every slot is handed to the term's [`SlotRunner`], which claims it (one store round trip:
/// fenced, monotonic, pause-aware, and writing the `running` record), runs it and ends it with
/// a record of its outcome. A pending run-now request runs as a `manual` slot at
/// the start of the term and whenever the control version moves.
pub(crate) async fn run_scheduled(
    simba: Simba,
    mut rec: Recording,
    timer: Timer,
    misfire: Misfire,
    term: Term,
    run: impl Fn(Term) -> JobFuture,
) -> Result<(), crate::BoxError> {
    let mut run_now = RunNowRequests(rec.control.take());
    let runner = SlotRunner::new(simba, rec, term, run);
    manual(&runner).await;
    match timer {
        Timer::Fixed(period) => run_fixed(&runner, &mut run_now, period).await,
        Timer::Cron { cron, tz } => run_cron(&runner, &mut run_now, &cron, tz, misfire).await,
    }
}

/// Run-now requests: moves when the store's control version moved (or the store broadcast a
/// change), which is when a request may be pending.
struct RunNowRequests(Option<watch::Receiver<u64>>);

impl RunNowRequests {
    /// Waits until the control version moves; never completes without a store.
    async fn changed(&mut self) {
        match self.0.as_mut() {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// The fixed-rate loop of [`run_scheduled`]: slots on the grid of `period` from the term's
/// start ([`FixedRateSlots`]).
async fn run_fixed<F: Fn(Term) -> JobFuture>(
    runner: &SlotRunner<F>,
    run_now: &mut RunNowRequests,
    period: Duration,
) -> Result<(), crate::BoxError> {
    let (rec, term) = (runner.records(), runner.term());
    let start = Instant::now();
    let start_wall = rec.now();
    // Claimed slots must grow across terms even if this node's wall clock is behind
    // the previous holder's: name them after the last claimed one.
    let last = match rec.last_slot_ms(term).await {
        Ok(last) => last,
        Err(e) => {
            tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; the store still refuses a claim of any slot at or before the last one claimed");
            None
        }
    };
    let mut slots = FixedRateSlots::new(period, start_wall, last);
    loop {
        let due = start + slots.due();
        loop {
            tokio::select! {
                _ = term.cancelled() => return Ok(()),
                _ = sleep_until(due) => break,
                _ = run_now.changed() => manual(runner).await,
            }
        }
        if !term.is_valid() {
            return Ok(());
        }
        let slot = Slot::fixed_rate(slots.name());
        let ran = runner.run(slot).await;
        // One record for the slots that passed while the run was in flight.
        rec.skipped_run(&slots.advance(start.elapsed()), ran.then_some(slot.at), term);
    }
}

/// The cron loop of [`run_scheduled`]: the misfire gap at the term's start, then each slot
/// claimed once across the cluster ([`CronSlots`]).
async fn run_cron<F: Fn(Term) -> JobFuture>(
    runner: &SlotRunner<F>,
    run_now: &mut RunNowRequests,
    cron: &Cron,
    tz: Tz,
    misfire: Misfire,
) -> Result<(), crate::BoxError> {
    let (rec, term) = (runner.records(), runner.term());
    let (gap, catch_up, now) = gap_at_term_start(rec, term, cron, tz, misfire).await;
    for s in gap {
        rec.append(s, Outcome::Missed, term);
    }
    if let Some(slot) = catch_up
        && term.is_valid()
    {
        runner.run(Slot::at(slot, SlotKind::CaughtUp)).await;
    }
    let mut slots = CronSlots::at_term_start(now, catch_up);
    // The last slot this loop ran, which the slots skipped next passed behind.
    let mut in_flight = None;
    loop {
        let (skipped, next) = slots.next(cron, tz, rec.now());
        // Slots that passed while the previous run was in flight: one record.
        rec.skipped_run(&skipped, in_flight.take(), term);
        let Some(slot) = next else {
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
                _ = run_now.changed() => manual(runner).await,
            }
        }
        slots.take(slot);
        if !term.is_valid() {
            return Ok(());
        }
        // The slot runs at most once across the cluster: claim it with the term's
        // token; a slot claimed by another term (another node, or a node whose wall
        // clock is behind) is skipped.
        if runner.run(Slot::at(slot, SlotKind::Scheduled)).await {
            in_flight = Some(slot);
        }
    }
}

/// Runs a pending run-now request, if the store has one for this job.
async fn manual<F: Fn(Term) -> JobFuture>(runner: &SlotRunner<F>) {
    let rec = runner.records();
    if rec.store.is_none() || !runner.term().is_valid() {
        return;
    }
    runner.run(Slot::at(rec.now(), SlotKind::Manual)).await;
}

/// At the start of a term: the slots nobody ran since the last claimed one (`missed`), and
/// the slot to run once for them under [`Misfire::RunOnce`] (not itself reported missed), and
/// the instant the gap ends (the term's slots start after it).
/// Without a store (or history for this job) there is no gap to see; `RunOnce` then tries
/// the latest slot, which the slot claim refuses if it already ran.
///
/// A store that does not answer the read of the last claimed slot (its connection is being
/// re-established after a server restart) is asked again, backing off, for as long as the
/// term lasts: the gap can only be computed from the slot claimed last before this term, and
/// a term that gave up on it left the slots of the failover without any record. No slot of
/// this term is claimed meanwhile (its claim would go to the same store); the slots that pass
/// while it waits are part of the gap, `missed` like the others.
async fn gap_at_term_start(
    rec: &Recording,
    term: &Term,
    cron: &Cron,
    tz: Tz,
    misfire: Misfire,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>, DateTime<Utc>) {
    let run_once = misfire == Misfire::RunOnce;
    if rec.store.is_none() {
        let now = rec.now();
        let (gap, catch_up) = term_start_gap(cron, tz, None, now, run_once);
        return (gap, catch_up, now);
    }
    let mut pause = LAST_SLOT_RETRY.0;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match rec.last_slot_ms(term).await {
            Ok(last) => {
                if tries > 1 {
                    tracing::info!(job = %rec.job, tries, "read the job's last slot; looking for missed slots");
                }
                let now = rec.now();
                let (gap, catch_up) =
                    term_start_gap(cron, tz, last.and_then(DateTime::from_timestamp_millis), now, run_once);
                return (gap, catch_up, now);
            }
            Err(e) if tries == 1 => {
                tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; asking again before the term's first slot")
            }
            Err(e) => tracing::debug!(job = %rec.job, error = %e, tries, "cannot read the job's last slot yet"),
        }
        tokio::select! {
            _ = term.cancelled() => return (Vec::new(), None, rec.now()),
            _ = tokio::time::sleep(pause) => {}
        }
        if !term.is_valid() {
            return (Vec::new(), None, rec.now());
        }
        pause = (pause * 2).min(LAST_SLOT_RETRY.1);
    }
}

/// The first and the longest pause between two reads of the job's last slot at a term's start.
const LAST_SLOT_RETRY: (std::time::Duration, std::time::Duration) =
    (std::time::Duration::from_millis(100), std::time::Duration::from_secs(1));

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use simba_core::slots::{next_slot, previous_slot};

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
