//! The measures P1-P7 and their anchors.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use futures_util::StreamExt;
use rand::Rng;
use simba::backend::etcd::etcd_client;
use simba::backend::{Acquire, Backend, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId};
use simba::job::{JobFuture, PartitionedJob, Schedule, ScheduledJob};
use simba::{FnListener, LockGuard, Runtime, RuntimeConfig, Simba, SimbaConfig, Term};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use crate::counting::{CountingProxy, Traffic};

/// A backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redis.
    Redis,
    /// PostgreSQL.
    Postgres,
    /// MariaDB (mysql://).
    MySql,
    /// ZooKeeper.
    ZooKeeper,
    /// etcd.
    Etcd,
    /// SQLite (a file).
    Sqlite,
}

impl Kind {
    /// Whether the raw anchor's names need no row made first (key-value stores).
    fn keyed(self) -> bool {
        matches!(self, Kind::Redis | Kind::Etcd)
    }

    /// The backend's name in tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Redis => "Redis",
            Kind::Postgres => "PostgreSQL",
            Kind::MySql => "MariaDB",
            Kind::ZooKeeper => "ZooKeeper",
            Kind::Etcd => "etcd",
            Kind::Sqlite => "SQLite",
        }
    }
}

/// A backend and its URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Which backend.
    pub(crate) kind: Kind,
    /// Its URL.
    pub(crate) url: String,
}

/// How long and how often to measure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Smoke-run sizes.
    pub(crate) quick: bool,
    /// Repetitions of throughput measures.
    pub(crate) reps: usize,
    /// Length of one throughput repetition.
    pub(crate) rep_len: Duration,
}

/// A configuration with this lease and renewal period.
pub(crate) fn config(lease: Duration, renew: Duration) -> Result<SimbaConfig> {
    Ok(SimbaConfig::builder().lease_duration(lease).renew_interval(renew).build()?)
}

/// A connected client whose session is live.
pub(crate) async fn client(url: &str, cfg: SimbaConfig) -> Result<Simba> {
    let s = Simba::connect(url, cfg).await.with_context(|| format!("connect to {url}"))?;
    timeout(Duration::from_secs(15), s.live()).await.map_err(|_| anyhow!("no live session on {url} within 15 s"))??;
    Ok(s)
}

/// `host:port` of a `scheme://[user@]host:port[/...]` URL.
pub(crate) fn upstream(url: &str) -> Result<SocketAddr> {
    let rest = url.split_once("://").map(|(_, r)| r).ok_or_else(|| anyhow!("no scheme in {url}"))?;
    let hostport = rest.split(['/', '?']).next().unwrap_or(rest);
    let hostport = hostport.rsplit_once('@').map_or(hostport, |(_, h)| h);
    hostport.parse().with_context(|| format!("{url}: expected an IP address and port"))
}

/// `url` with its host and port replaced by `addr`.
pub(crate) fn via(url: &str, addr: SocketAddr) -> Result<String> {
    let orig = upstream(url)?.to_string();
    Ok(url.replacen(&orig, &addr.to_string(), 1))
}

/// Acquires locks `p{from}..p{to}` with `IN_FLIGHT` acquisitions in flight (ZooKeeper and
/// Redis pipeline them on one connection; SQL backends queue them on their pool).
async fn acquire_many(simba: &Simba, prefix: &str, from: usize, to: usize, out: &mut Vec<LockGuard>) -> Result<()> {
    const IN_FLIGHT: usize = 256;
    let got: Vec<_> = futures_util::stream::iter(from..to)
        .map(|i| {
            let s = simba.clone();
            let name = format!("{prefix}.{i}");
            async move { timeout(Duration::from_secs(60), s.lock(name).acquire()).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for g in got {
        out.push(g.map_err(|_| anyhow!("an acquisition took more than 60 s"))??);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// P1 renewal cost

/// Traffic of one renewal period of one node holding `leases` leases.
#[derive(Debug, Clone)]
pub(crate) struct P1Row {
    /// Backend or anchor.
    pub(crate) system: String,
    /// Held leases.
    pub(crate) leases: usize,
    /// Round trips per renewal.
    pub(crate) round_trips: f64,
    /// Request bytes per renewal.
    pub(crate) up: f64,
    /// Reply bytes per renewal.
    pub(crate) down: f64,
    /// Whether every lease was still held after the window.
    pub(crate) held: bool,
}

/// A backend that counts the keep-alives and acquisitions the engine sends through it, times
/// its successful keep-alives when asked (P12), and offers the inner backend's jobs store only
/// with history on (off unless asked: the measures that count renewals run without history).
pub(crate) struct Counted<B> {
    pub(crate) inner: B,
    pub(crate) keep_alives: Arc<AtomicU64>,
    pub(crate) acquires: Arc<AtomicU64>,
    /// Successful keep-alives, ms, when timed.
    pub(crate) renewal_ms: Option<Arc<std::sync::Mutex<Vec<f64>>>>,
    /// Whether the jobs store is offered.
    pub(crate) history: bool,
}

impl<B> Counted<B> {
    /// Counts into `keep_alives` and `acquires`; no jobs store, keep-alives not timed.
    pub(crate) fn new(inner: B, keep_alives: Arc<AtomicU64>, acquires: Arc<AtomicU64>) -> Self {
        Counted { inner, keep_alives, acquires, renewal_ms: None, history: false }
    }

    /// Times every successful keep-alive into `renewal_ms`; offers the jobs store only if
    /// `history`.
    pub(crate) fn timed(inner: B, renewal_ms: Arc<std::sync::Mutex<Vec<f64>>>, history: bool) -> Self {
        let mut c = Counted::new(inner, Arc::default(), Arc::default());
        c.renewal_ms = Some(renewal_ms);
        c.history = history;
        c
    }
}

impl<B: Backend> Backend for Counted<B> {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        self.inner.open_session(ttl).await
    }
    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        self.keep_alives.fetch_add(1, Ordering::SeqCst);
        let t0 = tokio::time::Instant::now();
        let r = self.inner.keep_alive(session, held).await;
        if let Some(times) = &self.renewal_ms
            && r.is_ok()
        {
            times.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(t0.elapsed().as_secs_f64() * 1e3);
        }
        r
    }
    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        self.acquires.fetch_add(1, Ordering::Relaxed);
        self.inner.acquire(session, name).await
    }
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.inner.release(session, name, token).await
    }
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.inner.close_session(session).await
    }
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.inner.owned(session).await
    }
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.inner.claim_slot(session, name, token, slot).await
    }
    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.inner.join_group(session, group).await
    }
    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.inner.leave_group(session, group).await
    }
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.inner.members(group).await
    }
    async fn inspect(&self) -> BackendResult<simba::backend::StoreSnapshot> {
        self.inner.inspect().await
    }
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        self.inner.remove_idle_leases(prefix, idle_for, limit).await
    }
    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.inner.subscribe_releases()
    }
    fn job_store(&self) -> Option<simba::job_store::SharedJobStore> {
        if self.history { self.inner.job_store() } else { None }
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A client on `url` whose keep-alives are counted.
async fn counted_client(kind: Kind, url: &str, cfg: SimbaConfig) -> Result<(Simba, Arc<AtomicU64>)> {
    use simba::backend::{
        etcd::EtcdBackend, postgres::PostgresBackend, redis::RedisBackend, zookeeper::ZooKeeperBackend,
    };
    let n = Arc::new(AtomicU64::new(0));
    let keep_alives = Arc::clone(&n);
    let acquires = Arc::new(AtomicU64::new(0));
    let simba = match kind {
        Kind::Redis => Simba::new(Counted::new(RedisBackend::connect(url).await?, keep_alives, acquires), cfg)?,
        Kind::Postgres => Simba::new(Counted::new(PostgresBackend::connect(url).await?, keep_alives, acquires), cfg)?,
        Kind::ZooKeeper => Simba::new(Counted::new(ZooKeeperBackend::connect(url).await?, keep_alives, acquires), cfg)?,
        Kind::Etcd => Simba::new(Counted::new(EtcdBackend::connect(url).await?, keep_alives, acquires), cfg)?,
        other => bail!("P1 does not run on {other:?}"),
    };
    timeout(Duration::from_secs(15), simba.live())
        .await
        .map_err(|_| anyhow!("no live session on {url} within 15 s"))??;
    Ok((simba, n))
}

/// With `SIMBA_BENCH_DEBUG`: prints the client's events other than elections and stops to
/// stderr, labelled (why a measure lost a lease).
fn print_events(simba: &Simba, label: String) {
    let mut ev = simba.events();
    tokio::spawn(async move {
        loop {
            let e = match ev.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("{label}: {n} events not shown (lagged)");
                    continue;
                }
                Err(_) => break,
            };
            if !matches!(
                e,
                simba::Event::Elected { .. } | simba::Event::Revoked { reason: simba::RevokeReason::Stopped, .. }
            ) {
                eprintln!("{label} event: {e:?}");
            }
        }
    });
}

