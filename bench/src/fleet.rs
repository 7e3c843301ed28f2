//! P8, a fleet (issue 15 item 6): `sessions` clients, each its own session holding `per`
//! leases, on one store; what the store serves per second and the CPU its server processes
//! spend, from the server's own counters and `/proc`, against the per-lock renewal anchor (one
//! extend per held lock per renewal period, as Redisson's watchdog and ShedLock's keep-alive
//! do) at the same fleet and period.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures_util::StreamExt;
use simba::{LockGuard, Simba, SimbaConfig};
use tokio::time::{Instant, sleep, timeout};

use crate::measures::{Counted, Kind, Target};

/// P8's figures for one store.
#[derive(Debug, Clone)]
pub(crate) struct P8Row {
    /// Store.
    pub(crate) system: String,
    /// Sessions (clients) in the fleet.
    pub(crate) sessions: usize,
    /// Leases each session holds.
    pub(crate) per_session: usize,
    /// Renewal period of both sides.
    pub(crate) period: Duration,
    /// Length of each measuring window.
    pub(crate) window: Duration,
    /// Requests per second our fleet sent and had answered (keep-alives).
    pub(crate) ours_rps: f64,
    /// The server processes' CPU with nothing running, % of one core (subtracted from both
    /// sides' figures).
    pub(crate) idle_cpu: f64,
    /// Its server processes' CPU for our fleet above idle, % of one core.
    pub(crate) ours_cpu: f64,
    /// Extends per second the anchor sent and had answered.
    pub(crate) anchor_rps: f64,
    /// The same for the anchor, above idle.
    pub(crate) anchor_cpu: f64,
    /// Every lease stayed held through our window.
    pub(crate) held: bool,
}

/// One clock tick (USER_HZ 100) over `window`, in % of one core: the CPU figures' resolution.
fn resolution(window: Duration) -> f64 {
    1.0 / window.as_secs_f64()
}

impl P8Row {
    /// The anchor's store CPU divided by ours.
    /// Our CPU below one clock tick counts as one tick, so the ratio is never overstated.
    pub(crate) fn ratio(&self) -> f64 {
        self.anchor_cpu / self.ours_cpu.max(resolution(self.window))
    }

    /// Goal: the store's load follows sessions, not leases (ratio >= 15 at 20 per session).
    pub(crate) fn met(&self) -> bool {
        self.held && self.ratio() >= 15.0
    }
}

/// The server's pid file in the directory of `scripts/backends.sh`.
fn pid_file(kind: Kind) -> Result<PathBuf> {
    let dir = std::env::var("SIMBA_BACKENDS_DIR")
        .map_err(|_| anyhow!("SIMBA_BACKENDS_DIR is not set: run `bash scripts/bench.sh`"))?;
    let name = match kind {
        Kind::Postgres => "postgres.pid",
        Kind::Redis => "redis.pid",
        other => bail!("P8 runs on PostgreSQL and Redis, not {other:?}"),
    };
    Ok(PathBuf::from(dir).join(name))
}

/// The pid of `kind`'s server of `scripts/backends.sh` (PostgreSQL and Redis).
pub(crate) fn server_pid(kind: Kind) -> Result<u32> {
    Ok(std::fs::read_to_string(pid_file(kind)?).context("read the server's pid file")?.trim().parse()?)
}

/// User + system ticks of `pid` and of its children (PostgreSQL serves each connection from
/// a child of the postmaster).
pub(crate) fn server_ticks(pid: u32) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(p) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let Some((_, after)) = stat.rsplit_once(')') else { continue };
        let f: Vec<&str> = after.split_whitespace().collect();
        // `after` starts at field 3: ppid is field 4, utime 14, stime 15.
        let ppid = f.get(1).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        if p == pid || ppid == pid {
            total += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    Ok(total)
}

/// Measures over `window` while the fleet (or the anchor) runs: the requests it sent and had
/// answered per second (`sent` counts them) and the server processes' CPU in % of one core.
async fn measure(sent: &AtomicU64, pid: u32, window: Duration) -> Result<(f64, f64)> {
    let (n0, c0, t0) = (sent.load(Ordering::SeqCst), server_ticks(pid)?, Instant::now());
    sleep(window).await;
    let (n1, c1) = (sent.load(Ordering::SeqCst), server_ticks(pid)?);
    let secs = t0.elapsed().as_secs_f64();
    Ok((n1.saturating_sub(n0) as f64 / secs, c1.saturating_sub(c0) as f64 / 100.0 / secs * 100.0))
}

