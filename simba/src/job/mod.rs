//! Jobs: scheduled and partitioned work that runs only while this node holds its term.

mod group;
mod registry;
mod schedule;

pub use registry::{
    JobFuture, JobOutcome, Misfire, PARTITIONED_JOBS, PartitionFn, PartitionedJob, SCHEDULED_JOBS, Schedule,
    ScheduledFn, ScheduledJob,
};

pub(crate) use group::{GroupSpec, run_group};
pub use schedule::{ScheduleSpec, parse_cron, parse_time_zone};
pub(crate) use schedule::{Timer, run_scheduled};
