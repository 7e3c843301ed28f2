//! The jobs store on SQLite files: the query plans of the retention trim and of the newest
//! records of all jobs, and history at the largest retention.

use std::time::{Duration, Instant};

use super::super::dialect::{Param, Stmt};
use super::super::jobs::JobDialect;
use super::{SqliteBackend, SqliteDialect};
use crate::backend::Backend;
use crate::backend::job_store::{Claim, ClaimRequest, Outcome, RunRecord, SlotKind};

/// The largest `[history] retention` (`runtime::MAX_HISTORY_RETENTION`, not in every build).
const MAX_HISTORY_RETENTION: usize = 10_000;

/// A database file under the temp directory, removed (with its WAL files) on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new() -> Self {
        TempFile(std::env::temp_dir().join(format!("simba-jobs-test-{:032x}.db", rand::random::<u128>())))
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.0.display())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `EXPLAIN QUERY PLAN` of `stmt`, one line per step, with `params` bound.
async fn plan(backend: &SqliteBackend, stmt: &'static Stmt, params: &[Param<'static>]) -> Vec<String> {
    let args = stmt.args::<sqlx::Sqlite>(params).unwrap();
    let rows: Vec<(i64, i64, i64, String)> =
        sqlx::query_as_with(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {}", stmt.sql())), args)
            .fetch_all(backend.pool())
            .await
            .unwrap();
    rows.into_iter().map(|r| r.3).collect()
}

/// `records` records of `job` written straight into the table, slots 0, 100, 200, ...
async fn fill(backend: &SqliteBackend, job: &str, records: usize) {
    sqlx::query(
        "WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?2) \
         INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token, \
         started_ms, ended_ms, error) SELECT ?1, 0, i * 100, 'ran', 1, 1, 's', 'n', 1, i * 100, i * 100 + 5, NULL \
         FROM n",
    )
    .bind(job)
    .bind(i64::try_from(records).unwrap())
    .execute(backend.pool())
    .await
    .unwrap();
}

/// The retention trim reads its boundary once (no correlated subquery, which re-read and
/// sorted the job's records for every record: 33 s per trim at 10,000 records) and finds
/// what it removes by a range of the `(job, slot_ms, kind)` index.
#[tokio::test]
async fn retention_trim_reads_its_boundary_once_and_removes_by_an_index_range() {
    let db = TempFile::new();
    let backend = SqliteBackend::connect(&db.url()).await.unwrap();
    let store = backend.job_store().unwrap();
    store.history("warm-up", 1).await.unwrap();
    let s = SqliteDialect::job_statements();
    let lines = plan(&backend, &s.retain, &[Param::Text("j"), Param::Int(9_999)]).await;
    let text = lines.join("\n");
    eprintln!("retain:\n{text}");
    assert!(!text.contains("CORRELATED"), "the boundary is evaluated per record:\n{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("SEARCH simba_job_run USING")
                && l.contains("simba_job_run_order (job=? AND slot_ms<")),
        "the records removed are not found by an index range:\n{text}"
    );
    assert!(!text.contains("TEMP B-TREE"), "the boundary is sorted rather than read from the index:\n{text}");
}

/// `jobs()` reads each job's newest record by index seeks: no scan of the records (the
/// `NOT EXISTS` it replaces compared every record with its job's others) and every
/// correlated subquery is a seek.
#[tokio::test]
async fn newest_records_of_all_jobs_are_read_by_index_seeks() {
    let db = TempFile::new();
    let backend = SqliteBackend::connect(&db.url()).await.unwrap();
    backend.job_store().unwrap().history("warm-up", 1).await.unwrap();
    let lines = plan(&backend, &SqliteDialect::job_statements().last_records, &[]).await;
    let text = lines.join("\n");
    eprintln!("last_records:\n{text}");
    assert!(!lines.iter().any(|l| l.starts_with("SCAN r") || l.starts_with("SCAN n")), "a scan of records:\n{text}");
    for (i, line) in lines.iter().enumerate() {
        if line.contains("CORRELATED") {
            let next = lines.get(i + 1).map_or("", String::as_str);
            assert!(next.starts_with("SEARCH"), "a correlated subquery that is not a seek:\n{text}");
        }
    }
}

