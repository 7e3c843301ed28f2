//! Engine rules on paused Tokio time with the in-memory backend and a fault-injecting wrapper
//! (docs/SPEC.md sections 1-8), and the exhaustive model check of the protocol (V1).

// `tokio_unstable` is Tokio's own cfg, which this workspace does not declare (docs/adr/0021).
#![allow(unexpected_cfgs)]

mod elections;
mod groups;
mod locks;
mod model_check;
mod model_findings;
mod session;
mod simulation;
// Exact replay needs Tokio's seeded generator (docs/adr/0021).
#[cfg(tokio_unstable)]
mod simulation_replay;
mod terms;
