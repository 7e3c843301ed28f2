//! What the test node binaries share: the host's monotonic clock (the same for every process
//! on the host) and an append-only log file named by `SIMBA_NODE_LOG`.

use std::io::Write;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Nanoseconds on the host's monotonic clock (`CLOCK_MONOTONIC`, shared by all processes).
pub fn mono_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// Appends `line` and this process's id to the file named by `SIMBA_NODE_LOG` (nothing when
/// unset), flushed at once so that a `kill -9` loses nothing written before.
pub fn log(line: String) {
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let path = std::env::var("SIMBA_NODE_LOG").ok()?;
        std::fs::OpenOptions::new().create(true).append(true).open(path).ok().map(Mutex::new)
    });
    if let Some(f) = file {
        let mut f = f.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(f, "{line} {}", std::process::id());
        let _ = f.flush();
    }
}

/// `t` (a Tokio instant) on the host's monotonic clock.
pub fn to_mono(t: tokio::time::Instant) -> u128 {
    let now = tokio::time::Instant::now();
    let m = mono_ns();
    if t >= now { m + (t - now).as_nanos() } else { m.saturating_sub((now - t).as_nanos()) }
}
