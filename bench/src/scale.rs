//! P14, schedules as data at scale (issue 36 item 6): three node processes
//! (`simba-bench-node schedule-node ...`, each a `Runtime` with one handler and no job) run the
//! schedules of one store; the parent creates them through `admin::Schedules`, then measures:
//!
//! - **creation**: schedules created per second (64 creates in flight, nodes running);
//! - **node memory**: each node's RSS (`/proc/PID/status`) before and after the cold schedules
//!   (a yearly cron: they never fire in the run) were created and loaded, divided by the
//!   schedules of the partitions it holds (read from the store's leases);
//! - **store size**: PostgreSQL `pg_total_relation_size` of the schedule tables, Redis
//!   `used_memory` and the key count, before and after, divided by the schedules;
//! - **fires**: `hot` schedules on `* * * * * *`; over a window of whole seconds, the fires
//!   counted from the store's history (a `ran` record per slot, read through the jobs store after
//!   the window), lateness = the record's start minus its slot, and the CPU of the store's server
//!   and of the three nodes;
//! - **redistribution**: one node is killed (SIGKILL); the time until every partition it held is
//!   held by another node, and until each of them has a run started by another node, against
//!   the failover bound of the nodes' configuration.
//!
//! The anchor, on PostgreSQL and Redis: the raw store doing one write per fire at the same
//! rate, from this process (PostgreSQL: one `INSERT` of a history row; Redis: one `HSET`),
//! paced by the same one-second slots, with its lateness (the write's end minus the slot) and
//! the server's CPU; then the same writes flat out, the store's ceiling for them.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures_util::StreamExt;
use simba::admin::Schedules;
use simba::backend::Backend;
use simba::backend::namespace::Namespace;
use simba::job_store::{Outcome, SharedJobStore};
use simba::schedule_store::partition_of;
use simba::{Simba, SimbaConfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{Instant, sleep, timeout};

use crate::measures::{Kind, Target};
use crate::p14_common::{COLD, CREATES_IN_FLIGHT, PARTITIONS, create, id, rss};

/// The hot schedules' cron: every second.
const HOT: &str = "* * * * * *";
/// The node names.
const NODES: [&str; 3] = ["a", "b", "c"];

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    /// Schedules in all.
    pub(crate) schedules: usize,
    /// Of them on a one-second cron.
    pub(crate) hot: usize,
    /// The measuring window.
    pub(crate) window: Duration,
    /// The nodes' lease and renewal interval.
    pub(crate) lease: Duration,
    pub(crate) renew: Duration,
}

/// One store's P14 figures.
#[derive(Debug, Clone, Default)]
pub(crate) struct P14Row {
    pub(crate) system: String,
    pub(crate) schedules: usize,
    pub(crate) hot: usize,
    pub(crate) window_s: f64,
    /// Schedules created per second.
    pub(crate) create_rate: f64,
    /// Per node: bytes of RSS per schedule it holds, and the schedules it holds.
    pub(crate) node_bytes: Vec<(f64, usize)>,
    /// Per node: bytes of live heap (what the node's data keeps) per schedule it holds.
    pub(crate) node_heap: Vec<f64>,
    /// Store bytes per schedule, and what they are (`None` where not measured).
    pub(crate) store_bytes: Option<f64>,
    /// Rows or keys per schedule.
    pub(crate) store_items: Option<f64>,
    /// History bytes per `ran` record written in the run.
    pub(crate) history_bytes: Option<f64>,
    /// `ran` records per second in the window.
    pub(crate) fires_per_s: f64,
    /// Slots in the window that had no `ran` record: (outcome, count), `none` for no record.
    pub(crate) not_ran: Vec<(String, usize)>,
    /// Lateness of the window's runs, ms.
    pub(crate) late: Vec<f64>,
    /// The store server's CPU in the window, % of one core; the nodes' together.
    pub(crate) store_cpu: Option<f64>,
    pub(crate) nodes_cpu: f64,
    /// Partitions the killed node held; ms until all were held again; until all ran again.
    pub(crate) moved: usize,
    pub(crate) held_again_ms: f64,
    pub(crate) firing_again_ms: f64,
    /// The failover bound of the nodes' configuration.
    pub(crate) bound: Duration,
    /// The anchor at the same rate: writes/s, lateness ms, store CPU %; and flat out, writes/s.
    pub(crate) anchor: Option<Anchor>,
}

