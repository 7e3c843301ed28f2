//! The SQLite backend on real files: tokens, expiry, digests, slots, groups, schema, file
//! permissions, and two pools on one file contending.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::backend::{Backend, Join};

/// A database file under the temp directory with a random name, removed (with its WAL
/// and shared-memory files) on drop.
struct TempDb {
    path: PathBuf,
}

impl TempDb {
    fn new() -> Self {
        let name = format!("simba-sqlite-test-{:032x}.db", rand::random::<u128>());
        TempDb { path: std::env::temp_dir().join(name) }
    }

    fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    async fn backend(&self) -> SqliteBackend {
        SqliteBackend::connect(&self.url()).await.unwrap()
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

const TTL: Duration = Duration::from_secs(30);

/// Several processes starting at once on a fresh file: each opens it and switches it to
/// WAL mode, which takes an exclusive lock the busy timeout does not wait for. Every open
/// must succeed (before the retry, about 1 start in 20 of three processes failed with
/// "database is locked").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_opens_of_a_fresh_file_succeed() {
    for _ in 0..20 {
        let db = TempDb::new();
        let url = db.url();
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { SqliteBackend::connect(&url).await.map(|_| ()) })
            })
            .collect();
        for open in opens {
            open.await.unwrap().unwrap();
        }
    }
}

#[tokio::test]
async fn token_increments_across_terms() {
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap();
    assert_eq!(s.remaining, TTL);
    for expected in 1..=3 {
        assert_eq!(b.acquire(&s.id, "job").await.unwrap(), Acquire::Won(expected));
        assert!(b.release(&s.id, "job", expected).await.unwrap());
    }
    // The row survives release; its session_id is cleared.
    let (holder, token): (Option<String>, i64) =
        sqlx::query_as("SELECT session_id, token FROM simba_lease").fetch_one(b.pool()).await.unwrap();
    assert_eq!((holder, token), (None, 3));
}

#[tokio::test]
async fn held_until_holder_closes() {
    let db = TempDb::new();
    let b = db.backend().await;
    let a = b.open_session(TTL).await.unwrap().id;
    let c = b.open_session(TTL).await.unwrap().id;
    assert_ne!(a, c);
    b.join_group(&a, "g").await.unwrap();
    assert_eq!(b.acquire(&a, "x").await.unwrap(), Acquire::Won(1));
    assert_eq!(b.acquire(&c, "x").await.unwrap(), Acquire::Held);
    b.close_session(&a).await.unwrap();
    assert_eq!(b.acquire(&c, "x").await.unwrap(), Acquire::Won(2));
    assert!(b.members("g").await.unwrap().is_empty());
    // A closed session never comes back (S3), and closing it again succeeds.
    assert_eq!(b.keep_alive(&a, HeldDigest::default()).await.unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&a, "y").await.unwrap(), Acquire::Expired);
    b.close_session(&a).await.unwrap();
    b.close_session(&SessionId::new("unknown")).await.unwrap();
}

#[tokio::test]
async fn expired_session_never_comes_back() {
    let db = TempDb::new();
    let b = db.backend().await;
    let short = b.open_session(Duration::from_millis(200)).await.unwrap().id;
    let other = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&short, "x").await.unwrap(), Acquire::Won(1));
    b.join_group(&short, "g").await.unwrap();
    assert_eq!(b.members("g").await.unwrap(), vec![short.clone()]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut digest = HeldDigest::default();
    digest.add(1);
    assert_eq!(b.keep_alive(&short, digest).await.unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&short, "y").await.unwrap(), Acquire::Expired);
    assert!(b.owned(&short).await.unwrap().is_empty());
    assert!(b.members("g").await.unwrap().is_empty());
    assert_eq!(b.join_group(&short, "g").await.unwrap(), Join::Expired);
    assert!(!b.claim_slot(&short, "x", 1, 10).await.unwrap());
    assert_eq!(b.acquire(&other, "x").await.unwrap(), Acquire::Won(2));
    // The expired session's late release cannot free the new term (T7).
    assert!(!b.release(&short, "x", 1).await.unwrap());
    assert_eq!(b.owned(&other).await.unwrap(), vec![("x".to_owned(), 2)]);
}

