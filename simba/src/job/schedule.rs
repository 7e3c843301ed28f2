//! The scheduler: croner for cron slots (6 fields with seconds, any IANA time zone, DST
//! handled by croner and chrono-tz), Tokio timers for waiting, and the backend's fenced slot
//! record so that each cron slot runs at most once across the cluster (J5): the slot runner
//! (`runner.rs`) claims each slot these loops hand it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use simba_core::policy::{TermStart, jitter, term_start};
use simba_core::slots::{CronSlots, FixedRateSlots, next_slot, until};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::history::Recording;
use super::overlap::InFlight;
use super::runner::{Slot, SlotRunner};
use super::{JobFuture, Misfire, Policies, Schedule};
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

/// Runs `run` on `timer` for as long as `term` is valid (J5), under the job's `misfire` and
/// slot policies (J11-J14). Returns when the term is cancelled (the election then hands over,
/// H1) or ends; runs still in flight are awaited first.
///
/// Every slot is handed to the term's [`SlotRunner`], which claims it (one store round trip:
/// fenced, monotonic, pause-aware, and writing the `running` record), runs it and ends it with
/// a record of its outcome. A pending run-now request runs as a `manual` slot at
/// the start of the term and whenever the control version moves.
pub(crate) async fn run_scheduled(
    simba: Simba,
    mut rec: Recording,
    timer: Timer,
    (misfire, policies): (Misfire, Policies),
    term: Term,
    run: impl Fn(Term) -> JobFuture + Send + Sync,
) -> Result<(), crate::BoxError> {
    let mut run_now = RunNowRequests(rec.control.take());
    // A code-defined job's next slot, as a gauge while this node holds it (a partition's slots
    // are the group's: no gauge).
    let _gauge = (rec.job == rec.metric).then(|| NextSlot(Arc::clone(&rec.metric)));
    let mut runner = SlotRunner::new(simba, rec, term, run);
    if let Timer::Cron { cron, tz } = &timer {
        runner = runner.with_grid((**cron).clone(), *tz, policies.bounds());
    }
    manual(&runner).await;
    let mut runs = InFlight::new(&runner, policies.overlap);
    match timer {
        Timer::Fixed(period) => run_fixed(&mut runs, &mut run_now, period, &policies).await,
        Timer::Cron { cron, tz } => run_cron(&mut runs, &mut run_now, (&cron, tz), misfire, &policies).await,
    }
}

/// The next-slot gauge of a job while this node holds it; 0 once its term ended here.
struct NextSlot(Arc<str>);

impl NextSlot {
    /// Sets the gauge of `rec`'s job to `at`, unless `rec` is a partition's.
    fn set(rec: &Recording, at: DateTime<Utc>) {
        if rec.job == rec.metric {
            crate::metrics::job_next_slot(&rec.metric, Some(at));
        }
    }
}

impl Drop for NextSlot {
    fn drop(&mut self) {
        crate::metrics::job_next_slot(&self.0, None);
    }
}

/// Run-now requests: moves when the store's control version moved (or the store broadcast a
/// change), which is when a request may be pending.
struct RunNowRequests(Option<watch::Receiver<u64>>);

impl RunNowRequests {
    /// Waits until the control version moves; never completes without a store.
    async fn changed(&mut self) {
        super::wait::moved(self.0.as_mut()).await
    }
}

/// Waits until `due` (the monotonic clock) while the runs in flight progress and run-now
/// requests come in. `false`: the term was cancelled (the runs in flight were awaited).
async fn wait_until<F: Fn(Term) -> JobFuture + Send + Sync>(
    runs: &mut InFlight<'_, F>,
    run_now: &mut RunNowRequests,
    due: Instant,
) -> bool {
    let term = runs.term().clone();
    loop {
        // A backfill's next slot (J16), when one is walking and no run is in flight.
        let backfill = runs.backfill_due();
        tokio::select! {
            _ = term.cancelled() => {
                runs.drain(true).await;
                return false;
            }
            _ = sleep_until(due) => return true,
            _ = run_now.changed() => runs.manual().await,
            _ = runs.ended() => {}
            _ = super::wait::until(backfill) => runs.backfill().await,
        }
        // Each run-now request is its own run (R3): after one ran, the next pending one is
        // claimed at once (the claim answers `AlreadyClaimed` when none is left).
        while runs.take_manual_again() && term.is_valid() {
            runs.manual().await;
        }
    }
}

