//! Timing configuration (section C of the contract).

use std::time::Duration;

use simba_core::TimingConfig;

use crate::{ConfigError, Error};

/// The timing of sessions and candidates.
///
/// | field | default | meaning |
/// | --- | --- | --- |
/// | `lease_duration` | 15 s | the backend expires a session this long after its last renewal |
/// | `renew_interval` | `lease_duration / 3` | keep-alive period |
/// | `drift` | 0.01 | bound on the clock-rate difference between node and backend, in `[0, 0.5)` |
/// | `margin` | 50 ms | extra safety subtracted from every deadline |
/// | `retry_jitter` | `renew_interval / 2` | candidates retry after `renew_interval / 2 + [0, retry_jitter)` |
/// | `min_backoff` | 100 ms | lower bound of the backoff after a failed renewal |
/// | `fair_locks` | `true` | after tasks of this process passed a lock name among themselves for `renew_interval / 2`, the next one gives other nodes' candidates a short turn first |
/// | `remove_idle_leases_after` | 24 h | a lease record nobody holds or acquired for this long is removed from the store (rule B3; `None`: kept for ever) |
///
/// ```
/// use std::time::Duration;
/// let config = simba::SimbaConfig::builder()
///     .lease_duration(Duration::from_secs(6))
///     .build()?;
/// assert_eq!(config.renew_interval(), Duration::from_secs(2));
/// let faster = config.to_builder().lease_duration(Duration::from_secs(3)).renew_interval(Duration::from_secs(1)).build()?;
/// assert_eq!(faster.lease_duration(), Duration::from_secs(3));
/// # Ok::<(), simba::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimbaConfig {
    lease_duration: Duration,
    renew_interval: Duration,
    drift: f64,
    margin: Duration,
    retry_jitter: Duration,
    min_backoff: Duration,
    fair_locks: bool,
    remove_idle_leases_after: Option<Duration>,
}

impl Default for SimbaConfig {
    fn default() -> Self {
        SimbaConfigBuilder::default().build_unchecked()
    }
}

impl SimbaConfig {
    /// A builder with the defaults.
    pub fn builder() -> SimbaConfigBuilder {
        SimbaConfigBuilder::default()
    }

    /// A builder holding this configuration, to derive a variant. Fields derived from
    /// `lease_duration` keep their current values unless set again.
    pub fn to_builder(&self) -> SimbaConfigBuilder {
        SimbaConfigBuilder {
            lease_duration: self.lease_duration,
            renew_interval: Some(self.renew_interval),
            drift: self.drift,
            margin: self.margin,
            retry_jitter: Some(self.retry_jitter),
            min_backoff: self.min_backoff,
            fair_locks: self.fair_locks,
            remove_idle_leases_after: self.remove_idle_leases_after,
        }
    }

    /// How long the backend keeps a session after its last renewal.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }
    /// The keep-alive period.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }
    /// The bound on the clock-rate difference between node and backend.
    pub fn drift(&self) -> f64 {
        self.drift
    }
    /// Extra safety subtracted from every deadline.
    pub fn margin(&self) -> Duration {
        self.margin
    }
    /// The random part of a candidate's retry delay.
    pub fn retry_jitter(&self) -> Duration {
        self.retry_jitter
    }
    /// The lower bound of the backoff after a failed renewal.
    pub fn min_backoff(&self) -> Duration {
        self.min_backoff
    }
    /// The wait after `current` when an open of the session failed again: twice as long, at
    /// most `renew_interval` (D5). The session's reopen and the runtime's start share it.
    pub(crate) fn next_open_backoff(&self, current: Duration) -> Duration {
        TimingConfig::from(*self).next_open_backoff(current)
    }
    /// Whether a lock name passed among this process's tasks gives other nodes a turn
    /// (`simba_core::timing::gives_way`).
    pub fn fair_locks(&self) -> bool {
        self.fair_locks
    }
    /// How long a lease record stays in the store after its last acquisition once nobody
    /// holds it (rule B3); `None`: for ever.
    pub fn remove_idle_leases_after(&self) -> Option<Duration> {
        self.remove_idle_leases_after
    }

    /// The longest a crashed holder keeps a lease from the others:
    /// `lease_duration + renew_interval / 2 + retry_jitter`.
    pub fn failover_bound(&self) -> Duration {
        self.lease_duration + self.renew_interval / 2 + self.retry_jitter
    }
}

/// The one place a configuration becomes the core's timing settings (the core's rules read
/// only these; `fair_locks` is the engine's own).
impl From<SimbaConfig> for TimingConfig {
    fn from(c: SimbaConfig) -> Self {
        TimingConfig {
            lease_duration: c.lease_duration,
            renew_interval: c.renew_interval,
            drift: c.drift,
            margin: c.margin,
            retry_jitter: c.retry_jitter,
            min_backoff: c.min_backoff,
        }
    }
}