/// P8 on `t` (PostgreSQL or Redis): our fleet, then the anchor's, each measured over
/// `window` after one settling period.
pub(crate) async fn p8(
    t: &Target,
    sessions: usize,
    per_session: usize,
    period: Duration,
    window: Duration,
    run: &str,
) -> Result<P8Row> {
    let pid: u32 = std::fs::read_to_string(pid_file(t.kind)?)
        .context("read the server's pid file")?
        .trim()
        .parse()
        .context("the server's pid file")?;
    let cfg = SimbaConfig::builder().lease_duration(period * 3).renew_interval(period).build()?;
    let (_, idle_cpu) = measure(&AtomicU64::new(0), pid, window).await?;
    let keep_alives = Arc::new(AtomicU64::new(0));
    let (clients, guards) = fleet(t, sessions, per_session, cfg, &keep_alives, run).await?;
    // Two periods: every session renewed since its leases were taken, and the server's
    // work for the acquisitions is over.
    sleep(period * 2).await;
    let (ours_rps, ours_cpu) = measure(&keep_alives, pid, window).await?;
    let held = guards.iter().all(|g| g.term().is_valid());
    for c in &clients {
        c.close().await;
    }
    drop(guards);
    let stop = Arc::new(tokio::sync::Notify::new());
    let extends = Arc::new(AtomicU64::new(0));
    let a = Anchor { kind: t.kind, url: t.url.clone(), locks: sessions * per_session, period, run: run.to_owned() };
    let anchor = tokio::spawn(a.run(Arc::clone(&extends), Arc::clone(&stop)));
    sleep(period * 2).await;
    let (anchor_rps, anchor_cpu) = measure(&extends, pid, window).await?;
    stop.notify_one();
    anchor.await.map_err(|e| anyhow!("the anchor task: {e}"))??;
    Ok(P8Row {
        system: t.kind.label().to_owned(),
        sessions,
        per_session,
        period,
        window,
        ours_rps,
        idle_cpu,
        ours_cpu: (ours_cpu - idle_cpu).max(0.0),
        anchor_rps,
        anchor_cpu: (anchor_cpu - idle_cpu).max(0.0),
        held,
    })
}

