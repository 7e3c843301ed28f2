//! Jobs: scheduled and partitioned work that runs only while this node holds its term.

mod context;
mod group;
mod history;
mod published;
mod registry;
mod schedule;
mod writer;

pub use context::JobContext;
pub use history::{RunPolicy, WallClock};
pub use published::{
    JobKind, JobSettings, NodeRegistry, RegistryReport, compare as compare_registries, versions as registry_versions,
};
pub use registry::{
    JOB_POLICIES, JobFuture, JobOutcome, JobPolicy, Misfire, PARTITIONED_JOBS, PartitionFn, PartitionedJob,
    SCHEDULED_JOBS, Schedule, ScheduledFn, ScheduledJob, job_future,
};

pub(crate) use history::{Recording, node_name};
pub(crate) use writer::{Pending, Writer};

pub(crate) use group::{GroupSpec, run_group};
pub(crate) use schedule::{Timer, run_scheduled};
pub use schedule::{parse_cron, parse_time_zone};
#[cfg(feature = "testing")]
pub(crate) use simba_core::slots::next_slot;
