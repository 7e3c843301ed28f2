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
        // One `write` of the whole line: `writeln!` on a `File` writes each piece of the format
        // apart, and pieces of lines that several node processes append at the same moment
        // (the clock checks of nodes started together) then interleave in the shared file.
        let line = format!("{line} {}\n", std::process::id());
        let mut f = f.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = f.write_all(line.as_bytes());
        let _ = f.flush();
    }
}

/// The rate of this process's own clock (Tokio's `Instant`, `std::time::Instant`) to the
/// host's, as the fault harness injected it with libfaketime: `SIMBA_FAULT_CLOCK_RATE`, 1 when
/// unset (no skew).
///
/// [`mono_ns`] reads the host's clock through rustix, whose Linux backend calls the vDSO
/// itself and never libc's `clock_gettime`, so libfaketime's `LD_PRELOAD` does not reach it:
/// it stays the real clock that the harness and every node share. `std::time::Instant` (and
/// so Tokio's clock) calls libc's `clock_gettime(CLOCK_MONOTONIC)`, which libfaketime
/// replaces: it runs at this rate. [`clock_check`] measures both.
pub fn clock_rate() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        std::env::var("SIMBA_FAULT_CLOCK_RATE")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|r| *r > 0.0)
            .unwrap_or(1.0)
    })
}

/// `t` (a Tokio instant) on the host's monotonic clock.
///
/// Under an injected clock rate, the local time between now and `t` is turned into real time
/// with the rate (`real = local / rate`): a term's local deadline `t` is the moment the node's
/// own clock reaches it, which is when the node stops believing itself valid, and that is the
/// end of its validity on the real clock. Logging "valid" observations in real time instead
/// would end each interval at the last observation (one job period, 50 ms, before the
/// deadline): it would hide the ~30 ms by which a 3% slow clock with `drift = 0.01` outlives
/// the store's expiry, the very overlap the check is there to see.
///
/// The two clocks are read one after the other, and a thread preempted or stopped (`SIGSTOP`,
/// the fault suite's `NodePause`) between the two reads would shift the result by the delay:
/// a deadline read just before a 1.9 s pause would be logged 1.9 s late. So Tokio's clock is
/// read on both sides of the host's, again while the two readings lie more than 1 ms apart
/// (a few times at most: a stop or a preemption does not hit the same few nanoseconds twice),
/// and the first reading is used: the result errs by less than that gap, on the late side.
pub fn to_mono(t: tokio::time::Instant) -> u128 {
    let (now, m) = clock_pair();
    let rate = clock_rate();
    let real = |d: std::time::Duration| (d.as_nanos() as f64 / rate) as u128;
    if t >= now { m + real(t - now) } else { m.saturating_sub(real(now - t)) }
}

/// Tokio's clock and the host's, read within 1 ms of each other (see [`to_mono`]).
fn clock_pair() -> (tokio::time::Instant, u128) {
    let mut tries = 0;
    loop {
        let before = tokio::time::Instant::now();
        let m = mono_ns();
        let after = tokio::time::Instant::now();
        tries += 1;
        if after - before <= std::time::Duration::from_millis(1) || tries >= 10 {
            return (before, m);
        }
    }
}

/// Measures this process's clock rate: Tokio's `Instant` against [`mono_ns`] over `over`,
/// logged as `clock <real_start_ns> <real_ns> <local_ns>`. The fault harness checks that
/// `local / real` is the rate it injected (so that libfaketime reaches Tokio's clock and not
/// the harness's real one), and that `real_start` lies between the node's spawn and the
/// harness's reading (so that the node's [`mono_ns`] is the host's real clock).
pub fn clock_check(over: std::time::Duration) {
    let r0 = mono_ns();
    let l0 = tokio::time::Instant::now();
    // Busy-wait on the real clock: a sleep would be scaled by libfaketime too.
    while mono_ns() - r0 < over.as_nanos() {
        std::hint::spin_loop();
    }
    let local = l0.elapsed().as_nanos();
    let real = mono_ns() - r0;
    log(format!("clock {r0} {real} {local}"));
}

/// With `SIMBA_NODE_TRACING=1`, the library's log goes to stderr, filtered by `RUST_LOG`
/// (the multi-process tests read the warnings of the record writer and the claims' lines);
/// nothing otherwise.
pub fn trace_to_stderr() {
    if std::env::var_os("SIMBA_NODE_TRACING").is_some_and(|v| v == "1") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
}