#[tokio::test]
async fn reacquire_is_idempotent_and_release_needs_the_token() {
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
    assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
    assert!(!b.release(&s, "x", 2).await.unwrap());
    assert!(!b.release(&s, "x", u64::MAX).await.unwrap());
    assert!(!b.release(&s, "nope", 1).await.unwrap());
    assert_eq!(b.owned(&s).await.unwrap(), vec![("x".to_owned(), 1)]);
    assert!(b.release(&s, "x", 1).await.unwrap());
    assert!(!b.release(&s, "x", 1).await.unwrap());
    assert!(b.owned(&s).await.unwrap().is_empty());
}

#[tokio::test]
async fn keep_alive_digest() {
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap().id;
    let other = b.open_session(TTL).await.unwrap().id;
    match b.keep_alive(&s, HeldDigest::default()).await.unwrap() {
        KeepAlive::Alive { remaining, digest_matches } => {
            assert!(digest_matches);
            assert!(remaining <= TTL && remaining > TTL - Duration::from_secs(1), "{remaining:?}");
        }
        KeepAlive::Expired => panic!("expired"),
    }
    // b: token 1 then 2 (two terms); a: token 1; c: token 1, held by the other session.
    assert_eq!(b.acquire(&s, "b").await.unwrap(), Acquire::Won(1));
    assert!(b.release(&s, "b", 1).await.unwrap());
    assert_eq!(b.acquire(&s, "b").await.unwrap(), Acquire::Won(2));
    assert_eq!(b.acquire(&s, "a").await.unwrap(), Acquire::Won(1));
    assert_eq!(b.acquire(&other, "c").await.unwrap(), Acquire::Won(1));
    let held = HeldDigest::of(&[("a".to_owned(), 1), ("b".to_owned(), 2)]);
    let alive = |digest_matches| KeepAlive::Alive { remaining: TTL, digest_matches };
    let ka = |d| {
        let b = b.clone();
        let s = s.clone();
        async move {
            match b.keep_alive(&s, d).await.unwrap() {
                KeepAlive::Alive { digest_matches, .. } => alive(digest_matches),
                KeepAlive::Expired => KeepAlive::Expired,
            }
        }
    };
    assert_eq!(ka(held).await, alive(true));
    assert_eq!(ka(HeldDigest::of(&[("a".to_owned(), 1)])).await, alive(false));
    assert_eq!(ka(HeldDigest::of(&[("a".to_owned(), 1), ("b".to_owned(), 1)])).await, alive(false));
    assert_eq!(ka(HeldDigest::default()).await, alive(false));
}

#[tokio::test]
async fn digest_sum_wraps_like_held_digest() {
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap().id;
    let big = i64::MAX - 1;
    for name in ["p", "q", "r"] {
        sqlx::query("INSERT INTO simba_lease (name, session_id, token) VALUES (?1, ?2, ?3)")
            .bind(name)
            .bind(s.as_str())
            .bind(big)
            .execute(b.pool())
            .await
            .unwrap();
    }
    let t = big as u64;
    let held = HeldDigest::of(&[("p".to_owned(), t), ("q".to_owned(), t), ("r".to_owned(), t)]);
    let KeepAlive::Alive { digest_matches, .. } = b.keep_alive(&s, held).await.unwrap() else { panic!("expired") };
    assert!(digest_matches);
}

#[tokio::test]
async fn claim_slot_is_monotonic_and_fenced() {
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap().id;
    let other = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&s, "cron").await.unwrap(), Acquire::Won(1));
    assert!(b.claim_slot(&s, "cron", 1, 100).await.unwrap());
    assert!(!b.claim_slot(&s, "cron", 1, 100).await.unwrap());
    assert!(!b.claim_slot(&s, "cron", 1, 99).await.unwrap());
    assert!(!b.claim_slot(&s, "cron", 2, 101).await.unwrap());
    assert!(!b.claim_slot(&other, "cron", 1, 101).await.unwrap());
    assert!(b.claim_slot(&s, "cron", 1, 101).await.unwrap());
    // The next term keeps the record: an old slot cannot run again.
    b.close_session(&s).await.unwrap();
    assert_eq!(b.acquire(&other, "cron").await.unwrap(), Acquire::Won(2));
    assert!(!b.claim_slot(&other, "cron", 2, 101).await.unwrap());
    assert!(b.claim_slot(&other, "cron", 2, 102).await.unwrap());
}