/// Builds a [`SimbaConfig`]; [`build`](SimbaConfigBuilder::build) checks rule C1.
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct SimbaConfigBuilder {
    lease_duration: Duration,
    renew_interval: Option<Duration>,
    drift: f64,
    margin: Duration,
    retry_jitter: Option<Duration>,
    min_backoff: Duration,
    fair_locks: bool,
    remove_idle_leases_after: Option<Duration>,
}

/// [`SimbaConfigBuilder::remove_idle_leases_after`]'s default: a day.
pub const DEFAULT_REMOVE_IDLE_LEASES_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for SimbaConfigBuilder {
    fn default() -> Self {
        SimbaConfigBuilder {
            lease_duration: Duration::from_secs(15),
            renew_interval: None,
            drift: 0.01,
            margin: Duration::from_millis(50),
            retry_jitter: None,
            min_backoff: Duration::from_millis(100),
            fair_locks: true,
            remove_idle_leases_after: Some(DEFAULT_REMOVE_IDLE_LEASES_AFTER),
        }
    }
}

impl SimbaConfigBuilder {
    /// Sets `lease_duration` (default 15 s).
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }
    /// Sets `renew_interval` (default `lease_duration / 3`).
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = Some(d);
        self
    }
    /// Sets `drift` (default 0.01), in `[0, 0.5)`.
    pub fn drift(mut self, drift: f64) -> Self {
        self.drift = drift;
        self
    }
    /// Sets `margin` (default 50 ms).
    pub fn margin(mut self, d: Duration) -> Self {
        self.margin = d;
        self
    }
    /// Sets `retry_jitter` (default `renew_interval / 2`).
    pub fn retry_jitter(mut self, d: Duration) -> Self {
        self.retry_jitter = Some(d);
        self
    }
    /// Sets `min_backoff` (default 100 ms).
    pub fn min_backoff(mut self, d: Duration) -> Self {
        self.min_backoff = d;
        self
    }
    /// Sets `fair_locks` (default `true`). `false`: tasks of this process that keep
    /// re-locking a name may keep it from other nodes for as long as they do (more throughput
    /// inside one process, no bound on another node's wait).
    pub fn fair_locks(mut self, fair: bool) -> Self {
        self.fair_locks = fair;
        self
    }
    /// Sets `remove_idle_leases_after` (default [`DEFAULT_REMOVE_IDLE_LEASES_AFTER`], a day).
    /// Every client removes, now and then, the lease records of its store (its namespace)
    /// that nobody holds and nobody acquired for this long, so a service that locks one name
    /// per order or per tenant does not grow its store for ever; a name used again later gets
    /// a token above every token it had (rule B3). `None` keeps every record. Removal needs
    /// every node of the store on a version with the token floor: an older node's first
    /// acquisition of a removed name would start again at token 1 on Redis and SQLite (on
    /// PostgreSQL and MySQL/MariaDB the floor's trigger covers older nodes too).
    pub fn remove_idle_leases_after(mut self, after: Option<Duration>) -> Self {
        self.remove_idle_leases_after = after;
        self
    }

    fn build_unchecked(self) -> SimbaConfig {
        let renew_interval = self.renew_interval.unwrap_or(self.lease_duration / 3);
        SimbaConfig {
            lease_duration: self.lease_duration,
            renew_interval,
            drift: self.drift,
            margin: self.margin,
            retry_jitter: self.retry_jitter.unwrap_or(renew_interval / 2),
            min_backoff: self.min_backoff,
            fair_locks: self.fair_locks,
            remove_idle_leases_after: self.remove_idle_leases_after,
        }
    }

    /// Checks rule C1 and builds. Fails, naming the broken rule, unless every field is in
    /// range, `renew_interval * 2 <= lease_duration` (two renewal attempts fit before the
    /// deadline) and `lease_duration * (1 - drift) - margin > renew_interval` (otherwise every
    /// term flaps).
    pub fn build(self) -> Result<SimbaConfig, Error> {
        let c = self.build_unchecked();
        // Each error names the builder setting to change as its key (the reason names it too).
        let bad = |key: &str, msg: String| Err(Error::from(ConfigError::new(msg).with_key(key)));
        if c.lease_duration.is_zero() {
            return bad("lease_duration", "lease_duration must be greater than zero (e.g. \"15s\")".into());
        }
        if c.renew_interval.is_zero() {
            return bad("renew_interval", "renew_interval must be greater than zero".into());
        }
        if !(0.0..0.5).contains(&c.drift) || c.drift.is_nan() {
            return bad("drift", format!("drift must be in [0, 0.5), got {}", c.drift));
        }
        if c.min_backoff.is_zero() {
            return bad("min_backoff", "min_backoff must be greater than zero".into());
        }
        if c.min_backoff > c.renew_interval {
            return bad(
                "min_backoff",
                format!("min_backoff ({:?}) must not exceed renew_interval ({:?})", c.min_backoff, c.renew_interval),
            );
        }
        if c.renew_interval * 2 > c.lease_duration {
            return bad(
                "renew_interval",
                format!(
                    "renew_interval * 2 <= lease_duration is required so that two renewal attempts fit before the deadline, got renew_interval {:?} and lease_duration {:?}: lower renew_interval or raise lease_duration",
                    c.renew_interval, c.lease_duration
                ),
            );
        }
        let local = c.lease_duration.mul_f64(1.0 - c.drift).saturating_sub(c.margin);
        if local <= c.renew_interval {
            return bad(
                "lease_duration",
                format!(
                    "lease_duration * (1 - drift) - margin > renew_interval is required (otherwise every term flaps), got {local:?} <= {:?}: raise lease_duration or lower drift, margin or renew_interval",
                    c.renew_interval
                ),
            );
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C1: the table of defaults.
    #[test]
    fn c1_defaults() {
        let c = SimbaConfig::builder().build().expect("defaults are valid");
        assert_eq!(c.lease_duration(), Duration::from_secs(15));
        assert_eq!(c.renew_interval(), Duration::from_secs(5));
        assert_eq!(c.drift(), 0.01);
        assert_eq!(c.margin(), Duration::from_millis(50));
        assert_eq!(c.retry_jitter(), Duration::from_millis(2500));
        assert_eq!(c.min_backoff(), Duration::from_millis(100));
        assert_eq!(SimbaConfig::default(), c);
    }

    /// C1: `to_builder()` derives variants and keeps what was set.
    #[test]
    fn c1_to_builder() {
        let c = SimbaConfig::builder().drift(0.1).build().expect("valid");
        let d = c.to_builder().margin(Duration::from_millis(10)).build().expect("valid");
        assert_eq!(d.drift(), 0.1);
        assert_eq!(d.margin(), Duration::from_millis(10));
        assert_eq!(d.lease_duration(), c.lease_duration());
    }

    /// C1: two renewals must fit before the deadline.
    #[test]
    fn c1_two_renewals_fit() {
        let secs = Duration::from_secs;
        let err = SimbaConfig::builder().lease_duration(secs(10)).renew_interval(secs(6)).build();
        let msg = err.expect_err("6 * 2 > 10").to_string();
        assert!(msg.contains("renew_interval * 2 <= lease_duration"), "{msg}");
        assert!(SimbaConfig::builder().lease_duration(secs(10)).renew_interval(secs(5)).build().is_ok());
    }

    /// C1: the local validity must exceed the renew interval, or every term flaps.
    #[test]
    fn c1_local_validity_exceeds_renewal() {
        let ms = Duration::from_millis;
        // 1000 * 0.99 - 500 = 490 < 500
        let err = SimbaConfig::builder().lease_duration(ms(1000)).renew_interval(ms(500)).margin(ms(500)).build();
        let msg = err.expect_err("flapping").to_string();
        assert!(msg.contains("flaps"), "{msg}");
    }

    /// C1: every field in range.
    #[test]
    fn c1_ranges() {
        for b in [
            SimbaConfig::builder().drift(0.5),
            SimbaConfig::builder().drift(-0.1),
            SimbaConfig::builder().drift(f64::NAN),
            SimbaConfig::builder().lease_duration(Duration::ZERO),
            SimbaConfig::builder().min_backoff(Duration::ZERO),
            SimbaConfig::builder().min_backoff(Duration::from_secs(6)),
        ] {
            assert!(matches!(b.build(), Err(Error::InvalidConfig(_))), "{b:?}");
        }
    }

    /// A builder error names the setting to change as its key, with no file
    /// or line (it was set in code), and its reason is the whole message.
    #[test]
    fn builder_errors_name_the_setting() {
        let secs = Duration::from_secs;
        for (b, key) in [
            (SimbaConfig::builder().lease_duration(Duration::ZERO), "lease_duration"),
            (SimbaConfig::builder().drift(0.7), "drift"),
            (SimbaConfig::builder().min_backoff(secs(6)), "min_backoff"),
            (SimbaConfig::builder().lease_duration(secs(10)).renew_interval(secs(6)), "renew_interval"),
        ] {
            let Err(Error::InvalidConfig(e)) = b.build() else { panic!("{b:?} is invalid") };
            assert_eq!((e.key(), e.file(), e.line(), e.env_var()), (Some(key), None, None, None), "{e}");
            assert!(e.reason().starts_with(key), "{e}");
            assert_eq!(e.to_string(), e.reason());
        }
    }
}
