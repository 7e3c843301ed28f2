//! The jobs store (ADR 0012): run history and cluster-wide job control, kept in the
//! backend, through a trait apart from the lease [`Backend`](crate::backend::Backend).
//!
//! Every slot of a job (a cron instant, a fixed-rate tick, a manual trigger) gets one
//! [`RunRecord`]. The record is written by the slot claim itself ([`JobStore::claim_run`]:
//! the fenced, monotonic claim the scheduler already made before a run, now also checking
//! pause and writing the `running` record), so history adds no round trip before a run
//! starts. The end of a run overwrites that record ([`JobStore::finish_run`]); the runtime
//! does not wait for it before computing the next slot.
//!
//! Control (pause, resume, run now) is a small row per job name. A node polls
//! [`JobStore::control_version`] once per renewal interval (one call for all its jobs) and
//! reads [`JobStore::jobs`] only when the version moved; where the store can broadcast,
//! [`JobStore::subscribe_control`] wakes it at once.
//!
//! Partitioned jobs: partition `i` of job `g` is the job name `g/i` (its lease is `{group}.i`).
//! Pausing or triggering `g` applies to every partition; `g/i` to that one.
//!
//! A backend exposes its store with [`Backend::job_store`](crate::backend::Backend::job_store);
//! every implementation runs the suite in `simba::tck::jobs` (feature `tck`).
//!
//! The trait lives with the lease `Backend` in `backend/` (both are the backends' contract);
//! this module is its public path.

#[doc(inline)]
pub use crate::backend::job_store::*;
