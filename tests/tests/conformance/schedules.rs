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

/// etcd: every client connects its own backend to the private test server
/// (`SIMBA_TEST_ETCD_URL`).
mod etcd {
    use simba::backend::etcd::EtcdBackend;

    async fn make() -> EtcdBackend {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") else {
            panic!("SIMBA_TEST_ETCD_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        match EtcdBackend::connect(&url).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to the etcd test server: {e}"),
        }
    }

    simba::schedules_suite!(make);
}

/// Redis: every client connects its own backend to the private test server
/// (`SIMBA_TEST_REDIS_URL`).
mod redis {
    use simba::backend::redis::RedisBackend;

    async fn make() -> RedisBackend {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") else {
            panic!("SIMBA_TEST_REDIS_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        match RedisBackend::connect(&url).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to the Redis test server: {e}"),
        }
    }

    simba::schedules_suite!(make);

    /// A10 on Redis, where a listing walks an index (the space's ids, a partition's or a
    /// handler's, the smaller of the two when both filter) and drops the rows of the other
    /// filters: every combination of filters, cursors and limits answers what the memory
    /// store (the reference) answers, paged to the end, before and after edits that move
    /// schedules between handlers and deletes that take them out of every index.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a10_redis_listings_match_the_reference() {
        use simba::backend::Backend;
        use simba::schedule_store::{Actor, ListQuery, Schedule, ScheduleSpec, SharedScheduleStore};

        const P: u32 = 4;
        let space = simba::tck::conformance::unique("a10");
        let redis = make().await.schedule_store().expect("redis keeps schedules").in_space(&space);
        let memory = simba::backend::memory::MemoryBackend::new().schedule_store().expect("memory keeps schedules");
        let actor = Actor { who: "t", at_ms: 1, note: None };
        // Handler `b` holds the first ten ids and every seventh, `a` the rest: a partition's
        // set is smaller than `a`'s and larger than `b`'s, so both walks are taken, and a walk
        // of a partition for `a` drops rows across more than one batch (64).
        let handler = |i: usize| if i < 10 || i.is_multiple_of(7) { "b" } else { "a" };
        for i in 0..300 {
            let s = Schedule::new(format!("s{i:03}"), handler(i), ScheduleSpec::cron("0 0 * * * *", "UTC"));
            for store in [&redis, &memory] {
                store.create(&s, P, &actor).await.expect("create");
            }
        }
        async fn pages(store: &SharedScheduleStore, q: &ListQuery) -> Vec<Vec<String>> {
            let mut out = Vec::new();
            let mut q = q.clone();
            loop {
                let page: Vec<String> = store.list(&q).await.expect("list").into_iter().map(|s| s.id).collect();
                let next = page.last().cloned();
                let full = page.len() == q.limit;
                out.push(page);
                match next {
                    Some(id) if full && out.len() < 400 => q = q.after(id),
                    _ => return out,
                }
            }
        }
        let compare = |stage: &'static str| {
            let (redis, memory) = (redis.clone(), memory.clone());
            async move {
                let mut queries = 0;
                for limit in [1, 7, 70, 1000, usize::MAX] {
                    for handler in [None, Some("a"), Some("b"), Some("c")] {
                        for partition in [None, Some(0), Some(3), Some(9)] {
                            for prefix in [None, Some("s1"), Some("s29"), Some("t")] {
                                for after in [None, Some("s05"), Some("s150"), Some("s2")] {
                                    let mut q = ListQuery::first(limit);
                                    q.handler = handler.map(str::to_owned);
                                    q.partition = partition;
                                    q.prefix = prefix.map(str::to_owned);
                                    q.after = after.map(str::to_owned);
                                    assert_eq!(pages(&redis, &q).await, pages(&memory, &q).await, "{stage}: {q:?}");
                                    queries += 1;
                                }
                            }
                        }
                    }
                }
                queries
            }
        };
        assert_eq!(compare("created").await, 1280);
        for i in (0..300).step_by(5) {
            let id = format!("s{i:03}");
            let moved =
                Schedule::new(&id, if handler(i) == "a" { "b" } else { "c" }, ScheduleSpec::cron("0 0 * * * *", "UTC"));
            for store in [&redis, &memory] {
                assert!(store.update(&moved, &actor).await.expect("update").is_some());
            }
            if i % 3 == 0 {
                for store in [&redis, &memory] {
                    assert!(store.delete(&id, &actor).await.expect("delete"));
                }
            }
        }
        assert_eq!(compare("edited and deleted").await, 1280);
    }

    /// A7 on Redis, where each schedule's records are also kept in a trail of its own, trimmed
    /// with the space's: the records of every target and of the space are the memory store's
    /// (the reference), while the trail rolls over, and after a writer keeping fewer records
    /// trims it at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a7_redis_target_trails_follow_the_space_trail() {
        use simba::backend::Backend;
        use simba::schedule_store::{Actor, Schedule, ScheduleSpec, SharedScheduleStore};

        let space = simba::tck::conformance::unique("a7");
        let redis = make().await.schedule_store().expect("redis keeps schedules").in_space(&space).keeping_audit(40);
        let memory = simba::backend::memory::MemoryBackend::new().schedule_store().expect("memory").keeping_audit(40);
        let ids: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
        async fn same(redis: &SharedScheduleStore, memory: &SharedScheduleStore, ids: &[String], stage: &str) {
            assert_eq!(redis.audit(None, 1000).await.expect("audit"), memory.audit(None, 1000).await.expect("audit"));
            for id in ids {
                for limit in [1, 3, 1000, usize::MAX] {
                    let (r, m) = (redis.audit(Some(id), limit).await, memory.audit(Some(id), limit).await);
                    assert_eq!(r.expect("audit"), m.expect("audit"), "{stage}: {id} limit {limit}");
                }
            }
        }
        let mut nonempty = 0;
        for round in 0..15_i64 {
            for (i, id) in ids.iter().enumerate() {
                let at_ms = round * 100 + i as i64;
                let actor = Actor { who: "w", at_ms, note: (i % 3 == 0).then_some("n") };
                let s = Schedule::new(id, "h", ScheduleSpec::cron("0 0 * * * *", "UTC"));
                for store in [&redis, &memory] {
                    match (round + i as i64) % 4 {
                        0 => drop(store.create(&s, 8, &actor).await.expect("create")),
                        1 => drop(store.update(&s, &actor).await.expect("update")),
                        2 => drop(store.set_paused(id, i % 2 == 0, &actor).await.expect("pause")),
                        _ => drop(store.delete(id, &actor).await.expect("delete")),
                    }
                }
            }
            same(&redis, &memory, &ids, &format!("round {round}")).await;
            nonempty = redis.audit(None, 1000).await.expect("audit").len();
        }
        assert_eq!(nonempty, 40, "the trail rolled over");
        let (redis, memory) = (redis.keeping_audit(3), memory.keeping_audit(3));
        let actor = Actor { who: "w", at_ms: 10_000, note: None };
        for store in [&redis, &memory] {
            store.delete("t0", &actor).await.expect("delete");
            store
                .create(&Schedule::new("t0", "h", ScheduleSpec::cron("0 0 * * * *", "UTC")), 8, &actor)
                .await
                .expect("create");
        }
        same(&redis, &memory, &ids, "trimmed to 3").await;
        assert_eq!(redis.audit(None, 1000).await.expect("audit").len(), 3);
    }
}

