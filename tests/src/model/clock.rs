//! The model's node clocks as the engine's core sees them (issue 13 item 3). The model keeps
//! every node timestamp as whole units relative to the node's clock now (see
//! [`super::lease`]); the core is generic over [`Moment`], so the model hands it a
//! [`NodeTime`]: nanoseconds relative to the node's clock now, one model unit being one second
//! ([`UNIT`]). Every model duration (a grant, `margin`, `renew_interval`) becomes a whole
//! number of seconds, so the core's arithmetic on it is exact unless the formula itself has
//! a fraction (`drift`), and its results come back as whole units, rounded as each caller
//! says.

use std::ops::Add;
use std::time::Duration;

use simba::SimbaConfig;
use simba_core::{Moment, Timing};

use super::config::Config;

/// One model unit of time.
pub const UNIT: Duration = Duration::from_secs(1);

const NANOS_PER_UNIT: i64 = 1_000_000_000;

/// An instant on a node's clock, in nanoseconds relative to that clock now (negative: in the
/// past). The model builds one for each node timestamp it passes to the core and reads the
/// core's instants back with [`units_up`](NodeTime::units_up) or
/// [`units_down`](NodeTime::units_down).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeTime(i64);

impl NodeTime {
    /// The node's clock now.
    pub const NOW: NodeTime = NodeTime(0);

    /// `units` model units from now (negative: ago).
    pub fn at(units: i16) -> Self {
        NodeTime(i64::from(units) * NANOS_PER_UNIT)
    }

    /// This instant in whole units from now, rounded up: for a local deadline, which the
    /// model may only move later (a node that believes its session live a little longer
    /// makes the check stricter, never laxer; on the model's integer instants a deadline at
    /// `d` units is passed at instant `k` exactly when `k >= ceil(d)`).
    pub fn units_up(self) -> i16 {
        to_i16(-(-self.0).div_euclid(NANOS_PER_UNIT))
    }

    /// This instant in whole units from now, rounded down: for a timer the model fires at the
    /// last whole instant before its due time.
    pub fn units_down(self) -> i16 {
        to_i16(self.0.div_euclid(NANOS_PER_UNIT))
    }
}

fn to_i16(v: i64) -> i16 {
    i16::try_from(v).unwrap_or_else(|_| panic!("a model instant of {v} units does not fit in i16"))
}

impl Add<Duration> for NodeTime {
    type Output = NodeTime;

    fn add(self, d: Duration) -> NodeTime {
        let nanos = i64::try_from(d.as_nanos()).unwrap_or_else(|_| panic!("a model duration of {d:?} is too long"));
        NodeTime(self.0 + nanos)
    }
}

impl Moment for NodeTime {
    fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }
}

/// `units` model units as a [`Duration`] (0 for a negative count).
pub fn duration(units: i16) -> Duration {
    UNIT * u32::try_from(units).unwrap_or(0)
}

/// The engine's timing rules for the model's configuration: `lease_duration`,
/// `renew_interval` and `margin` in whole units, `drift` as its fraction, and a
/// `min_backoff` of one unit.
///
/// # Panics
///
/// If the engine refuses the configuration (rule C1, which [`Config::validate`] checks in
/// integers first).
pub fn timing(cfg: &Config) -> Timing {
    let (num, den) = cfg.drift;
    let config = SimbaConfig::builder()
        .lease_duration(duration(cfg.lease))
        .renew_interval(duration(cfg.renew_interval))
        .drift(f64::from(num) / f64::from(den))
        .margin(duration(cfg.margin))
        .min_backoff(UNIT)
        .build()
        .unwrap_or_else(|e| panic!("the engine refuses the model's configuration: {e}"));
    Timing::new(config.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_up_and_down() {
        let half = Duration::from_millis(500);
        assert_eq!(NodeTime::at(5).units_up(), 5);
        assert_eq!((NodeTime::at(4) + half).units_up(), 5);
        assert_eq!((NodeTime::at(4) + half).units_down(), 4);
        assert_eq!((NodeTime::at(-3) + half).units_up(), -2);
        assert_eq!((NodeTime::at(-3) + half).units_down(), -3);
        assert_eq!(NodeTime::at(2).saturating_duration_since(NodeTime::at(-1)), duration(3));
        assert_eq!(NodeTime::at(-1).saturating_duration_since(NodeTime::at(2)), Duration::ZERO);
    }

    /// The model's timing as the engine computes it: `8 * 3/4 - 1 = 5` units, exactly.
    #[test]
    fn the_engine_computes_the_models_validity_exactly() {
        let t = timing(&Config::base());
        assert_eq!(t.local_validity(duration(8)), duration(5));
        assert_eq!(t.deadline(NodeTime::at(-2), duration(8)).units_up(), 3);
    }
}
