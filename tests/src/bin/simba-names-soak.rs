//! The million-name soak (`bash scripts/names-soak.sh`, ADR 0030): one client takes and
//! releases `SIMBA_NAMES_SOAK_NAMES` (default 1,000,000) distinct lock names, each once, from
//! `SIMBA_NAMES_SOAK_TASKS` (default 8) tasks at once, on the store `SIMBA_NAMES_SOAK_URL`
//! (default: a SQLite file in a temporary directory), and shows whether the store's lease records
//! and the node's memory stay flat. The client runs with a 3 s lease (renewal every second) and
//! `remove_idle_leases_after` 5 s, so its own sweeper (rule B3, `engine::idle`: every 60
//! renewal intervals, then back to back while a call removes a full batch of 1,000) is what
//! removes the records; the soak never removes any itself.
//!
//! Every 10 s, at the 10% mark and at the end it samples the names done, its resident memory
//! (`VmRSS`) and the store's lease records and bytes:
//!
//! - SQLite: `COUNT(*)` of `simba_lease`; bytes are the database's pages in use
//!   (`page_count - freelist_count` times `page_size`), and the file's bytes (with its WAL) apart;
//! - PostgreSQL: `COUNT(*)` and `pg_total_relation_size('simba_lease')` (heap, indexes, TOAST,
//!   dead tuples included);
//! - MySQL/MariaDB: `COUNT(*)` and `data_length + index_length` of `simba_lease` from
//!   `information_schema.tables` (InnoDB's estimate, refreshed by its statistics), and the
//!   table's file (`FILE_SIZE` of its tablespace) apart;
//! - Redis: the keys `simba:lease:*` of the URL's database, counted with `SCAN`, and the server's
//!   `used_memory` (`INFO memory`: every database of the server, not only the soak's).
//!
//! A store it cannot measure (another scheme, a TLS URL the measuring connection cannot open)
//! gets `null` figures and the reason, never made-up ones.
//!
//! After the last name it keeps running until the sweeper has caught up (the store holds no more
//! lease records than at the start), or `SIMBA_NAMES_SOAK_DRAIN_SECS` (default 180) have passed;
//! then it takes the first `SIMBA_NAMES_SOAK_CHECK` (default 100) names again and checks that
//! each one's token is above the token it got in the first pass (T3 across the removal; it also
//! says how many of those records were removed before, which is what makes the check bite).
//!
//! It prints the samples as a table and writes a JSON summary to `SIMBA_NAMES_SOAK_OUT` (default
//! `target/names-soak/<store>.json`). It exits with 1 when
//!
//! - the records at the end exceed 2 × (names per second × 5 s + 1,000): the sweeper did not
//!   catch up;
//! - the most records at any sample exceed 2 × (names per second × (60 s + 5 s) + 1,000): the
//!   sweeper did not keep up while names were being used (records at most one sweep period and
//!   one idle time of names, plus a batch);
//! - resident memory grew by more than `SIMBA_NAMES_SOAK_MAX_RSS_GROWTH_PCT` (default 10)
//!   percent from the 10% mark to the end (the summary also gives the growth from the first
//!   sample after the sweeper's first period, whose removals warm the driver's caches, a step
//!   that comes after the 10% mark when names go fast);
//! - a re-acquired name's token is not above its first one, or a name could not be taken at
//!   all (after 10 tries).
//!
//! For a PostgreSQL or MySQL/MariaDB URL it creates the URL's database first when it is missing
//! (a dedicated one, such as `simba_names_soak`, keeps the soak's sweeper off other tests'
//! records: removal is store-wide). `SIMBA_NAMES_SOAK_RUN` names the run (default: the Unix
//! time), which goes into the names `soak.names.{run}.{i}`.

#![allow(clippy::print_stdout, clippy::print_stderr)] // The figures are the point.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use simba::backend::BackendUrl;
use simba::{Simba, SimbaConfig};
use sqlx::Connection;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

