#![doc = include_str!("docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
pub mod backend;
mod client;
mod config;
pub mod dashboard;
mod election;
mod engine;
mod error;
mod events;
pub mod fencing;
mod group;
pub mod guide;
pub mod job;
pub mod job_store;
#[cfg(any(feature = "dashboard", feature = "prometheus"))]
mod listener;
mod lock;
pub mod metrics;
mod name;
#[cfg(any(feature = "dashboard", feature = "prometheus"))]
mod probe;
pub mod runtime;
pub mod schedule_store;
mod secret;
mod suggest;
mod term;

#[cfg(feature = "tck")]
pub mod tck;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{Simba, SimbaBuilder};
pub use config::{DEFAULT_REMOVE_IDLE_LEASES_AFTER, SimbaConfig, SimbaConfigBuilder};
pub use election::{Election, ElectionListener, FnListener};
pub use error::{BoxError, ConfigError, Error};
pub use events::{ElectionSnapshot, ElectionState, Event, SessionStatus, Snapshot, TermSnapshot};
pub use fencing::{FencedCell, StaleToken};
pub use group::{Group, GroupWatch, Membership};
pub use job::{JobContext, State};
pub use lock::{Lock, LockGuard};
pub use name::{MAX_NAME_LEN, name_problem, validate_name};
pub use runtime::{Runtime, RuntimeBuilder, RuntimeConfig, run};
pub use term::{RevokeReason, Term};

#[doc(inline)]
pub use simba_macros::{simba_handler, simba_partitioned, simba_scheduled};

/// The README's examples, compiled and run as doctests (`cargo test --doc`), so the landing
/// page cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// Support for the code the macros generate. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use linkme;

    use std::borrow::Cow;

    pub use crate::job::job_future;
    use crate::job::{
        Handler, JobContext, JobFuture, Misfire, PartitionedJob, Policies, Schedule, ScheduledJob, StateNeed,
    };
    use crate::{BoxError, Term};

    /// The context of the run being executed (a manual context outside the runtime, when a
    /// generated wrapper is called by hand).
    pub fn job_context() -> JobContext {
        JobContext::current().unwrap_or_else(|| JobContext::manual(chrono::Utc::now(), "local"))
    }

    /// The `State<T>` argument of job `job`'s run in `ctx`. The runtime checked at start that
    /// it was given; a wrapper called by hand without it gets the same message as an error.
    pub fn state<T: Clone + Send + Sync + 'static>(ctx: &JobContext, job: &str) -> Result<crate::State<T>, BoxError> {
        match ctx.state::<T>() {
            Some(value) => Ok(crate::State(value)),
            None => Err(crate::job::StateMap::default()
                .check(job, &[StateNeed::of::<T>()])
                .err()
                .unwrap_or_default()
                .into()),
        }
    }

    /// The outcome of a job function that takes `State<T>` (its wrapper returns early when a
    /// state is missing, so the outcome is converted here).
    pub fn into_job_result<O: crate::job::JobOutcome>(outcome: O) -> Result<(), BoxError> {
        outcome.into_job_result()
    }

    /// The payload of handler `handler`'s run, deserialised from the schedule's JSON into `T`
    /// (the error names the handler and the type; the run is recorded `failed`).
    pub fn payload<T: serde::de::DeserializeOwned>(payload: &str, handler: &str) -> Result<T, BoxError> {
        crate::job::decode_payload(payload, handler)
    }

    /// The registry entry of a handler, every field given (`const`).
    pub const fn handler(
        name: &'static str,
        run: &'static (dyn Fn(Term, std::sync::Arc<str>) -> JobFuture + Send + Sync),
        needs: &'static [StateNeed],
    ) -> Handler {
        Handler::new(name, run).with_needs(needs)
    }

    /// The registry entry of a scheduled job, every field given (`const`).
    pub const fn scheduled_job(
        name: &'static str,
        lease: &'static str,
        schedule: Schedule,
        misfire: Misfire,
        policies: Policies,
        run: &'static (dyn Fn(Term) -> JobFuture + Send + Sync),
        needs: &'static [StateNeed],
    ) -> ScheduledJob {
        ScheduledJob {
            name: Cow::Borrowed(name),
            lease: Cow::Borrowed(lease),
            schedule,
            misfire,
            policies,
            run: crate::job::ScheduledRun::from_static(run),
            needs,
        }
    }

    /// The registry entry of a partitioned job, every field given (`const`).
    #[allow(clippy::too_many_arguments)] // One argument per field: what the macro generates.
    pub const fn partitioned_job(
        name: &'static str,
        group: &'static str,
        partitions: u32,
        schedule: Option<Schedule>,
        misfire: Misfire,
        policies: Policies,
        run: &'static (dyn Fn(Term, u32) -> JobFuture + Send + Sync),
        needs: &'static [StateNeed],
    ) -> PartitionedJob {
        PartitionedJob {
            name: Cow::Borrowed(name),
            group: Cow::Borrowed(group),
            partitions,
            schedule,
            misfire,
            policies,
            run: crate::job::PartitionRun::from_static(run),
            needs,
        }
    }
}
