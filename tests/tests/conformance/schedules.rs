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

    /// A11 on PostgreSQL: a schedule write notifies its space at its commit
    /// (`simba_schedules`), and another backend's listener hears it, so holders read the
    /// counters at once rather than at their next poll.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_postgres_broadcasts_schedule_changes() {
        super::a11_changes_are_broadcast(make().await, make().await).await;
    }
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

    /// A11 on etcd: a write's change counter is heard by another backend's watch (the
    /// counters' keys under the schedules' prefix), naming the space.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_etcd_broadcasts_schedule_changes() {
        super::a11_changes_are_broadcast(make().await, make().await).await;
    }
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

    /// A11 on Redis: a schedule write publishes its space (`{prefix}:schedules`), and another
    /// backend's subscription hears it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_redis_broadcasts_schedule_changes() {
        super::a11_changes_are_broadcast(make().await, make().await).await;
    }

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

/// ZooKeeper: every client connects its own backend to the private test server
/// (`SIMBA_TEST_ZK_URL`).
mod zookeeper {
    use simba::backend::zookeeper::ZooKeeperBackend;

    async fn make() -> ZooKeeperBackend {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else {
            panic!("SIMBA_TEST_ZK_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        match ZooKeeperBackend::connect(&url).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to the ZooKeeper test server: {e}"),
        }
    }

    simba::schedules_suite!(make);