/// The lease, as the soak node's (`scripts/soak.sh`).
const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(1);
/// `remove_idle_leases_after`.
const IDLE: Duration = Duration::from_secs(5);
/// The sweeper's period in renewal intervals and its batch (`engine::idle::EVERY_RENEWALS`,
/// `engine::idle::BATCH`), for the bounds.
const SWEEP_RENEWALS: u32 = 60;
const BATCH: u64 = 1000;
/// Tries per name before it counts as failed.
const TRIES: u32 = 10;
/// The Redis backend's default key prefix (the URL cannot change it).
const REDIS_LEASES: &str = "simba:lease:";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// One sample of the run.
#[derive(Clone)]
struct Sample {
    t: f64,
    phase: &'static str,
    names: u64,
    rss_kib: u64,
    store: Result<Measure, String>,
}

#[derive(Clone, Copy)]
struct Measure {
    records: u64,
    bytes: u64,
    /// SQLite only: the database file and its WAL, which do not shrink.
    file_bytes: Option<u64>,
}

impl Sample {
    fn records(&self) -> Option<u64> {
        self.store.as_ref().ok().map(|m| m.records)
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "t_s": (self.t * 10.0).round() / 10.0,
            "phase": self.phase,
            "names": self.names,
            "rss_kib": self.rss_kib,
        });
        match &self.store {
            Ok(m) => {
                v["records"] = json!(m.records);
                v["bytes"] = json!(m.bytes);
                if let Some(f) = m.file_bytes {
                    v["file_bytes"] = json!(f);
                }
            }
            Err(e) => {
                v["records"] = Value::Null;
                v["bytes"] = Value::Null;
                v["store_error"] = json!(e);
            }
        }
        v
    }
}

/// The connection that measures the store, apart from the client's.
enum Probe {
    Sqlite(SqlitePool, PathBuf),
    Postgres(PgPool),
    MySql(MySqlPool),
    Redis(redis::aio::MultiplexedConnection),
    None(String),
}

impl Probe {
    async fn open(store: &str, url: &BackendUrl, text: &str) -> Probe {
        let probe = match store {
            "sqlite" => Probe::sqlite(url, text).await,
            "postgres" => {
                async {
                    let options = PgConnectOptions::from_str(text)?;
                    anyhow::Ok(Probe::Postgres(PgPoolOptions::new().max_connections(1).connect_with(options).await?))
                }
                .await
            }
            "mysql" | "mariadb" => {
                async {
                    let options = MySqlConnectOptions::from_str(text)?;
                    anyhow::Ok(Probe::MySql(MySqlPoolOptions::new().max_connections(1).connect_with(options).await?))
                }
                .await
            }
            "redis" => {
                async {
                    // simba's own parameters (wait_replicas, ca_file, ...) are not the redis crate's.
                    let plain = text.split('?').next().unwrap_or(text);
                    let client = redis::Client::open(plain)?;
                    anyhow::Ok(Probe::Redis(client.get_multiplexed_async_connection().await?))
                }
                .await
            }
            other => Err(anyhow::anyhow!("no measurement for the {other} store")),
        };
        probe.unwrap_or_else(|e| Probe::None(format!("cannot measure the store: {e:#}")))
    }

    async fn sqlite(url: &BackendUrl, text: &str) -> anyhow::Result<Probe> {
        let file = url.sqlite_file().context("an in-memory SQLite database has no file to measure")?;
        let options = SqliteConnectOptions::from_str(text)?.read_only(true);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
        Ok(Probe::Sqlite(pool, file))
    }