/// P1 on our engine: one node holds 1, 1k, 10k, 100k leases; its traffic through a counting
/// proxy over a window of about `PERIODS` renewal periods, divided by the keep-alives sent in
/// the window.
pub(crate) async fn p1(t: &Target, levels: &[usize], run: &str) -> Result<Vec<P1Row>> {
    const PERIODS: u32 = 5;
    let proxy = CountingProxy::start(upstream(&t.url)?).await?;
    let url = via(&t.url, proxy.addr())?;
    let period = Duration::from_millis(600);
    let (simba, keep_alives) = counted_client(t.kind, &url, config(Duration::from_secs(3), period)?).await?;
    let sid = simba.session_id();
    let mut guards = Vec::new();
    let mut rows = Vec::new();
    let debug = std::env::var("SIMBA_BENCH_DEBUG").is_ok();
    if debug {
        print_events(&simba, format!("P1 {}", t.kind.label()));
    }
    for &n in levels {
        let have = guards.len();
        acquire_many(&simba, &format!("p1.{run}"), have, n, &mut guards).await?;
        sleep(period * 2).await;
        // Start the window half a period after a keep-alive, end it half a period after
        // another: every keep-alive in it is whole.
        let k0 = keep_alives.load(Ordering::SeqCst);
        while keep_alives.load(Ordering::SeqCst) == k0 {
            sleep(Duration::from_millis(1)).await;
        }
        sleep(period / 2).await;
        let before = proxy.read();
        let conns0 = proxy.per_connection();
        let k1 = keep_alives.load(Ordering::SeqCst);
        sleep(period * PERIODS).await;
        let d = proxy.read().since(before);
        let k = keep_alives.load(Ordering::SeqCst) - k1;
        if debug {
            for (i, c) in proxy.per_connection().iter().enumerate() {
                let c0 = conns0.get(i).copied().unwrap_or_default();
                eprintln!("P1 {} {n}: connection {i}: {:?} (keep-alives {k})", t.kind.label(), c.since(c0));
            }
        }
        let held = simba.session_id() == sid && guards.iter().all(|g| g.term().is_valid());
        if debug {
            let invalid = guards.iter().filter(|g| !g.term().is_valid()).count();
            eprintln!("P1 {} {n}: session kept {}, invalid terms {invalid}", t.kind.label(), simba.session_id() == sid);
        }
        rows.push(per_period(t.kind.label(), n, d, k.max(1) as f64, held));
    }
    // Close first: the session's end revokes every term, so dropping the guards sends nothing.
    simba.close().await;
    drop(guards);
    Ok(rows)
}

fn per_period(system: &str, leases: usize, d: Traffic, periods: f64, held: bool) -> P1Row {
    P1Row {
        system: system.to_owned(),
        leases,
        round_trips: d.exchanges as f64 / periods,
        up: d.up as f64 / periods,
        down: d.down as f64 / periods,
        held,
    }
}

/// The Redlock-style extend of one lock (compare the holder's token, then PEXPIRE), as
/// Redisson's watchdog and ShedLock's keep-alive send once per held lock.
pub(crate) const EXTEND: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

/// P1's anchor: one extend per lock on Redis, `leases` requests per renewal period. Sent with
/// 64 in flight to finish in bounded time; bytes do not depend on it, and each request is its
/// own exchange for the anchor's clients, so round trips are counted as requests.
pub(crate) async fn p1_anchor(url: &str, levels: &[usize], run: &str) -> Result<Vec<P1Row>> {
    let proxy = CountingProxy::start(upstream(url)?).await?;
    let client = redis::Client::open(via(url, proxy.addr())?)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let script = redis::Script::new(EXTEND);
    let key = |i: usize| format!("bench:anchor:{run}:{i}");
    let token = format!("token-{run}");
    let mut rows = Vec::new();
    let mut have = 0;
    for &n in levels {
        for chunk in (have..n).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                pipe.cmd("SET").arg(key(i)).arg(&token).arg("NX").arg("PX").arg(60_000).ignore();
            }
            pipe.query_async::<()>(&mut conn.clone()).await?;
        }
        have = n;
        // Load the script so that the window sees EVALSHA only.
        let _: i64 = script.key(key(0)).arg(&token).arg(30_000).invoke_async(&mut conn.clone()).await?;
        let before = proxy.read();
        let extended: Vec<redis::RedisResult<i64>> = futures_util::stream::iter(0..n)
            .map(|i| {
                let mut c = conn.clone();
                let (script, token, k) = (&script, &token, key(i));
                async move { script.key(k).arg(token).arg(30_000).invoke_async::<i64>(&mut c).await }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        let d = proxy.read().since(before);
        let held = extended.iter().all(|r| matches!(r, Ok(1)));
        let mut row = per_period("Redis anchor: extend per lock", n, d, 1.0, held);
        row.round_trips = n as f64;
        rows.push(row);
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// P2 acquire + release throughput

/// A raw lock primitive on the backend's own connection(s), without simba.
enum Raw {
    Redis(redis::aio::MultiplexedConnection),
    /// etcd: a `Txn` that puts the key if it is absent (create revision 0), and a `Delete`.
    Etcd(Box<etcd_client::Client>),
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
    Lite(sqlx::SqlitePool),
}

impl Raw {
    async fn acquire(&mut self, name: &str, holder: &str) -> Result<bool> {
        Ok(match self {
            Raw::Redis(c) => {
                let r: Option<String> =
                    redis::cmd("SET").arg(name).arg(holder).arg("NX").arg("PX").arg(15_000).query_async(c).await?;
                r.is_some()
            }
            Raw::Etcd(c) => {
                let key = format!("bench/raw/{name}");
                let txn = etcd_client::Txn::new()
                    .when([etcd_client::Compare::create_revision(key.as_str(), etcd_client::CompareOp::Equal, 0)])
                    .and_then([etcd_client::TxnOp::put(key.as_str(), holder, None)]);
                c.txn(txn).await?.succeeded()
            }
            Raw::Pg(p) => {
                sqlx::query(
                    "UPDATE simba_bench_raw SET holder = $1, until_ms = (extract(epoch from clock_timestamp()) * 1000)::bigint + 15000 \
                     WHERE name = $2 AND (holder IS NULL OR until_ms < (extract(epoch from clock_timestamp()) * 1000)::bigint)",
                )
                .bind(holder)
                .bind(name)
                .execute(&*p)
                .await?
                .rows_affected()
                    == 1
            }
            Raw::My(p) => {
                sqlx::query(
                    "UPDATE simba_bench_raw SET holder = ?, until_ms = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 15000 \
                     WHERE name = ? AND (holder IS NULL OR until_ms < CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))",
                )
                .bind(holder)
                .bind(name)
                .execute(&*p)
                .await?
                .rows_affected()
                    == 1
            }
            Raw::Lite(p) => {
                sqlx::query(
                    "UPDATE simba_bench_raw SET holder = ?, until_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + 15000 \
                     WHERE name = ? AND (holder IS NULL OR until_ms < CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))",
                )
                .bind(holder)
                .bind(name)
                .execute(&*p)
                .await?
                .rows_affected()
                    == 1
            }
        })
    }

    async fn release(&mut self, name: &str, holder: &str) -> Result<()> {
        match self {
            Raw::Redis(c) => {
                let _: i64 = redis::cmd("DEL").arg(name).query_async(c).await?;
            }
            Raw::Etcd(c) => {
                c.delete(format!("bench/raw/{name}"), None).await?;
            }
            Raw::Pg(p) => {
                sqlx::query("UPDATE simba_bench_raw SET holder = NULL WHERE name = $1 AND holder = $2")
                    .bind(name)
                    .bind(holder)
                    .execute(&*p)
                    .await?;
            }
            Raw::My(p) => {
                sqlx::query("UPDATE simba_bench_raw SET holder = NULL WHERE name = ? AND holder = ?")
                    .bind(name)
                    .bind(holder)
                    .execute(&*p)
                    .await?;
            }
            Raw::Lite(p) => {
                sqlx::query("UPDATE simba_bench_raw SET holder = NULL WHERE name = ? AND holder = ?")
                    .bind(name)
                    .bind(holder)
                    .execute(&*p)
                    .await?;
            }
        }
        Ok(())
    }
}

/// The raw table with the serial row and `CONC_NAMES` rows for the concurrent run.
async fn raw_setup(raw: &Raw) -> Result<()> {
    match raw {
        Raw::Redis(_) | Raw::Etcd(_) => {}
        Raw::Pg(p) => {
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS simba_bench_raw (name TEXT PRIMARY KEY, holder TEXT, until_ms BIGINT)",
            )
            .execute(p)
            .await?;
            sqlx::query(
                "INSERT INTO simba_bench_raw (name) SELECT 'raw.' || g FROM generate_series(0, 1000) g ON CONFLICT DO NOTHING",
            )
            .execute(p)
            .await?;
        }
        Raw::My(p) => {
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS simba_bench_raw (name VARCHAR(200) PRIMARY KEY, holder VARCHAR(64), until_ms BIGINT)",
            )
            .execute(p)
            .await?;
            sqlx::query(
                "INSERT IGNORE INTO simba_bench_raw (name) WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < 1000) SELECT CONCAT('raw.', g) FROM s",
            )
            .execute(p)
            .await?;
        }
        Raw::Lite(p) => {
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS simba_bench_raw (name TEXT PRIMARY KEY, holder TEXT, until_ms INTEGER)",
            )
            .execute(p)
            .await?;
            sqlx::query(
                "INSERT OR IGNORE INTO simba_bench_raw (name) WITH RECURSIVE s(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM s WHERE g < 1000) SELECT 'raw.' || g FROM s",
            )
            .execute(p)
            .await?;
        }
    }
    Ok(())
}

