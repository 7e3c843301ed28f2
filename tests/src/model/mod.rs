//! An exhaustively checked model of the lease protocol (SPEC rule V1).
//!
//! [`lease`] describes the protocol as a transition system (two nodes, one backend, a lossy
//! reordering network, drifting clocks, pauses and crashes) with the three invariants of V1
//! ([`config`] holds its timing, bounds and mutants, [`state`] its packed state, [`clock`]
//! turns its integer clocks into the instants the engine's core takes);
//! each node's elections are the engine's `ElectionMachine`, driven as the engine's contender
//! drives it (`lease::election`); [`rebalance`] drives the engine's J6 rebalance decision for a
//! small partition group; [`explore`] is a small breadth-first explorer over canonical states
//! that returns a shortest counterexample. `tests/tests/engine/model_check.rs` runs the correct model and one
//! mutant per broken rule; `docs/adr/0006-protocol-model.md` explains the design and bounds.

pub mod bag;
pub mod clock;
pub mod config;
pub mod explore;
pub mod lease;
pub mod rebalance;
pub mod state;

pub use config::{Config, Invariant, Mutant, RateMode, Schedule};
pub use explore::{Counterexample, Model, Report, Transition, Violation, explore, explore_bounded};
pub use lease::LeaseModel;
pub use state::{Action, State};
