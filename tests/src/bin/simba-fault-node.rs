//! A node for the fault-injection suite: a fixed-rate job on the lease `ledger` that, while its
//! term is valid, appends an entry with the term's fencing token to a fenced ledger through a
//! shipped recipe (`SIMBA_LEDGER`: a PostgreSQL or Redis URL, or a SQLite file path), and logs
//! each term's validity on the host's monotonic clock to `SIMBA_NODE_LOG`:
//!
//! ```text
//! term <token> <start_mono_ns> <pid>          a term started
//! valid <token> <deadline_mono_ns> <pid>      its local deadline moved (never once revoked)
//! end <token> <end_mono_ns> <pid>             it was revoked: the instant it ended
//! clock <real_start_ns> <real_ns> <local_ns> <pid>  its clock's rate, under an injected skew
//! write <start_ns> <end_ns> <token> <0|1> <pid>  a ledger write, refused (0) or accepted (1)
//! ```
//!
//! Under a clock-rate skew (`SIMBA_FAULT_CLOCK_RATE`, the factor the harness gave libfaketime),
//! the node first measures its clock's rate (`clock`), and converts its terms' local instants
//! to the host's clock with that factor (`simba_tests::node_log::to_mono` says why).
//!
//! The backend and timing come from `SIMBA_CONFIG` / `SIMBA_*` overrides as for any simba
//! binary. With `SIMBA_HISTORY_LOG` the node records every lease operation it makes to that
//! file for the history checker (`simba_tests::lincheck`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use simba::fencing::{PostgresFence, RedisFence, SqliteFence};
use simba::{Term, simba_scheduled};
use simba_tests::node_log::{clock_check, log, mono_ns, to_mono};
use tokio::sync::OnceCell;

/// The ledger: one of the shipped fencing recipes.
enum Ledger {
    Sqlite(SqliteFence),
    Postgres(PostgresFence),
    Redis(RedisFence),
}

impl Ledger {
    async fn write(&self, token: u64, value: &str) -> Result<bool, simba::BoxError> {
        // One resource per run (`SIMBA_LEDGER_ID`), so that runs on a shared server start
        // from an empty ledger.
        static ID: OnceLock<String> = OnceLock::new();
        let id = ID.get_or_init(|| std::env::var("SIMBA_LEDGER_ID").unwrap_or_else(|_| "ledger".into()));
        match self {
            Ledger::Sqlite(f) => f.write(id, token, value).await,
            Ledger::Postgres(f) => f.write(id, token, value).await,
            Ledger::Redis(f) => f.write(id, token, value).await,
        }
    }
}

async fn fence() -> anyhow::Result<&'static Ledger> {
    static FENCE: OnceCell<Ledger> = OnceCell::const_new();
    FENCE
        .get_or_try_init(|| async {
            let target = std::env::var("SIMBA_LEDGER")?;
            let e = |e: simba::BoxError| anyhow::anyhow!(e);
            if target.starts_with("postgres") {
                let pool = sqlx::PgPool::connect(&target).await?;
                return Ok(Ledger::Postgres(PostgresFence::new(pool).await.map_err(e)?));
            }
            if target.starts_with("redis") {
                return Ok(Ledger::Redis(RedisFence::connect(&target).await.map_err(e)?));
            }
            let opts: sqlx::sqlite::SqliteConnectOptions = format!("sqlite://{target}?mode=rwc").parse()?;
            let opts = opts.busy_timeout(Duration::from_secs(5)).journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::SqlitePool::connect_with(opts).await?;
            Ok::<_, anyhow::Error>(Ledger::Sqlite(SqliteFence::new(pool).await.map_err(e)?))
        })
        .await
}

/// What the node logged of one term: its last deadline, and whether it logged its end.
#[derive(Default)]
struct Logged {
    deadline: u128,
    ended: bool,
}

/// Logs a term's start once, its deadline whenever it moves while the term lasts, and its end
/// once, as soon as any observer here sees the revocation: the job at each run (before and
/// after its write) and a watcher task that [`Term::revoked`] wakes at the revocation itself.
///
/// The `end` line carries the revoked term's [`Term::deadline`], which the library freezes at
/// the revocation instant (or at the session's earlier deadline): the instant the term ended,
/// not the instant this node got round to logging it, so a node stopped or starved between
/// the two still logs the truth once it runs. No `valid` line is logged for a term already
/// revoked, and a revocation that lands while a `valid` line is being logged is followed by
/// the `end` line in the same critical section, with no await in between.
fn watch(term: &Term) {
    static SEEN: OnceLock<Mutex<HashMap<(u64, u128), Logged>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    let token = term.token();
    // A term is its token and its start: a store that lost grants (an asynchronous standby
    // promoted) can grant this node a token it held before, and that is a new term to log.
    let start = to_mono(term.started_at());
    let logged = match seen.entry((token, start)) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            log(format!("term {token} {start}"));
            let t = term.clone();
            tokio::spawn(async move {
                t.revoked().await;
                watch(&t);
            });
            e.insert(Logged::default())
        }
    };
    if logged.ended {
        return;
    }
    if term.revoke_reason().is_none() {
        let deadline = to_mono(term.deadline());
        // Checked again after the read: a revocation between the two would make this the
        // session's deadline, read while the term lasted but past its end; the end is logged
        // instead.
        if term.revoke_reason().is_none() {
            if deadline.abs_diff(logged.deadline) > 1_000_000 {
                log(format!("valid {token} {deadline}"));
                logged.deadline = deadline;
            }
            if term.revoke_reason().is_none() {
                return;
            }
        }
    }
    // Revoked: its deadline is frozen at its end (never later than now).
    let end = to_mono(term.deadline()).min(mono_ns());
    log(format!("end {token} {end}"));
    logged.ended = true;
}

#[simba_scheduled(fixed_rate = "50ms", lease = "ledger")]
async fn ledger(term: &Term) -> anyhow::Result<()> {
    watch(term);
    term.ensure_valid(Duration::from_millis(20))?;
    let fence = fence().await?;
    let start = mono_ns();
    let accepted = fence.write(term.token(), &format!("{}-{start}", std::process::id())).await;
    let end = mono_ns();
    match accepted {
        Ok(ok) => log(format!("write {start} {end} {} {}", term.token(), u8::from(ok))),
        Err(e) => log(format!("write-error {start} {end} {} {e}", term.token())),
    }
    watch(term);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A process's first line: the harness tells this process from an earlier one that had the
    // same PID (PIDs wrap at `kernel.pid_max`, 32,768 here, within a long run).
    log(format!("node {}", mono_ns()));
    if std::env::var_os("SIMBA_FAULT_CLOCK_RATE").is_some() {
        clock_check(Duration::from_millis(200));
    }
    // SIMBA_FAULT_NODE_LOGS=DIR: the node's log goes to DIR/node-PID.log (the diagnosis of a
    // slow failover needs the nodes' side).
    if let Some(dir) = std::env::var_os("SIMBA_FAULT_NODE_LOGS") {
        let path = std::path::Path::new(&dir).join(format!("node-{}.log", std::process::id()));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(Mutex::new(file))
            .with_ansi(false)
            .init();
    }
    // The ledger's connection and table are set up before the node joins, so that a node's
    // first term does not count the harness's own setup as failover time (the job retries
    // it if the ledger is not reachable yet).
    if let Err(e) = fence().await {
        tracing::warn!(error = %e, "the ledger is not reachable yet; the job will retry");
    }
    // SIMBA_HISTORY_LOG=FILE: every lease operation goes through the history checker's
    // recorder (rule V4), which appends it to FILE.
    simba_tests::lincheck::run_node().await
}