/// A client on `t` and, where there is one, the raw primitive on the same connection pool
/// (Redis: a connection of its own to the same server).
async fn client_and_raw(t: &Target, cfg: SimbaConfig) -> Result<(Simba, Option<Raw>)> {
    use simba::backend::{etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, sqlite::SqliteBackend};
    let err = |e: simba::backend::BackendError| anyhow!("{e}");
    let (simba, raw) = match t.kind {
        Kind::Etcd => {
            let b = EtcdBackend::connect(&t.url).await.map_err(err)?;
            let c = b.client();
            (Simba::new(b, cfg)?, Some(Raw::Etcd(Box::new(c))))
        }
        Kind::Redis => {
            let c = redis::Client::open(t.url.as_str())?.get_multiplexed_async_connection().await?;
            (Simba::connect(&t.url, cfg).await?, Some(Raw::Redis(c)))
        }
        Kind::Postgres => {
            let b = PostgresBackend::connect(&t.url).await.map_err(err)?;
            let pool = b.pool().clone();
            (Simba::new(b, cfg)?, Some(Raw::Pg(pool)))
        }
        Kind::MySql => {
            let b = MySqlBackend::connect(&t.url).await.map_err(err)?;
            let pool = b.pool().clone();
            (Simba::new(b, cfg)?, Some(Raw::My(pool)))
        }
        Kind::Sqlite => {
            let b = SqliteBackend::connect(&t.url).await.map_err(err)?;
            let pool = b.pool().clone();
            (Simba::new(b, cfg)?, Some(Raw::Lite(pool)))
        }
        Kind::ZooKeeper => (Simba::connect(&t.url, cfg).await?, None),
    };
    timeout(Duration::from_secs(15), simba.live()).await.map_err(|_| anyhow!("no live session within 15 s"))??;
    if let Some(r) = &raw {
        raw_setup(r).await?;
    }
    Ok((simba, raw))
}

/// P2 for one backend.
#[derive(Debug, Clone)]
pub(crate) struct P2Row {
    /// Backend.
    pub(crate) system: String,
    /// Our serial acquire+release per second (median of the repetitions).
    pub(crate) ours: f64,
    /// The raw primitive's serial acquire+release per second.
    pub(crate) raw: Option<f64>,
    /// Serial `Backend::acquire` + `Backend::release` straight on a backend of our own, without
    /// the engine: splits the gap to the raw primitive into the backend's part and the
    /// engine's.
    pub(crate) direct: f64,
    /// Ours, 16 contenders on 1,000 names, acquire+release per second.
    pub(crate) ours_conc: f64,
    /// Raw, 16 contenders on 1,000 names.
    pub(crate) raw_conc: Option<f64>,
}