#[tokio::test]
async fn schema_creation_is_idempotent() {
    let db = TempDb::new();
    let first = db.backend().await;
    let s = first.open_session(TTL).await.unwrap().id;
    assert_eq!(first.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
    let second = db.backend().await;
    second.create_schema().await.unwrap();
    assert_eq!(second.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
    assert_eq!(second.describe(), format!("sqlite:{}", db.path.display()));
    let pooled = SqliteBackend::from_pool(first.pool().clone()).await.unwrap();
    assert_eq!(pooled.describe(), second.describe());
}

#[tokio::test]
async fn groups() {
    let db = TempDb::new();
    let b = db.backend().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let s = b.open_session(TTL).await.unwrap().id;
        b.join_group(&s, "g").await.unwrap();
        b.join_group(&s, "g").await.unwrap();
        ids.push(s);
    }
    ids.sort();
    assert_eq!(b.members("g").await.unwrap(), ids);
    assert!(b.members("h").await.unwrap().is_empty());
    b.leave_group(&ids[1], "g").await.unwrap();
    b.leave_group(&ids[1], "g").await.unwrap();
    assert_eq!(b.members("g").await.unwrap(), vec![ids[0].clone(), ids[2].clone()]);
}

#[tokio::test]
async fn in_memory_and_bad_paths() {
    let b = SqliteBackend::connect("sqlite::memory:").await.unwrap();
    assert_eq!(b.describe(), "sqlite::memory:");
    let s = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));

    let missing = std::env::temp_dir().join(format!("simba-missing-{:032x}", rand::random::<u128>())).join("db.sqlite");
    let err = SqliteBackend::connect(&format!("sqlite://{}", missing.display())).await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
}

/// Safe defaults: the file simba creates, and its WAL and shared-memory files,
/// are readable and writable by their owner only, whatever the umask allows.
#[cfg(unix)]
#[tokio::test]
async fn new_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let db = TempDb::new();
    let b = db.backend().await;
    let s = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&s, "x").await.unwrap(), Acquire::Won(1));
    let mut checked = 0;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.path.clone().into_os_string();
        p.push(suffix);
        if let Ok(meta) = std::fs::metadata(&p) {
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{p:?}");
            checked += 1;
        }
    }
    assert!(checked >= 2, "the database and its WAL file exist");
}

#[tokio::test]
async fn open_session_collects_long_dead_sessions_but_not_leases() {
    let db = TempDb::new();
    let b = db.backend().await;
    let dead = b.open_session(TTL).await.unwrap().id;
    assert_eq!(b.acquire(&dead, "x").await.unwrap(), Acquire::Won(1));
    b.join_group(&dead, "g").await.unwrap();
    // Age the session past the grace period on the database's clock.
    sqlx::query("UPDATE simba_session SET expires_at = expires_at - 1000000 WHERE id = ?1")
        .bind(dead.as_str())
        .execute(b.pool())
        .await
        .unwrap();
    let live = b.open_session(TTL).await.unwrap().id;
    let sessions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_session").fetch_one(b.pool()).await.unwrap();
    let members: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_member").fetch_one(b.pool()).await.unwrap();
    let leases: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(b.pool()).await.unwrap();
    assert_eq!((sessions, members, leases), (1, 0, 1));
    assert_eq!(b.keep_alive(&dead, HeldDigest::default()).await.unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&live, "x").await.unwrap(), Acquire::Won(2));
}

/// Two pools on one file (as two processes would be) contend for one lease; at no
/// instant do both hold it, and the tokens of all terms are exactly 1..=wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_never_both_win() {
    const ATTEMPTS: usize = 200;
    let db = TempDb::new();
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    // Both pools and sessions are ready before either starts, so they really overlap.
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let b = db.backend().await;
        let s = b.open_session(TTL).await.unwrap().id;
        let holders = holders.clone();
        let overlaps = overlaps.clone();
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut tokens = Vec::new();
            let mut held = 0;
            for _ in 0..ATTEMPTS {
                match b.acquire(&s, "contended").await.unwrap() {
                    Acquire::Won(token) => {
                        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        // Hold the lease for a moment so that the other pool tries
                        // while it is taken.
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        holders.fetch_sub(1, Ordering::SeqCst);
                        assert!(b.release(&s, "contended", token).await.unwrap());
                        tokens.push(token);
                    }
                    Acquire::Held => held += 1,
                    Acquire::Expired => panic!("session expired"),
                }
                // Pace the attempts so that neither pool finishes (or starves the
                // other) before the other starts.
                tokio::time::sleep(Duration::from_micros(300)).await;
            }
            (tokens, held)
        }));
    }
    let mut tokens = Vec::new();
    let mut held = 0;
    for t in tasks {
        let (won, lost) = t.await.unwrap();
        tokens.extend(won);
        held += lost;
    }
    // The pools did contend: some attempts found the lease taken.
    assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    tokens.sort_unstable();
    let expected: Vec<u64> = (1..=tokens.len() as u64).collect();
    assert_eq!(tokens, expected);
}