    /// What `bytes` is, for the table and the summary.
    fn bytes_are(&self) -> &'static str {
        match self {
            Probe::Sqlite(..) => "SQLite pages in use: (page_count - freelist_count) * page_size",
            Probe::Postgres(_) => "pg_total_relation_size('simba_lease')",
            Probe::MySql(_) => "information_schema.tables data_length + index_length of simba_lease",
            Probe::Redis(_) => "INFO memory used_memory (the whole server)",
            Probe::None(_) => "not measured",
        }
    }

    async fn measure(&mut self) -> Result<Measure, String> {
        let done: anyhow::Result<Measure> = match self {
            Probe::Sqlite(pool, file) => {
                async {
                    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(&*pool).await?;
                    let pages: i64 = sqlx::query_scalar("PRAGMA page_count").fetch_one(&*pool).await?;
                    let free: i64 = sqlx::query_scalar("PRAGMA freelist_count").fetch_one(&*pool).await?;
                    let size: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&*pool).await?;
                    let len = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
                    let mut wal = file.clone().into_os_string();
                    wal.push("-wal");
                    Ok(Measure {
                        records: u64::try_from(records)?,
                        bytes: u64::try_from((pages - free) * size)?,
                        file_bytes: Some(len(file.clone()) + len(PathBuf::from(wal))),
                    })
                }
                .await
            }
            Probe::Postgres(pool) => {
                async {
                    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(&*pool).await?;
                    let bytes: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('simba_lease')::bigint")
                        .fetch_one(&*pool)
                        .await?;
                    Ok(Measure { records: u64::try_from(records)?, bytes: u64::try_from(bytes)?, file_bytes: None })
                }
                .await
            }
            Probe::MySql(pool) => {
                async {
                    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(&*pool).await?;
                    let bytes: i64 = sqlx::query_scalar(
                        "SELECT CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
                     WHERE table_schema = DATABASE() AND table_name = 'simba_lease'",
                    )
                    .fetch_one(&*pool)
                    .await?;
                    // The table's file (innodb_file_per_table), which statistics do not lag:
                    // MariaDB's view, then MySQL 8's; none when neither answers.
                    let mut file_bytes = None;
                    for view in ["INNODB_SYS_TABLESPACES", "INNODB_TABLESPACES"] {
                        let sql = format!(
                            "SELECT CAST(FILE_SIZE AS SIGNED) FROM information_schema.{view} \
                             WHERE NAME = CONCAT(DATABASE(), '/simba_lease')"
                        );
                        if let Ok(Some(f)) =
                            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)).fetch_optional(&*pool).await
                        {
                            file_bytes = u64::try_from(f).ok();
                            break;
                        }
                    }
                    Ok(Measure { records: u64::try_from(records)?, bytes: u64::try_from(bytes)?, file_bytes })
                }
                .await
            }
            Probe::Redis(con) => {
                async {
                    let mut cursor = 0u64;
                    let mut records = 0u64;
                    loop {
                        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(format!("{REDIS_LEASES}*"))
                            .arg("COUNT")
                            .arg(10_000)
                            .query_async(&mut *con)
                            .await?;
                        records += keys.len() as u64;
                        cursor = next;
                        if cursor == 0 {
                            break;
                        }
                    }
                    let info: String = redis::cmd("INFO").arg("memory").query_async(&mut *con).await?;
                    let bytes = info
                        .lines()
                        .find_map(|l| l.strip_prefix("used_memory:"))
                        .and_then(|v| v.trim().parse().ok())
                        .context("no used_memory in INFO memory")?;
                    Ok(Measure { records, bytes, file_bytes: None })
                }
                .await
            }
            Probe::None(why) => return Err(why.clone()),
        };
        done.map_err(|e| format!("{e:#}"))
    }

    /// How many of `names` have a lease record in the store.
    async fn present(&mut self, names: &[String]) -> Result<u64, String> {
        let done: anyhow::Result<u64> = match self {
            Probe::Sqlite(pool, _) => {
                async {
                    let mut n = 0;
                    for name in names {
                        let c: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease WHERE name = ?")
                            .bind(name)
                            .fetch_one(&*pool)
                            .await?;
                        n += u64::try_from(c)?;
                    }
                    Ok(n)
                }
                .await
            }
            Probe::Postgres(pool) => {
                async {
                    let mut n = 0;
                    for name in names {
                        let c: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease WHERE name = $1")
                            .bind(name)
                            .fetch_one(&*pool)
                            .await?;
                        n += u64::try_from(c)?;
                    }
                    Ok(n)
                }
                .await
            }
            Probe::MySql(pool) => {
                async {
                    let mut n = 0;
                    for name in names {
                        let c: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease WHERE name = ?")
                            .bind(name)
                            .fetch_one(&*pool)
                            .await?;
                        n += u64::try_from(c)?;
                    }
                    Ok(n)
                }
                .await
            }
            Probe::Redis(con) => {
                async {
                    let keys: Vec<String> = names.iter().map(|n| format!("{REDIS_LEASES}{n}")).collect();
                    let n: u64 = redis::cmd("EXISTS").arg(keys).query_async(&mut *con).await?;
                    Ok(n)
                }
                .await
            }
            Probe::None(why) => return Err(why.clone()),
        };
        done.map_err(|e| format!("{e:#}"))
    }
}

