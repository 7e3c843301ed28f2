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

/// Runs the node's runtime as `simba::run()` does; with `SIMBA_HISTORY_LOG=FILE`, on the
/// backend the configuration names (`[backend] url`, `SIMBA_BACKEND__URL`) wrapped in a [`RecordingBackend`] that appends every
/// lease operation to FILE (the fault suite's node binaries).
pub async fn run_node() -> anyhow::Result<()> {
    let Some(path) = std::env::var_os("SIMBA_HISTORY_LOG") else {
        simba::run().await?;
        return Ok(());
    };
    let rec = Recorder::to_file(std::path::Path::new(&path))?;
    let backend = connect_retrying().await?;
    simba::Runtime::builder().backend(RecordingBackend::new(backend, rec)).run().await?;
    Ok(())
}

/// The backend the configuration names, connected as the runtime would: a node started while
/// the server restarts (a server kill) waits for it, up to 30 s.
async fn connect_retrying() -> anyhow::Result<simba::backend::Connected> {
    use simba::backend::{BackendError, BackendUrl, ConnectOptions, connect};
    let url = BackendUrl::new(&simba::RuntimeConfig::load()?.backend_url);
    let start = tokio::time::Instant::now();
    loop {
        match connect(&url, ConnectOptions::default()).await {
            Ok(b) => return Ok(b),
            Err(e @ BackendError::Unavailable { .. }) if start.elapsed() < std::time::Duration::from_secs(30) => {
                tracing::warn!(error = %e, "the backend is unavailable; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
