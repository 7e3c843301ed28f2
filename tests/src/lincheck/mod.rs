//! The outside history checker (rule V4, ADR 0022): every lease operation a client makes
//! against a backend is recorded with its invocation and completion instants on the host's
//! monotonic clock and its result ([`record`]), and the history is checked after the run
//! against a sequential model of the lease contract ([`model`]) by a linearizability search
//! (Wing & Gong with memoization and P-compositionality, as Porcupine does: [`search`]).
//!
//! The nodes' own report (their logged terms and ledger writes) says what the nodes believed;
//! this checks what the store answered, whatever the nodes made of it. [`mutant`] holds the
//! positive control: a wrapper that grants a held lease once more, which the checker must
//! catch.

pub mod model;
pub mod mutant;
pub mod record;
pub mod search;

pub use model::Tolerance;
pub use record::{Call, Op, Outcome, Recorder, RecordingBackend, parse_history};
pub use search::{Budget, Verdict, check_history};
