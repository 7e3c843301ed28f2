//! The conformance suite (B4) on SQLite: every test opens its own pool on one shared file,
//! as separate processes on one host would.
//!
//! The file lives in a temporary directory that each test's cleanup guard keeps alive: the
//! directory is removed when the last test using it ends (issue 13 item 4; before, every run
//! left a `simba-conformance-<pid>` directory behind).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use simba::backend::sqlite::SqliteBackend;
use tempfile::TempDir;

/// The directory of the shared database while some test holds it.
static DIR: Mutex<Weak<TempDir>> = Mutex::new(Weak::new());

fn dir() -> Arc<TempDir> {
    let mut slot = DIR.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(d) = slot.upgrade() {
        return d;
    }
    let d = Arc::new(tempfile::Builder::new().prefix("simba-conformance-").tempdir().expect("a temporary directory"));
    *slot = Arc::downgrade(&d);
    d
}

async fn make() -> (SqliteBackend, Arc<TempDir>) {
    let dir = dir();
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    // Two connects racing to switch a new file to WAL can fail once (see SqliteBackend::connect).
    for _ in 0..5 {
        if let Ok(b) = SqliteBackend::connect(&url).await {
            return (b, dir);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (SqliteBackend::connect(&url).await.expect("connect to the test database"), dir)
}

simba::conformance_suite!(
    make,
    simba::tck::conformance::Capabilities::NONE.with_release_broadcast().with_kept_lease_records()
);

/// Issue 13 item 4: the suite's temporary directory is removed once no test holds it.
#[tokio::test]
async fn issue13_4_sqlite_suite_dir_is_removed() {
    let (backend, guard) = make().await;
    let path = guard.path().to_owned();
    assert!(path.join("simba.db").exists());
    drop(backend);
    // Other tests of this binary may hold the directory too; wait for them to end.
    let weak = Arc::downgrade(&guard);
    drop(guard);
    for _ in 0..600 {
        if weak.strong_count() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(weak.strong_count(), 0, "the directory is still held after 60 s");
    assert!(!path.exists(), "the temporary directory {} was not removed", path.display());
}

/// Issue 12 item 6: the namespace concern on this backend.
mod namespaces {
    use super::*;

    simba::namespace_suite!(make);
}
