#![doc = include_str!("docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
mod client;
mod config;
mod election;
mod error;
mod events;
pub mod fencing;
mod lock;
mod name;
mod session;
mod term;
mod timing;

#[cfg(feature = "tck")]
pub mod tck;

pub use client::{Simba, SimbaBuilder};
pub use config::{SimbaConfig, SimbaConfigBuilder};
pub use election::{BoxError, Election, ElectionListener, FnListener};
pub use error::Error;
pub use events::{ElectionSnapshot, ElectionState, Event, SessionStatus, Snapshot, TermSnapshot};
pub use fencing::{FencedCell, StaleToken};
pub use lock::{Lock, LockGuard};
pub use name::{MAX_NAME_LEN, name_problem, validate_name};
pub use term::{RevokeReason, Term};