/// `sessions` clients over ten shared backends (pools), each holding `per` leases.
async fn fleet(
    t: &Target,
    sessions: usize,
    per: usize,
    cfg: SimbaConfig,
    keep_alives: &Arc<AtomicU64>,
    run: &str,
) -> Result<(Vec<Simba>, Vec<LockGuard>)> {
    use simba::backend::{postgres::PostgresBackend, redis::RedisBackend};
    let err = |e: simba::backend::BackendError| anyhow!("{e}");
    // Ten backends (connection pools), shared by the clients in turn: a few processes' worth
    // of connections, each client its own session.
    let clients = match t.kind {
        Kind::Postgres => {
            let mut pools = Vec::new();
            for _ in 0..10 {
                pools.push(PostgresBackend::connect(&t.url).await.map_err(err)?);
            }
            clients_over(&pools, sessions, cfg, keep_alives)?
        }
        Kind::Redis => {
            let mut conns = Vec::new();
            for _ in 0..10 {
                conns.push(RedisBackend::connect(&t.url).await.map_err(err)?);
            }
            clients_over(&conns, sessions, cfg, keep_alives)?
        }
        other => bail!("P8 runs on PostgreSQL and Redis, not {other:?}"),
    };
    for c in &clients {
        timeout(Duration::from_secs(60), c.live())
            .await
            .map_err(|_| anyhow!("a fleet session did not open within 60 s"))??;
    }
    let names: Vec<(usize, usize)> = (0..sessions).flat_map(|c| (0..per).map(move |l| (c, l))).collect();
    let got: Vec<_> = futures_util::stream::iter(names)
        .map(|(c, l)| {
            let s = clients[c].clone();
            let name = format!("p8.{run}.{c}.{l}");
            async move { timeout(Duration::from_secs(60), s.lock(name).acquire()).await }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let mut guards = Vec::with_capacity(sessions * per);
    for g in got {
        guards.push(g.map_err(|_| anyhow!("an acquisition took more than 60 s"))??);
    }
    Ok((clients, guards))
}

/// `sessions` clients, each its own session, over `backends` in turn (clones share a pool).
fn clients_over<B: simba::backend::Backend + Clone>(
    backends: &[B],
    sessions: usize,
    cfg: SimbaConfig,
    keep_alives: &Arc<AtomicU64>,
) -> Result<Vec<Simba>> {
    (0..sessions)
        .map(|i| {
            let b = counted(backends[i % backends.len()].clone(), keep_alives);
            Ok(Simba::builder().backend(b).config(cfg).build()?)
        })
        .collect()
}

fn counted<B>(inner: B, keep_alives: &Arc<AtomicU64>) -> Counted<B> {
    Counted::new(inner, Arc::clone(keep_alives), Arc::new(AtomicU64::new(0)))
}

/// The anchor: `locks` locks, each extended once per `period` (compare the holder's token,
/// then push its expiry), 64 requests in flight.
struct Anchor {
    kind: Kind,
    url: String,
    locks: usize,
    period: Duration,
    run: String,
}

impl Anchor {
    /// Extends every lock once per period until `stop`, counting the answered extends.
    async fn run(self, extends: Arc<AtomicU64>, stop: Arc<tokio::sync::Notify>) -> Result<()> {
        let Anchor { kind, url, locks, period, run } = self;
        let token = format!("token-{run}");
        let ttl_ms = (period * 3).as_millis() as i64;
        match kind {
            Kind::Redis => {
                let conn = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
                let key = |i: usize| format!("bench:p8:{run}:{i}");
                for chunk in (0..locks).collect::<Vec<_>>().chunks(1000) {
                    let mut pipe = redis::pipe();
                    for &i in chunk {
                        pipe.cmd("SET").arg(key(i)).arg(&token).arg("NX").arg("PX").arg(ttl_ms).ignore();
                    }
                    pipe.query_async::<()>(&mut conn.clone()).await?;
                }
                let script = redis::Script::new(crate::measures::EXTEND);
                loop {
                    let round = Instant::now();
                    let _: Vec<redis::RedisResult<i64>> = futures_util::stream::iter(0..locks)
                        .map(|i| {
                            let mut c = conn.clone();
                            let (script, token, k) = (&script, &token, key(i));
                            let extends = &extends;
                            async move {
                                let r = script.key(k).arg(token).arg(ttl_ms).invoke_async::<i64>(&mut c).await;
                                extends.fetch_add(1, Ordering::Relaxed);
                                r
                            }
                        })
                        .buffer_unordered(64)
                        .collect()
                        .await;
                    tokio::select! {
                        _ = stop.notified() => break,
                        _ = tokio::time::sleep_until(round + period) => {}
                    }
                }
                let mut pipe = redis::pipe();
                for i in 0..locks {
                    pipe.cmd("DEL").arg(key(i)).ignore();
                }
                pipe.query_async::<()>(&mut conn.clone()).await?;
            }
            Kind::Postgres => {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(10).connect(&url).await?;
                // One fixed table (static SQL): made anew for each run.
                sqlx::query("DROP TABLE IF EXISTS bench_p8_locks").execute(&pool).await?;
                sqlx::query(
                "CREATE TABLE bench_p8_locks (name TEXT PRIMARY KEY, locked_by TEXT NOT NULL, lock_until TIMESTAMPTZ NOT NULL)",
            )
            .execute(&pool)
            .await?;
                sqlx::query(
                "INSERT INTO bench_p8_locks SELECT 'p8.' || i, $1, now() + interval '1 minute' FROM generate_series(1, $2) i",
            )
            .bind(&token)
            .bind(locks as i64)
            .execute(&pool)
            .await?;
                // ShedLock's JDBC extend: one UPDATE per held lock.
                const EXTEND: &str = "UPDATE bench_p8_locks SET lock_until = now() + make_interval(secs => $3) \
                 WHERE name = $1 AND locked_by = $2 AND lock_until > now()";
                loop {
                    let round = Instant::now();
                    let _: Vec<_> = futures_util::stream::iter(1..=locks)
                        .map(|i| {
                            let (pool, token, extends) = (&pool, &token, &extends);
                            async move {
                                let r = sqlx::query(EXTEND)
                                    .bind(format!("p8.{i}"))
                                    .bind(token)
                                    .bind(ttl_ms as f64 / 1000.0)
                                    .execute(pool)
                                    .await;
                                extends.fetch_add(1, Ordering::Relaxed);
                                r
                            }
                        })
                        .buffer_unordered(64)
                        .collect()
                        .await;
                    tokio::select! {
                        _ = stop.notified() => break,
                        _ = tokio::time::sleep_until(round + period) => {}
                    }
                }
                sqlx::query("DROP TABLE bench_p8_locks").execute(&pool).await?;
                pool.close().await;
            }
            other => bail!("P8 runs on PostgreSQL and Redis, not {other:?}"),
        }
        Ok(())
    }
}
