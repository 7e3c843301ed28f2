//! P10, no starvation between processes (issue 15 item 7): clients (each its own session and
//! connection pool, as separate processes would be) with several tasks each lock one name,
//! hold it a millisecond and release it, in a loop. Counted: the sections, how often the lock
//! changed client between two sections (a handoff), and each section's wait from asking to
//! holding. Run with `fair_locks` on (the default) and off (the anchor: tasks of one process
//! queue locally first, so a client whose tasks keep re-locking keeps the name).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio::time::{Instant, sleep};

use crate::measures::{Target, client, config};
use crate::stats;

/// One P10 run.
#[derive(Debug, Clone)]
pub(crate) struct P10Row {
    pub(crate) system: String,
    pub(crate) fair: bool,
    pub(crate) clients: usize,
    pub(crate) tasks: usize,
    pub(crate) iterations: usize,
    pub(crate) sections: usize,
    pub(crate) handoffs: usize,
    pub(crate) p50_wait_ms: f64,
    pub(crate) p99_wait_ms: f64,
    pub(crate) worst_wait_ms: f64,
    pub(crate) took_s: f64,
}

impl P10Row {
    /// Goal: a candidate's wait is bounded by the streaks of the other clients: each passes
    /// the name among its tasks for at most half a renewal interval, then gives way for one
    /// courtesy; so `(clients - 1) x (500 + 50) ms`, plus 200 ms for the sections and the
    /// store's round trips.
    pub(crate) fn bound_ms(&self) -> f64 {
        (self.clients.saturating_sub(1) as f64) * 550.0 + 200.0
    }

    pub(crate) fn met(&self) -> bool {
        self.worst_wait_ms <= self.bound_ms()
    }
}

/// The timing of P10: renewals every second, so a local streak gives way after 500 ms.
fn timing(fair: bool) -> Result<simba::SimbaConfig> {
    let c = config(Duration::from_secs(3), Duration::from_secs(1))?;
    Ok(c.to_builder().fair_locks(fair).build()?)
}

/// `clients` x `tasks` x `iterations` sections on one lease of `t`.
pub(crate) async fn p10(
    t: &Target,
    fair: bool,
    clients: usize,
    tasks: usize,
    iterations: usize,
    run: &str,
) -> Result<P10Row> {
    let cfg = timing(fair)?;
    let name = format!("p10-{run}-{}", if fair { "fair" } else { "unfair" });
    let mut cs = Vec::with_capacity(clients);
    for _ in 0..clients {
        cs.push(client(&t.url, cfg).await?);
    }
    // (when it was taken, which client, how long it was waited for)
    let log: Arc<Mutex<Vec<(Instant, usize, Duration)>>> = Arc::default();
    let started = Instant::now();
    let mut handles = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        for _ in 0..tasks {
            let (c, log, name) = (c.clone(), Arc::clone(&log), name.clone());
            handles.push(tokio::spawn(async move {
                for _ in 0..iterations {
                    let asked = Instant::now();
                    let g = c.lock(name.clone()).acquire().await?;
                    let got = Instant::now();
                    log.lock().unwrap_or_else(PoisonError::into_inner).push((got, i, got - asked));
                    sleep(Duration::from_millis(1)).await;
                    g.release().await?;
                }
                Ok::<(), simba::Error>(())
            }));
        }
    }
    for h in handles {
        h.await.map_err(|e| anyhow!("a P10 task panicked: {e}"))??;
    }
    let took = started.elapsed();
    for c in &cs {
        c.close().await;
    }
    let mut log = std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner));
    log.sort_by_key(|(at, _, _)| *at);
    let handoffs = log.windows(2).filter(|w| w[0].1 != w[1].1).count();
    let waits: Vec<f64> = log.iter().map(|(_, _, w)| w.as_secs_f64() * 1000.0).collect();
    Ok(P10Row {
        system: t.kind.label().to_owned(),
        fair,
        clients,
        tasks,
        iterations,
        sections: log.len(),
        handoffs,
        p50_wait_ms: stats::median(&waits),
        p99_wait_ms: stats::quantile(&waits, 0.99),
        worst_wait_ms: stats::max(&waits),
        took_s: took.as_secs_f64(),
    })
}
