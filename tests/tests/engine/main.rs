//! Engine rules on paused Tokio time with the in-memory backend and a fault-injecting wrapper
//! (docs/SPEC.md sections 1-8), and the exhaustive model check of the protocol (V1).

mod elections;
mod groups;
mod locks;
mod model_check;
mod model_findings;
mod session;
mod simulation;
// Exact replay needs Tokio's seeded generator: `--cfg tokio_unstable`, which
// .cargo/config.toml sets for this repository's builds (docs/adr/0021).
#[cfg(tokio_unstable)]
mod simulation_replay;
mod terms;
