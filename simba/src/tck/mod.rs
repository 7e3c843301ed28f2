//! Test kit (feature `tck`): the backend conformance suite, the jobs store suite (`jobs`), the
//! schedule store suite (`schedules`), the
//! server suite (`servers`: takeovers by hand, server kills and pauses, through per-store
//! hooks), the fencing kit for your own resources, and a fault-injecting backend wrapper for
//! engine tests.

pub mod conformance;
mod faulty;
pub mod fencing_spec;
pub mod jobs;
pub mod namespaces;
pub mod schedules;
pub mod servers;

pub use faulty::{Fault, FaultHandle, FaultyBackend, Op};
