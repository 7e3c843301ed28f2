//! How a job retries and times out: the policy the runner (`runner.rs`) runs each slot's
//! attempts under.

use std::time::Duration;

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