/// Serial and concurrent acquire+release throughput, ours beside the raw primitive.
pub(crate) async fn p2(t: &Target, plan: Plan, run: &str) -> Result<P2Row> {
    let cfg = config(Duration::from_secs(15), Duration::from_secs(5))?;
    let (simba, mut raw) = client_and_raw(t, cfg).await?;
    let name = format!("p2.{run}.serial");
    let holder = format!("bench-{run}");
    let mut ours = Vec::new();
    let mut raws = Vec::new();
    for rep in 0..=plan.reps {
        // Repetition 0 warms up and is not counted; ours and raw alternate.
        let (n, secs) = timed(plan.rep_len, || async {
            let g = simba.lock(name.as_str()).acquire().await?;
            g.release().await?;
            Ok(())
        })
        .await?;
        if rep > 0 {
            ours.push(n as f64 / secs);
        }
        if let Some(r) = raw.as_mut() {
            let raw_name = if t.kind.keyed() { format!("raw.{run}") } else { "raw.1000".to_owned() };
            let r = Arc::new(tokio::sync::Mutex::new(r));
            let (n, secs) = timed(plan.rep_len, || {
                let r = Arc::clone(&r);
                let (raw_name, holder) = (raw_name.clone(), holder.clone());
                async move {
                    let mut r = r.lock().await;
                    if !r.acquire(&raw_name, &holder).await? {
                        bail!("the raw lock {raw_name} was held: is another benchmark running?");
                    }
                    r.release(&raw_name, &holder).await
                }
            })
            .await?;
            if rep > 0 {
                raws.push(n as f64 / secs);
            }
        }
    }
    simba.close().await;
    let direct = {
        use simba::backend::{
            etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, redis::RedisBackend,
            sqlite::SqliteBackend, zookeeper::ZooKeeperBackend,
        };
        let err = |e: simba::backend::BackendError| anyhow!("{e}");
        let name = format!("p2.{run}.direct");
        match t.kind {
            Kind::Redis => direct_serial(&RedisBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?,
            Kind::Postgres => direct_serial(&PostgresBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?,
            Kind::MySql => direct_serial(&MySqlBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?,
            Kind::Sqlite => direct_serial(&SqliteBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?,
            Kind::ZooKeeper => {
                direct_serial(&ZooKeeperBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?
            }
            Kind::Etcd => direct_serial(&EtcdBackend::connect(&t.url).await.map_err(err)?, plan, &name).await?,
        }
    };
    let (ours_conc, raw_conc) = p2_concurrent(t, plan, run).await?;
    Ok(P2Row {
        system: t.kind.label().to_owned(),
        ours: crate::stats::median(&ours),
        raw: raw.map(|_| crate::stats::median(&raws)),
        direct,
        ours_conc,
        raw_conc,
    })
}

/// Serial acquire + release per second straight on `b` (one session, no engine): median of
/// the repetitions after a warm-up one.
async fn direct_serial<B: Backend>(b: &B, plan: Plan, name: &str) -> Result<f64> {
    let s = b.open_session(Duration::from_secs(60)).await.map_err(|e| anyhow!("{e}"))?.id;
    let mut rates = Vec::new();
    for rep in 0..=plan.reps {
        let (n, secs) = timed(plan.rep_len, || async {
            match b.acquire(&s, name).await.map_err(|e| anyhow!("{e}"))? {
                Acquire::Won(token) => {
                    b.release(&s, name, token).await.map_err(|e| anyhow!("{e}"))?;
                    Ok(())
                }
                other => bail!("{name}: acquire answered {other:?} on a free lease"),
            }
        })
        .await?;
        if rep > 0 {
            rates.push(n as f64 / secs);
        }
    }
    b.close_session(&s).await.map_err(|e| anyhow!("{e}"))?;
    Ok(crate::stats::median(&rates))
}

/// Runs `op` back to back for `len`; returns how many completed and the seconds taken.
async fn timed<F, Fut>(len: Duration, mut op: F) -> Result<(u64, f64)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < len {
        op().await?;
        n += 1;
    }
    Ok((n, start.elapsed().as_secs_f64()))
}

const CONTENDERS: usize = 16;
const CONC_NAMES: usize = 1000;

/// 16 contenders (each its own client and session) take random names among 1,000: ours waits
/// for a held name (as `acquire()` does); raw tries another name at once.
async fn p2_concurrent(t: &Target, plan: Plan, run: &str) -> Result<(f64, Option<f64>)> {
    let cfg = config(Duration::from_secs(15), Duration::from_secs(5))?;
    let mut clients = Vec::new();
    let mut raws = Vec::new();
    for _ in 0..CONTENDERS {
        let (s, r) = client_and_raw(t, cfg).await?;
        clients.push(s);
        if let Some(r) = r {
            raws.push(r);
        }
    }
    let mut ours = Vec::new();
    let mut raw_rates = Vec::new();
    for _ in 0..plan.reps {
        let tasks = clients.iter().map(|s| {
            let s = s.clone();
            let run = run.to_owned();
            async move {
                let start = Instant::now();
                let mut n = 0u64;
                while start.elapsed() < plan.rep_len {
                    let i = rand::rng().random_range(0..CONC_NAMES);
                    let g = s.lock(format!("p2.{run}.c{i}")).acquire().await?;
                    g.release().await?;
                    n += 1;
                }
                Ok::<_, anyhow::Error>(n)
            }
        });
        let start = Instant::now();
        let mut total = 0;
        for r in futures_util::future::join_all(tasks).await {
            total += r?;
        }
        ours.push(total as f64 / start.elapsed().as_secs_f64());
        if !raws.is_empty() {
            let tasks = raws.iter_mut().enumerate().map(|(k, r)| {
                let (run, redis) = (run.to_owned(), t.kind.keyed());
                async move {
                    let holder = format!("bench-{run}-{k}");
                    let start = Instant::now();
                    let mut n = 0u64;
                    while start.elapsed() < plan.rep_len {
                        let i = rand::rng().random_range(0..CONC_NAMES);
                        let name = if redis { format!("raw.{run}.c{i}") } else { format!("raw.{i}") };
                        if r.acquire(&name, &holder).await? {
                            r.release(&name, &holder).await?;
                            n += 1;
                        }
                    }
                    Ok::<_, anyhow::Error>(n)
                }
            });
            let start = Instant::now();
            let mut total = 0;
            for r in futures_util::future::join_all(tasks).await {
                total += r?;
            }
            raw_rates.push(total as f64 / start.elapsed().as_secs_f64());
        }
    }
    for c in clients {
        c.close().await;
    }
    let raw = (!raw_rates.is_empty()).then(|| crate::stats::median(&raw_rates));
    Ok((crate::stats::median(&ours), raw))
}

// ---------------------------------------------------------------------------------------------
// P3 crash failover, P4 graceful handover

/// The release watch's query counter of a SQLite or MariaDB backend (issue 15 P4).
type WatchCounter = Box<dyn Fn() -> u64 + Send + Sync>;

/// A live client on `t`, and for SQLite and MariaDB the query counter of its backend's
/// release watch.
async fn watched_client(t: &Target, cfg: SimbaConfig) -> Result<(Simba, Option<WatchCounter>)> {
    let (s, counter): (Simba, Option<WatchCounter>) = match t.kind {
        Kind::Sqlite => {
            let b = simba::backend::sqlite::SqliteBackend::connect(&t.url).await?;
            let c = b.clone();
            (Simba::new(b, cfg)?, Some(Box::new(move || c.release_watch_queries())))
        }
        Kind::MySql => {
            let b = simba::backend::mysql::MySqlBackend::connect(&t.url).await?;
            let c = b.clone();
            (Simba::new(b, cfg)?, Some(Box::new(move || c.release_watch_queries())))
        }
        _ => return Ok((client(&t.url, cfg).await?, None)),
    };
    timeout(Duration::from_secs(15), s.live())
        .await
        .map_err(|_| anyhow!("no live session on {} within 15 s", t.url))??;
    Ok((s, counter))
}

/// One handover trial's result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handover {
    /// From the crash or `stop()` to the next term, ms.
    pub(crate) ms: f64,
    /// Release-watch queries per second of the candidate's node while it waited, and of the
    /// leader's node over the same time (SQLite and MariaDB only).
    pub(crate) watch_qps: Option<(f64, f64)>,
}

/// One handover trial: A leads, B waits as a candidate, then A crashes (`crash`) or stops;
/// the time from then until B's term starts, in ms.
async fn handover_trial(t: &Target, cfg: SimbaConfig, name: String, crash: bool) -> Result<Handover> {
    let (a, a_watch) = watched_client(t, cfg).await?;
    let (b, b_watch) = watched_client(t, cfg).await?;
    let (atx, mut arx) = mpsc::unbounded_channel::<Instant>();
    let ea = a.election(name.as_str());
    ea.start(FnListener::new(
        move |_t: &Term| {
            let _ = atx.send(Instant::now());
        },
        |_: &Term, _| {},
    ))?;
    timeout(Duration::from_secs(20), arx.recv()).await.map_err(|_| anyhow!("{name}: A not elected within 20 s"))?;
    let (btx, mut brx) = mpsc::unbounded_channel::<Instant>();
    let watched = |w: &Option<WatchCounter>| w.as_ref().map_or(0, |f| f());
    let (qa0, qb0, waiting_since) = (watched(&a_watch), watched(&b_watch), Instant::now());
    let eb = b.election(name.as_str());
    eb.start(FnListener::new(
        move |_t: &Term| {
            let _ = btx.send(Instant::now());
        },
        |_: &Term, _| {},
    ))?;
    // B has tried and failed; the crash lands at a random phase of A's renewal period.
    let phase = rand::rng().random_range(0.0..1.0);
    sleep(Duration::from_millis(200) + cfg.renew_interval().mul_f64(phase)).await;
    if brx.try_recv().is_ok() {
        bail!("{name}: B was elected while A led");
    }
    let t0 = Instant::now();
    if crash {
        a.crash_for_tests();
    } else {
        ea.stop().await;
    }
    let limit = cfg.failover_bound() * 4 + Duration::from_secs(5);
    let t1 = timeout(limit, brx.recv())
        .await
        .map_err(|_| anyhow!("{name}: B not elected within {limit:?}"))?
        .ok_or_else(|| anyhow!("{name}: B's listener ended"))?;
    let waited = t1.duration_since(waiting_since).as_secs_f64();
    let watch_qps = b_watch
        .as_ref()
        .map(|_| ((watched(&b_watch) - qb0) as f64 / waited, (watched(&a_watch) - qa0) as f64 / waited));
    b.close().await;
    if !crash {
        a.close().await;
    }
    Ok(Handover { ms: t1.duration_since(t0).as_secs_f64() * 1e3, watch_qps })
}

/// `trials` handover trials on `t`, `parallel` at a time (each on its own lease name and two
/// clients of its own).
pub(crate) async fn handovers(
    t: &Target,
    cfg: SimbaConfig,
    trials: usize,
    parallel: usize,
    crash: bool,
    run: &str,
) -> Result<Vec<Handover>> {
    let what = if crash { "p3" } else { "p4" };
    let results: Vec<Result<Handover>> = futures_util::stream::iter(0..trials)
        .map(|i| handover_trial(t, cfg, format!("{what}.{run}.{i}"), crash))
        .buffer_unordered(parallel)
        .collect()
        .await;
    results.into_iter().collect()
}

// ---------------------------------------------------------------------------------------------
// P5 cron lateness

/// Fire times by scheduler: the lease name of ours on each backend, `tokio-cron-scheduler.X`
/// for the anchor of backend X's phase.
static FIRES: Mutex<Vec<(String, chrono::DateTime<chrono::Utc>)>> = Mutex::new(Vec::new());
const TCS: &str = "tokio-cron-scheduler";

fn record(who: &str) {
    let now = chrono::Utc::now();
    FIRES.lock().unwrap_or_else(PoisonError::into_inner).push((who.to_owned(), now));
}

fn take_fires(who: &str) -> Vec<chrono::DateTime<chrono::Utc>> {
    let mut all = FIRES.lock().unwrap_or_else(PoisonError::into_inner);
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *all).into_iter().partition(|(w, _)| w == who);
    *all = rest;
    mine.into_iter().map(|(_, t)| t).collect()
}

fn p5_job(term: Term) -> JobFuture {
    record(term.name());
    Box::pin(async { Ok(()) })
}

/// Lateness of at most `slots` fires after the first, in ms: the fire time minus its slot
/// (the whole second it falls in; both schedulers fire well within a second of the slot).
fn lateness(fires: &[chrono::DateTime<chrono::Utc>], slots: u64) -> Vec<f64> {
    fires.iter().skip(1).take(slots as usize).map(|t| f64::from(t.timestamp_subsec_nanos()) / 1e6).collect()
}

/// One backend's quiet P5 phase.
#[derive(Debug, Clone)]
pub(crate) struct P5Phase {
    /// Backend.
    pub(crate) system: String,
    /// Our lateness per slot, ms (slot claim and `running` record on).
    pub(crate) ours: Vec<f64>,
    /// tokio-cron-scheduler's lateness per slot in the same phase, ms.
    pub(crate) tcs: Vec<f64>,
    /// The slot claim alone (one call after another, after the cron phase), ms per call;
    /// empty if it could not be measured (the error is printed).
    pub(crate) claim: Vec<f64>,
    /// What the runtime claims a slot with on this backend: `claim_run` (the jobs store: the
    /// fenced claim and the `running` record), on every backend since the SQL servers' stores
    /// are on by default.
    pub(crate) claim_with: &'static str,
}

/// P5 on one backend, in a phase of its own (nothing else of the benchmark runs): an
/// every-second cron job in a `Runtime` on `t` (each fire claims its slot and writes the
/// `running` record in the backend's jobs store) beside tokio-cron-scheduler on the same
/// schedule in the same process for the same `slots` seconds; then `slots` slot claims timed
/// alone, to tell the claim's share of the lateness from the timer's.
pub(crate) async fn p5(t: &Target, slots: u64, run: &str) -> Result<P5Phase> {
    let label = t.kind.label();
    let lease = format!("p5.{label}.{run}");
    let job = ScheduledJob::new("p5_cron", Schedule::cron("* * * * * *"), &p5_job).with_lease(lease.clone());
    let toml = format!("[backend]\nurl = \"{}\"\n", t.url);
    let cfg = RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?;
    let rt = Runtime::builder().config(cfg).without_registry().job(job).start().await?;
    let anchor = format!("{TCS}.{label}");
    let mut tcs = tokio_cron_scheduler::JobScheduler::new().await?;
    let who = anchor.clone();
    tcs.add(tokio_cron_scheduler::Job::new_async("* * * * * *", move |_id, _l| {
        record(&who);
        Box::pin(async {})
    })?)
    .await?;
    tcs.start().await?;
    sleep(Duration::from_secs(slots + 2)).await;
    tcs.shutdown().await?;
    rt.shutdown().await;
    let ours = lateness(&take_fires(&lease), slots);
    let tcs = lateness(&take_fires(&anchor), slots);
    if ours.is_empty() {
        bail!("P5 {label}: our job never ran");
    }
    let claim = claim_alone(t, slots as usize, run).await.unwrap_or_else(|e| {
        eprintln!("P5 {label}: the claim alone was not measured: {e:#}");
        Vec::new()
    });
    Ok(P5Phase { system: label.to_owned(), ours, tcs, claim, claim_with: "claim_run" })
}

/// `n` scheduled-slot claims of one held term, one after another, timed one by one (ms).
async fn claim_alone(t: &Target, n: usize, run: &str) -> Result<Vec<f64>> {
    use simba::job_store::{Claim, ClaimRequest, SlotKind};
    let simba = client(&t.url, SimbaConfig::default()).await?;
    let store = simba.job_store().ok_or_else(|| anyhow!("{}: no jobs store", t.kind.label()))?;
    let name = format!("p5c.{}.{run}", t.kind.label());
    let guard = simba.lock(name.as_str()).acquire().await?;
    let term = guard.term().clone();
    let job = format!("p5_claim.{run}");
    let base = chrono::Utc::now().timestamp_millis();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let req = ClaimRequest {
            session: term.session_id(),
            lease: term.name(),
            token: term.token(),
            job: &job,
            slot_ms: base + i as i64 * 1000,
            kind: SlotKind::Scheduled,
            node: "simba-bench",
            started_ms: chrono::Utc::now().timestamp_millis(),
            attempts: 1,
        };
        let t0 = Instant::now();
        let c = store.claim_run(req).await?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
        if !matches!(c, Claim::Claimed(_)) {
            bail!("claim {i} was not granted: {c:?}");
        }
    }
    drop(guard);
    simba.close().await;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// P9 the cost of history

/// One backend's P9 row: history (the jobs store) on beside off.
#[derive(Debug, Clone)]
pub(crate) struct P9Row {
    /// Backend.
    pub(crate) system: String,
    /// Round trips to the store per slot claim with history on (`JobStore::claim_run`), one
    /// per call as the counting proxy saw them; empty on SQLite (a local file, no network).
    pub(crate) trips_on: Vec<f64>,
    /// The same with history off (`Backend::claim_slot`, what the runtime claims with when the
    /// backend offers no jobs store).
    pub(crate) trips_off: Vec<f64>,
    /// Lateness per slot, ms, of the runtime with history on.
    pub(crate) late_on: Vec<f64>,
    /// Lateness per slot, ms, of the runtime with history off, in the same seconds.
    pub(crate) late_off: Vec<f64>,
}

/// P9 on one backend (issue 12 "Done when": the cost of history). Two parts:
///
/// - **Round trips before a run starts**, counted: a backend of our own through the counting
///   proxy holds a term and claims `calls` slots with `JobStore::claim_run` (history on: the
///   fenced claim, the pause check and the `running` record), then `calls` with
///   `Backend::claim_slot` (history off). Each call's exchanges are read from the proxy right
///   before it and 20 ms after it returned, so the window always holds what the driver does
///   after the answer without the caller waiting (sqlx pings a connection it gets back into
///   its pool: one exchange on the SQL servers, on and off alike). Ten calls of each first
///   warm the connections (prepared statements, the jobs tables' first-use check).
/// - **Lateness, side by side**: two `Runtime`s in this process, each with its own backend
///   connection and an every-second cron job on its own lease, for the same `slots`
///   seconds: one with the backend's jobs store, one with the same backend wrapped so that it
///   offers none (`simba::tck::FaultyBackend` with no fault: every call goes straight to the
///   backend, and the runtime claims slots with `claim_slot` and records nothing).
pub(crate) async fn p9(t: &Target, slots: u64, calls: usize, run: &str) -> Result<P9Row> {
    use simba::backend::{
        etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, redis::RedisBackend, sqlite::SqliteBackend,
        zookeeper::ZooKeeperBackend,
    };
    let err = |e: simba::backend::BackendError| anyhow!("{e}");
    let proxy = match t.kind {
        Kind::Sqlite => None,
        _ => Some(CountingProxy::start(upstream(&t.url)?).await?),
    };
    let counted = match &proxy {
        Some(p) => via(&t.url, p.addr())?,
        None => t.url.clone(),
    };
    macro_rules! go {
        ($b:ty) => {{
            let (on, off, count) = (
                <$b>::connect(&t.url).await.map_err(err)?,
                <$b>::connect(&t.url).await.map_err(err)?,
                <$b>::connect(&counted).await.map_err(err)?,
            );
            p9_on(t, on, off, count, proxy.as_ref(), slots, calls, run).await
        }};
    }
    match t.kind {
        Kind::Postgres => go!(PostgresBackend),
        Kind::MySql => go!(MySqlBackend),
        Kind::Sqlite => go!(SqliteBackend),
        Kind::Redis => go!(RedisBackend),
        Kind::ZooKeeper => go!(ZooKeeperBackend),
        Kind::Etcd => go!(EtcdBackend),
    }
}

#[allow(clippy::too_many_arguments)] // One measure's inputs; called from one place.
async fn p9_on<B: Backend>(
    t: &Target,
    on: B,
    off: B,
    count: B,
    proxy: Option<&CountingProxy>,
    slots: u64,
    calls: usize,
    run: &str,
) -> Result<P9Row> {
    let label = t.kind.label();
    if on.job_store().is_none() {
        bail!("P9 {label}: the backend offers no jobs store");
    }
    let (trips_on, trips_off) = match proxy {
        Some(p) => p9_trips(&count, p, calls, &format!("p9c.{label}.{run}")).await?,
        None => (Vec::new(), Vec::new()),
    };
    let lease_on = format!("p9.on.{label}.{run}");
    let lease_off = format!("p9.off.{label}.{run}");
    let job = |name: &'static str, lease: String| {
        ScheduledJob::new(name, Schedule::cron("* * * * * *"), &p5_job).with_lease(lease)
    };
    let toml = format!("[backend]\nurl = \"{}\"\n", t.url);
    let cfg = RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?;
    let (without, _faults) = simba::tck::FaultyBackend::new(off);
    let rt_on =
        Runtime::builder().config(cfg.clone()).without_registry().backend(on).job(job("p9_on", lease_on.clone()));
    let rt_off =
        Runtime::builder().config(cfg).without_registry().backend(without).job(job("p9_off", lease_off.clone()));
    let (rt_on, rt_off) = (rt_on.start().await?, rt_off.start().await?);
    sleep(Duration::from_secs(slots + 2)).await;
    rt_on.shutdown().await;
    rt_off.shutdown().await;
    let (late_on, late_off) = (lateness(&take_fires(&lease_on), slots), lateness(&take_fires(&lease_off), slots));
    if late_on.is_empty() || late_off.is_empty() {
        bail!("P9 {label}: a job never ran (history on: {} fires, off: {})", late_on.len(), late_off.len());
    }
    Ok(P9Row { system: label.to_owned(), trips_on, trips_off, late_on, late_off })
}

/// Per call, the exchanges the proxy saw: `calls` claims with history on, then off.
async fn p9_trips<B: Backend>(b: &B, proxy: &CountingProxy, calls: usize, lease: &str) -> Result<(Vec<f64>, Vec<f64>)> {
    use simba::job_store::{Claim, ClaimRequest, SlotKind};
    let e = |e: simba::backend::BackendError| anyhow!("{e}");
    let store = b.job_store().ok_or_else(|| anyhow!("no jobs store"))?;
    let s = b.open_session(Duration::from_secs(60)).await.map_err(e)?.id;
    let token = match b.acquire(&s, lease).await.map_err(e)? {
        Acquire::Won(token) => token,
        other => bail!("{lease}: acquire answered {other:?} on a free lease"),
    };
    let job = format!("{lease}.job");
    let mut slot = chrono::Utc::now().timestamp_millis();
    const WARM: usize = 10;
    // Each window ends 20 ms after the call returned, so it always holds what the driver does
    // after the answer (sqlx pings a connection it gets back into its pool: one exchange the
    // caller does not wait for, which would otherwise land in or out of the window by a race).
    const SETTLE: Duration = Duration::from_millis(20);
    let (mut on, mut off) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..WARM + calls {
        slot += 1000;
        let req = ClaimRequest {
            session: &s,
            lease,
            token,
            job: &job,
            slot_ms: slot,
            kind: SlotKind::Scheduled,
            node: "simba-bench",
            started_ms: chrono::Utc::now().timestamp_millis(),
            attempts: 1,
        };
        let before = proxy.read();
        let c = store.claim_run(req).await.map_err(e)?;
        sleep(SETTLE).await;
        let d = proxy.read().since(before);
        if !matches!(c, Claim::Claimed(_)) {
            bail!("{lease}: claim {i} was not granted: {c:?}");
        }
        if i >= WARM {
            on.push(d.exchanges as f64);
        }
    }
    for i in 0..WARM + calls {
        slot += 1000;
        let before = proxy.read();
        let ok = b.claim_slot(&s, lease, token, slot).await.map_err(e)?;
        sleep(SETTLE).await;
        let d = proxy.read().since(before);
        if !ok {
            bail!("{lease}: slot {i} was not granted");
        }
        if i >= WARM {
            off.push(d.exchanges as f64);
        }
    }
    b.close_session(&s).await.map_err(e)?;
    Ok((on, off))
}

// ---------------------------------------------------------------------------------------------
// P6 partition rebalance

/// One partition term as its worker saw it.
struct PartTerm {
    lease: String,
    token: u64,
    session: String,
    start: Instant,
    end: Option<Instant>,
}

/// Every partition term of the run, in the order their workers started.
static P6_LOG: Mutex<Vec<PartTerm>> = Mutex::new(Vec::new());

fn p6_log() -> std::sync::MutexGuard<'static, Vec<PartTerm>> {
    P6_LOG.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks its term ended when the worker returns or is aborted.
struct Ended(usize);

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(e) = p6_log().get_mut(self.0) {
            e.end.get_or_insert_with(Instant::now);
        }
    }
}