/// A8: ZooKeeper has no schedule store yet: the backend answers `None`, and
/// every schedule operation of the API fails saying so, naming the store (not silently).
#[tokio::test]
async fn a8_stores_without_schedules_say_so() {
    use simba::backend::{Backend, BackendUrl, ConnectOptions};
    for var in ["SIMBA_TEST_ZK_URL"] {
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

/// A11 on real servers: a node with a handler runs the schedules created through its API on
/// SQLite, PostgreSQL, etcd and Redis, each slot claimed under its partition's token (the
/// claim of a schedule slot is the claim's transaction on the SQL stores, not the jobs'
/// routine; on Redis the claim script on the schedule's own ledger) and recorded `ran` once, in
/// a namespace of the test's own. Real time, about 4 s each.
mod runtime {
    use std::time::Duration;

    use simba::backend::Backend;
    use simba::job::{Handler, job_future};
    use simba::job_store::Outcome;
    use simba::schedule_store::{Schedule, ScheduleSpec};
    use simba::{Runtime, RuntimeConfig};

    async fn runs_schedules<B: Backend>(backend: B, label: &str) {
        let toml = format!(
            "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n\n[backend]\nnamespace = \"a11{label}{}\"\n\n\
             [schedules]\npartitions = 2\n",
            std::process::id()
        );
        let config = RuntimeConfig::from_toml_str(&toml, "test.toml", Vec::new()).expect("config");
        let handler = Handler::from_closure("ping", |_term, payload| {
            job_future(async move { serde_json::from_str::<u64>(&payload).map(|_| ()) })
        });
        let node = Runtime::builder().config(config).without_registry().backend(backend).handler(handler).start().await;
        let node = node.expect("start");
        let api = node.schedules().expect("schedules");
        let every = ScheduleSpec::fixed_rate(Duration::from_secs(1));
        for id in ["p-1", "p-2", "p-3"] {
            api.create(Schedule::new(id, "ping", every.clone()).with_payload("7"), "test").await.expect("create");
        }
        tokio::time::sleep(Duration::from_millis(4_200)).await;
        let jobs = node.simba().job_store().expect("a jobs store");
        for id in ["p-1", "p-2", "p-3"] {
            let h = jobs.history(&format!("schedule/{id}"), 100).await.expect("history");
            let ran: Vec<i64> = h.iter().filter(|r| r.outcome == Outcome::Ran).map(|r| r.slot_ms).collect();
            assert!(ran.len() >= 2, "{label} {id}: {h:?}");
            let mut slots: Vec<i64> = h.iter().map(|r| r.slot_ms).collect();
            slots.dedup();
            assert_eq!(slots.len(), h.len(), "{label} {id}: each slot once: {h:?}");
            assert!(h.iter().all(|r| r.token > 0 && r.slot_ms % 1000 == 0), "{label} {id}: {h:?}");
        }
        node.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_schedules_run_on_sqlite() {
        let dir = std::env::temp_dir().join(format!("simba-schedules-runtime-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let url = format!("sqlite://{}", dir.join("simba.db").display());
        let backend = simba::backend::sqlite::SqliteBackend::connect(&url).await.expect("connect");
        runs_schedules(backend, "sqlite").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_schedules_run_on_postgres() {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else {
            panic!("SIMBA_TEST_POSTGRES_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let backend = simba::backend::postgres::PostgresBackend::connect(&url).await.expect("connect");
        runs_schedules(backend, "postgres").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_schedules_run_on_etcd() {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") else {
            panic!("SIMBA_TEST_ETCD_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let backend = simba::backend::etcd::EtcdBackend::connect(&url).await.expect("connect");
        runs_schedules(backend, "etcd").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_schedules_run_on_redis() {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_REDIS_URL") else {
            panic!("SIMBA_TEST_REDIS_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let backend = simba::backend::redis::RedisBackend::connect(&url).await.expect("connect");
        runs_schedules(backend, "redis").await;
    }
}
