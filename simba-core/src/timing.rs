//! The timing rules: deadlines, renewal periods, timeouts and backoffs as functions of the
//! configuration and monotonic instants ([`Moment`]). No I/O and no clock reads happen here,
//! so every rule of section D is tested by arithmetic alone.

use std::time::Duration;

use super::Moment;
use super::mutants::{Mutant, active};

/// The settings the timing rules read, as plain values (section C of the contract). The
/// `simba` crate's `SimbaConfig` checks them (rule C1) and converts into this; the core takes
/// them as they come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingConfig {
    /// How long the backend keeps a session after its last renewal.
    pub lease_duration: Duration,
    /// The keep-alive period.
    pub renew_interval: Duration,
    /// The bound on the clock-rate difference between node and backend, in `[0, 0.5)`.
    pub drift: f64,
    /// Extra safety subtracted from every deadline.
    pub margin: Duration,
    /// The random part of a candidate's retry delay.
    pub retry_jitter: Duration,
    /// The lower bound of the backoff after a failed renewal.
    pub min_backoff: Duration,
}

impl Default for TimingConfig {
    /// The defaults of section C: a 15 s lease renewed every 5 s, drift 0.01, margin 50 ms,
    /// retry jitter 2.5 s, minimum backoff 100 ms.
    fn default() -> Self {
        TimingConfig {
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            drift: 0.01,
            margin: Duration::from_millis(50),
            retry_jitter: Duration::from_millis(2500),
            min_backoff: Duration::from_millis(100),
        }
    }
}

impl TimingConfig {
    /// The wait after `current` when an open of the session failed again: twice as long, at
    /// most `renew_interval` (D5). The session's reopen and the runtime's start share it.
    pub fn next_open_backoff(&self, current: Duration) -> Duration {
        (current * 2).min(self.renew_interval)
    }
}

/// The timing rules of one client.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The configuration the rules read.
    pub config: TimingConfig,
}

/// When to renew next, derived from what the backend granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewPlan {
    /// The keep-alive period.
    pub period: Duration,
    /// Whether the grant was too short for `renew_interval` (rule D4).
    pub shortened: bool,
}

impl Timing {
    /// The rules of `config`.
    pub fn new(config: TimingConfig) -> Self {
        Timing { config }
    }

    /// How long a grant of `remaining` stays valid on the local clock:
    /// `remaining * (1 - drift) - margin` (rule D1), never negative. The drift term is what
    /// keeps the deadline before the store's expiry while the clocks' rates differ (D6).
    pub fn local_validity(&self, remaining: Duration) -> Duration {
        let drift = if active(Mutant::IgnoreDrift) { 0.0 } else { self.config.drift };
        remaining.mul_f64(1.0 - drift).saturating_sub(self.config.margin)
    }

    /// D1: `deadline = sent_at + remaining * (1 - drift) - margin`, where `sent_at` is when the
    /// request was sent, so a slow reply only shortens the deadline.
    pub fn deadline<T: Moment>(&self, sent_at: T, remaining: Duration) -> T {
        sent_at + self.local_validity(remaining)
    }

    /// D4: renew every `renew_interval`, unless the backend granted less than
    /// `lease_duration` and the local validity cannot fit two renewals at `renew_interval`;
    /// then renew every third of the local validity.
    pub fn renew_plan(&self, remaining: Duration) -> RenewPlan {
        let validity = self.local_validity(remaining);
        let interval = self.config.renew_interval;
        if remaining < self.config.lease_duration && validity < interval * 2 {
            RenewPlan { period: (validity / 3).max(Duration::from_millis(1)), shortened: true }
        } else {
            RenewPlan { period: interval, shortened: false }
        }
    }

    /// D5: after a failed renewal, retry after `clamp(remaining / 2, min_backoff, renew_interval)`
    /// where `remaining` is the time left before the local deadline.
    pub fn backoff<T: Moment>(&self, now: T, deadline: T) -> Duration {
        let remaining = deadline.saturating_duration_since(now);
        (remaining / 2).clamp(self.config.min_backoff, self.config.renew_interval)
    }