    /// A11 on ZooKeeper: a write sets its space's row, which another backend's watch hears.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_zookeeper_broadcasts_schedule_changes() {
        super::a11_changes_are_broadcast(make().await, make().await).await;
    }

    /// A10 on ZooKeeper: schedules are children of their partition's node, so a holder's load
    /// of one partition reads that partition only (one listing, then one read per schedule),
    /// and a listing of the whole space lists each written partition once; the change
    /// counters and the partition count are one read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_a_partition_is_listed_alone() {
        use simba::backend::Backend;
        use simba::schedule_store::{Actor, ListQuery, Schedule, ScheduleSpec, partition_of};
        let b = make().await;
        let store = b.schedule_store().expect("a schedule store").in_space(&simba::tck::conformance::unique("zkl"));
        let ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
        for id in ids {
            let s = Schedule::new(id, "h", ScheduleSpec::cron("0 0 * * * *", "UTC"));
            store.create(&s, 4, &Actor { who: "t", at_ms: 1, note: None }).await.expect("create");
        }
        let p = partition_of("a", 4);
        let in_p = ids.iter().filter(|id| partition_of(id, 4) == p).count();
        let written: std::collections::BTreeSet<u32> = ids.iter().map(|id| partition_of(id, 4)).collect();
        let before = b.requests_sent();
        let rows = store.list(&ListQuery::first(100).partition(p)).await.expect("list a partition");
        assert_eq!(rows.len(), in_p);
        assert_eq!(b.requests_sent() - before, 1 + in_p as u64, "one listing, then one read per schedule");
        let before = b.requests_sent();
        assert_eq!(store.list(&ListQuery::first(3)).await.expect("list").len(), 3);
        assert_eq!(b.requests_sent() - before, 1 + written.len() as u64 + 3, "the row, each partition, 3 reads");
        let before = b.requests_sent();
        assert_eq!(store.list(&ListQuery::first(3).after("c")).await.expect("list").len(), 3);
        assert_eq!(b.requests_sent() - before, 1 + 3, "the partitions not written since are not listed again");
        let s = Schedule::new("a0", "h", ScheduleSpec::cron("0 0 * * * *", "UTC"));
        store.create(&s, 4, &Actor { who: "t", at_ms: 2, note: None }).await.expect("create");
        let before = b.requests_sent();
        let page: Vec<String> =
            store.list(&ListQuery::first(3)).await.expect("list").into_iter().map(|s| s.id).collect();
        assert_eq!(page, ["a", "a0", "b"], "a new id is seen at once");
        assert_eq!(b.requests_sent() - before, 1 + 1 + 3, "only the written partition is listed again");
        let before = b.requests_sent();
        store.changes().await.expect("changes");
        store.partitions().await.expect("partitions");
        assert_eq!(b.requests_sent() - before, 2, "one read each");
    }

    /// A6, A7 on ZooKeeper: writers racing on one space lose nothing. Eight clients (each its
    /// own backend) edit, pause and resume schedules of one space at once: every write lands
    /// once (each schedule's revision counts its writes), and each write's counter bump and
    /// audit record land with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_racing_writers_lose_nothing() {
        use simba::backend::Backend;
        use simba::schedule_store::{Actor, Schedule, ScheduleSpec};
        const WRITERS: u64 = 8;
        const WRITES: u64 = 6;
        let space = simba::tck::conformance::unique("zkr");
        let actor = Actor { who: "t", at_ms: 1, note: None };
        let first = make().await.schedule_store().expect("a schedule store").in_space(&space);
        for id in ["r0", "r1"] {
            first
                .create(&Schedule::new(id, "h", ScheduleSpec::cron("0 0 * * * *", "UTC")), 1, &actor)
                .await
                .expect("create");
        }
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let store = make().await.schedule_store().expect("a schedule store").in_space(&space);
            tasks.push(tokio::spawn(async move {
                let id = format!("r{}", w % 2);
                for i in 0..WRITES {
                    let actor = Actor { who: "racer", at_ms: i as i64, note: Some("n") };
                    let wrote = match i % 3 {
                        0 => store.set_paused(&id, true, &actor).await.map(|r| r.is_some()),
                        1 => store.set_paused(&id, false, &actor).await.map(|r| r.is_some()),
                        _ => {
                            let s = Schedule::new(id.as_str(), "h2", ScheduleSpec::cron("0 0 * * * *", "UTC"));
                            store.update(&s.with_payload(i.to_string()), &actor).await.map(|r| r.is_some())
                        }
                    };
                    assert!(wrote.expect("a racing write"), "writer {w}, write {i}");
                }
            }));
        }
        for t in tasks {
            t.await.expect("a writer");
        }
        let per_schedule = WRITERS / 2 * WRITES;
        for id in ["r0", "r1"] {
            let got = first.get(id).await.expect("get").expect("there");
            assert_eq!(got.revision, 1 + per_schedule, "{id}: every write counted once");
        }
        let writes = 2 + WRITERS * WRITES;
        assert_eq!(first.changes().await.expect("changes"), [(0, writes)]);
        assert_eq!(first.audit(None, 1000).await.expect("audit").len() as u64, writes);
    }

    /// ZooKeeper's limit: a partition's children are listed in one reply of at most
    /// `jute.maxbuffer`, so a create that would take its listing past the budget is refused,
    /// saying why, and writes nothing. The schedule lives at
    /// `/simba/schedules/{space}/p/{partition}/{id}`, its partition node counting the listing's
    /// bytes (set by hand here, as 8,000 ids of the longest would).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn zookeeper_a_full_partition_refuses_a_create() {
        use simba::backend::Backend;
        use simba::backend::zookeeper::zookeeper_client as zk;
        use simba::schedule_store::{Actor, Schedule, ScheduleSpec, partition_of};
        let b = make().await;
        let space = simba::tck::conformance::unique("zkf");
        let store = b.schedule_store().expect("a schedule store").in_space(&space);
        let actor = Actor { who: "t", at_ms: 1, note: None };
        let s = |id: &str| Schedule::new(id, "h", ScheduleSpec::cron("0 0 * * * *", "UTC"));
        store.create(&s("first"), 1, &actor).await.expect("create");
        let url = simba_tests::server_url("SIMBA_TEST_ZK_URL").expect("the URL");
        let raw = zk::Client::connect(url.trim_start_matches("zk://")).await.expect("a raw client");
        let partition = format!("/simba/schedules/{space}/p/{}", partition_of("first", 1));
        let (bytes, _) = raw.get_data(&partition).await.expect("the partition node");
        assert_eq!(bytes, b"9", "4 bytes of length and `first`");
        assert!(raw.check_stat(&format!("{partition}/first")).await.expect("stat").is_some(), "the schedule's node");
        raw.set_data(&partition, b"999991", None).await.expect("fill the partition by hand");
        let e = store.create(&s("second"), 1, &actor).await.expect_err("the partition is full");
        assert!(e.to_string().contains("jute.maxbuffer") && e.to_string().contains("partitions"), "{e}");
        assert_eq!(store.get("second").await.expect("get"), None, "nothing written");
        assert_eq!(store.audit(None, 10).await.expect("audit").len(), 1);
        assert_eq!(store.changes().await.expect("changes"), [(0, 1)]);
        assert!(store.delete("first", &actor).await.expect("delete"), "a delete still works");
        assert_eq!(raw.get_data(&partition).await.expect("the partition node").0, b"999982");
    }
}

