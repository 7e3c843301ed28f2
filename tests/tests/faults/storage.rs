//! Storage faults on SQLite (issue 16, item 9): the database on a full disk and on a
//! read-only file system, each a small tmpfs the test mounts (the suite runs as root, as CI
//! does). A write that cannot be stored fails with an error saying why (the disk is full, the
//! database is read-only), the database is never corrupted (`PRAGMA integrity_check`), and the
//! same node works again once space returns or the file system is writable again.

#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use simba::backend::sqlite::SqliteBackend;
use simba::backend::{Acquire, Backend};
use simba::{Simba, SimbaConfig};

/// A tmpfs of `size` mounted on a new temporary directory, unmounted on drop.
struct Mount {
    dir: tempfile::TempDir,
}

impl Mount {
    fn new(size: &str) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "the storage-fault tests mount a small tmpfs and need root (as CI runs): mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Mount { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, mode: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(self.path())
            .output()
            .expect("run mount");
        assert!(out.status.success(), "remount {mode}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Writes `path` until the file system has no space left; returns the bytes written.
fn fill(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0xa5u8; 4096];
    let mut n = 0;
    while f.write_all(&block).is_ok() {
        n += block.len() as u64;
    }
    // The last partial block.
    while f.write_all(&block[..1]).is_ok() {
        n += 1;
    }
    let _ = f.sync_all();
    n
}

async fn integrity(db: &Path) -> String {
    let opts: sqlx::sqlite::SqliteConnectOptions =
        format!("sqlite://{}", db.display()).parse().expect("sqlite options");
    let pool = sqlx::SqlitePool::connect_with(opts.read_only(true)).await.expect("open for the check");
    let r: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&pool).await.expect("integrity_check");
    pool.close().await;
    r
}

/// Every message of an error and its sources.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut s = e.source();
    while let Some(x) = s {
        out.push_str(&format!(": {x}"));
        s = x.source();
    }
    out
}

/// A full disk: the backend's writes fail saying the disk is full; nothing is corrupted;
/// when the filler is removed the same backend (and a node on the file) work again.
///
/// Regression test for a bug this test found: every acquisition on the full disk returned
/// `Won(1)` although nothing was stored (the lease statement is `INSERT ... RETURNING` in
/// autocommit, read with `fetch_optional`, which took the returned row and dropped the commit's
/// SQLITE_FULL), so two nodes could both win token 1 of one lease. The statement is read with
/// `fetch_all` now: the first acquisition on the full disk fails with "database or disk is
/// full", and the node recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_disk_clear_error_no_corruption_recovery() {
    let m = Mount::new("4m");
    let db: PathBuf = m.path().join("simba.db");
    let url = format!("sqlite://{}", db.display());
    let backend = SqliteBackend::connect(&url).await.expect("connect");
    let grant = backend.open_session(Duration::from_secs(30)).await.expect("session");
    for i in 0..20 {
        backend.acquire(&grant.id, &format!("before-{i}")).await.expect("acquire before the disk is full");
    }
    let filler = m.path().join("filler");
    let filled = fill(&filler);
    // Distinct names until a write needs a page the full disk cannot give.
    let mut error = None;
    let mut ok = 0;
    for i in 0..20_000 {
        match backend.acquire(&grant.id, &format!("full-{i}-{}", "x".repeat(100))).await {
            Ok(Acquire::Won(_)) => ok += 1,
            Ok(other) => panic!("acquisition {i} on a full disk: {other:?}"),
            Err(e) => {
                error = Some(chain(&e));
                break;
            }
        }
    }
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM simba_lease").fetch_one(backend.pool()).await.unwrap_or(-1);
    let error = error.unwrap_or_else(|| {
        panic!("{ok} acquisitions on a full disk ({filled} bytes of filler) all won, with {rows} lease rows stored")
    });
    eprintln!("full disk after {ok} more acquisitions: {error}");
    assert!(error.contains("disk is full"), "the error says the disk is full: {error}");
    assert!(error.contains("simba.db"), "the error names the database: {error}");
    // Space returns: the same backend works, the session still counts, nothing is corrupted.
    std::fs::remove_file(&filler).expect("remove the filler");
    let mut recovered = false;
    for _ in 0..50 {
        if backend.acquire(&grant.id, "after-space-returns").await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "the backend works again once space returns");
    assert_eq!(integrity(&db).await, "ok");
    // A node on the same file takes a lock (rule T1 names) after the fault.
    let simba = Simba::connect(&url, SimbaConfig::default()).await.expect("a node after the fault");
    let guard = simba.lock("after-the-full-disk").acquire().await.expect("lock");
    assert!(guard.term().is_valid());
    guard.release().await.expect("release");
    simba.close().await;
    assert_eq!(integrity(&db).await, "ok");
}

/// A read-only file system (remounted read-only under a closed database: Linux refuses to
/// remount a file system with files open for writing): opening the database fails naming it
/// and saying that it must be writable; after a remount read-write a node opens it and works, and the file is
/// intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_read_only_clear_error_no_corruption_recovery() {
    let m = Mount::new("8m");
    let db: PathBuf = m.path().join("simba.db");
    let url = format!("sqlite://{}", db.display());
    let backend = SqliteBackend::connect(&url).await.expect("connect");
    let grant = backend.open_session(Duration::from_secs(30)).await.expect("session");
    backend.acquire(&grant.id, "before").await.expect("acquire");
    backend.pool().close().await;
    drop(backend);
    m.remount("ro");
    let e = match SqliteBackend::connect(&url).await {
        Ok(_) => panic!("a backend on a read-only file system opened"),
        Err(e) => chain(&e),
    };
    eprintln!("read-only file system: {e}");
    assert!(e.contains("simba.db"), "the error names the database: {e}");
    assert!(e.contains("writable"), "the error says the database must be writable: {e}");
    m.remount("rw");
    assert_eq!(integrity(&db).await, "ok");
    let backend = SqliteBackend::connect(&url).await.expect("connect once writable");
    let grant = backend.open_session(Duration::from_secs(30)).await.expect("session");
    backend.acquire(&grant.id, "after-rw").await.expect("acquire once writable");
    backend.pool().close().await;
    assert_eq!(integrity(&db).await, "ok");
}
