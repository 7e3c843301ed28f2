//! A backfill's plan (rule J16, ADR 0023): the past range `[from, to]` of a job's slots to run
//! again, at most `rate` runs per second. The plan travels as the key of a run-now request
//! (R3: keyed, bounded, broadcast through the control version, taken once by the holder), so
//! every store carries it without a column of its own; each of its slots is then claimed by
//! [`Ask::Backfill`](crate::claim::Ask::Backfill), which alone decides whether the slot runs.

use std::fmt;
use std::time::Duration;

/// The most slots one backfill may cover.
pub const MAX_BACKFILL_SLOTS: u64 = 10_000;

/// The longest one backfill may take at its budget.
pub const MAX_BACKFILL_TIME: Duration = Duration::from_secs(86_400);

/// What every backfill request's key starts with ([`BackfillPlan::key`]).
pub const BACKFILL_KEY_PREFIX: &str = "backfill:";

/// The budget's unit: thousandths of a run per second (the key carries an integer).
const MILLI: u64 = 1000;

/// A backfill's plan: the range of slots (both ends included, unix milliseconds) and the
/// budget in thousandths of a run per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackfillPlan {
    /// The range's first instant, unix milliseconds.
    pub from_ms: i64,
    /// The range's last instant, unix milliseconds (included).
    pub to_ms: i64,
    /// At most this many thousandths of a run per second.
    pub milli_rate: u64,
}

/// Why a backfill was refused before anything was stored.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PlanError {
    /// `from` is after `to`.
    Reversed {
        /// The range's start as given, unix milliseconds.
        from_ms: i64,
        /// The range's end as given, unix milliseconds.
        to_ms: i64,
    },
    /// The budget is not a positive number of runs per second of at least 0.001.
    Rate {
        /// The budget as given.
        rate: f64,
    },
    /// The range holds no slot of the job.
    NoSlot,
    /// The range holds more than [`MAX_BACKFILL_SLOTS`] slots, or would take longer than
    /// [`MAX_BACKFILL_TIME`] at the budget.
    TooBig {
        /// How many slots the range holds (at least this many, when it holds more than the
        /// count went).
        slots: u64,
        /// How long it would take at the budget.
        takes: Duration,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Reversed { from_ms, to_ms } => write!(
                f,
                "the range starts after it ends ({} > {}): give --from before --to",
                instant(*from_ms),
                instant(*to_ms)
            ),
            PlanError::Rate { rate } => {
                write!(f, "the budget must be at least 0.001 runs per second, not {rate}: give a positive --rate")
            }
            PlanError::NoSlot => f.write_str("the range holds no slot of the job: widen it"),
            PlanError::TooBig { slots, takes } => write!(
                f,
                "the range holds {slots} slots and would take {} at the budget; a backfill covers at most {} slots \
                 and one day: split the range or raise --rate",
                humanize(*takes),
                MAX_BACKFILL_SLOTS
            ),
        }
    }
}

impl std::error::Error for PlanError {}

