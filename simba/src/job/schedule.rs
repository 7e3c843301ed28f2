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

use super::{JobFuture, Misfire, Schedule};
use crate::client::Shared;
use crate::{Error, Term};

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

/// Parses a 6-field cron expression with seconds (the macros use the same parser).
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    CronParser::builder().seconds(Seconds::Required).year(Year::Disallowed).build().parse(expr).map_err(|e| {
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

/// Runs `run` on `timer` for as long as `term` is valid, one run at a time (J5). Returns when
/// the term is cancelled (the election then hands over, H1) or ends.
pub(crate) async fn run_scheduled(
    shared: Arc<Shared>,
    job: Arc<str>,
    timer: Timer,
    misfire: Misfire,
    term: Term,
    run: impl Fn(Term) -> JobFuture,
) -> Result<(), crate::BoxError> {
    match timer {
        Timer::Fixed(period) => {
            // Slots at start + k * period on the monotonic clock: no drift accumulates and
            // sub-second periods stay exact. Slots that pass during a long run are skipped;
            // the next run is on the grid again.
            let start = Instant::now();
            let mut k: u128 = 1;
            loop {
                let slot = start + grid(period, k);
                tokio::select! {
                    _ = term.cancelled() => return Ok(()),
                    _ = sleep_until(slot) => {}
                }
                if !term.is_valid() {
                    return Ok(());
                }
                run_once(&job, &term, run(term.clone()), slot.elapsed()).await;
                let elapsed = start.elapsed().as_nanos();
                k = (k + 1).max(elapsed.div_ceil(period.as_nanos().max(1)));
            }
        }
        Timer::Cron { cron, tz } => {
            let mut catch_up = misfire == Misfire::RunOnce;
            let mut last: Option<DateTime<Utc>> = None;
            loop {
                let now = Utc::now();
                let slot = if catch_up {
                    catch_up = false;
                    previous_slot(&cron, tz, now)
                } else {
                    // Never the same slot twice on this node, even if the wall clock steps back.
                    let after = last.map_or(now, |l| l.max(now));
                    next_slot(&cron, tz, after)
                };
                let Some(slot) = slot else {
                    tracing::warn!(job = %job, "the cron expression has no further slot; the job will not run again");
                    term.cancelled().await;
                    return Ok(());
                };
                // Sleep on the monotonic clock, then re-check the wall clock: it may have
                // been adjusted while we slept.
                loop {
                    let wait = until(slot, Utc::now());
                    if wait.is_zero() {
                        break;
                    }
                    tokio::select! {
                        _ = term.cancelled() => return Ok(()),
                        _ = sleep_until(Instant::now() + wait) => {}
                    }
                }
                last = Some(slot);
                if !term.is_valid() {
                    return Ok(());
                }
                // The slot runs at most once across the cluster: record it with the term's
                // token; a slot recorded by another term (another node, or a node whose wall
                // clock is behind) is skipped.
                match claim(&shared, &term, slot).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(job = %job, slot = %slot, "slot already ran (or the term ended); skipping it");
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(job = %job, slot = %slot, error = %e, "cannot record the slot; skipping it rather than risking a second run");
                        continue;
                    }
                }
                let lateness = until(Utc::now(), slot);
                run_once(&job, &term, run(term.clone()), lateness).await;
            }
        }
    }
}

async fn claim(shared: &Shared, term: &Term, slot: DateTime<Utc>) -> Result<bool, Error> {
    let cell = term.session();
    let to = shared.timing.call_timeout(shared.timing.config.renew_interval(), Instant::now(), Some(cell.deadline()));
    match tokio::time::timeout(
        to,
        shared.backend.claim_slot(&cell.id, term.name(), term.token(), slot.timestamp_millis()),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(source)) => Err(Error::Backend { op: "record a cron slot", name: Some(term.name().to_owned()), source }),
        Err(_) => Ok(false),
    }
}

async fn run_once(job: &str, term: &Term, fut: JobFuture, lateness: Duration) {
    let started = Instant::now();
    crate::metrics::job_started(job, lateness);
    tracing::debug!(job, lease = term.name(), token = term.token(), ?lateness, "job run starting");
    let span = tracing::info_span!("job", job, lease = term.name(), token = term.token());
    let result = tracing::Instrument::instrument(fut, span).await;
    crate::metrics::job_finished(job, started.elapsed(), result.is_err());
    match result {
        Ok(()) => tracing::debug!(job, token = term.token(), took = ?started.elapsed(), "job run finished"),
        Err(e) => tracing::error!(job, lease = term.name(), token = term.token(), error = %e, "job run failed"),
    }
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
