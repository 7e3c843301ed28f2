//! The schedule store suite (`simba::tck::schedules`, rules A6 to A10) on every store that has
//! one, each against its real server; and the stores that have none yet say so (A8).

/// The in-memory store: one store shared by the clients of a test, as one server is.
mod memory {
    use simba::backend::memory::MemoryBackend;

    fn store() -> MemoryBackend {
        use std::sync::OnceLock;
        static STORE: OnceLock<MemoryBackend> = OnceLock::new();
        STORE.get_or_init(MemoryBackend::new).clone()
    }

    async fn make() -> MemoryBackend {
        store()
    }

    simba::schedules_suite!(make);
}

/// SQLite: every client opens its own pool on one shared file, as separate processes on one
/// host would.
mod sqlite {
    use simba::backend::sqlite::SqliteBackend;

    fn path() -> &'static str {
        use std::sync::OnceLock;
        static PATH: OnceLock<String> = OnceLock::new();
        PATH.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("simba-schedules-conformance-{}", std::process::id()));
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

    simba::schedules_suite!(make);
}

/// PostgreSQL: every client connects its own backend to the private test server
/// (`SIMBA_TEST_POSTGRES_URL`).
mod postgres {
    use simba::backend::postgres::PostgresBackend;

    async fn make() -> PostgresBackend {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else {
            panic!("SIMBA_TEST_POSTGRES_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        match PostgresBackend::connect(&url).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to the PostgreSQL test server: {e}"),
        }
    }

    simba::schedules_suite!(make);
}

/// MySQL (MariaDB): every client connects its own backend to the private test server
/// (`SIMBA_TEST_MYSQL_URL`).
mod mysql {
    use simba::backend::mysql::MySqlBackend;

    async fn make() -> MySqlBackend {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_MYSQL_URL") else {
            panic!("SIMBA_TEST_MYSQL_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        match MySqlBackend::connect(&url).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to the MySQL (MariaDB) test server: {e}"),
        }
    }

    simba::schedules_suite!(make);
}

/// A8: Redis, ZooKeeper and etcd have no schedule store yet: the backend answers `None`, and
/// every schedule operation of the API fails saying so, naming the store (not silently).
#[tokio::test]
async fn a8_stores_without_schedules_say_so() {
    use simba::backend::{Backend, BackendUrl, ConnectOptions};
    for var in ["SIMBA_TEST_REDIS_URL", "SIMBA_TEST_ZK_URL", "SIMBA_TEST_ETCD_URL"] {
        let Some(url) = simba_tests::server_url(var) else {
            panic!("{var} is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let url = BackendUrl::from(url);
        let backend = match simba::backend::connect(&url, ConnectOptions::for_reading()).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to {url}: {e}"),
        };
        assert!(backend.schedule_store().is_none(), "{url}: a schedule store this slice does not test");
        let e = simba::admin::Schedules::for_backend(&backend).expect_err("no schedule store");
        let said = e.to_string();
        assert!(said.contains("schedules are not supported by this store yet"), "{said}");
        assert!(said.contains(url.scheme()), "names the store: {said}");
    }
}