fn instant(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m {}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl BackfillPlan {
    /// The plan of `[from_ms, to_ms]` at `rate` runs per second, whose range holds `slots`
    /// slots of the job, checked: the range in order, a budget of at least 0.001/s, at least
    /// one slot, at most [`MAX_BACKFILL_SLOTS`] slots and [`MAX_BACKFILL_TIME`] at the budget.
    pub fn new(from_ms: i64, to_ms: i64, rate: f64, slots: u64) -> Result<Self, PlanError> {
        if from_ms > to_ms {
            return Err(PlanError::Reversed { from_ms, to_ms });
        }
        if !(0.001..=1_000_000.0).contains(&rate) {
            return Err(PlanError::Rate { rate });
        }
        let milli_rate = (rate * MILLI as f64).round() as u64;
        let plan = BackfillPlan { from_ms, to_ms, milli_rate };
        if slots == 0 {
            return Err(PlanError::NoSlot);
        }
        let takes = plan.takes(slots);
        if slots > MAX_BACKFILL_SLOTS || takes > MAX_BACKFILL_TIME {
            return Err(PlanError::TooBig { slots, takes });
        }
        Ok(plan)
    }

    /// The budget in runs per second.
    pub fn rate(&self) -> f64 {
        self.milli_rate as f64 / MILLI as f64
    }

    /// The least time between the starts of two runs at the budget.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(MILLI as f64 / self.milli_rate.max(1) as f64)
    }

    /// How long `slots` runs take at the budget (the first starts at once).
    pub fn takes(&self, slots: u64) -> Duration {
        self.interval().saturating_mul(u32::try_from(slots.saturating_sub(1)).unwrap_or(u32::MAX))
    }

    /// The key of this plan's request, made unique by `nonce` (ASCII letters and digits):
    /// `backfill:<from>:<to>:<milli-rate>:<nonce>`, a valid request key
    /// ([`valid_request_key`](crate::claim::valid_request_key)) for a nonce of up to 8 bytes.
    pub fn key(&self, nonce: &str) -> String {
        format!("{BACKFILL_KEY_PREFIX}{}:{}:{}:{nonce}", self.from_ms, self.to_ms, self.milli_rate)
    }

    /// The plan a request key carries; `None` for a key that is no backfill's.
    pub fn from_key(key: &str) -> Option<Self> {
        let mut f = key.strip_prefix(BACKFILL_KEY_PREFIX)?.split(':');
        let from_ms = f.next()?.parse().ok()?;
        let to_ms = f.next()?.parse().ok()?;
        let milli_rate = f.next()?.parse().ok().filter(|r| *r > 0)?;
        f.next()?;
        (from_ms <= to_ms).then_some(BackfillPlan { from_ms, to_ms, milli_rate })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_780_000_000_000;

    /// J16: a plan is checked before anything is stored: the range in order, a positive
    /// budget, at least one slot, at most 10,000 slots and one day at the budget (both numbers
    /// named); it travels as a request key and is read back from it.
    #[test]
    fn j16_plans_are_checked_and_travel_as_a_key() {
        let plan = BackfillPlan::new(T, T + 3_600_000, 2.5, 60).expect("a small plan");
        assert_eq!(plan.interval(), Duration::from_millis(400));
        assert_eq!(plan.takes(60), Duration::from_millis(400 * 59));
        let key = plan.key("a1b2c3d4");
        assert!(crate::claim::valid_request_key(&key), "{key}");
        assert_eq!(BackfillPlan::from_key(&key), Some(plan));
        assert_eq!(BackfillPlan::from_key("k-1"), None, "a run-now request's key");
        assert_eq!(BackfillPlan::from_key("backfill:5:4:1000:x"), None, "reversed");
        assert_eq!(BackfillPlan::from_key("backfill:4:5:0:x"), None, "no budget");

        assert_eq!(BackfillPlan::new(T + 1, T, 1.0, 1), Err(PlanError::Reversed { from_ms: T + 1, to_ms: T }));
        for rate in [0.0, -1.0, f64::NAN, 0.0001] {
            assert!(matches!(BackfillPlan::new(T, T, rate, 1), Err(PlanError::Rate { .. })), "{rate}");
        }
        assert_eq!(BackfillPlan::new(T, T, 1.0, 0), Err(PlanError::NoSlot));
        let too_many = BackfillPlan::new(T, T + 1, 1000.0, 10_001).expect_err("10,001 slots");
        assert!(matches!(too_many, PlanError::TooBig { slots: 10_001, .. }));
        assert!(too_many.to_string().contains("10001 slots"), "{too_many}");
        let too_long = BackfillPlan::new(T, T + 1, 0.1, 8_642).expect_err("over a day at 0.1/s");
        assert_eq!(too_long, PlanError::TooBig { slots: 8_642, takes: Duration::from_secs(86_410) });
        let text = too_long.to_string();
        assert!(text.contains("8642 slots") && text.contains("24h 0m"), "{text}");
        assert!(BackfillPlan::new(T, T + 1, 0.1, 8_641).is_ok(), "a day exactly");
    }
}