/// A8: every store of a URL has a schedule store, also through the connection by URL (the
/// backend the tool and the dashboard use), so the API opens on each.
#[tokio::test]
async fn a8_every_store_of_a_url_has_schedules() {
    use simba::backend::{Backend, BackendUrl, ConnectOptions};
    let vars = [
        "SIMBA_TEST_POSTGRES_URL",
        "SIMBA_TEST_MYSQL_URL",
        "SIMBA_TEST_REDIS_URL",
        "SIMBA_TEST_ZK_URL",
        "SIMBA_TEST_ETCD_URL",
    ];
    for var in vars {
        let Some(url) = simba_tests::server_url(var) else {
            panic!("{var} is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let url = BackendUrl::from(url);
        let backend = match simba::backend::connect(&url, ConnectOptions::for_reading()).await {
            Ok(b) => b,
            Err(e) => panic!("cannot connect to {url}: {e}"),
        };
        assert!(backend.schedule_store().is_some(), "{url}: no schedule store");
        if let Err(e) = simba::admin::Schedules::for_backend(&backend) {
            panic!("{url}: the schedules API does not open: {e}");
        }
    }
}

/// A11 where the store broadcasts: a write through `writer` in a space of its own reaches
/// `listener`'s subscription (`ScheduleStore::subscribe_changes`) naming that space, within 5 s.
async fn a11_changes_are_broadcast<B: simba::backend::Backend>(listener: B, writer: B) {
    use simba::schedule_store::{Actor, Schedule, ScheduleSpec};
    let store = listener.schedule_store().expect("schedules");
    let Some(mut heard) = store.subscribe_changes() else { panic!("{} does not broadcast", store.describe()) };
    // The subscription is being made: writes until one is heard (a write before it is lost,
    // as the contract allows; the holders' poll finds it).
    let space = simba::tck::conformance::unique("a11b");
    let store = writer.schedule_store().expect("schedules").in_space(&space);
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        for i in 0.. {
            let s = Schedule::new(format!("b{i}"), "h", ScheduleSpec::cron("0 0 * * * *", "UTC"));
            store.create(&s, 4, &Actor { who: "t", at_ms: 1, note: None }).await.expect("create");
            let wait = tokio::time::timeout(std::time::Duration::from_millis(500), async {
                loop {
                    match heard.recv().await {
                        Ok(name) if name == space => return name,
                        Ok(_) => {}
                        Err(e) => panic!("the broadcast ended: {e}"),
                    }
                }
            });
            if let Ok(name) = wait.await {
                return name;
            }
        }
        unreachable!()
    })
    .await;
    assert_eq!(got.ok().as_deref(), Some(space.as_str()), "the write's space was broadcast");
}

/// A8: a backend without a schedule store (here the test wrapper offering none) fails every
/// schedule operation of the API saying so and naming the store, and a runtime with handlers on
/// it starts without running schedules (not silently: it logs why).
#[tokio::test]
async fn a8_a_store_without_schedules_says_so() {
    use simba::backend::Backend;
    let (backend, _) = simba::tck::FaultyBackend::new(simba::backend::memory::MemoryBackend::new());
    let backend = backend.with_job_store().without_schedule_store();
    assert!(backend.schedule_store().is_none());
    let e = simba::admin::Schedules::for_backend(&backend).expect_err("no schedule store");
    let said = e.to_string();
    assert!(said.contains("schedules are not supported by this store yet"), "{said}");
    assert!(said.contains("faulty(memory"), "names the store: {said}");
    let handler = simba::job::Handler::from_closure("h", |_t, _p| {
        simba::job::job_future(async { Ok::<(), simba::BoxError>(()) })
    });
    let node = simba::Runtime::builder().without_registry().backend(backend).handler(handler).start().await;
    let node = node.expect("starts without schedules");
    assert!(node.schedules().is_err(), "the node's API says so too");
    node.shutdown().await;
}

/// A11 on real servers: a node with a handler runs the schedules created through its API on
/// SQLite, PostgreSQL, etcd, Redis and ZooKeeper, each slot claimed under its partition's
/// token (the claim of a schedule slot is the claim's transaction on the SQL stores, not the
/// jobs' routine; on Redis the claim script on the schedule's own ledger) and recorded `ran`
/// once, in a namespace of the test's own. Real time, about 4 s each.
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a11_schedules_run_on_zookeeper() {
        let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else {
            panic!("SIMBA_TEST_ZK_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
        };
        let backend = simba::backend::zookeeper::ZooKeeperBackend::connect(&url).await.expect("connect");
        runs_schedules(backend, "zookeeper").await;
    }
}
