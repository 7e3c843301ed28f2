//! Engine rules on paused Tokio time with the in-memory backend and a fault-injecting wrapper
//! (docs/SPEC.md sections 1-8), and the exhaustive model check of the protocol (V1).

mod elections;
mod groups;
mod locks;
mod model_check;
mod model_findings;
mod session;
mod terms;
