//! How a job retries and times out: the policy the runner (`runner.rs`) runs each slot's
//! attempts under; and the slot policies (J11-J14) the slot loops (`schedule.rs`) follow,
//! whose decisions are the core's (`simba_core::policy`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use simba_core::policy::Bounds;
pub use simba_core::policy::Overlap;

use super::{Misfire, Schedule};

/// A job's slot policies (rules J11-J14): what a slot that comes due does while a run is in
/// flight ([`Overlap`]), how old a missed slot may be and still be caught up, how far a
/// slot's start is spread, and the instants outside which the job has no slots. The macros'
/// options `overlap`, `catch_up_window`, `jitter`, `start` and `end` build it; by hand,
/// [`ScheduledJob::with_policies`](super::ScheduledJob::with_policies); `simba.toml` keys of
/// the same names override it per job.
///
/// ```
/// use std::time::Duration;
/// use simba::job::{Overlap, Policies};
///
/// const P: Policies = Policies::new()
///     .with_overlap(Overlap::BufferOne)
///     .with_jitter(Duration::from_secs(30))
///     .with_start_ms(1_798_761_600_000); // 2027-01-01T00:00:00Z
/// assert_eq!(P.overlap, Overlap::BufferOne);
/// assert_eq!(P.start.map(|s| s.to_rfc3339()).as_deref(), Some("2027-01-01T00:00:00+00:00"));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policies {
    /// What a slot that comes due does while a run of the job is in flight (J11).
    pub overlap: Overlap,
    /// With `misfire = "run_once"`: missed slots older than this at a term's start are
    /// recorded `missed` (saying so) and never caught up (J12). `None`: no limit.
    pub catch_up_window: Option<Duration>,
    /// The longest start jitter: each slot starts up to this long after its instant, by a
    /// hash of the job's name and the slot, the same on every node, and always before the
    /// next slot (J13). `None`: slots start on their instant.
    pub jitter: Option<Duration>,
    /// No slot before this instant (J14).
    pub start: Option<DateTime<Utc>>,
    /// No slot after this instant (J14).
    pub end: Option<DateTime<Utc>>,
}

impl Policies {
    /// The defaults: overlap `skip`, no catch-up window, no jitter, no bounds.
    pub const fn new() -> Self {
        Policies { overlap: Overlap::Skip, catch_up_window: None, jitter: None, start: None, end: None }
    }

    /// Slots that come due while a run is in flight follow `overlap`.
    pub const fn with_overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Missed slots older than `window` at a term's start are not caught up.
    pub const fn with_catch_up_window(mut self, window: Duration) -> Self {
        self.catch_up_window = Some(window);
        self
    }

    /// Each slot starts up to `max` after its instant (the same instant on every node).
    pub const fn with_jitter(mut self, max: Duration) -> Self {
        self.jitter = Some(max);
        self
    }

    /// No slot before `start`.
    pub fn with_start(mut self, start: DateTime<Utc>) -> Self {
        self.start = Some(start);
        self
    }

    /// No slot after `end`.
    pub fn with_end(mut self, end: DateTime<Utc>) -> Self {
        self.end = Some(end);
        self
    }

    /// No slot before `ms` unix milliseconds (`const`, what the macros generate).
    pub const fn with_start_ms(mut self, ms: i64) -> Self {
        self.start = DateTime::from_timestamp_millis(ms);
        self
    }

    /// No slot after `ms` unix milliseconds (`const`).
    pub const fn with_end_ms(mut self, ms: i64) -> Self {
        self.end = DateTime::from_timestamp_millis(ms);
        self
    }

    /// The bounds as the core takes them.
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds { start: self.start, end: self.end }
    }

    /// Why these policies contradict each other or the job's `schedule` and `misfire`, with
    /// the option at fault (`None`: they do not). The macros refuse the same at compile time;
    /// this catches `simba.toml` and jobs built by hand.
    pub fn problem(&self, schedule: &Schedule, misfire: Misfire) -> Option<(&'static str, String)> {
        use simba_rules::policies::{WINDOW_NEEDS_CRON, WINDOW_NEEDS_RUN_ONCE, bounds_problem, jitter_problem};
        if self.catch_up_window.is_some() {
            if matches!(schedule, Schedule::FixedRate(_)) {
                return Some(("catch_up_window", WINDOW_NEEDS_CRON.to_owned()));
            }
            if misfire != Misfire::RunOnce {
                return Some(("catch_up_window", WINDOW_NEEDS_RUN_ONCE.to_owned()));
            }
        }
        if self.catch_up_window.is_some_and(|w| w.is_zero()) {
            return Some(("catch_up_window", "the catch-up window must be longer than zero".to_owned()));
        }
        let period = match schedule {
            Schedule::FixedRate(p) => Some(p.as_millis()),
            Schedule::Cron { .. } => None,
        };
        if let Some(m) = self.jitter.and_then(|j| jitter_problem(j.as_millis(), period)) {
            return Some(("jitter", m));
        }
        let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
        bounds_problem(ms(self.start), ms(self.end)).map(|m| ("end", m.to_owned()))
    }
}

/// How a job retries and times out (`retry`, `backoff`, `timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPolicy {
    /// How many attempts a slot gets (1: no retry).
    pub attempts: u32,
    /// The first backoff; each retry doubles it, capped at [`RunPolicy::MAX_BACKOFF`], with
    /// up to 20% jitter.
    pub backoff: Duration,
    /// A run that outlives this is signalled, given [`RunPolicy::GRACE`], then dropped.
    pub timeout: Option<Duration>,
}

impl Default for RunPolicy {
    fn default() -> Self {
        RunPolicy { attempts: 1, backoff: Duration::from_secs(1), timeout: None }
    }
}

impl RunPolicy {
    /// The longest backoff between two attempts.
    pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
    /// How long a timed-out run may take to return after its cancellation signal.
    pub const GRACE: Duration = Duration::from_secs(1);

    /// The wait before attempt `next` (2 or more), `unit` in `[0, 1)` for the jitter.
    pub fn backoff_before(&self, next: u32, unit: f64) -> Duration {
        let doublings = next.saturating_sub(2).min(20);
        let base = self.backoff.saturating_mul(1 << doublings).min(Self::MAX_BACKOFF);
        base.mul_f64(0.8 + 0.4 * unit.clamp(0.0, 1.0)).min(Self::MAX_BACKOFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backoff doubles, is capped and jittered within ±20%.
    #[test]
    fn backoff_is_exponential_capped_and_jittered() {
        let p = RunPolicy { attempts: 5, backoff: Duration::from_secs(1), timeout: None };
        assert_eq!(p.backoff_before(2, 0.5), Duration::from_secs(1));
        assert_eq!(p.backoff_before(3, 0.5), Duration::from_secs(2));
        assert_eq!(p.backoff_before(4, 0.5), Duration::from_secs(4));
        assert!(p.backoff_before(2, 0.0) >= Duration::from_millis(800));
        assert!(p.backoff_before(2, 0.999) <= Duration::from_millis(1200));
        assert_eq!(p.backoff_before(40, 0.5), RunPolicy::MAX_BACKOFF);
    }
}
