//! Jobs: scheduled and partitioned work that runs only while this node holds its term.

mod registry;

pub use registry::{
    JobFuture, JobOutcome, Misfire, PARTITIONED_JOBS, PartitionFn, PartitionedJob, SCHEDULED_JOBS, Schedule,
    ScheduledFn, ScheduledJob,
};