/// The worker of a partition: logs its term's start (session, token), and its end when the
/// term is cancelled (H1 revokes it before the release, so before anyone else can take it).
fn p6_worker(term: Term, _partition: u32) -> JobFuture {
    let idx = {
        let mut log = p6_log();
        log.push(PartTerm {
            lease: term.name().to_owned(),
            token: term.token(),
            session: term.session_id().as_str().to_owned(),
            start: Instant::now(),
            end: None,
        });
        log.len() - 1
    };
    Box::pin(async move {
        let _ended = Ended(idx);
        term.cancelled().await;
        Ok(())
    })
}

/// One step of P6.
#[derive(Debug, Clone)]
pub(crate) struct P6Row {
    /// Backend.
    pub(crate) system: String,
    /// Partitions of the group.
    pub(crate) partitions: u32,
    /// "16 -> 17", "17 -> 16".
    pub(crate) step: String,
    /// Time until every member holds its share, ms.
    pub(crate) ms: f64,
    /// The renewal interval of every member.
    pub(crate) renew: Duration,
    /// The goal, in renewal intervals.
    pub(crate) goal_intervals: f64,
    /// Partition terms started during the step (until it settled).
    pub(crate) moved: u64,
    /// The least number of partitions that must move: the newcomer's share, or what the
    /// leaver held.
    pub(crate) minimum: u64,
    /// Pairs of terms of one partition whose lifetimes overlapped (0: never held twice),
    /// over the whole scenario, and the terms checked.
    pub(crate) held_twice: usize,
    /// Partition terms checked for `held_twice`.
    pub(crate) terms: usize,
    /// `Backend::acquire` calls of all members from the change until the step settled (each
    /// one store round trip; most answer that the partition is held).
    pub(crate) acquires: u64,
}

