//! Shared helpers for simba's integration tests.

pub mod lincheck;
pub mod model;
pub mod node_log;
pub mod proxy;
pub mod servers;
pub mod sim;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::tck::{FaultHandle, FaultyBackend};
use simba::{ElectionListener, RevokeReason, Simba, SimbaConfig, Term};
use tokio::time::Instant;

/// The default configuration (lease 15 s, renew 5 s, drift 0.01, margin 50 ms).
pub fn config() -> SimbaConfig {
    SimbaConfig::default()
}

/// A client on a fault-injecting wrapper around `store`, with a fixed jitter seed.
pub fn faulty_client(store: &MemoryBackend, seed: u64) -> (Simba, FaultHandle) {
    faulty_client_with(store, config(), seed)
}

/// [`faulty_client`] with a configuration.
pub fn faulty_client_with(store: &MemoryBackend, config: SimbaConfig, seed: u64) -> (Simba, FaultHandle) {
    let (b, h) = FaultyBackend::new(store.clone());
    let c = Simba::builder().backend(b).config(config).seed(seed).build().expect("client");
    (c, h)
}

/// A shared, ordered log of what happened, for order checks.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<String>>>);

impl Journal {
    /// Appends an entry.
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(s.into());
    }

    /// The entries so far.
    pub fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A listener that records its callbacks as `elected:<token>` and `revoked:<token>:<reason>`.
#[derive(Clone, Default)]
pub struct Recorder {
    /// Where the callbacks go.
    pub journal: Journal,
}

impl ElectionListener for Recorder {
    fn on_elected(&self, term: &Term) {
        self.journal.push(format!("elected:{}", term.token()));
    }
    fn on_revoked(&self, term: &Term, reason: RevokeReason) {
        self.journal.push(format!("revoked:{}:{reason:?}", term.token()));
    }
}

/// Polls `f` every 10 ms until it returns `Some`, panicking after `within`.
pub async fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() <= within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Milliseconds since `t0`, for readable timing assertions.
pub fn ms_since(t0: Instant, t: Instant) -> u128 {
    t.duration_since(t0).as_millis()
}

/// An error's message and those of its sources, one per line (a backend error's `Display`
/// names only the operation; the cause is in its source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!("\n{s}"));
        source = s.source();
    }
    out
}

/// The URL of a test server from environment variable `var` (set by
/// `scripts/backends.sh start`, which the test command runs).
///
/// Under `CI=true` a missing variable FAILS the test: CI must run every backend test. Outside
/// CI it returns `None` after saying which variable is missing, and the caller returns early.
pub fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            let msg = format!(
                "{var} is not set: start the test servers with `eval \"$(bash scripts/backends.sh start)\"` (or run `bash scripts/test.sh`)"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            tracing::warn!("{msg}; skipping");
            // Visible in `cargo test` output, which captures logs but not this.
            std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED: {msg}\n").as_bytes()).ok();
            None
        }
    }
}