/// The raw store's one write per fire.
#[derive(Debug, Clone, Default)]
pub(crate) struct Anchor {
    pub(crate) what: &'static str,
    pub(crate) per_s: f64,
    pub(crate) late: Vec<f64>,
    pub(crate) store_cpu: Option<f64>,
    pub(crate) flat_out_per_s: f64,
}

impl P14Row {
    /// Goal: >= 2,000 fenced, recorded fires/s with lateness p99 < 250 ms.
    pub(crate) fn fires_met(&self) -> bool {
        self.fires_per_s >= 2000.0 && crate::stats::quantile(&self.late, 0.99) < 250.0
    }

    /// The largest node's bytes per schedule.
    pub(crate) fn worst_node_bytes(&self) -> f64 {
        self.node_bytes.iter().map(|(b, _)| *b).fold(f64::NAN, f64::max)
    }

    /// Goal: < 1 KiB of node memory per schedule (every node).
    pub(crate) fn memory_met(&self) -> bool {
        self.worst_node_bytes() < 1024.0
    }

    /// Goal: every moved partition held again within the failover bound (the redistribution;
    /// its first run comes at its next slot after the new holder's first read, reported beside
    /// it as `firing_again_ms`).
    pub(crate) fn redistribution_met(&self) -> bool {
        self.held_again_ms <= self.bound.as_secs_f64() * 1e3
    }
}

/// A node process.
struct Node {
    name: &'static str,
    child: tokio::process::Child,
    pid: u32,
    session: String,
    /// The node's live heap as it last told it, bytes.
    heap: Arc<AtomicU64>,
}

fn ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some((_, after)) = stat.rsplit_once(')') else { return 0 };
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

async fn spawn(exe: &std::path::Path, t: &Target, ns: &str, name: &'static str, s: Sizes) -> Result<Node> {
    let log = std::env::temp_dir().join(format!("simba-bench-p14-{ns}-{name}.stderr"));
    let stderr = std::fs::File::create(&log)?;
    let mut child = tokio::process::Command::new(exe)
        .args(["schedule-node", &t.url, ns, name, &s.lease.as_millis().to_string(), &s.renew.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .context("start a schedule node")?;
    let pid = child.id().ok_or_else(|| anyhow!("the node has no pid"))?;
    let out = child.stdout.take().ok_or_else(|| anyhow!("the node has no standard output"))?;
    let mut lines = BufReader::new(out).lines();
    let session = timeout(Duration::from_secs(60), async {
        while let Some(l) = lines.next_line().await? {
            if let Some(s) = l.strip_prefix("session ") {
                return anyhow::Ok(s.to_owned());
            }
        }
        Err(anyhow!("node {name} ended before its session was live (stderr: {})", log.display()))
    })
    .await
    .map_err(|_| anyhow!("node {name}: no session within 60 s (stderr: {})", log.display()))??;
    let heap = Arc::new(AtomicU64::new(0));
    let told = Arc::clone(&heap);
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(b) = l.strip_prefix("heap ").and_then(|b| b.parse().ok()) {
                told.store(b, Ordering::Relaxed);
            }
        }
    });
    Ok(Node { name, child, pid, session, heap })
}

/// Which session holds each partition of `simba.schedules` in namespace `ns`.
async fn holders(b: &impl Backend, ns: &str) -> Result<BTreeMap<u32, String>> {
    let snap = b.inspect().await.map_err(|e| anyhow!("inspect: {e}"))?;
    let prefix = format!("{ns}~simba.schedules.");
    Ok(snap
        .leases
        .into_iter()
        .filter_map(|l| Some((l.name.strip_prefix(&prefix)?.parse().ok()?, l.session.to_string())))
        .collect())
}