/// Serves run-now requests and the runs in flight until the term is cancelled: the job has no
/// further slot (its end bound passed, or its cron expression has none).
async fn idle<F: Fn(Term) -> JobFuture + Send + Sync>(runs: &mut InFlight<'_, F>, run_now: &mut RunNowRequests) {
    while wait_until(runs, run_now, Instant::now() + Duration::from_secs(86_400)).await {}
}

/// The fixed-rate loop of [`run_scheduled`]: slots on the grid of `period` from the term's
/// start ([`FixedRateSlots`]), each started up to the jitter after its tick (J13), none
/// outside the bounds (J14).
async fn run_fixed<F: Fn(Term) -> JobFuture + Send + Sync>(
    runs: &mut InFlight<'_, F>,
    run_now: &mut RunNowRequests,
    period: Duration,
    policies: &Policies,
) -> Result<(), crate::BoxError> {
    let (rec, term) = (runs.records().clone(), runs.term().clone());
    let start = Instant::now();
    let start_wall = rec.now();
    // Claimed slots must grow across terms even if this node's wall clock is behind
    // the previous holder's: name them after the last claimed one.
    let last = match rec.last_slot_ms(&term).await {
        Ok(last) => last,
        Err(e) => {
            tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; the store still refuses a claim of any slot at or before the last one claimed");
            None
        }
    };
    let (bounds, max_jitter) = (policies.bounds(), policies.jitter.unwrap_or_default());
    let mut slots = FixedRateSlots::new(period, start_wall, last);
    loop {
        let named = slots.name();
        let delay = jitter(&rec.job, named.0, max_jitter, Some(period));
        NextSlot::set(&rec, named.1);
        if !wait_until(runs, run_now, start + slots.due() + delay).await {
            return Ok(());
        }
        if !term.is_valid() {
            runs.drain(true).await;
            return Ok(());
        }
        let slot = Slot::fixed_rate(named);
        if bounds.ended(slot.at) {
            tracing::info!(job = %rec.metric, "the job's end bound passed; it will not run again");
            idle(runs, run_now).await;
            return Ok(());
        }
        let ran = if bounds.contains(slot.at) { runs.due(slot).await } else { None };
        // One record for the slots that passed while the run was in flight (none outside
        // the bounds: those are not slots).
        let skipped: Vec<_> = slots.advance(start.elapsed()).into_iter().filter(|s| bounds.contains(*s)).collect();
        rec.skipped_run(&skipped, ran, &term);
    }
}

