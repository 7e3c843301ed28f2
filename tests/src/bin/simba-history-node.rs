//! A node for the multi-process history test (issues 12 and 38, "Done when"), run by
//! `simba::run()` with the jobs store recording every slot. Its jobs:
//!
//! - `slow`: a cron job every second whose run takes 400 ms (so that a `kill -9` can land in
//!   the middle of one);
//! - `ledger`: a 100 ms fixed-rate job that writes the term's fencing token to a fenced ledger
//!   (`SIMBA_LEDGER`: a PostgreSQL URL, else a SQLite file path; `SIMBA_LEDGER_ID` names the
//!   resource) through a shipped recipe, and logs whether the ledger accepted it;
//! - `flaky`: a cron job every 2 s with `retry = 2`, `backoff = "100ms"`, `timeout = "400ms"`
//!   whose slots, by `(slot second / 2) % 3`, fail once (0), outlive the timeout once (1) or
//!   fail every attempt (2);
//! - `parts`: a 12-partition group whose workers hold their partition until the term ends.
//!
//! It appends what it does to the file named by `SIMBA_NODE_LOG`, on the host's monotonic
//! clock (each line ends with the pid), so the test can tell which slots really ran, and where:
//!
//! ```text
//! run <mono_ns> <slot_ms> <kind> <token> <pid>            a run of `slow` started
//! try <mono_ns> <slot_ms> <kind> <attempt> <token> <pid>  an attempt of `flaky` started
//! write <start_ns> <end_ns> <token> <0|1> <pid>           a ledger write, refused (0) or accepted (1)
//! write-error <start_ns> <end_ns> <token> <error> <pid>   a ledger write that failed
//! part-start <mono_ns> <partition> <token> <pid>          a partition term started
//! part-end <mono_ns> <partition> <token> <pid>            ... and its worker ended
//! ```
//!
//! With `SIMBA_NODE_TRACING=1` it also writes the library's log to stderr (`RUST_LOG`).

use std::time::Duration;

use simba::fencing::{PostgresFence, SqliteFence};
use simba::job::JobContext;
use simba::{Term, simba_partitioned, simba_scheduled};
use simba_tests::node_log::{log, mono_ns, trace_to_stderr};
use tokio::sync::OnceCell;

#[simba_scheduled(cron = "* * * * * *")]
async fn slow(term: &Term, ctx: &JobContext) -> anyhow::Result<()> {
    log(format!("run {} {} {} {}", mono_ns(), ctx.slot().timestamp_millis(), ctx.kind(), term.token()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A run that outlived its term says so (recorded `cancelled`, not `ran`).
    term.ensure_valid(Duration::from_millis(20))?;
    Ok(())
}

/// The ledger: one of the shipped fencing recipes.
enum Ledger {
    Sqlite(SqliteFence),
    Postgres(PostgresFence),
}

async fn fence() -> anyhow::Result<&'static Ledger> {
    static FENCE: OnceCell<Ledger> = OnceCell::const_new();
    FENCE
        .get_or_try_init(|| async {
            let target = std::env::var("SIMBA_LEDGER")?;
            let e = |e: simba::BoxError| anyhow::anyhow!(e);
            if target.starts_with("postgres") {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(&target).await?;
                return Ok(Ledger::Postgres(PostgresFence::new(pool).await.map_err(e)?));
            }
            let opts: sqlx::sqlite::SqliteConnectOptions = format!("sqlite://{target}?mode=rwc").parse()?;
            let opts = opts.busy_timeout(Duration::from_secs(5)).journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(2).connect_with(opts).await?;
            Ok::<_, anyhow::Error>(Ledger::Sqlite(SqliteFence::new(pool).await.map_err(e)?))
        })
        .await
}

#[simba_scheduled(fixed_rate = "100ms")]
async fn ledger(term: &Term) -> anyhow::Result<()> {
    term.ensure_valid(Duration::from_millis(20))?;
    let fence = fence().await?;
    let id = std::env::var("SIMBA_LEDGER_ID").unwrap_or_else(|_| "ledger".into());
    let start = mono_ns();
    let value = format!("{}-{start}", std::process::id());
    let accepted = match fence {
        Ledger::Sqlite(f) => f.write(&id, term.token(), &value).await,
        Ledger::Postgres(f) => f.write(&id, term.token(), &value).await,
    };
    let end = mono_ns();
    match accepted {
        Ok(ok) => log(format!("write {start} {end} {} {}", term.token(), u8::from(ok))),
        Err(e) => log(format!("write-error {start} {end} {} {}", term.token(), e.to_string().replace('\n', " "))),
    }
    Ok(())
}

/// What a slot of `flaky` does, by its slot: 0 fails once, 1 outlives the timeout once, 2
/// fails every attempt (the test computes the same from the slot).
fn flaky_mode(slot_ms: i64) -> i64 {
    (slot_ms.div_euclid(1000) / 2).rem_euclid(3)
}

#[simba_scheduled(cron = "*/2 * * * * *", retry = 2, backoff = "100ms", timeout = "400ms")]
async fn flaky(term: &Term, ctx: &JobContext) -> anyhow::Result<()> {
    let slot = ctx.slot().timestamp_millis();
    log(format!("try {} {slot} {} {} {}", mono_ns(), ctx.kind(), ctx.attempt(), term.token()));
    match (flaky_mode(slot), ctx.attempt()) {
        (0, 1) => anyhow::bail!("fails once (attempt 1)"),
        (1, 1) => {
            // Outlives the 400 ms timeout: waits for the timeout's signal and reports it as a
            // failure, so the attempt is a failure whether the timer or the body is recorded.
            tokio::select! {
                _ = ctx.cancelled() => anyhow::bail!("stopped at the timeout (attempt 1)"),
                _ = tokio::time::sleep(Duration::from_secs(3)) => anyhow::bail!("no timeout signal within 3 s"),
            }
        }
        (2, n) => anyhow::bail!("fails every attempt (attempt {n})"),
        _ => Ok(()),
    }
}

#[simba_partitioned(group = "parts", partitions = 12)]
async fn parts(term: &Term, partition: u32) -> anyhow::Result<()> {
    struct End(u32, u64);
    impl Drop for End {
        fn drop(&mut self) {
            log(format!("part-end {} {} {}", mono_ns(), self.0, self.1));
        }
    }
    log(format!("part-start {} {partition} {}", mono_ns(), term.token()));
    let _end = End(partition, term.token());
    term.cancelled().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    log(format!("node {}", mono_ns()));
    trace_to_stderr();
    // The ledger's connection and table are set up before the node joins (the job retries
    // it if the ledger is not reachable yet).
    if std::env::var_os("SIMBA_LEDGER").is_some()
        && let Err(e) = fence().await
    {
        tracing::warn!(error = %e, "the ledger is not reachable yet; the job will retry");
    }
    // SIMBA_HISTORY_LOG=FILE: every lease operation goes through the history checker's
    // recorder (rule V4).
    simba_tests::lincheck::run_node().await
}
