//! Each server backend against its real server (started by `scripts/backends.sh`): the server
//! suite of the test kit (`simba::tck::servers`, one `server_suite!` entry a backend, with the
//! hooks that backend's server allows), and what the conformance suite cannot check from
//! outside (round trips, schema rights, key layouts, the backend's own takeovers and
//! restarts).
//!
//! Tests that pause, kill or restart a server, or time a handover, take [`SERIAL`], so that no
//! two of them run at once (they would disturb each other's servers and timings).

mod backfill;
mod etcd;
mod mysql;
mod postgres;
mod redis;
mod zookeeper;

/// Held by every test that disturbs a server or measures time against it: the lock the
/// server suite's generated tests hold, so that this file's own tests queue with them.
use simba::tck::servers::SERIAL;
