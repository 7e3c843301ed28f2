//! Test kit (feature `tck`): the backend conformance suite and a fault-injecting backend
//! wrapper for engine tests.

pub mod conformance;
mod faulty;

pub use faulty::{Fault, FaultHandle, FaultyBackend, Op};