/// The store's name for the summary: the URL's scheme, MariaDB told from MySQL by its version.
async fn store_name(url: &BackendUrl, text: &str) -> String {
    match url.scheme() {
        "postgres" | "postgresql" => "postgres".to_owned(),
        "mysql" | "mariadb" => {
            let version = async {
                let mut c = MySqlConnection::connect_with(&MySqlConnectOptions::from_str(text)?).await?;
                let v: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&mut c).await?;
                anyhow::Ok(v)
            };
            match version.await {
                Ok(v) if v.contains("MariaDB") => "mariadb".to_owned(),
                _ => "mysql".to_owned(),
            }
        }
        "redis" | "rediss" => "redis".to_owned(),
        other => other.to_owned(),
    }
}

/// Creates the database a PostgreSQL or MySQL/MariaDB URL names when it is missing.
async fn ensure_database(url: &BackendUrl, text: &str) -> anyhow::Result<()> {
    let valid = |db: &str| !db.is_empty() && db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match url.scheme() {
        "postgres" | "postgresql" => {
            let options = PgConnectOptions::from_str(text)?;
            let Some(db) = options.get_database().map(str::to_owned) else { return Ok(()) };
            let mut c = PgConnection::connect_with(&options.database("postgres")).await?;
            let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(&db)
                .fetch_optional(&mut c)
                .await?;
            if found.is_none() {
                if !valid(&db) {
                    bail!("database {db:?} is missing; create it (the soak only creates plain names)");
                }
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{db}\""))).execute(&mut c).await?;
                println!("names-soak: created PostgreSQL database {db}");
            }
        }
        "mysql" | "mariadb" => {
            let options = MySqlConnectOptions::from_str(text)?;
            let Some(db) = options.get_database().map(str::to_owned) else { return Ok(()) };
            if !valid(&db) {
                return Ok(());
            }
            let mut c = MySqlConnection::connect_with(&options.database("information_schema")).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE IF NOT EXISTS `{db}`"))).execute(&mut c).await?;
        }
        _ => {}
    }
    Ok(())
}

