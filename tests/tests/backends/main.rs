//! Each server backend against its real server (started by `scripts/backends.sh`): what the
//! conformance suite cannot check from outside (round trips, server pauses and restarts,
//! schema rights, takeovers by hand).
//!
//! Tests that pause, kill or restart a server, or time a handover, take [`SERIAL`], so that no
//! two of them run at once (they would disturb each other's servers and timings).

mod etcd;
mod mysql;
mod postgres;
mod redis;
mod zookeeper;

/// Held by every test that disturbs a server or measures time against it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
