//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on SQLite: every client opens
//! its own pool on one shared file, as separate processes on one host would.

use simba::backend::sqlite::SqliteBackend;

fn path() -> &'static str {
    use std::sync::OnceLock;
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("simba-jobs-conformance-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        format!("sqlite://{}", dir.join("simba.db").display())
    })
}

async fn make() -> SqliteBackend {
    // Two connects racing to switch a new file to WAL can fail once (see SqliteBackend::connect).
    for _ in 0..5 {
        if let Ok(b) = SqliteBackend::connect(path()).await {
            return b;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    SqliteBackend::connect(path()).await.expect("connect to the test database")
}

simba::jobs_suite!(make);
