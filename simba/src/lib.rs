#![doc = include_str!("docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
pub mod backend;
#[cfg(feature = "cli")]
pub mod cli;
mod client;
mod config;
pub mod dashboard;
mod election;
mod engine;
mod error;
mod events;
pub mod fencing;
mod group;
pub mod job;
pub mod job_store;
mod lock;
pub mod metrics;
mod name;
pub mod runtime;
mod secret;
mod suggest;
mod term;

#[cfg(feature = "tck")]
pub mod tck;
#[cfg(feature = "testing")]
pub mod testing;

pub use client::{Simba, SimbaBuilder};
pub use config::{SimbaConfig, SimbaConfigBuilder};
pub use election::{BoxError, Election, ElectionListener, FnListener};
pub use error::{ConfigError, Error};
pub use events::{ElectionSnapshot, ElectionState, Event, SessionStatus, Snapshot, TermSnapshot};
pub use fencing::{FencedCell, StaleToken};
pub use group::{Group, GroupWatch, Membership};
pub use lock::{Lock, LockGuard};
pub use name::{MAX_NAME_LEN, name_problem, validate_name};
pub use runtime::{Runtime, RuntimeBuilder, RuntimeConfig, run};
pub use term::{RevokeReason, Term};

#[doc(inline)]
pub use simba_macros::{simba_partitioned, simba_scheduled};

/// Support for the code the macros generate. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use linkme;

    use crate::job::JobContext;
    pub use crate::job::job_future;

    /// The context of the run being executed (a manual context outside the runtime, when a
    /// generated wrapper is called by hand).
    pub fn job_context() -> JobContext {
        JobContext::current().unwrap_or_else(|| JobContext::manual(chrono::Utc::now(), "local"))
    }
}
