//! Jobs, macros and the runtime (docs/SPEC.md section 10), and the macros' compile-time errors (J3).

mod added;
mod alerts;
mod backfill;
mod history;
mod jobs;
mod macros;
mod namespaced;
mod paused_node;
mod policies;
mod records;
mod registry;
mod schedules;
mod state;
mod testkit;