/// The cron loop of [`run_scheduled`]: the misfire gap at the term's start (with the
/// catch-up window, J12), then each slot claimed once across the cluster ([`CronSlots`]),
/// started up to the jitter after its instant (J13), none outside the bounds (J14).
async fn run_cron<F: Fn(Term) -> JobFuture + Send + Sync>(
    runs: &mut InFlight<'_, F>,
    run_now: &mut RunNowRequests,
    (cron, tz): (&Cron, Tz),
    misfire: Misfire,
    policies: &Policies,
) -> Result<(), crate::BoxError> {
    let (rec, term) = (runs.records().clone(), runs.term().clone());
    let (start, now) = gap_at_term_start(&rec, &term, (cron, tz), misfire, policies).await;
    record_term_start(&rec, &term, &start, policies);
    if let Some(slot) = start.catch_up
        && term.is_valid()
    {
        runs.runner().run(Slot::at(slot, SlotKind::CaughtUp)).await;
    }
    let (bounds, max_jitter) = (policies.bounds(), policies.jitter.unwrap_or_default());
    let mut slots = CronSlots::at_term_start(now, start.catch_up);
    // The last slot this loop ran, which the slots skipped next passed behind.
    let mut in_flight = None;
    loop {
        let (skipped, next) = slots.next(cron, tz, rec.now());
        // Slots that passed while the previous run was in flight: one record.
        let skipped: Vec<_> = skipped.into_iter().filter(|s| bounds.contains(*s)).collect();
        rec.skipped_run(&skipped, in_flight.take(), &term);
        let Some(slot) = bounds.next_cron(cron, tz, next) else {
            let why =
                if next.is_some() { "the job's end bound passed" } else { "the cron expression has no further slot" };
            tracing::warn!(job = %rec.metric, "{why}; the job will not run again");
            idle(runs, run_now).await;
            return Ok(());
        };
        NextSlot::set(&rec, slot);
        let until_next = next_slot(cron, tz, slot).and_then(|n| (n - slot).to_std().ok());
        let starts = slot
            + chrono::Duration::from_std(jitter(&rec.job, slot.timestamp_millis(), max_jitter, until_next))
                .unwrap_or_default();
        // Sleep on the monotonic clock, then re-check the wall clock: it may have
        // been adjusted while we slept.
        loop {
            let wait = until(starts, rec.now());
            if wait.is_zero() {
                break;
            }
            if !wait_until(runs, run_now, Instant::now() + wait).await {
                return Ok(());
            }
        }
        slots.take(slot);
        if !term.is_valid() {
            runs.drain(true).await;
            return Ok(());
        }
        // The slot runs at most once across the cluster: claim it with the term's
        // token; a slot claimed by another term (another node, or a node whose wall
        // clock is behind) is skipped.
        in_flight = runs.due(Slot::at(slot, SlotKind::Scheduled)).await;
    }
}

/// Records the slots of a term's start gap: `missed`, saying so for those older than the
/// catch-up window (J12).
fn record_term_start(rec: &Recording, term: &Term, start: &TermStart, policies: &Policies) {
    if let Some(w) = policies.catch_up_window {
        let why = format!("older than the catch-up window ({}) when the term started", humantime::format_duration(w));
        for s in &start.expired {
            rec.append_with(*s, Outcome::Missed, Some(why.clone()), term);
        }
    }
    for s in &start.missed {
        rec.append(*s, Outcome::Missed, term);
    }
}

/// Runs the pending run-now requests, if the store has some for this job: each is its own
/// run (R3), claimed one after the other until none is left (at most the most a job keeps).
async fn manual<F: Fn(Term) -> JobFuture>(runner: &SlotRunner<F>) {
    let rec = runner.records();
    for _ in 0..crate::job_store::MAX_PENDING_REQUESTS {
        if rec.store.is_none() || !runner.term().is_valid() {
            return;
        }
        if !runner.run(Slot::at(rec.now(), SlotKind::Manual)).await {
            return;
        }
    }
}

/// At the start of a term: the slots nobody ran since the last claimed one (`missed`, those
/// older than the catch-up window apart, J12), the slot to run once for them under
/// [`Misfire::RunOnce`] (not itself reported missed), and the instant the gap ends (the
/// term's slots start after it). Slots outside the bounds are left out (J14).
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
    (cron, tz): (&Cron, Tz),
    misfire: Misfire,
    policies: &Policies,
) -> (TermStart, DateTime<Utc>) {
    let run_once = misfire == Misfire::RunOnce;
    let (window, bounds) = (policies.catch_up_window, policies.bounds());
    if rec.store.is_none() {
        let now = rec.now();
        return (term_start(cron, tz, None, now, run_once, window, &bounds), now);
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
                let last = last.and_then(DateTime::from_timestamp_millis);
                return (term_start(cron, tz, last, now, run_once, window, &bounds), now);
            }
            Err(e) if tries == 1 => {
                tracing::warn!(job = %rec.job, error = %e, "cannot read the job's last slot; asking again before the term's first slot")
            }
            Err(e) => tracing::debug!(job = %rec.job, error = %e, tries, "cannot read the job's last slot yet"),
        }
        tokio::select! {
            _ = term.cancelled() => return (TermStart::default(), rec.now()),
            _ = tokio::time::sleep(pause) => {}
        }
        if !term.is_valid() {
            return (TermStart::default(), rec.now());
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