    /// K1: a candidate retries after `renew_interval / 2 + uniform[0, retry_jitter)`;
    /// `unit` is a uniform sample from `[0, 1)`.
    pub fn candidate_delay(&self, unit: f64) -> Duration {
        self.config.renew_interval / 2 + self.config.retry_jitter.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Tasks of one process queue locally for a lock name, so a local waiter,
/// already waiting when its neighbour releases, would win every race against another node's
/// candidate (woken by the release's broadcast a few milliseconds later). Once the name has
/// passed between this process's tasks for half a renewal interval (the candidate delay's
/// base, K1) without going to the store's other nodes, the next local waiter first gives
/// way for this long: enough for a woken remote candidate's attempt, short beside the streak.
pub fn lock_courtesy(renew_interval: Duration) -> Duration {
    (renew_interval / 20).clamp(Duration::from_millis(20), Duration::from_millis(250))
}

/// Whether the local waiter that takes a lock's turn at `now` gives way first
/// ([`lock_courtesy`]): the name came from the store at `since`, its last local holder released
/// it at `released_at`, and the streak (since to that release) reached half a renewal interval.
/// A release older than that is no streak: nobody local waited.
pub fn gives_way<T: Moment>(since: Option<T>, released_at: Option<T>, now: T, renew_interval: Duration) -> bool {
    let fair = renew_interval / 2;
    match (since, released_at) {
        (Some(since), Some(released)) => {
            now.saturating_duration_since(released) < fair && released.saturating_duration_since(since) >= fair
        }
        _ => false,
    }
}

/// What the local waiter that takes a lock's turn does first, and what
/// becomes of the name's local streak: the one place this rule is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Courtesy {
    /// Give way for this long ([`lock_courtesy`]); the streak ends (whoever takes the name
    /// next, from the store or locally, starts a new one).
    GiveWay(Duration),
    /// Go ahead; the streak goes on (a local holder released it just now).
    Keep,
    /// Go ahead; the streak ends: nobody local took the name over at once, so whoever takes
    /// it next starts a new one.
    StartAnew,
}

/// The courtesy rule ([`gives_way`], [`lock_courtesy`]) with the streak's fate: the name
/// came from the store at `since`, its last local holder released it at `released_at`.
pub fn courtesy<T: Moment>(since: Option<T>, released_at: Option<T>, now: T, renew_interval: Duration) -> Courtesy {
    if gives_way(since, released_at, now, renew_interval) {
        return Courtesy::GiveWay(lock_courtesy(renew_interval));
    }
    match released_at {
        Some(r) if now.saturating_duration_since(r) < renew_interval / 2 => Courtesy::Keep,
        _ => Courtesy::StartAnew,
    }
}

/// Fair locks between processes: a local waiter whose process gave a lock name way at
/// `gave_way_at` ([`Courtesy::GiveWay`]) and did not get it back, woken at `now` by another
/// node's release of the name, waits this long before its attempt when the give-way was less
/// than a renewal interval ago. Another process's candidate, which has waited longer (through
/// the streak that just ended), then takes the name first, so the name goes round the
/// processes instead of between the last two (a streak lasts at least half an interval, so
/// the process whose streak came before the last one no longer defers).
pub fn defer_after_release<T: Moment>(gave_way_at: Option<T>, now: T, renew_interval: Duration) -> Option<Duration> {
    gave_way_at.filter(|&g| now.saturating_duration_since(g) < renew_interval).map(|_| lock_courtesy(renew_interval))
}

/// D2: a backend call times out after the current renewal period, and never later than the
/// session's deadline (a reply after it could not be used anyway). Applied through
/// `SessionCell::call_timeout`, which passes the session's current period, and by the
/// session machine to its keep-alives.
pub fn call_timeout<T: Moment>(period: Duration, now: T, deadline: T) -> Duration {
    period.min(deadline.saturating_duration_since(now))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn timing() -> Timing {
        Timing::new(TimingConfig::default())
    }

    /// D1: the formula, exactly.
    #[test]
    fn d1_deadline_formula() {
        let t = timing();
        let sent = Instant::now();
        let d = t.deadline(sent, Duration::from_secs(15));
        // 15 s * 0.99 - 50 ms = 14.8 s
        assert_eq!(d - sent, Duration::from_millis(14_800));
    }

    /// D6, the safety argument on arithmetic: while the node's clock runs at a rate within
    /// `drift` of the store's, the local deadline (D1) comes strictly before the store expires
    /// the session, seen on the store's clock, for any grant; and a clock slower than `drift`
    /// allows breaks it (so this test can fail).
    #[test]
    fn d6_local_deadline_precedes_the_stores_expiry_within_drift() {
        let t = Timing::new(TimingConfig { drift: 0.05, ..TimingConfig::default() });
        // The node's elapsed time is the store's times `rate`: the worst case is the slowest
        // clock, whose deadline comes latest on the store's clock.
        let store_time_of_deadline = |remaining: Duration, rate: f64| t.local_validity(remaining).div_f64(rate);
        for ms in [200, 1_000, 5_000, 15_000, 60_000] {
            let remaining = Duration::from_millis(ms);
            for rate in [0.95, 0.97, 1.0, 1.03, 1.05] {
                // The store's clock started `remaining` at or after the send: its expiry is at
                // `remaining` or later after the send.
                assert!(store_time_of_deadline(remaining, rate) < remaining, "{ms} ms at rate {rate}");
            }
        }
        let careless = Timing::new(TimingConfig { drift: 0.0, margin: Duration::ZERO, ..TimingConfig::default() });
        let late = careless.local_validity(Duration::from_secs(15)).div_f64(0.97);
        assert!(late > Duration::from_secs(15), "a 3% slow clock outlives the store's expiry without drift");
    }

    /// D1, D6: the mutant the model checker must catch (`IgnoreDrift`) drops exactly the drift
    /// term of the formula, and only inside `with`.
    #[cfg(simba_mutants)]
    #[test]
    fn d1_d6_mutant_ignore_drift_drops_the_drift_term() {
        use crate::mutants::{Mutant, with};
        let t = Timing::new(TimingConfig { drift: 0.1, ..TimingConfig::default() });
        let grant = Duration::from_secs(15);
        // 15 s * 0.9 - 50 ms = 13.45 s; without the drift term 15 s - 50 ms = 14.95 s.
        assert_eq!(t.local_validity(grant), Duration::from_millis(13_450));
        assert_eq!(with(Some(Mutant::IgnoreDrift), || t.local_validity(grant)), Duration::from_millis(14_950));
        let sent = Instant::now();
        assert_eq!(with(Some(Mutant::IgnoreDrift), || t.deadline(sent, grant)) - sent, Duration::from_millis(14_950));
        assert_eq!(
            with(Some(Mutant::DeadlineFromArrival), || t.local_validity(grant)),
            Duration::from_millis(13_450),
            "another mutant leaves the formula alone"
        );
        assert_eq!(t.local_validity(grant), Duration::from_millis(13_450), "off outside `with`");
    }

    /// D1: a grant shorter than the margin yields a deadline at `sent_at`, never before.
    #[test]
    fn d1_deadline_never_before_sent_at() {
        let t = timing();
        let sent = Instant::now();
        assert_eq!(t.deadline(sent, Duration::from_millis(10)), sent);
    }

    /// D4: a full grant renews every `renew_interval`; a capped one every third of the
    /// local validity.
    #[test]
    fn d4_renew_plan() {
        let t = timing();
        assert_eq!(
            t.renew_plan(Duration::from_secs(15)),
            RenewPlan { period: Duration::from_secs(5), shortened: false }
        );
        // 6 s granted: validity 5.89 s < 2 * 5 s, renew every 5.89 / 3 s.
        let p = t.renew_plan(Duration::from_secs(6));
        assert!(p.shortened);
        assert_eq!(p.period, Duration::from_millis(5_890) / 3);
        // 12 s granted: validity 11.83 s fits two renewals at 5 s.
        assert!(!t.renew_plan(Duration::from_secs(12)).shortened);
    }

    /// D2: the call timeout is the renewal period, cut at the deadline.
    #[test]
    fn d2_call_timeout() {
        let now = Instant::now();
        let p = Duration::from_secs(5);
        assert_eq!(call_timeout(p, now, now + Duration::from_secs(2)), Duration::from_secs(2));
        assert_eq!(call_timeout(p, now, now + Duration::from_secs(9)), p);
        assert_eq!(call_timeout(p, now, now), Duration::ZERO);
    }

    /// D5: the backoff is half the remaining time, clamped.
    #[test]
    fn d5_backoff() {
        let t = timing();
        let now = Instant::now();
        assert_eq!(t.backoff(now, now + Duration::from_secs(14)), Duration::from_secs(5));
        assert_eq!(t.backoff(now, now + Duration::from_secs(6)), Duration::from_secs(3));
        assert_eq!(t.backoff(now, now + Duration::from_millis(120)), Duration::from_millis(100));
        assert_eq!(t.backoff(now, now), Duration::from_millis(100));
    }

    /// K1: the candidate delay spans `[renew_interval / 2, renew_interval / 2 + retry_jitter)`.
    #[test]
    fn k1_candidate_delay() {
        let t = timing();
        assert_eq!(t.candidate_delay(0.0), Duration::from_millis(2500));
        assert_eq!(t.candidate_delay(0.5), Duration::from_millis(3750));
    }

    /// A local waiter gives way once a local streak reached half a renewal
    /// interval, right after a local release; not before, and not after a release nobody local
    /// followed at once. The courtesy is a twentieth of the interval, within 20 to 250 ms.
    #[test]
    fn issue15_7_lock_courtesy() {
        let renew = Duration::from_secs(5);
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!gives_way(Some(at(0)), Some(at(2499)), at(2500), renew), "a streak under 2.5 s");
        assert!(gives_way(Some(at(0)), Some(at(2500)), at(2501), renew), "2.5 s, released just now");
        assert!(!gives_way(Some(at(0)), Some(at(2500)), at(5000), renew), "released 2.5 s ago: no streak");
        assert!(!gives_way(None, Some(at(2500)), at(2501), renew), "fresh from the store");
        assert!(!gives_way::<std::time::Instant>(Some(at(0)), None, at(9000), renew), "never released locally");
        assert_eq!(lock_courtesy(renew), Duration::from_millis(250));
        assert_eq!(lock_courtesy(Duration::from_secs(1)), Duration::from_millis(50));
        assert_eq!(lock_courtesy(Duration::from_millis(100)), Duration::from_millis(20));
        // Woken by another node's release: defer only within a renewal interval of giving way.
        assert_eq!(defer_after_release(Some(at(0)), at(4999), renew), Some(Duration::from_millis(250)));
        assert_eq!(defer_after_release(Some(at(0)), at(5000), renew), None, "the give-way before the last streak");
        assert_eq!(defer_after_release(None, at(10), renew), None, "never gave way");
        // The streak's fate, decided in one place.
        let c = |since, released, now| courtesy(since, released, now, renew);
        assert_eq!(c(Some(at(0)), Some(at(2500)), at(2501)), Courtesy::GiveWay(Duration::from_millis(250)));
        assert_eq!(c(Some(at(0)), Some(at(2000)), at(2001)), Courtesy::Keep, "a short streak goes on");
        assert_eq!(c(Some(at(0)), Some(at(2000)), at(4500)), Courtesy::StartAnew, "nobody local followed at once");
        assert_eq!(c(Some(at(0)), None, at(1)), Courtesy::StartAnew, "never released locally");
        assert_eq!(c(None, None, at(1)), Courtesy::StartAnew, "fresh from the store");
    }
}
