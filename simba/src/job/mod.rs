//! Jobs: scheduled and partitioned work that runs only while this node holds its term.
//!
//! A job's term runs top-down: the slot loop (`schedule.rs`; a partition's worker in
//! `group.rs` runs the same loop) says which slot is due, hands it to the term's slot runner
//! (`runner.rs`: claim, attempts, retries, timeout), which records each outcome through the
//! job's history (`history.rs`) and its ordered writer (`writer.rs`).

mod alert;
mod changes;
mod clock;
mod context;
mod group;
mod handler;
mod held;
mod history;
mod overlap;
mod policy;
mod published;
mod registry;
mod runner;
mod schedule;
mod shard;
mod state;
mod wait;
#[cfg(feature = "webhook")]
pub(crate) mod webhook;
mod webhook_url;
mod writer;

pub(crate) use alert::Alerts;
pub use alert::{Alert, AlertFn, AlertKind};
pub use clock::WallClock;
pub use context::JobContext;
pub(crate) use handler::decode_payload;
pub use handler::{HANDLERS, Handler, HandlerRun};
pub use policy::{Overlap, Policies, RunPolicy};
pub use published::{
    JobKind, JobSettings, NodeRegistry, RegistryReport, compare as compare_registries, versions as registry_versions,
};
pub use registry::{
    JOB_POLICIES, JobFn, JobFuture, JobOutcome, JobPolicy, Misfire, PARTITIONED_JOBS, PartitionRun, PartitionedJob,
    SCHEDULED_JOBS, Schedule, ScheduledJob, ScheduledRun, job_future,
};
pub(crate) use state::StateMap;
pub use state::{State, StateNeed};
pub use webhook_url::WebhookUrl;

pub(crate) use history::{Recording, node_name};
pub(crate) use writer::{Pending, Writer};

pub(crate) use group::{GroupSpec, run_group};
pub(crate) use schedule::{Timer, run_scheduled};
pub use schedule::{parse_cron, parse_time_zone};
pub(crate) use shard::{GROUP as SCHEDULES_GROUP, Shards};
#[cfg(feature = "testing")]
pub(crate) use simba_core::slots::next_slot;
