//! P12 and P13 (issue 38 item 5): what history at full retention costs the leases, and how
//! soon a run-now request reaches the holder.
//!
//! - **P12**: two runtimes on one store, each with its own backend connection, a 1.5 s lease
//!   renewed every 500 ms and a 100 ms fixed-rate job (one of them holds it), the job's history
//!   prefilled to 9,990 records under `[history] retention = 10000` so that every write trims
//!   at full retention. Every keep-alive of both is timed by a wrapper around the backend. The
//!   same again with the backend wrapped so that it offers no jobs store (history off). Goal:
//!   renewal p99 with history within 10% of history off. Beside it, the history records the
//!   job wrote per second (each is a claim and an end write).
//! - **P13**: a runtime holds a cron job that never fires by itself; a second connection (the
//!   operator's) requests a run now with `JobStore::trigger`, and the time from the request to
//!   the start of the holder's run is taken. Goal: p50 < 50 ms on the stores that broadcast
//!   control changes (PostgreSQL, Redis, ZooKeeper, etcd); SQLite and MariaDB poll once per
//!   renewal interval and are reported beside them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use futures_util::StreamExt;
use simba::backend::Backend;
use simba::job::{JobContext, JobFuture, Schedule, ScheduledJob};
use simba::job_store::{Outcome, RunRecord, SharedJobStore, SlotKind};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::time::{Instant, sleep, timeout};

use crate::measures::{Counted, Kind, Target};

/// The scenario's retention (the largest `[history] retention`).
const RETENTION: usize = 10_000;