impl P6Row {
    /// Balanced within the goal, with the minimum moves, never held twice.
    pub(crate) fn met(&self) -> bool {
        self.ms <= self.renew.as_secs_f64() * 1e3 * self.goal_intervals
            && self.moved == self.minimum
            && self.held_twice == 0
    }
}

/// A runtime running `job` on `t`'s backend wrapped in [`Counted`] (its acquisitions add to
/// `acquires`).
async fn counted_runtime(
    t: &Target,
    cfg: RuntimeConfig,
    job: PartitionedJob,
    acquires: Arc<AtomicU64>,
) -> Result<simba::runtime::RunningRuntime> {
    use simba::backend::{
        etcd::EtcdBackend, mysql::MySqlBackend, postgres::PostgresBackend, redis::RedisBackend, sqlite::SqliteBackend,
        zookeeper::ZooKeeperBackend,
    };
    let keep_alives = Arc::new(AtomicU64::new(0));
    let b = Runtime::builder().config(cfg).without_registry().partitioned(job);
    let url = t.url.as_str();
    Ok(match t.kind {
        Kind::Redis => b.backend(Counted::new(RedisBackend::connect(url).await?, keep_alives, acquires)),
        Kind::Postgres => b.backend(Counted::new(PostgresBackend::connect(url).await?, keep_alives, acquires)),
        Kind::MySql => b.backend(Counted::new(MySqlBackend::connect(url).await?, keep_alives, acquires)),
        Kind::ZooKeeper => b.backend(Counted::new(ZooKeeperBackend::connect(url).await?, keep_alives, acquires)),
        Kind::Etcd => b.backend(Counted::new(EtcdBackend::connect(url).await?, keep_alives, acquires)),
        Kind::Sqlite => b.backend(Counted::new(SqliteBackend::connect(url).await?, keep_alives, acquires)),
    }
    .start()
    .await?)
}

/// Open partition terms of `prefix` per session of `members`, and those held by any other
/// session.
fn p6_counts(prefix: &str, members: &[Option<String>]) -> (Vec<u32>, u32) {
    let log = p6_log();
    let mut counts = vec![0u32; members.len()];
    let mut others = 0;
    for e in log.iter().filter(|e| e.end.is_none() && e.lease.starts_with(prefix)) {
        match members.iter().position(|m| m.as_deref() == Some(e.session.as_str())) {
            Some(i) => counts[i] += 1,
            None => others += 1,
        }
    }
    (counts, others)
}

fn p6_sessions(nodes: &[simba::runtime::RunningRuntime]) -> Vec<Option<String>> {
    nodes.iter().map(|n| n.simba().session_id().map(|s| s.as_str().to_owned())).collect()
}

