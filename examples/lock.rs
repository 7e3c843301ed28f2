//! A distributed lock around a critical section: two nodes (each its own session on the same
//! store, as two processes would be) take turns on the lock `nightly-report`; the holder checks
//! that its term can still finish a step (`ensure_valid`) before each one, and gives the lock
//! back when it is done.
//!
//! ```text
//! cargo run --example lock                     # on ./lock-example.db (SQLite)
//! SIMBA_BACKEND__URL=postgres://user@host/db cargo run --example lock --features postgres
//! ```
//!
//! Run it in two terminals on the same file or server and the sections of the four nodes never
//! overlap either. `LOCK_ROUNDS=N` sets how many sections each node runs (default 2).
#![allow(clippy::print_stdout)] // an example prints what it does

use std::time::Duration;

use simba::{Simba, SimbaConfig};

/// The steps of one critical section, and what each must still have of the term to start.
const STEPS: u32 = 3;
const STEP_TIME: Duration = Duration::from_millis(150);
const STEP_NEEDS: Duration = Duration::from_secs(1);

/// One node: `rounds` times, wait for the lock, run the section step by step under its term,
/// release the lock.
async fn node(name: &'static str, simba: Simba, rounds: u32) -> anyhow::Result<()> {
    let lock = simba.lock("nightly-report");
    for _ in 0..rounds {
        let guard = lock.acquire().await?;
        let term = guard.term();
        println!("node {name}: holds the lock (token {})", term.token());
        for step in 1..=STEPS {
            // A step the term could not finish is not started: the lock may be someone
            // else's by then (this returns an error naming the time left).
            term.ensure_valid(STEP_NEEDS)?;
            println!("node {name}: step {step} of {STEPS} (token {})", term.token());
            tokio::time::sleep(STEP_TIME).await;
        }
        println!("node {name}: done, releasing (token {})", term.token());
        guard.release().await?;
    }
    simba.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("SIMBA_BACKEND__URL").unwrap_or_else(|_| "sqlite://lock-example.db".to_owned());
    let rounds: u32 = std::env::var("LOCK_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    // Two clients, two sessions: to the store they are two nodes.
    let a = Simba::connect(&url, SimbaConfig::default()).await?;
    let b = Simba::connect(&url, SimbaConfig::default()).await?;
    let (ra, rb) = tokio::join!(node("a", a, rounds), node("b", b, rounds));
    ra?;
    rb?;
    println!("all {} sections ran, one at a time", 2 * rounds);
    Ok(())
}
