//! Fencing (F1-F3): every shipped recipe passes the `fencing_spec` kit against its real store;
//! a deliberately broken resource (read, then write) fails it; a resource that errors, panics
//! or hangs is reported, not waited for forever.

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::sync::atomic::{AtomicU64, Ordering};

use simba::fencing::{MySqlFence, PostgresFence, RedisFence, SqliteFence};
use simba::tck::fencing_spec::{FencedResource, fencing_spec};
use simba::{BoxError, FencedCell};
use simba_tests::server_url;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    t ^ (N.fetch_add(1, Ordering::Relaxed) << 48) ^ u64::from(std::process::id())
}

struct Cell(FencedCell<String>);

impl FencedResource for Cell {
    async fn write(&self, token: u64, value: &str) -> Result<bool, BoxError> {
        Ok(self.0.write(token, value.to_owned()).is_ok())
    }
    async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
        let (t, v) = self.0.read();
        Ok((t > 0).then_some((t, v)))
    }
}

/// F2/F3: the in-process fenced cell passes the kit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_fenced_cell_passes() {
    let report = fencing_spec(|| async { Ok(Cell(FencedCell::new(String::new()))) }).await.expect("the cell is fenced");
    assert_eq!(report.checks.len(), 2);
}

/// A resource that reads the highest token, then writes in a separate step.
struct Broken(tokio::sync::Mutex<(u64, String)>);

impl FencedResource for Broken {
    async fn write(&self, token: u64, value: &str) -> Result<bool, BoxError> {
        let highest = self.0.lock().await.0;
        if token < highest {
            return Ok(false);
        }
        tokio::task::yield_now().await; // the gap between check and write
        *self.0.lock().await = (token, value.to_owned());
        Ok(true)
    }
    async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
        let g = self.0.lock().await;
        Ok((g.0 > 0).then(|| g.clone()))
    }
}

/// F3: the kit catches a resource whose check and write are two steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_broken_resource_fails() {
    let err = fencing_spec(|| async { Ok(Broken(tokio::sync::Mutex::new((0, String::new())))) })
        .await
        .expect_err("read-then-write must fail");
    assert_eq!(err.check, "concurrent writers: atomic check-and-write", "{err}");
    eprintln!("broken resource: {err}");
}

struct Failing;
impl FencedResource for Failing {
    async fn write(&self, token: u64, _value: &str) -> Result<bool, BoxError> {
        if token == 7 { Err("disk full".into()) } else { Ok(true) }
    }
    async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
        Ok(None)
    }
}

struct Hanging;
impl FencedResource for Hanging {
    async fn write(&self, _token: u64, _value: &str) -> Result<bool, BoxError> {
        std::future::pending().await
    }
    async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
        Ok(None)
    }
}

/// Bad input: a resource that errors or hangs is reported with the check and the cause.
#[tokio::test(start_paused = true)]
async fn f3_kit_reports_errors_and_hangs() {
    let err = fencing_spec(|| async { Ok(Failing) }).await.expect_err("error");
    assert!(err.to_string().contains("write(token 7) returned an error: disk full"), "{err}");
    let err = fencing_spec(|| async { Ok(Hanging) }).await.expect_err("hang");
    assert!(err.to_string().contains("did not answer within"), "{err}");
    let err = fencing_spec(|| async { Err::<Hanging, BoxError>("no database".into()) }).await.expect_err("make");
    assert!(err.to_string().contains("creating a resource returned an error: no database"), "{err}");
}

macro_rules! sql_resource {
    ($name:ident, $fence:ty) => {
        struct $name($fence, String);
        impl FencedResource for $name {
            async fn write(&self, token: u64, value: &str) -> Result<bool, BoxError> {
                self.0.write(&self.1, token, value).await
            }
            async fn read(&self) -> Result<Option<(u64, String)>, BoxError> {
                self.0.read(&self.1).await
            }
        }
    };
}

sql_resource!(SqliteRes, SqliteFence);
sql_resource!(PgRes, PostgresFence);
sql_resource!(MyRes, MySqlFence);
sql_resource!(RedisRes, RedisFence);

/// F2/F3: the SQL recipe on SQLite (one conditional UPDATE) passes the kit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_sqlite_recipe_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("fenced.db").display());
    let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().expect("url");
    let pool =
        sqlx::SqlitePool::connect_with(opts.busy_timeout(std::time::Duration::from_secs(10))).await.expect("pool");
    let fence = SqliteFence::new(pool).await.expect("table");
    fencing_spec(|| {
        let f = fence.clone();
        async move { Ok(SqliteRes(f, unique("res"))) }
    })
    .await
    .expect("SQLite recipe is fenced");
}

/// F2/F3: the SQL recipe on PostgreSQL passes the kit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_postgres_recipe_passes() {
    let Some(url) = server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    let pool = sqlx::PgPool::connect(&url).await.expect("postgres");
    let fence = PostgresFence::new(pool).await.expect("table");
    fencing_spec(|| {
        let f = fence.clone();
        async move { Ok(PgRes(f, unique("res"))) }
    })
    .await
    .expect("PostgreSQL recipe is fenced");
}

/// F2/F3: the SQL recipe on MariaDB passes the kit (equal tokens count as matched rows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_mysql_recipe_passes() {
    let Some(url) = server_url("SIMBA_TEST_MYSQL_URL") else { return };
    let pool = sqlx::MySqlPool::connect(&url).await.expect("mysql");
    let fence = MySqlFence::new(pool).await.expect("table");
    fencing_spec(|| {
        let f = fence.clone();
        async move { Ok(MyRes(f, unique("res"))) }
    })
    .await
    .expect("MySQL recipe is fenced");
}

/// F2/F3: the Redis Lua recipe passes the kit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_redis_recipe_passes() {
    let Some(url) = server_url("SIMBA_TEST_REDIS_URL") else { return };
    let fence = RedisFence::connect(&url).await.expect("redis");
    fencing_spec(|| {
        let f = fence.clone();
        async move { Ok(RedisRes(f, unique("res"))) }
    })
    .await
    .expect("Redis recipe is fenced");
}