/// What the store holds, as (bytes, rows or keys): the schedule tables and the history tables
/// on PostgreSQL, the whole (private) Redis; `None` elsewhere.
async fn store_size(t: &Target) -> Result<Option<((f64, f64), (f64, f64))>> {
    match t.kind {
        Kind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&t.url).await?;
            let sched: f64 = sqlx::query_scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::float8 FROM pg_class c WHERE c.relkind = 'r' \
                 AND c.relname IN ('simba_schedule', 'simba_schedule_audit', 'simba_schedule_change')",
            )
            .fetch_one(&pool)
            .await?;
            let hist: f64 = sqlx::query_scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::float8 FROM pg_class c WHERE c.relkind = 'r' \
                 AND c.relname IN ('simba_job', 'simba_job_run')",
            )
            .fetch_one(&pool)
            .await?;
            let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM simba_schedule").fetch_one(&pool).await?;
            let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM simba_job_run").fetch_one(&pool).await?;
            pool.close().await;
            Ok(Some(((sched, rows as f64), (hist, runs as f64))))
        }
        Kind::Redis => {
            let mut c = redis::Client::open(t.url.as_str())?.get_multiplexed_async_connection().await?;
            let info: String = redis::cmd("INFO").arg("memory").query_async(&mut c).await?;
            let used = info
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or_else(|| anyhow!("no used_memory in INFO"))?;
            let keys: i64 = redis::cmd("DBSIZE").query_async(&mut c).await?;
            Ok(Some(((used, keys as f64), (used, keys as f64))))
        }
        _ => Ok(None),
    }
}

/// The store server's CPU ticks (PostgreSQL and Redis: `scripts/backends.sh`'s pid file).
fn store_ticks(t: &Target) -> Option<u64> {
    let pid = crate::fleet::server_pid(t.kind).ok()?;
    crate::fleet::server_ticks(pid).ok()
}

