//! Faults with real processes (rule V2): the fault suite, the multi-process cron test, the
//! multi-process history test (issue 12), the multi-process schedules test (issue 36), degraded networks (issue 16 item 2), replicated stores
//! with their leader faulted (ADR 0029) and the fault proxy itself.
//!
//! The fault suite and the multi-process test start node processes and time failovers, so
//! they take [`SERIAL`] and never run at the same time.

mod checker;
mod degraded;
mod faults;
mod history;
mod history_servers;
mod multiprocess;
mod nodes;
mod proxy;
mod replicated;
mod replicated_pg;
mod replicated_redis;
mod schedules;
mod storage;

/// Held by every test that runs node processes against shared servers and times them.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