/// Connects a new backend of `t`'s kind and passes it to `$body` as `$b`.
macro_rules! with_backend {
    ($t:expr, |$b:ident| $body:expr) => {{
        use simba::backend::{
            etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, redis::RedisBackend,
            sqlite::SqliteBackend, zookeeper::ZooKeeperBackend,
        };
        let e = |e: simba::backend::BackendError| anyhow!("{e}");
        match $t.kind {
            Kind::Postgres => {
                let $b = PostgresBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
            Kind::MySql => {
                let $b = MySqlBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
            Kind::Sqlite => {
                let $b = SqliteBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
            Kind::Redis => {
                let $b = RedisBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
            Kind::ZooKeeper => {
                let $b = ZooKeeperBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
            Kind::Etcd => {
                let $b = EtcdBackend::connect(&$t.url).await.map_err(e)?;
                $body
            }
        }
    }};
}

/// One backend's P12 row.
#[derive(Debug, Clone)]
pub(crate) struct P12Row {
    pub(crate) system: String,
    /// Renewal round trips with history on (retention 10,000, prefilled), ms.
    pub(crate) on: Vec<f64>,
    /// The same with history off, ms.
    pub(crate) off: Vec<f64>,
    /// History records the 100 ms job wrote per second with history on.
    pub(crate) records_per_s: f64,
    /// How long the prefill of 9,990 records took, s.
    pub(crate) prefill_s: f64,
}

impl P12Row {
    /// p99 with history over p99 without.
    pub(crate) fn ratio(&self) -> f64 {
        crate::stats::quantile(&self.on, 0.99) / crate::stats::quantile(&self.off, 0.99)
    }

    /// The goal: within 10%.
    pub(crate) fn met(&self) -> bool {
        self.ratio() <= 1.10
    }
}

fn p12_job(_term: Term) -> JobFuture {
    Box::pin(async { Ok(()) })
}

/// The runtime configuration of P12 and P13: a 1.5 s lease renewed every 500 ms, retention
/// 10,000.
fn runtime_config(url: &str) -> Result<RuntimeConfig> {
    let toml = format!(
        "[backend]\nurl = \"{url}\"\n\n[session]\nlease_duration = \"1500ms\"\nrenew_interval = \"500ms\"\n\n\
         [history]\nretention = {RETENTION}\n"
    );
    Ok(RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?)
}

/// Writes `n` records of `job`, 100 ms apart and older than now, through the jobs store.
async fn prefill(store: &SharedJobStore, job: &str, n: usize) -> Result<()> {
    let base = chrono::Utc::now().timestamp_millis() - 60_000;
    let results: Vec<_> = futures_util::stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            let mut rec = RunRecord::not_run(job, base - 100 * i as i64, Outcome::Ran);
            (rec.attempt, rec.attempts, rec.node) = (1, 1, "prefill".to_owned());
            async move { append_retrying(&store, &rec).await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// One append, tried again while the store is unavailable (concurrent appends of one job can
/// deadlock in MariaDB's trim; the runtime's record writer retries the same way), at most 5
/// times; the error names its causes.
async fn append_retrying(store: &SharedJobStore, rec: &RunRecord) -> Result<()> {
    let mut tries = 0;
    loop {
        tries += 1;
        match store.append(rec).await {
            Ok(_) => return Ok(()),
            Err(simba::backend::BackendError::Unavailable { .. }) if tries < 5 => {
                sleep(Duration::from_millis(20 * tries)).await;
            }
            Err(e) => {
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text = format!("{text}: {c}");
                    cause = c.source();
                }
                bail!("prefill (try {tries}): {text}");
            }
        }
    }
}

/// Sessions renewing during P12 (one of them holds the job): more renewals, a steadier p99.
const P12_RUNTIMES: usize = 6;
/// Rounds of P12: history on, then off, alternately, so that a drift of the machine's load
/// falls on both.
const P12_ROUNDS: u64 = 3;

/// P12 on one backend: [`P12_ROUNDS`] rounds of `secs / P12_ROUNDS` seconds with history on
/// (prefilled once), then as long off; the samples of each side are pooled.
pub(crate) async fn p12(t: &Target, secs: u64, run: &str) -> Result<P12Row> {
    let label = t.kind.label();
    let mut row =
        P12Row { system: label.to_owned(), on: Vec::new(), off: Vec::new(), records_per_s: 0.0, prefill_s: 0.0 };
    let phase = (secs / P12_ROUNDS).max(2);
    let mut store = None;
    let mut written = 0usize;
    for _ in 0..P12_ROUNDS {
        for history in [true, false] {
            let name = format!("p12_{}_{label}_{run}", if history { "on" } else { "off" });
            let (samples, w) = p12_phase(t, &name, history, phase, &mut store, &mut row.prefill_s).await?;
            written += w;
            if history { row.on.extend(samples) } else { row.off.extend(samples) }
        }
    }
    row.records_per_s = written as f64 / (phase * P12_ROUNDS) as f64;
    Ok(row)
}

/// One phase of P12: [`P12_RUNTIMES`] runtimes for `secs` seconds; the renewal times and the
/// records the job wrote. The first phase with history prefills the job's history into `store`.
async fn p12_phase(
    t: &Target,
    name: &str,
    history: bool,
    secs: u64,
    store: &mut Option<SharedJobStore>,
    prefill_s: &mut f64,
) -> Result<(Vec<f64>, usize)> {
    let label = t.kind.label();
    let job = || ScheduledJob::from_closure(name.to_owned(), Schedule::fixed_rate(Duration::from_millis(100)), p12_job);
    let renewals = Arc::new(Mutex::new(Vec::new()));
    let mut runtimes = Vec::new();
    for _ in 0..P12_RUNTIMES {
        let rt = with_backend!(t, |b| {
            if history && store.is_none() {
                // At the scenario's retention: the store's own (the default, 100) would trim
                // every append of the prefill to it.
                let s = b.job_store().ok_or_else(|| anyhow!("{label}: no jobs store"))?.keeping(RETENTION);
                let t0 = Instant::now();
                prefill(&s, name, RETENTION - 10).await?;
                *prefill_s = t0.elapsed().as_secs_f64();
                let kept = s.history(name, RETENTION).await.map_err(|e| anyhow!("{label}: read the history: {e}"))?;
                if kept.len() != RETENTION - 10 {
                    bail!("{label}: the prefill left {} records, not {}", kept.len(), RETENTION - 10);
                }
                *store = Some(s);
            }
            let timed = Counted::timed(b, Arc::clone(&renewals), history);
            Runtime::builder()
                .config(runtime_config(&t.url)?)
                .without_registry()
                .backend(timed)
                .job(job())
                .start()
                .await?
        });
        runtimes.push(rt);
    }
    // The first renewals of a new session are not the steady state.
    sleep(Duration::from_secs(2)).await;
    renewals.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let from = chrono::Utc::now().timestamp_millis();
    sleep(Duration::from_secs(secs)).await;
    let samples = std::mem::take(&mut *renewals.lock().unwrap_or_else(PoisonError::into_inner));
    let mut written = 0;
    if let (true, Some(s)) = (history, store.as_ref()) {
        let h = s.history(name, RETENTION).await.map_err(|e| anyhow!("{label}: read the history: {e}"))?;
        written = h.iter().filter(|r| r.slot_ms >= from && r.node != "prefill").count();
    }
    for rt in runtimes {
        rt.shutdown().await;
    }
    if samples.is_empty() {
        bail!("{label}: no renewal succeeded (history {})", if history { "on" } else { "off" });
    }
    Ok((samples, written))
}

/// One backend's P13 row.
#[derive(Debug, Clone)]
pub(crate) struct P13Row {
    pub(crate) system: String,
    /// From the request to the run's start, ms.
    pub(crate) latency: Vec<f64>,
    /// Whether the store is one that broadcasts control changes (PostgreSQL, Redis, ZooKeeper,
    /// etcd: the goal applies); SQLite and MariaDB poll.
    pub(crate) broadcasts: bool,
}

impl P13Row {
    /// p50 < 50 ms where the store broadcasts.
    pub(crate) fn met(&self) -> bool {
        crate::stats::median(&self.latency) < 50.0
    }
}

/// Manual runs started, by lease.
static STARTS: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

fn p13_job(term: Term) -> JobFuture {
    // The run's context is set while the future runs, not while the function makes it.
    Box::pin(async move {
        if JobContext::current().is_some_and(|c| c.kind() == SlotKind::Manual) {
            STARTS.lock().unwrap_or_else(PoisonError::into_inner).push((term.name().to_owned(), Instant::now()));
        }
        Ok(())
    })
}

fn starts(lease: &str) -> Vec<Instant> {
    STARTS.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|(l, _)| l == lease).map(|(_, t)| *t).collect()
}

/// P13 on one backend: `n` run-now requests, one at a time.
pub(crate) async fn p13(t: &Target, n: usize, run: &str) -> Result<P13Row> {
    let label = t.kind.label();
    let name = format!("p13_{label}_{run}");
    // Midnight on 1 January: never during the measure.
    let job = ScheduledJob::from_closure(name.clone(), Schedule::cron("0 0 0 1 1 *"), p13_job);
    let rt = Runtime::builder().config(runtime_config(&t.url)?).without_registry().job(job).start().await?;
    let operator = crate::measures::client(&t.url, simba::SimbaConfig::default()).await?;
    let store = operator.job_store().ok_or_else(|| anyhow!("{label}: no jobs store"))?;
    let broadcasts = matches!(t.kind, Kind::Postgres | Kind::Redis | Kind::ZooKeeper | Kind::Etcd);
    let mut latency = Vec::with_capacity(n);
    // The first request also waits for the runtime's first term: not counted.
    for i in 0..=n {
        let before = starts(&name).len();
        let t0 = Instant::now();
        store
            .trigger(&name, &format!("bench-{i}"), chrono::Utc::now().timestamp_millis())
            .await
            .map_err(|e| anyhow!("{label}: trigger: {e}"))?;
        let within = if i == 0 { Duration::from_secs(15) } else { Duration::from_secs(5) };
        let started = timeout(within, async {
            loop {
                if let Some(at) = starts(&name).get(before) {
                    return *at;
                }
                sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .map_err(|_| anyhow!("{label}: run-now request {i} did not run within {within:?}"))?;
        if i > 0 {
            latency.push(started.saturating_duration_since(t0).as_secs_f64() * 1e3);
        }
        sleep(Duration::from_millis(200)).await;
    }
    operator.close().await;
    rt.shutdown().await;
    Ok(P13Row { system: label.to_owned(), latency, broadcasts })
}