/// History at the largest `[history] retention`: one job with 10,000 records (and another
/// as large). An append drops exactly the oldest record, a finish trims too (the claim
/// does not), `jobs()` answers each job's newest record. The time of each call is printed
/// for the report (`cargo test -p simba-sched --all-features --lib history_at_maximum_retention
/// -- --nocapture`); none is asserted.
#[tokio::test]
async fn history_at_maximum_retention_keeps_the_newest_records() {
    let db = TempFile::new();
    let backend = SqliteBackend::connect(&db.url()).await.unwrap();
    let store = backend.job_store().unwrap().keeping(MAX_HISTORY_RETENTION);
    store.history("warm-up", 1).await.unwrap();
    fill(&backend, "tick", MAX_HISTORY_RETENTION).await;
    fill(&backend, "other", MAX_HISTORY_RETENTION).await;
    let count = |job: &'static str| {
        let pool = backend.pool().clone();
        async move {
            let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM simba_job_run WHERE job = ?1")
                .bind(job)
                .fetch_one(&pool)
                .await
                .unwrap();
            n
        }
    };
    let timed = |what: &str, took: Duration| eprintln!("{what}: {:.3} ms", took.as_secs_f64() * 1000.0);

    let at = Instant::now();
    assert!(store.append(&RunRecord::not_run("tick", 1_000_000_000, Outcome::Missed)).await.unwrap());
    timed("append + trim at 10,000 records", at.elapsed());
    assert_eq!(count("tick").await, 10_000);
    let oldest = store.history("tick", 20_000).await.unwrap().last().map(|r| r.slot_ms);
    assert_eq!(oldest, Some(100), "the oldest record, slot 0, is the one dropped");

    let session = backend.open_session(Duration::from_secs(30)).await.unwrap().id;
    let Ok(crate::backend::Acquire::Won(token)) = backend.acquire(&session, "tick").await else {
        panic!("the free lease is won")
    };
    let req = ClaimRequest {
        session: &session,
        lease: "tick",
        token,
        job: "tick",
        slot_ms: 2_000_000_000,
        kind: SlotKind::Scheduled,
        node: "n",
        started_ms: 2_000_000_000,
        attempts: 1,
    };
    let at = Instant::now();
    let Claim::Claimed(mut record) = store.claim_run(req).await.unwrap() else { panic!("claimed") };
    timed("claim at 10,000 records", at.elapsed());
    assert_eq!(count("tick").await, 10_001, "the claim does not trim");
    record.outcome = Outcome::Ran;
    record.ended_ms = Some(2_000_000_010);
    let at = Instant::now();
    assert!(store.finish_run(&record).await.unwrap());
    timed("finish + trim at 10,000 records", at.elapsed());
    assert_eq!(count("tick").await, 10_000, "the finish trims");
    assert_eq!(store.history("tick", 20_000).await.unwrap().last().map(|r| r.slot_ms), Some(200));

    let at = Instant::now();
    let jobs = store.jobs().await.unwrap();
    timed("jobs() over 2 x 10,000 records", at.elapsed());
    let newest: Vec<(&str, Option<i64>)> =
        jobs.iter().map(|j| (j.job.as_str(), j.last.as_ref().map(|r| r.slot_ms))).collect();
    assert_eq!(newest, vec![("other", Some(999_900)), ("tick", Some(2_000_000_000))]);
}

/// ADR 0015, addendum: on a file, the history records after their claim (`finish_run`,
/// `append`) are written by a connection of their own with `synchronous = NORMAL` (they do
/// not sync the disk under the file's write lock), while the lease calls and the claim stay on
/// the pool with `synchronous = FULL`. The claim opens no connection of the records' pool; the
/// finish does.
#[tokio::test]
async fn history_records_after_the_claim_commit_unsynced_and_the_claim_synced() {
    let db = TempFile::new();
    let backend = SqliteBackend::connect(&db.url()).await.unwrap();
    let records = backend.records.clone().expect("a file has a records pool");
    let store = backend.job_store().unwrap();
    let synchronous = |pool: sqlx::SqlitePool| async move {
        let (v,): (i64,) = sqlx::query_as("PRAGMA synchronous").fetch_one(&pool).await.unwrap();
        v
    };
    assert_eq!(synchronous(backend.pool().clone()).await, 2, "the lease calls' pool syncs every commit (FULL)");
    let session = backend.open_session(Duration::from_secs(30)).await.unwrap().id;
    let Ok(crate::backend::Acquire::Won(token)) = backend.acquire(&session, "tick").await else {
        panic!("the free lease is won")
    };
    let req = ClaimRequest {
        session: &session,
        lease: "tick",
        token,
        job: "tick",
        slot_ms: 1_000,
        kind: SlotKind::Scheduled,
        node: "n",
        started_ms: 1_000,
        attempts: 1,
    };
    let Claim::Claimed(mut record) = store.claim_run(req).await.unwrap() else { panic!("claimed") };
    assert_eq!(records.size(), 0, "the claim wrote through the records' connection");
    record.outcome = Outcome::Ran;
    record.ended_ms = Some(1_010);
    assert!(store.finish_run(&record).await.unwrap());
    assert!(store.keeping(5).append(&RunRecord::not_run("tick", 2_000, Outcome::Missed)).await.unwrap());
    assert_eq!(records.size(), 1, "the finish and the append share one connection of their own");
    assert_eq!(synchronous(records).await, 1, "history records after the claim commit without a sync (NORMAL)");
    let h = store.history("tick", 10).await.unwrap();
    let outcomes: Vec<(i64, Outcome)> = h.iter().map(|r| (r.slot_ms, r.outcome)).collect();
    assert_eq!(outcomes, vec![(2_000, Outcome::Missed), (1_000, Outcome::Ran)], "the lease pool reads what they wrote");
}