/// K2, BENCHMARKS.md P4: two pools on one file (two processes). The waiting pool's watch sends
/// no query until one of its acquisitions answers `Held`; then a release by the other pool,
/// and a close of the other pool's session, are heard within a few watch ticks; after that
/// the watch is idle again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_by_another_pool_is_heard_and_the_watch_idles() {
    let db = TempDb::new();
    let (leader, waiter) = (db.backend().await, db.backend().await);
    let a = leader.open_session(TTL).await.unwrap().id;
    let b = waiter.open_session(TTL).await.unwrap().id;
    let mut rx = waiter.subscribe_releases().unwrap();
    let Acquire::Won(t) = leader.acquire(&a, "w").await.unwrap() else { panic!("not won") };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(waiter.release_watch_queries(), 0, "the watch queried while nothing was waited for");

    let heard_within = |rx: &mut tokio::sync::broadcast::Receiver<String>| {
        let mut rx = rx.resubscribe();
        async move {
            let started = std::time::Instant::now();
            loop {
                if rx.recv().await.unwrap() == "w" {
                    return started.elapsed();
                }
            }
        }
    };
    // A release.
    assert_eq!(waiter.acquire(&b, "w").await.unwrap(), Acquire::Held);
    let heard = tokio::spawn(heard_within(&mut rx));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(leader.release(&a, "w", t).await.unwrap());
    let took = tokio::time::timeout(Duration::from_secs(2), heard).await.unwrap().unwrap();
    assert!(took < Duration::from_millis(250), "heard after {took:?}");
    // A closed session frees its leases too.
    let Acquire::Won(_) = leader.acquire(&a, "w").await.unwrap() else { panic!("not won again") };
    assert_eq!(waiter.acquire(&b, "w").await.unwrap(), Acquire::Held);
    let heard = tokio::spawn(heard_within(&mut rx));
    tokio::time::sleep(Duration::from_millis(50)).await;
    leader.close_session(&a).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), heard).await.unwrap().unwrap();
    assert!(matches!(waiter.acquire(&b, "w").await.unwrap(), Acquire::Won(_)));
    // Nothing waited for: no more queries.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let idle = waiter.release_watch_queries();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiter.release_watch_queries(), idle, "the watch kept querying after the wait ended");
}

/// A process that starts on a file whose tables exist (every `simba` command, every node after
/// the first) reaches the jobs store without SQLite's write lock: here another connection holds
/// that lock for the whole test, and a new backend still reads the jobs store at once. Before,
/// the jobs schema was created in a `BEGIN IMMEDIATE` transaction on every first call, so the
/// read waited the busy timeout (5 s) and failed: `simba jobs` and a starting node's first claim
/// queued behind whoever held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_process_reads_the_jobs_store_without_the_write_lock() {
    let db = TempDb::new();
    let first = db.backend().await;
    let store = first.job_store().unwrap();
    assert!(store.jobs().await.unwrap().is_empty(), "the first process creates the tables");
    let mut holder = SqliteConnectOptions::from_str(&db.url()).unwrap().connect().await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut holder).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), db.backend()).await.expect("connect without the lock");
    let read = tokio::time::timeout(Duration::from_secs(2), second.job_store().unwrap().jobs()).await;
    assert!(read.is_ok_and(|r| r.is_ok_and(|j| j.is_empty())), "read the jobs store while the write lock is held");
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
}

/// The backend builds its jobs and schedule stores once and hands the same ones out after
/// (each keeps its "schema checked" cell), also through a clone.
#[tokio::test]
async fn stores_are_built_once_per_backend() {
    let db = TempDb::new();
    let backend = db.backend().await;
    let (jobs, schedules) = (backend.job_store().unwrap(), backend.schedule_store().unwrap());
    assert!(jobs.same(&backend.job_store().unwrap()), "one jobs store");
    assert!(jobs.same(&backend.clone().job_store().unwrap()), "shared by clones");
    assert!(schedules.same(&backend.schedule_store().unwrap()), "one schedule store");
    assert!(schedules.same(&backend.clone().schedule_store().unwrap()), "shared by clones");
}
