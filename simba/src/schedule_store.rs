//! The schedule store (ADR 0020): schedules stored as data, their partitions' change counters
//! and the operators' audit trail, kept in the backend through a trait apart from the lease
//! [`Backend`](crate::backend::Backend) and the [`JobStore`](crate::job_store::JobStore).
//!
//! A schedule is a row: an id (the lease-name rule), a handler name, a spec (cron in a time
//! zone, or a fixed rate), a JSON payload of at most 16 KiB, policies, a pause with its note,
//! who created and last changed it and when, and a revision. Its partition of the built-in
//! group `simba.schedules` is `fnv1a64(id) mod P` ([`partition_of`]). Its slots are claimed
//! and recorded in the jobs store under the job name `schedule/<id>`, so history, pause of all
//! schedules (`schedule`) and the tools treat them as jobs.
//!
//! Every write bumps its partition's change counter and appends an audit record in the same
//! atomic step. Operators use [`admin::Schedules`](crate::admin::Schedules), which checks a
//! schedule before it writes (the store does not).
//!
//! A backend exposes its store with
//! [`Backend::schedule_store`](crate::backend::Backend::schedule_store): every store of this
//! crate does (memory, SQLite, PostgreSQL, MySQL/MariaDB, Redis, ZooKeeper and etcd); a
//! backend without one answers `None`, which the API reports as "schedules are not supported
//! by this store yet". Every implementation runs the suite in `simba::tck::schedules`
//! (feature `tck`).

#[doc(inline)]
pub use crate::backend::schedule_store::*;