/// An in-memory database lives in the pool's one connection: no records pool there.
#[tokio::test]
async fn an_in_memory_database_writes_history_on_its_one_connection() {
    let backend = SqliteBackend::connect("sqlite::memory:").await.unwrap();
    assert!(backend.records.is_none());
    let store = backend.job_store().unwrap();
    assert!(store.append(&RunRecord::not_run("tick", 2_000, Outcome::Missed)).await.unwrap());
    assert_eq!(store.history("tick", 10).await.unwrap().len(), 1);
}

/// The jobs tables as a build before keyed run-now requests (R3, commit d69c1bd) created them:
/// no `simba_job_request`, no `simba_job_run_key`.
const SCHEMA_BEFORE_R3: &str = include_str!("jobs_schema_before_r3.sql");

/// R3 on a database written by an older build: the store's first call creates the two request
/// tables and changes nothing else; a request the older build left pending (a counter, no key)
/// runs once, unnamed; one left pending beside a new keyed request runs with it, named by the
/// key; the history of the older build's records reads on.
#[tokio::test]
async fn r3_an_older_database_gains_the_request_tables_and_its_pending_requests_run_once() {
    let db = TempFile::new();
    let backend = SqliteBackend::connect(&db.url()).await.unwrap();
    for statement in super::super::dialect::script(SCHEMA_BEFORE_R3) {
        sqlx::raw_sql(statement).execute(backend.pool()).await.unwrap();
    }
    let t = 1_780_000_000_000_i64;
    let old_rows = format!(
        "INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id) VALUES \
         ('legacy', 0, NULL, 1, {t}, 0, 0), ('mixed', 0, NULL, 2, {t}, 0, 0); \
         INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token) VALUES \
         ('legacy', 0, {}, 'ran', 1, 1, 's', 'n', 1)",
        t - 60_000
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(old_rows)).execute(backend.pool()).await.unwrap();
    let tables = || async {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('simba_job_request', 'simba_job_run_key')",
        )
        .fetch_one(backend.pool())
        .await
        .unwrap();
        n
    };
    assert_eq!(tables().await, 0, "the older build's schema");
    let store = backend.job_store().unwrap();
    assert_eq!(store.history("legacy", 10).await.unwrap().len(), 1, "its history reads");
    assert_eq!(tables().await, 2, "created at the first call");
    let session = backend.open_session(Duration::from_secs(30)).await.unwrap().id;
    let Ok(crate::backend::Acquire::Won(token)) = backend.acquire(&session, "l").await else { panic!("won") };
    let manual = |job: &'static str| ClaimRequest {
        session: &session,
        lease: "l",
        token,
        job,
        slot_ms: 0,
        kind: SlotKind::Manual,
        node: "n",
        started_ms: t,
        attempts: 1,
    };
    let Claim::Claimed(rec) = store.claim_run(manual("legacy")).await.unwrap() else { panic!("the old request") };
    assert_eq!((rec.slot_ms, rec.request_key), (t, None), "runs at its time, unnamed");
    assert_eq!(store.claim_run(manual("legacy")).await.unwrap(), Claim::AlreadyClaimed, "once");
    let made = store.trigger("mixed", "after-upgrade", t + 5).await.unwrap();
    assert!(
        matches!(&made, crate::backend::job_store::Triggered::Requested(r) if r.id == 3 && r.slot_ms == t + 5),
        "{made:?}"
    );
    let Claim::Claimed(rec) = store.claim_run(manual("mixed")).await.unwrap() else { panic!("the new request") };
    assert_eq!((rec.slot_ms, rec.request_key.as_deref()), (t + 5, Some("after-upgrade")));
    assert_eq!(store.claim_run(manual("mixed")).await.unwrap(), Claim::AlreadyClaimed, "the older ones ran with it");
    let h = store.history("mixed", 10).await.unwrap();
    assert_eq!(h.iter().map(|r| r.request_key.as_deref()).collect::<Vec<_>>(), vec![Some("after-upgrade")]);
}
