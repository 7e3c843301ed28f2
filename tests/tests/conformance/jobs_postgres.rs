//! The jobs store suite (issue 12 item 1, `simba::tck::jobs`) on PostgreSQL: every client
//! connects its own backend to the private test server.
//!
//! Needs `SIMBA_TEST_POSTGRES_URL` (set by `eval "$(bash scripts/backends.sh start)"`); without
//! it every test fails, saying what is missing.

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

simba::jobs_suite!(make);

/// Issue 12 ("every feature on all six backends"; ADR 0012, amendment "the SQL claim in one
/// round trip"): the store is on by default, and `without_job_store` switches it off.
#[tokio::test]
async fn jobs_store_is_on_by_default() {
    use simba::backend::Backend;
    let backend = make().await;
    assert!(backend.job_store().is_some(), "PostgreSQL: no jobs store by default");
    assert!(backend.without_job_store().job_store().is_none(), "PostgreSQL: without_job_store left it on");
}

/// Run now at once on PostgreSQL: the jobs store broadcasts control changes (the control
/// routine notifies, the backend's listener forwards), so `jobs_control_broadcast_where_supported`
/// and `jobs_control_broadcast_covers_pause_and_resume` check delivery here rather than finding
/// no subscription and returning.
#[tokio::test]
async fn jobs_store_broadcasts_control_changes() {
    use simba::backend::Backend;
    let backend = make().await;
    let store = backend.job_store().expect("on by default");
    assert!(store.subscribe_control().is_some(), "PostgreSQL: no control broadcast");
    assert!(store.keeping(5).subscribe_control().is_some(), "PostgreSQL: keeping() lost the control broadcast");
}

/// Issue 12 (ADR 0012, amendment "the SQL claim in one round trip"): a user that may not create
/// the jobs tables and routines gets an error that prints them (the function bodies included);
/// once an administrator ran that script and granted DML, the same user's store claims through
/// the routine the administrator created (none is created again: the user could not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_store_of_a_user_without_ddl_rights_prints_the_routines() {
    use simba::backend::{Acquire, Backend, BackendError};
    use simba::job_store::{Claim, ClaimRequest, SlotKind};
    let Some(url) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else { return };
    let root = sqlx::PgPool::connect(&url).await.expect("connect an admin pool");
    let id = format!("{:016x}", rand::random::<u64>());
    let (database, user) = (format!("simba_jobsddl_db_{id}"), format!("simba_jobsddl_{id}"));
    simba_tests::servers::exec(&root, format!("CREATE DATABASE {database}")).await;
    simba_tests::servers::exec(&root, format!("CREATE ROLE {user} LOGIN")).await;
    let admin_url = simba_tests::servers::url_for("postgres", &url, "postgres", &database);
    let db_admin = sqlx::PgPool::connect(&admin_url).await.expect("connect to the new database");
    simba_tests::servers::exec(
        &db_admin,
        format!("REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO {user}"),
    )
    .await;
    simba_tests::servers::exec(&db_admin, PostgresBackend::schema()).await;
    simba_tests::servers::exec(
        &db_admin,
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON simba_session, simba_lease, simba_lease_floor, simba_member TO {user}"
        ),
    )
    .await;
    let restricted = simba_tests::servers::url_for("postgres", &url, &user, &database);
    let b = PostgresBackend::connect(&restricted).await.expect("the lease tables exist: the user connects");
    let store = b.job_store().expect("on by default");
    let err = store.history("job", 10).await.expect_err("the user may not create the jobs tables");
    let msg = err.to_string();
    assert!(matches!(err, BackendError::Misconfigured(_)), "{err:?}");
    for expected in [
        "CREATE TABLE IF NOT EXISTS simba_job ",
        "CREATE TABLE IF NOT EXISTS simba_job_request ",
        "CREATE TABLE IF NOT EXISTS simba_job_run_key ",
        "simba_claim_run_v2",
        "simba_job_control_v2",
        "$simba$",
    ] {
        assert!(msg.contains(expected), "missing {expected:?} in: {msg}");
    }
    // The administrator runs the printed script (everything after the first line) and grants.
    let script = msg.split_once('\n').map(|(_, s)| s).expect("a script after the first line");
    simba_tests::servers::exec(&db_admin, script.to_owned()).await;
    simba_tests::servers::exec(
        &db_admin,
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON simba_job, simba_job_run, simba_job_version, simba_registry, \
             simba_job_request, simba_job_run_key TO {user}"
        ),
    )
    .await;
    let b = PostgresBackend::connect(&restricted).await.expect("connect again");
    let store = b.job_store().expect("on by default");
    let s = b.open_session(std::time::Duration::from_secs(30)).await.expect("open a session").id;
    let Ok(Acquire::Won(token)) = b.acquire(&s, "job").await else { panic!("the free lease is won") };
    let req = ClaimRequest {
        session: &s,
        lease: "job",
        token,
        job: "job",
        slot_ms: 1_000,
        kind: SlotKind::Scheduled,
        node: "n",
        started_ms: 1_000,
        attempts: 1,
    };
    let claimed = store.claim_run(req).await.expect("the claim runs the administrator's routine");
    assert!(matches!(claimed, Claim::Claimed(_)), "{claimed:?}");
    assert_eq!(store.history("job", 10).await.expect("history").len(), 1);
    b.close_session(&s).await.expect("close");
    drop((b, store));
    db_admin.close().await;
    simba_tests::servers::exec(&root, format!("DROP DATABASE {database} WITH (FORCE)")).await;
    simba_tests::servers::exec(&root, format!("DROP ROLE {user}")).await;
}
