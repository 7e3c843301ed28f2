//! The wall clock that a job's slots are computed on.

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// The scheduler's wall clock: the system's, or (for tests on paused Tokio time) one that
/// advances with Tokio's clock from the instant it was made.
#[derive(Debug, Clone, Copy, Default)]
pub enum WallClock {
    /// `Utc::now()`.
    #[default]
    System,
    /// `at` plus the Tokio time elapsed since `since`: cron runs on paused time.
    FollowsTokio {
        /// The wall-clock instant at `since`.
        at: DateTime<Utc>,
        /// The Tokio instant it was anchored at.
        since: Instant,
    },
}

impl WallClock {
    /// A clock that reads `at` now and advances with Tokio's clock (paused or not).
    pub fn follow_tokio_from(at: DateTime<Utc>) -> Self {
        WallClock::FollowsTokio { at, since: Instant::now() }
    }

    /// The current wall-clock time.
    pub fn now(&self) -> DateTime<Utc> {
        match self {
            WallClock::System => Utc::now(),
            WallClock::FollowsTokio { at, since } => {
                *at + chrono::Duration::from_std(since.elapsed()).unwrap_or_default()
            }
        }
    }
}