/// Waits until every node holds `floor` or `ceil` of `partitions / nodes` and nothing else
/// holds one.
async fn wait_balanced(
    nodes: &[simba::runtime::RunningRuntime],
    prefix: &str,
    partitions: u32,
    limit: Duration,
) -> Result<()> {
    let m = nodes.len() as u32;
    let (lo, hi) = (partitions / m, partitions.div_ceil(m));
    let start = Instant::now();
    loop {
        let (counts, others) = p6_counts(prefix, &p6_sessions(nodes));
        if others == 0 && counts.iter().sum::<u32>() == partitions && counts.iter().all(|c| (lo..=hi).contains(c)) {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("not balanced within {limit:?}: partitions per node {counts:?}, {others} held by other sessions");
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// Terms of `prefix` started at or after `since`.
fn p6_started_since(prefix: &str, since: Instant) -> u64 {
    p6_log().iter().filter(|e| e.lease.starts_with(prefix) && e.start >= since).count() as u64
}

/// Pairs of consecutive terms (by start) of one partition whose lifetimes overlap, or whose
/// tokens do not grow; and the number of terms checked.
fn p6_overlaps(prefix: &str) -> (usize, usize) {
    let log = p6_log();
    let mut by: std::collections::BTreeMap<&str, Vec<&PartTerm>> = std::collections::BTreeMap::new();
    for e in log.iter().filter(|e| e.lease.starts_with(prefix)) {
        by.entry(e.lease.as_str()).or_default().push(e);
    }
    let mut bad = 0;
    let mut n = 0;
    for terms in by.values_mut() {
        terms.sort_by_key(|e| e.start);
        n += terms.len();
        for w in terms.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.end.is_none_or(|end| end > b.start) || b.token <= a.token {
                bad += 1;
            }
        }
    }
    (bad, n)
}

/// The partition map of one P6 scenario over time (issue 15: "P6, the partition map over
/// time"): from just before the newcomer joins to the end of the leave's step, how many
/// partitions the newcomer, the leaver and the other members hold, and how many nobody does.
#[derive(Debug, Clone)]
pub(crate) struct P6Map {
    /// Backend.
    pub(crate) system: String,
    /// Partitions of the group.
    pub(crate) partitions: u32,
    /// The renewal interval of every member.
    pub(crate) renew: Duration,
    /// When the leaver was told to shut down, ms after the newcomer started joining.
    pub(crate) leave_at_ms: f64,
    /// One point per change of the map, in time order.
    pub(crate) points: Vec<P6MapPoint>,
}

/// The partition map at one moment of [`P6Map`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct P6MapPoint {
    /// Ms after the newcomer started joining (negative before it).
    pub(crate) t_ms: f64,
    /// Partitions the newcomer holds.
    pub(crate) newcomer: u32,
    /// Partitions the member that leaves holds.
    pub(crate) leaver: u32,
    /// The fewest and the most any other member holds.
    pub(crate) others_min: u32,
    pub(crate) others_max: u32,
    /// Partitions nobody holds.
    pub(crate) unheld: u32,
}

/// The map over time from partition terms `(session, start, end)`: `members` are every
/// member's session (the newcomer's and the leaver's among them), `join` is the origin, and
/// only changes from `from` to `to` make points (the state at `from` is the first one).
fn map_points<'a>(
    terms: impl Iterator<Item = (&'a str, Instant, Option<Instant>)>,
    partitions: u32,
    members: &[&str],
    (newcomer, leaver): (&str, &str),
    (join, from, to): (Instant, Instant, Instant),
) -> Vec<P6MapPoint> {
    // (when, +1 or -1, whose); a term that ends before `from` or starts after `to` adds nothing.
    let mut events: Vec<(Instant, i64, &str)> = Vec::new();
    for (session, start, end) in terms {
        if start > to || end.is_some_and(|e| e <= from) {
            continue;
        }
        events.push((start.max(from), 1, session));
        if let Some(e) = end.filter(|&e| e <= to) {
            events.push((e, -1, session));
        }
    }
    // Ends first at one instant: a partition handed over at once is never counted twice.
    events.sort_by_key(|&(at, d, _)| (at, d));
    let mut held: std::collections::HashMap<&str, i64> = members.iter().map(|m| (*m, 0)).collect();
    let mut points: Vec<P6MapPoint> = Vec::new();
    let signed_ms = |at: Instant| {
        if at >= join {
            at.duration_since(join).as_secs_f64() * 1e3
        } else {
            -(join.duration_since(at).as_secs_f64() * 1e3)
        }
    };
    let mut i = 0;
    while i < events.len() {
        let at = events[i].0;
        while i < events.len() && events[i].0 == at {
            *held.entry(events[i].2).or_insert(0) += events[i].1;
            i += 1;
        }
        let count = |m: &str| u32::try_from(held.get(m).copied().unwrap_or(0)).unwrap_or(0);
        let others: Vec<u32> = members.iter().filter(|m| **m != newcomer && **m != leaver).map(|m| count(m)).collect();
        let total: i64 = held.values().sum();
        let point = P6MapPoint {
            t_ms: signed_ms(at),
            newcomer: count(newcomer),
            leaver: count(leaver),
            others_min: others.iter().copied().min().unwrap_or(0),
            others_max: others.iter().copied().max().unwrap_or(0),
            unheld: u32::try_from(i64::from(partitions) - total).unwrap_or(0),
        };
        // Only changes of the map make points.
        let same = points.last().is_some_and(|p| P6MapPoint { t_ms: p.t_ms, ..point } == *p);
        if !same {
            points.push(point);
        }
    }
    points
}

/// `map` with its points and leave time filled in from the log of `prefix`: `members` are the
/// sessions just before the leave (the leaver first, the newcomer last), `join` and `leave`
/// when each step began; the map runs from half a second before the join to now.
fn p6_map(prefix: &str, members: &[Option<String>], (join, leave): (Instant, Instant), map: P6Map) -> Result<P6Map> {
    let sessions: Vec<&str> = members.iter().flatten().map(String::as_str).collect();
    let (Some(Some(newcomer)), Some(Some(leaver))) = (members.last(), members.first()) else {
        bail!("a member without a session at the leave");
    };
    let log = p6_log();
    let terms = log.iter().filter(|e| e.lease.starts_with(prefix)).map(|e| (e.session.as_str(), e.start, e.end));
    let from = join.checked_sub(Duration::from_millis(500)).unwrap_or(join);
    let points = map_points(terms, map.partitions, &sessions, (newcomer, leaver), (join, from, Instant::now()));
    Ok(P6Map { leave_at_ms: leave.duration_since(join).as_secs_f64() * 1e3, points, ..map })
}

/// A scenario of P6.
#[derive(Debug, Clone, Copy)]
pub(crate) struct P6Case {
    /// Partitions of the group.
    pub(crate) partitions: u32,
    /// Members before one joins.
    pub(crate) members: usize,
    /// The goal for each step, in renewal intervals.
    pub(crate) goal_intervals: f64,
}

/// `case.partitions` partitions (`PartitionedJob`) on `case.members` runtimes in this
/// process, each its own client and session; one more joins, then one of the first leaves
/// (graceful shutdown). Every partition term is logged by its worker (session, token, start,
/// end), which gives the shares, the moves, whether two terms of a partition overlapped, and
/// the partition map over time.
pub(crate) async fn p6(t: &Target, case: P6Case, session: SimbaConfig, run: &str) -> Result<(Vec<P6Row>, P6Map)> {
    let P6Case { partitions, members, goal_intervals } = case;
    let group = format!("p6-{run}-{}-{partitions}-{}", t.kind.label(), session.renew_interval().as_millis());
    let prefix = format!("{group}.");
    let job = PartitionedJob::new("p6_part", partitions, &p6_worker).with_group(group);
    let toml = format!("[backend]\nurl = \"{}\"\n", t.url);
    let acquires = Arc::new(AtomicU64::new(0));
    let start_node = || {
        let toml = toml.clone();
        let acquires = Arc::clone(&acquires);
        let job = job.clone();
        async move {
            let mut cfg = RuntimeConfig::from_toml_str(&toml, "benchmark", Vec::new())?;
            cfg.session = session;
            let rt = counted_runtime(t, cfg, job, acquires).await?;
            timeout(Duration::from_secs(15), rt.simba().live())
                .await
                .map_err(|_| anyhow!("no live session within 15 s"))??;
            Ok::<_, anyhow::Error>(rt)
        }
    };
    let started: Vec<Result<_>> = futures_util::future::join_all((0..members).map(|_| start_node())).await;
    let mut nodes = Vec::new();
    let mut first_err = None;
    for r in started {
        match r {
            Ok(n) => nodes.push(n),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let outcome = async {
        if let Some(e) = first_err {
            return Err(e.context(format!("starting {members} members")));
        }
        let limit = Duration::from_secs(300);
        wait_balanced(&nodes, &prefix, partitions, limit).await.context(format!("{members} members"))?;
        sleep(session.renew_interval()).await;
        let m1 = members + 1;
        let settle = Duration::from_millis(500).max(session.renew_interval() / 2);
        let mut rows = Vec::new();
        let a0 = acquires.load(Ordering::Relaxed);
        let t0 = Instant::now();
        let join = t0;
        nodes.push(start_node().await?);
        wait_balanced(&nodes, &prefix, partitions, limit).await.context(format!("{members} -> {m1} members"))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let newcomer = p6_sessions(&nodes[members..]);
        let minimum = u64::from(p6_counts(&prefix, &newcomer).0.first().copied().unwrap_or(0));
        sleep(settle).await;
        let row = |step: String, ms: f64, moved: u64, minimum: u64, acquires: u64| P6Row {
            system: t.kind.label().to_owned(),
            partitions,
            step,
            ms,
            renew: session.renew_interval(),
            goal_intervals,
            moved,
            minimum,
            held_twice: 0,
            terms: 0,
            acquires,
        };
        let a = acquires.load(Ordering::Relaxed) - a0;
        rows.push(row(format!("{members} -> {m1}"), ms, p6_started_since(&prefix, t0), minimum, a));
        let members_now = p6_sessions(&nodes);
        let leaving = nodes.remove(0);
        let minimum = u64::from(p6_counts(&prefix, &p6_sessions(std::slice::from_ref(&leaving))).0[0]);
        let a0 = acquires.load(Ordering::Relaxed);
        let t0 = Instant::now();
        leaving.shutdown().await;
        wait_balanced(&nodes, &prefix, partitions, limit).await.context(format!("{m1} -> {members} members"))?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        sleep(settle).await;
        let a = acquires.load(Ordering::Relaxed) - a0;
        rows.push(row(format!("{m1} -> {members}"), ms, p6_started_since(&prefix, t0), minimum, a));
        let map = p6_map(
            &prefix,
            &members_now,
            (join, t0),
            P6Map {
                system: t.kind.label().to_owned(),
                partitions,
                renew: session.renew_interval(),
                leave_at_ms: 0.0,
                points: Vec::new(),
            },
        )?;
        Ok((rows, map))
    }
    .await;
    futures_util::future::join_all(nodes.into_iter().map(|n| n.shutdown())).await;
    let (mut rows, map) = outcome?;
    let (bad, n) = p6_overlaps(&prefix);
    for r in &mut rows {
        r.held_twice = bad;
        r.terms = n;
    }
    Ok((rows, map))
}

// ---------------------------------------------------------------------------------------------
// P7 memory and idle CPU

/// Resident set size of this process, bytes.
fn rss() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/self/status"))?;
    Ok(kb * 1024)
}

/// User + system CPU time of this process, in clock ticks (USER_HZ, 100 on Linux).
fn cpu_ticks() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/stat")?;
    let after = s.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| anyhow!("bad /proc/self/stat"))?;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; `after` starts at field 3.
    Ok(f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0))
}