/// % of one core from two tick counts over `secs`.
fn pct(t0: u64, t1: u64, secs: f64) -> f64 {
    t1.saturating_sub(t0) as f64 / 100.0 / secs * 100.0
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Sleeps until wall-clock millisecond `ms`.
async fn sleep_until_ms(ms: i64) {
    let d = ms - now_ms();
    if d > 0 {
        sleep(Duration::from_millis(d as u64)).await;
    }
}

/// The window's slots `[from, to)` of `ids` in the history: lateness of each `ran` record and
/// the outcomes of the rest.
async fn count(
    jobs: &SharedJobStore,
    ids: &[String],
    (from, to): (i64, i64),
) -> Result<(Vec<f64>, Vec<(String, usize)>)> {
    let limit = usize::try_from((to - from) / 1000).unwrap_or(0) + 30;
    let reads: Vec<_> = futures_util::stream::iter(ids.iter().cloned())
        .map(|id| {
            let jobs = jobs.clone();
            async move { jobs.history(&simba::schedule_store::job_name(&id), limit).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let (mut late, mut other) = (Vec::new(), BTreeMap::<String, usize>::new());
    for recs in reads {
        let recs = recs.map_err(|e| anyhow!("history: {e}"))?;
        let mut seen = BTreeSet::new();
        for r in recs.iter().filter(|r| r.slot_ms >= from && r.slot_ms < to) {
            seen.insert(r.slot_ms);
            match (r.outcome, r.started_ms) {
                (Outcome::Ran, Some(s)) => late.push((s - r.slot_ms) as f64),
                (o, _) => *other.entry(format!("{o:?}").to_lowercase()).or_default() += 1,
            }
        }
        let slots = ((to - from) / 1000) as usize;
        let none = slots.saturating_sub(seen.len());
        if none > 0 {
            *other.entry("none".to_owned()).or_default() += none;
        }
    }
    Ok((late, other.into_iter().collect()))
}

/// P14 on `t`: `s.schedules` schedules, `s.hot` of them every second.
pub(crate) async fn p14(t: &Target, s: Sizes, run: &str, step: &impl Fn(&str)) -> Result<P14Row> {
    let exe = node_exe()?;
    let label = t.kind.label();
    let ns = format!("p14-{}-{run}", label.to_lowercase());
    let cfg = SimbaConfig::builder().lease_duration(s.lease).renew_interval(s.renew).build()?;
    let raw = simba::backend::connect(&simba::backend::BackendUrl::new(&t.url), Default::default())
        .await
        .map_err(|e| anyhow!("{e}"))?;
    let client = Simba::connect_in(&t.url, Some(Namespace::new(&ns)?), cfg).await?;
    client.live().await?;
    let api = Schedules::for_client(&client)?.with_partitions(PARTITIONS)?.with_handlers(["tick"]);
    let jobs = client.job_store().ok_or_else(|| anyhow!("{label} has no jobs store"))?;
    let mut row = P14Row {
        system: label.to_owned(),
        schedules: s.schedules,
        hot: s.hot,
        window_s: s.window.as_secs_f64(),
        bound: cfg.failover_bound(),
        ..P14Row::default()
    };

    step(&format!("P14 {label}: 3 node processes"));
    let mut nodes = Vec::new();
    for name in NODES {
        nodes.push(spawn(&exe, t, &ns, name, s).await?);
    }
    // Every partition held, by all three nodes (the balance comes within a few intervals).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let h = holders(&raw, &ns).await?;
        let owners: BTreeSet<&String> = h.values().collect();
        if h.len() == PARTITIONS as usize && owners.len() == NODES.len() {
            break;
        }
        if Instant::now() > deadline {
            bail!("the partitions were not spread over the 3 nodes within 60 s ({} held)", h.len());
        }
        sleep(s.renew).await;
    }
    sleep(s.renew * 3).await;
    let rss0: Vec<u64> = nodes.iter().map(|n| rss(n.pid)).collect::<Result<_>>()?;
    let heap0: Vec<u64> = nodes.iter().map(|n| n.heap.load(Ordering::Relaxed)).collect();
    let size0 = store_size(t).await?;

    // The cold schedules: loaded, never fired in the run.
    let cold: Vec<String> = (s.hot..s.schedules).map(id).collect();
    let hot: Vec<String> = (0..s.hot).map(id).collect();
    step(&format!("P14 {label}: creating {} schedules ({CREATES_IN_FLIGHT} in flight)", s.schedules));
    let secs = create(&api, &cold, COLD).await?;
    row.create_rate = cold.len() as f64 / secs;
    step(&format!("P14 {label}: {} created in {secs:.1} s ({:.0}/s)", cold.len(), row.create_rate));
    // Loaded: a change reaches the holders within one interval; RSS sampled until steady.
    sleep(s.renew * 3).await;
    let mut last: Vec<u64> = nodes.iter().map(|n| rss(n.pid)).collect::<Result<_>>()?;
    for _ in 0..10 {
        sleep(Duration::from_secs(2)).await;
        let now: Vec<u64> = nodes.iter().map(|n| rss(n.pid)).collect::<Result<_>>()?;
        let steady = now.iter().zip(&last).all(|(a, b)| a.abs_diff(*b) * 100 <= *b);
        last = now;
        if steady {
            break;
        }
    }
    let h = holders(&raw, &ns).await?;
    for (i, n) in nodes.iter().enumerate() {
        let parts: BTreeSet<u32> = h.iter().filter(|(_, s)| **s == n.session).map(|(p, _)| *p).collect();
        let held = cold.iter().filter(|id| parts.contains(&partition_of(id, PARTITIONS))).count();
        let grown = last[i].saturating_sub(rss0[i]) as f64;
        row.node_bytes.push((if held > 0 { grown / held as f64 } else { f64::NAN }, held));
        let heap = n.heap.load(Ordering::Relaxed).saturating_sub(heap0[i]) as f64;
        row.node_heap.push(if held > 0 { heap / held as f64 } else { f64::NAN });
    }
    let size1 = store_size(t).await?;
    if let (Some(((b0, n0), _)), Some(((b1, n1), _))) = (size0, size1) {
        row.store_bytes = Some((b1 - b0) / cold.len() as f64);
        row.store_items = Some((n1 - n0) / cold.len() as f64);
    }

    // The hot schedules, then the window.
    create(&api, &hot, HOT).await?;
    step(&format!("P14 {label}: {} schedules every second; settling, then {:?}", s.hot, s.window));
    sleep(s.renew * 3 + Duration::from_secs(5)).await;
    let from = (now_ms() / 1000 + 1) * 1000;
    let to = from + i64::try_from(s.window.as_millis())?;
    sleep_until_ms(from).await;
    let (st0, nt0) = (store_ticks(t), nodes.iter().map(|n| ticks(n.pid)).sum::<u64>());
    sleep_until_ms(to).await;
    let (st1, nt1) = (store_ticks(t), nodes.iter().map(|n| ticks(n.pid)).sum::<u64>());
    let secs = s.window.as_secs_f64();
    row.store_cpu = st0.zip(st1).map(|(a, b)| pct(a, b, secs));
    row.nodes_cpu = pct(nt0, nt1, secs);
    // The window's last runs end and their records are written (the writer's batches).
    sleep(s.renew * 2).await;
    let size2 = store_size(t).await?;

    // Redistribution: kill node a; its partitions held again, then running again.
    let h = holders(&raw, &ns).await?;
    let victim = &nodes[0];
    let orphans: BTreeSet<u32> = h.iter().filter(|(_, s)| **s == victim.session).map(|(p, _)| *p).collect();
    let probe: BTreeMap<u32, String> =
        hot.iter().map(|id| (partition_of(id, PARTITIONS), id.clone())).filter(|(p, _)| orphans.contains(p)).collect();
    row.moved = orphans.len();
    step(&format!("P14 {label}: kill -9 node {} ({} partitions)", victim.name, orphans.len()));
    let killed = Instant::now();
    let killed_ms = now_ms();
    nodes[0].child.start_kill()?;
    let bound = row.bound + Duration::from_secs(30);
    let mut held_again = None;
    let mut firing: BTreeMap<u32, i64> = BTreeMap::new();
    while killed.elapsed() < bound && (held_again.is_none() || firing.len() < probe.len()) {
        if held_again.is_none() {
            let h = holders(&raw, &ns).await?;
            if orphans.iter().all(|p| h.get(p).is_some_and(|s| *s != nodes[0].session)) {
                held_again = Some(killed.elapsed().as_secs_f64() * 1e3);
            }
        }
        let waiting: Vec<(u32, String)> =
            probe.iter().filter(|(p, _)| !firing.contains_key(p)).map(|(p, id)| (*p, id.clone())).collect();
        for (p, id) in waiting {
            let recs = jobs.history(&simba::schedule_store::job_name(&id), 5).await.map_err(|e| anyhow!("{e}"))?;
            let first = recs
                .iter()
                .filter(|r| r.node != nodes[0].name && r.slot_ms > killed_ms)
                .filter_map(|r| r.started_ms)
                .min();
            if let Some(ms) = first {
                firing.insert(p, ms - killed_ms);
            }
        }
        sleep(Duration::from_millis(50)).await;
    }
    row.held_again_ms = held_again.unwrap_or(f64::INFINITY);
    row.firing_again_ms =
        if firing.len() == probe.len() { firing.values().copied().max().unwrap_or(0) as f64 } else { f64::INFINITY };

    let (late, other) = count(&jobs, &hot, (from, to)).await?;
    row.fires_per_s = late.len() as f64 / secs;
    row.late = late;
    row.not_ran = other;
    if let (Some((_, (b1, n1))), Some((_, (b2, n2)))) = (size1, size2) {
        // Bytes of history per record written (only where the store counts records).
        if n2 > n1 && t.kind == Kind::Postgres {
            row.history_bytes = Some((b2 - b1) / (n2 - n1));
        }
    }
    for n in &mut nodes {
        let _ = n.child.start_kill();
        let _ = n.child.wait().await;
    }
    client.close().await;
    cleanup(t, &ns).await;
    step(&format!("P14 {label}: {:.0} fires/s; the anchor", row.fires_per_s));
    row.anchor = anchor(t, s, run).await?;
    Ok(row)
}

/// Deletes the run's schedules and history from PostgreSQL and Redis (the private servers
/// keep their data between runs); best effort.
async fn cleanup(t: &Target, ns: &str) {
    let done = async {
        match t.kind {
            Kind::Postgres => {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&t.url).await?;
                let like = format!("{ns}~%");
                for q in [
                    "DELETE FROM simba_schedule WHERE space = $1",
                    "DELETE FROM simba_schedule_audit WHERE space = $1",
                    "DELETE FROM simba_schedule_change WHERE space = $1",
                ] {
                    sqlx::query(q).bind(ns).execute(&pool).await?;
                }
                sqlx::query("DELETE FROM simba_job_run WHERE job LIKE $1").bind(&like).execute(&pool).await?;
                sqlx::query("DELETE FROM simba_job WHERE job LIKE $1").bind(&like).execute(&pool).await?;
                sqlx::query("VACUUM simba_schedule, simba_job_run, simba_job").execute(&pool).await?;
            }
            Kind::Redis => {
                let mut c = redis::Client::open(t.url.as_str())?.get_multiplexed_async_connection().await?;
                unlink_matching(&mut c, &format!("*{ns}~*")).await?;
            }
            _ => {}
        }
        anyhow::Ok(())
    };
    if let Err(e) = done.await {
        println!("P14 {}: cleanup of {ns} failed: {e}", t.kind.label());
    }
}

/// The anchor on PostgreSQL and Redis: one write per fire at the hot schedules' rate, then
/// flat out.
async fn anchor(t: &Target, s: Sizes, run: &str) -> Result<Option<Anchor>> {
    enum W {
        Pg(sqlx::PgPool),
        Redis(redis::aio::MultiplexedConnection),
    }
    let (w, what) = match t.kind {
        Kind::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(16).connect(&t.url).await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS p14_anchor (job TEXT NOT NULL, slot_ms BIGINT NOT NULL, \
                 started_ms BIGINT NOT NULL, node TEXT NOT NULL, outcome TEXT NOT NULL, PRIMARY KEY (job, slot_ms))",
            )
            .execute(&pool)
            .await?;
            (W::Pg(pool), "one INSERT of a history row per fire")
        }
        Kind::Redis => {
            let c = redis::Client::open(t.url.as_str())?.get_multiplexed_async_connection().await?;
            (W::Redis(c), "one HSET of a history entry per fire")
        }
        _ => return Ok(None),
    };
    let w = Arc::new(w);
    let shared = Arc::clone(&w);
    let write = move |job: String, slot: i64| {
        let w = Arc::clone(&shared);
        async move {
            let started = now_ms();
            match &*w {
                W::Pg(pool) => {
                    sqlx::query("INSERT INTO p14_anchor VALUES ($1, $2, $3, 'anchor', 'ran')")
                        .bind(&job)
                        .bind(slot)
                        .bind(started)
                        .execute(pool)
                        .await?;
                }
                W::Redis(c) => {
                    let mut c = c.clone();
                    let _: i64 = redis::cmd("HSET")
                        .arg(format!("p14a:{job}"))
                        .arg(slot)
                        .arg(format!("ran {started} anchor"))
                        .query_async(&mut c)
                        .await?;
                }
            }
            anyhow::Ok(now_ms() - slot)
        }
    };
    // Paced: every second, one write per hot schedule, 64 in flight.
    let from = (now_ms() / 1000 + 1) * 1000;
    let slots = s.window.as_secs().max(1) as i64;
    let st0 = store_ticks(t);
    let mut late = Vec::new();
    let mut tasks = Vec::new();
    for k in 0..slots {
        let slot = from + k * 1000;
        sleep_until_ms(slot).await;
        let jobs: Vec<String> = (0..s.hot).map(|i| format!("a{run}.{}", id(i))).collect();
        let write = write.clone();
        tasks.push(tokio::spawn(async move {
            futures_util::stream::iter(jobs).map(|j| write(j, slot)).buffer_unordered(64).collect::<Vec<_>>().await
        }));
    }
    sleep_until_ms(from + slots * 1000).await;
    let st1 = store_ticks(t);
    for task in tasks {
        for r in task.await? {
            late.push(r? as f64);
        }
    }
    let secs = slots as f64;
    // Sustained: the writes that ended within the window (a store that falls behind ends
    // the rest later, and they count in the lateness only).
    let end = from + slots * 1000;
    let within = (0..slots)
        .flat_map(|k| std::iter::repeat_n(from + k * 1000, s.hot))
        .zip(&late)
        .filter(|(slot, l)| *slot + **l as i64 <= end)
        .count();
    // Flat out: the same writes, 64 in flight, for a third of the window.
    let ops = Arc::new(AtomicU64::new(0));
    let len = (s.window / 3).max(Duration::from_secs(2));
    let started = Instant::now();
    let base = from + slots * 1000 + 1;
    let stream = futures_util::stream::iter(0..)
        .take_while(|_| std::future::ready(started.elapsed() < len))
        .map(|i: i64| {
            let ops = Arc::clone(&ops);
            let f = write(format!("f{run}.{}", i % 10_000), base + i);
            async move {
                f.await?;
                ops.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64);
    let results: Vec<_> = stream.collect().await;
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return Err(e);
    }
    let flat = ops.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    match &*w {
        W::Pg(pool) => {
            sqlx::query("DROP TABLE p14_anchor").execute(pool).await?;
        }
        W::Redis(c) => {
            unlink_matching(&mut c.clone(), "p14a:*").await?;
        }
    }
    Ok(Some(Anchor {
        what,
        per_s: within as f64 / secs,
        late,
        store_cpu: st0.zip(st1).map(|(a, b)| pct(a, b, secs)),
        flat_out_per_s: flat,
    }))
}

/// Removes every Redis key matching `pattern` (`SCAN` pages, each `UNLINK`ed).
async fn unlink_matching(c: &mut redis::aio::MultiplexedConnection, pattern: &str) -> Result<()> {
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(10_000).query_async(c).await?;
        if !keys.is_empty() {
            let _: i64 = redis::cmd("UNLINK").arg(&keys).query_async(c).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The node binary, `simba-bench-node`, beside this one.
fn node_exe() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("the benchmark's own executable")?.with_file_name("simba-bench-node");
    if !exe.is_file() {
        bail!(
            "P14's node binary {} is missing: build both binaries with `cargo build --release -p simba-bench` \
             (`bash scripts/bench.sh` does)",
            exe.display()
        );
    }
    Ok(exe)
}

/// P14's node heap per schedule, in process (`simba-bench-node held-heap N`, which counts its
/// allocations): `n` yearly schedules created in an in-memory store with no node running,
/// then one node (holding every partition) started; the growth of its live heap once it has
/// loaded them, less the growth of the same node over an empty store, per schedule.
/// Returns the bytes per schedule of live heap and of RSS.
pub(crate) async fn held_heap(n: usize) -> Result<(f64, f64)> {
    let out = tokio::process::Command::new(node_exe()?)
        .args(["held-heap", &n.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .await
        .context("start simba-bench-node held-heap")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("simba-bench-node held-heap {n} failed ({}): {text}", out.status);
    }
    let figures =
        text.lines().find_map(|l| l.strip_prefix("held-heap ")).ok_or_else(|| anyhow!("no figures: {text}"))?;
    let parsed: Vec<f64> = figures.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    match parsed[..] {
        [heap, rss] => Ok((heap, rss)),
        _ => bail!("simba-bench-node held-heap printed `{figures}`, not two figures"),
    }
}