/// Takes `name` and releases it: the token it got. Retries up to [`TRIES`] times, counting errors.
async fn take_once(simba: &Simba, name: &str, errors: &AtomicU64) -> Option<u64> {
    for _ in 0..TRIES {
        match simba.lock(name).acquire().await {
            Ok(guard) => {
                let token = guard.term().token();
                if let Err(e) = guard.release().await {
                    errors.fetch_add(1, Ordering::Relaxed);
                    eprintln!("names-soak: release {name}: {e}");
                }
                return Some(token);
            }
            Err(e) => {
                let n = errors.fetch_add(1, Ordering::Relaxed);
                if n < 20 {
                    eprintln!("names-soak: acquire {name}: {e}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    None
}

fn fmt_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var("SIMBA_NODE_TRACING").is_ok_and(|v| v == "1") {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .init();
    }
    let n = env_u64("SIMBA_NAMES_SOAK_NAMES", 1_000_000).max(1);
    let tasks = env_u64("SIMBA_NAMES_SOAK_TASKS", 8).max(1);
    let drain_limit = Duration::from_secs(env_u64("SIMBA_NAMES_SOAK_DRAIN_SECS", 180));
    let check_n = env_u64("SIMBA_NAMES_SOAK_CHECK", 100).min(n);
    let max_rss_growth = env_u64("SIMBA_NAMES_SOAK_MAX_RSS_GROWTH_PCT", 10) as f64;
    let run = std::env::var("SIMBA_NAMES_SOAK_RUN").unwrap_or_else(|_| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0).to_string()
    });
    let tmp = tempfile::tempdir()?;
    let url_text = std::env::var("SIMBA_NAMES_SOAK_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| format!("sqlite://{}", tmp.path().join("simba.db").display()));
    let url = BackendUrl::new(url_text.as_str());
    simba::backend::install_tls_provider();
    ensure_database(&url, &url_text).await.context("preparing the database")?;
    let store = store_name(&url, &url_text).await;
    let out = std::env::var("SIMBA_NAMES_SOAK_OUT")
        .ok()
        .filter(|o| !o.is_empty())
        .map_or_else(|| PathBuf::from(format!("target/names-soak/{store}.json")), PathBuf::from);

    let config = SimbaConfig::builder()
        .lease_duration(LEASE)
        .renew_interval(RENEW)
        .remove_idle_leases_after(Some(IDLE))
        .build()?;
    let simba = Simba::connect(&url_text, config).await.context("connecting the client")?;
    simba.live().await.context("opening the session")?;
    let mut probe = Probe::open(&store, &url, &url_text).await;
    println!(
        "names-soak: {n} names on {} ({store}), {tasks} tasks, lease {}s, renewal {}s, remove_idle_leases_after {}s (the client's sweeper: every {}s, at once again after a full batch of {BATCH}); run {run}",
        url.redacted(),
        LEASE.as_secs(),
        RENEW.as_secs(),
        IDLE.as_secs(),
        (RENEW * SWEEP_RENEWALS).as_secs()
    );
    println!("names-soak: bytes are {}", probe.bytes_are());

    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let header = format!(
        "{:>8} {:<7} {:>9} {:>10} {:>9} {:>14} {:>14}",
        "t_s", "phase", "names", "rss_kib", "records", "bytes", "file_bytes"
    );
    println!("{header}");
    let mut sample = |phase: &'static str, names: u64, store: Result<Measure, String>| {
        let s = Sample { t: start.elapsed().as_secs_f64(), phase, names, rss_kib: rss_kib(), store };
        let (records, bytes, file) = match &s.store {
            Ok(m) => (Some(m.records), Some(m.bytes), m.file_bytes),
            Err(_) => (None, None, None),
        };
        println!(
            "{:>8.1} {:<7} {:>9} {:>10} {:>9} {:>14} {:>14}",
            s.t,
            s.phase,
            s.names,
            s.rss_kib,
            fmt_opt(records),
            fmt_opt(bytes),
            fmt_opt(file)
        );
        if let Err(e) = &s.store {
            println!("         store not measured: {e}");
        }
        samples.push(s.clone());
        s
    };
    let first = sample("start", 0, probe.measure().await);
    let records_at_start = first.records();

    // The names, from `tasks` tasks; the first `check_n` tokens kept for the check.
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_tokens = Arc::new(Mutex::new(vec![None::<u64>; usize::try_from(check_n)?]));
    let mark = Arc::new(tokio::sync::Notify::new());
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (simba, next, done, errors, failed, first_tokens, mark, run) = (
            simba.clone(),
            Arc::clone(&next),
            Arc::clone(&done),
            Arc::clone(&errors),
            Arc::clone(&failed),
            Arc::clone(&first_tokens),
            Arc::clone(&mark),
            run.clone(),
        );
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let name = format!("soak.names.{run}.{i}");
                match take_once(&simba, &name, &errors).await {
                    Some(token) => {
                        if i < check_n {
                            first_tokens.lock().unwrap_or_else(PoisonError::into_inner)[i as usize] = Some(token);
                        }
                    }
                    None => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if done.fetch_add(1, Ordering::Relaxed) + 1 == (n / 10).max(1) {
                    mark.notify_one();
                }
            }
        });
    }
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + Duration::from_secs(10), Duration::from_secs(10));
    let mut marked = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let m = probe.measure().await;
                sample("names", done.load(Ordering::Relaxed), m);
            }
            () = mark.notified(), if marked.is_none() => {
                let m = probe.measure().await;
                marked = Some(sample("10%", done.load(Ordering::Relaxed), m));
            }
            joined = workers.join_next() => match joined {
                Some(r) => r.context("a naming task")?,
                None => break,
            },
        }
    }
    let naming = start.elapsed();
    let rate = n as f64 / naming.as_secs_f64();
    let names_done = sample("named", done.load(Ordering::Relaxed), probe.measure().await);
    let marked = marked.unwrap_or_else(|| names_done.clone());

    // The sweeper catches up: at most as many records as at the start.
    let target = records_at_start.unwrap_or(0);
    let drain_started = Instant::now();
    let mut caught_up = names_done.records().is_some_and(|r| r <= target);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + Duration::from_secs(10), Duration::from_secs(10));
    while !caught_up && drain_started.elapsed() < drain_limit {
        tick.tick().await;
        let s = sample("drain", n, probe.measure().await);
        caught_up = s.records().is_some_and(|r| r <= target);
        if s.store.is_err() && matches!(probe, Probe::None(_)) {
            break;
        }
    }
    let drain = drain_started.elapsed();
    let drained = sample("drained", n, probe.measure().await);

    // T3 across the removal: the first names again, each above its first token.
    let check_names: Vec<String> = (0..check_n).map(|i| format!("soak.names.{run}.{i}")).collect();
    let present_before = probe.present(&check_names).await;
    let firsts = first_tokens.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut check_failures = Vec::new();
    let mut checked = 0u64;
    for (name, first) in check_names.iter().zip(firsts) {
        let Some(first) = first else {
            check_failures.push(format!("{name}: no first token (the first pass failed)"));
            continue;
        };
        match take_once(&simba, name, &errors).await {
            Some(again) if again > first => checked += 1,
            Some(again) => check_failures.push(format!("{name}: token {again} after {first}")),
            None => check_failures.push(format!("{name}: could not be taken again")),
        }
    }
    let token_ok = check_failures.is_empty() && checked == check_n;
    let end = sample("end", n, probe.measure().await);
    simba.close().await;
    let duration = start.elapsed();

    // The figures and the verdict.
    let measured: Vec<u64> = samples.iter().filter_map(Sample::records).collect();
    let max_records = measured.iter().copied().max();
    let max_bytes = samples.iter().filter_map(|s| s.store.as_ref().ok().map(|m| m.bytes)).max();
    let idle_s = IDLE.as_secs_f64();
    let period_s = (RENEW * SWEEP_RENEWALS).as_secs_f64();
    let final_bound = (2.0 * (rate * idle_s + BATCH as f64)).ceil() as u64;
    let run_bound = (2.0 * (rate * (period_s + idle_s) + BATCH as f64)).ceil() as u64;
    let growth = |from: u64| (end.rss_kib as f64 - from as f64) * 100.0 / from.max(1) as f64;
    let rss_growth = growth(marked.rss_kib);
    // For the record, not the verdict: the sweeper's first removals (one period after the start)
    // warm the store driver's caches (SQLite's page caches, 1 MiB per pooled connection), a
    // step that comes after the 10% mark when the names go fast. The growth from the first
    // sample after that to the end tells that step from growth per name.
    let after_sweep = samples.iter().find(|s| s.t >= period_s + 10.0 && s.phase != "start").cloned();
    let rss_growth_after_sweep = after_sweep.as_ref().map(|s| growth(s.rss_kib));
    let mut failures = Vec::new();
    let final_records = drained.records();
    match final_records {
        Some(r) if r > final_bound => failures.push(format!(
            "{r} lease records after the drain, more than 2 x ({rate:.0} names/s x {idle_s} s + {BATCH}) = {final_bound}: the sweeper did not catch up"
        )),
        Some(_) => {}
        None => failures.push("the store's records were not measured".to_owned()),
    }
    if let Some(m) = max_records.filter(|m| *m > run_bound) {
        failures.push(format!(
            "{m} lease records at most, more than 2 x ({rate:.0} names/s x ({period_s} s + {idle_s} s) + {BATCH}) = {run_bound}: the sweeper did not keep up"
        ));
    }
    if rss_growth > max_rss_growth {
        failures.push(format!(
            "resident memory grew {rss_growth:+.1}% from the 10% mark ({} KiB) to the end ({} KiB), more than {max_rss_growth}%",
            marked.rss_kib, end.rss_kib
        ));
    }
    if !token_ok {
        failures.push(format!(
            "T3 across removal: {checked} of {check_n} names above their first token; {}",
            check_failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        failures.push(format!("{failed} names could not be taken in {TRIES} tries"));
    }

    let rss_after_first_sweep = after_sweep.as_ref().map(|s| {
        json!({
            "t_s": s.t.round(),
            "names": s.names,
            "rss_kib": s.rss_kib,
            "growth_pct_to_end": rss_growth_after_sweep.map(|g| (g * 100.0).round() / 100.0),
        })
    });
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    let mut summary = json!({
        "store": store,
        "url": url.redacted(),
        "run": run,
        "names": n,
        "tasks": tasks,
        "lease_duration_s": LEASE.as_secs(),
        "renew_interval_s": RENEW.as_secs(),
        "remove_idle_leases_after_s": IDLE.as_secs(),
        "sweep_period_s": period_s,
        "sweep_batch": BATCH,
        "naming_s": (naming.as_secs_f64() * 10.0).round() / 10.0,
        "drain_s": (drain.as_secs_f64() * 10.0).round() / 10.0,
        "duration_s": (duration.as_secs_f64() * 10.0).round() / 10.0,
        "acquisitions_per_s": rate.round(),
        "acquire_errors": errors.load(Ordering::Relaxed),
        "names_failed": failed,
        "bytes_are": probe.bytes_are(),
        "records_at_start": records_at_start,
        "records_when_named": names_done.records(),
        "max_records": max_records,
        "final_records": final_records,
        "records_at_end": end.records(),
        "max_bytes": max_bytes,
        "bytes_at_start": first.store.as_ref().ok().map(|m| m.bytes),
        "final_bytes": drained.store.as_ref().ok().map(|m| m.bytes),
        "caught_up": caught_up,
        "bound_final_records": final_bound,
        "bound_max_records": run_bound,
        "rss_kib_start": first.rss_kib,
        "rss_kib_at_10pct": marked.rss_kib,
        "rss_kib_end": end.rss_kib,
        "max_rss_kib": samples.iter().map(|s| s.rss_kib).max(),
        "rss_growth_pct_from_10pct": (rss_growth * 100.0).round() / 100.0,
        "max_rss_growth_pct": max_rss_growth,
        "token_check": {
            "names": check_n,
            "records_present_before": present_before.as_ref().ok(),
            "records_present_error": present_before.as_ref().err(),
            "above_first_token": checked,
            "passed": token_ok,
            "failures": check_failures,
        },
        "samples": samples.iter().map(Sample::json).collect::<Vec<_>>(),
        "git_commit": commit,
        "git_dirty": dirty,
        "failures": failures,
        "ok": failures.is_empty(),
    });
    summary["rss_after_first_sweep"] = rss_after_first_sweep.unwrap_or(Value::Null);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&summary)? + "\n")?;

    println!(
        "names-soak: {n} names in {:.1} s ({rate:.0}/s, {} acquire errors), drain {:.1} s ({}), {:.1} s in all",
        naming.as_secs_f64(),
        errors.load(Ordering::Relaxed),
        drain.as_secs_f64(),
        if caught_up { "caught up" } else { "NOT caught up" },
        duration.as_secs_f64()
    );
    println!(
        "names-soak: lease records {} at the start, {} at most (bound {run_bound}), {} after the drain (bound {final_bound}); bytes {} at the start, {} at most, {} after the drain",
        fmt_opt(records_at_start),
        fmt_opt(max_records),
        fmt_opt(final_records),
        fmt_opt(first.store.as_ref().ok().map(|m| m.bytes)),
        fmt_opt(max_bytes),
        fmt_opt(drained.store.as_ref().ok().map(|m| m.bytes)),
    );
    println!(
        "names-soak: RSS {} KiB at the start, {} KiB at the 10% mark, {} KiB at the end: {rss_growth:+.1}% (bound {max_rss_growth}%)",
        first.rss_kib, marked.rss_kib, end.rss_kib
    );
    if let (Some(s), Some(g)) = (&after_sweep, rss_growth_after_sweep) {
        println!(
            "names-soak: RSS {} KiB at {:.0} s, the first sample after the sweeper's first period: {g:+.1}% to the end (for the record; the bound is on the 10% mark)",
            s.rss_kib, s.t
        );
    }
    println!(
        "names-soak: T3 across removal: {checked} of {check_n} names taken again above their first token ({} of their records still present before)",
        present_before.map_or_else(|e| format!("unknown: {e}"), |p| p.to_string())
    );
    println!("names-soak: summary in {}", out.display());
    if failures.is_empty() {
        println!("names-soak: ok");
        Ok(())
    } else {
        for f in &failures {
            println!("names-soak: FAILED: {f}");
        }
        drop(tmp);
        std::process::exit(1);
    }
}