/// P7's figures.
#[derive(Debug, Clone)]
pub(crate) struct P7 {
    /// Backend.
    pub(crate) system: String,
    /// Leases held for the memory figure.
    pub(crate) leases: usize,
    /// RSS growth per held lease, bytes.
    pub(crate) bytes_per_lease: f64,
    /// Leases held for the CPU figure.
    pub(crate) idle_leases: usize,
    /// Window of the CPU figure.
    pub(crate) window: Duration,
    /// CPU used over the window, percent of one core.
    pub(crate) idle_cpu_pct: f64,
}

/// RSS delta per held lease at `leases`, and the idle CPU of a node holding `idle_leases`
/// (default timing: lease 15 s, renewal every 5 s) over `window`.
pub(crate) async fn p7(t: &Target, leases: usize, idle_leases: usize, window: Duration, run: &str) -> Result<P7> {
    let cfg = SimbaConfig::default();
    let simba = client(&t.url, cfg).await?;
    let mut guards = Vec::with_capacity(leases);
    // Warm the paths once so that one-off allocations are not counted.
    acquire_many(&simba, &format!("p7.{run}.w"), 0, 100, &mut guards).await?;
    sleep(Duration::from_millis(200)).await;
    let r0 = rss()?;
    acquire_many(&simba, &format!("p7.{run}.m"), 0, leases, &mut guards).await?;
    sleep(Duration::from_millis(500)).await;
    let r1 = rss()?;
    let bytes_per_lease = (r1.saturating_sub(r0)) as f64 / leases as f64;
    simba.close().await;
    drop(guards);

    let simba = client(&t.url, cfg).await?;
    if std::env::var("SIMBA_BENCH_DEBUG").is_ok() {
        print_events(&simba, format!("P7 {}", t.kind.label()));
    }
    let mut guards = Vec::with_capacity(idle_leases);
    acquire_many(&simba, &format!("p7.{run}.i"), 0, idle_leases, &mut guards).await?;
    sleep(Duration::from_secs(1)).await;
    let c0 = cpu_ticks()?;
    let w0 = Instant::now();
    sleep(window).await;
    let c1 = cpu_ticks()?;
    let secs = w0.elapsed().as_secs_f64();
    let held = guards.iter().all(|g| g.term().is_valid());
    simba.close().await;
    drop(guards);
    if !held {
        bail!("P7: a lease was lost during the idle window");
    }
    Ok(P7 {
        system: t.kind.label().to_owned(),
        leases,
        bytes_per_lease,
        idle_leases,
        window,
        idle_cpu_pct: (c1 - c0) as f64 / 100.0 / secs * 100.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(lease: &str, token: u64, start: Instant, end: Option<Instant>) -> PartTerm {
        PartTerm { lease: lease.to_owned(), token, session: "s".to_owned(), start, end }
    }

    /// The held-twice check flags overlapping lifetimes and tokens that do not grow, and
    /// passes a clean hand-over.
    #[test]
    fn p6_overlaps_flags_a_partition_held_twice() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        p6_log().extend([
            // Clean: the second term starts after the first ended, with a larger token.
            term("ovl-test-ok.0", 1, t0, Some(t0 + ms(10))),
            term("ovl-test-ok.0", 2, t0 + ms(11), None),
            // Overlap: the second starts before the first ended.
            term("ovl-test-bad.0", 1, t0, Some(t0 + ms(10))),
            term("ovl-test-bad.0", 2, t0 + ms(5), None),
            // A token that does not grow.
            term("ovl-test-bad.1", 5, t0, Some(t0 + ms(1))),
            term("ovl-test-bad.1", 4, t0 + ms(2), None),
        ]);
        assert_eq!(p6_overlaps("ovl-test-ok."), (0, 2));
        assert_eq!(p6_overlaps("ovl-test-bad."), (2, 4));
    }

    /// The partition map: a hand-over at one instant is never counted twice nor as unheld,
    /// only changes make points, and the state at `from` is the first point.
    #[test]
    fn p6_map_follows_the_terms() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Three partitions; "a" leaves, "n" joins at t0 + 100 and takes partition 2 from "a"
        // at 200 (hand-over at one instant), "b" holds partition 1 throughout; partition 0 is
        // free from 300 (a left) until "b" takes it at 350.
        let terms = [
            ("a", t0, Some(t0 + ms(300))),
            ("b", t0, None),
            ("a", t0, Some(t0 + ms(200))),
            ("n", t0 + ms(200), None),
            ("b", t0 + ms(350), None),
        ];
        let pts =
            map_points(terms.into_iter(), 3, &["a", "b", "n"], ("n", "a"), (t0 + ms(100), t0 + ms(50), t0 + ms(400)));
        let view: Vec<(i64, u32, u32, u32, u32)> =
            pts.iter().map(|p| (p.t_ms.round() as i64, p.newcomer, p.leaver, p.others_max, p.unheld)).collect();
        assert_eq!(view, vec![(-50, 0, 2, 1, 0), (100, 1, 1, 1, 0), (200, 1, 0, 1, 1), (250, 1, 0, 2, 0)]);
        assert!(pts.iter().all(|p| p.others_min == p.others_max), "one other member");
    }
}
