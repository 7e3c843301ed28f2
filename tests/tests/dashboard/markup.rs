//! Markup in the store stays text in the browser (issue 14, item 4): a session id, a lease
//! name, a group name and a member written straight into a SQLite file, with markup that
//! would run script if it were not escaped, served by `simba dashboard` (the operator's way).

#![allow(clippy::print_stderr)] // Timings are printed for the report.

use std::time::Duration;

use simba::backend::sqlite::SqliteBackend;

use crate::harness::{Browser, free_port, wait_listening};

const SESSION: &str = "<simba-x>s</simba-x><img src=x onerror=\"window.__pwned=1\">";
const LEASE: &str = "<script>window.__pwned=2</script>";
const GROUP: &str = "g\"><simba-x>'&amp;";

const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Writes a live session holding a lease and a partition of a group, all named with markup.
async fn hostile_store(url: &str) -> sqlx::SqlitePool {
    drop(SqliteBackend::connect(url).await.expect("create the schema"));
    let pool = sqlx::SqlitePool::connect(url).await.expect("open");
    let now = NOW;
    let statements = [
        format!(
            "INSERT INTO simba_session (id, expires_at, ttl_ms, created_at) VALUES (?1, {now} + 600000, 600000, {now})"
        ),
        format!("INSERT INTO simba_lease (name, session_id, token, acquired_at) VALUES (?2, ?1, 7, {now})"),
        format!("INSERT INTO simba_lease (name, session_id, token, acquired_at) VALUES (?3 || '.0', ?1, 3, {now})"),
        format!("INSERT INTO simba_member (group_name, session_id, joined_at) VALUES (?3, ?1, {now})"),
    ];
    for sql in statements {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(SESSION)
            .bind(LEASE)
            .bind(GROUP)
            .execute(&pool)
            .await
            .expect("insert");
    }
    pool
}

/// The hostile session takes partition `n` of the hostile group: every page changes.
async fn take_partition(pool: &sqlx::SqlitePool, n: usize) {
    let sql =
        format!("INSERT INTO simba_lease (name, session_id, token, acquired_at) VALUES (?1 || '.{n}', ?2, 1, {NOW})");
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(GROUP).bind(SESSION).execute(pool).await.expect("insert");
}

/// On every page, first as served and again after a live update: no element the store's
/// strings spell exists, no script of theirs ran, and the strings show as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_the_store_is_inert_on_every_page() {
    let _serial = crate::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("hostile.db").display());
    let pool = hostile_store(&url).await;
    let port = free_port();
    let args = ["simba", "dashboard", "--backend", &url, "--listen", &format!("127.0.0.1:{port}")].map(str::to_owned);
    let cli = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = simba_cli::run(args, &mut out, &mut err).await;
        (code, String::from_utf8_lossy(&err).into_owned())
    });
    wait_listening(port, Duration::from_secs(20)).await;
    let browser = Browser::start().await;
    for (i, path) in ["/", "/leases", "/groups"].into_iter().enumerate() {
        browser.client.goto(&format!("http://127.0.0.1:{port}{path}")).await.expect("open");
        for round in ["as served", "after a live update"] {
            if round == "after a live update" {
                // The store changes under the open page: one more partition held. The page
                // shows it, without a reload, within a second (issue 14, item 2).
                let shows = match path {
                    "/" => format!("return document.querySelector('#count-leases')?.textContent === '{}'", 3 + i),
                    "/leases" => {
                        format!("return document.querySelectorAll('#leases tr[data-lease]').length === {}", 3 + i)
                    }
                    _ => format!("return document.querySelector('section.group')?.dataset.partitions === '{}'", 2 + i),
                };
                browser.eval("window.__simbaNoReload = 1; return true").await;
                take_partition(&pool, i + 1).await;
                let took = browser.wait_for("the new partition", Duration::from_secs(1), &shows).await;
                eprintln!("{path}: a change in the store shown after {took:?}");
                assert_eq!(browser.eval("return window.__simbaNoReload === 1").await, true, "{path}: reloaded");
            }
            let injected =
                browser.eval("return document.querySelectorAll('simba-x, main img, main script').length").await;
            assert_eq!(injected, 0, "{path} {round}: markup from the store became elements");
            let ran = browser.eval("return window.__pwned === undefined").await;
            assert_eq!(ran, true, "{path} {round}: a script from the store ran");
            let text = browser.eval("return document.getElementById('main').innerText").await;
            let text = text.as_str().unwrap_or_default().to_owned();
            // Session ids show shortened (8 characters), in full in their title.
            let expect: &[&str] = match path {
                "/leases" => &[LEASE, "<simba-x"],
                "/groups" => &[GROUP, "<simba-x"],
                _ => &["<simba-x", LEASE, GROUP],
            };
            for s in expect {
                assert!(text.contains(s), "{path} {round}: {s:?} is not shown as text in:\n{text}");
            }
            let titles = browser.eval("return [...document.querySelectorAll('main code.sid')].map(c => c.title)").await;
            assert!(
                titles.as_array().is_some_and(|t| !t.is_empty() && t.iter().all(|x| x == SESSION)),
                "{path} {round}: session titles {titles}"
            );
        }
    }
    browser.close().await;
    pool.close().await;
    assert!(!cli.is_finished(), "`simba dashboard` stopped early: {:?}", cli.await);
    cli.abort();
}

const ERROR: &str = "<script>window.__pwned=3</script><simba-x>boom</simba-x> & \"quotes\"";

/// Claims and ends one slot of `job` as failed with `error` (the way a node records a run).
async fn failed_run(
    backend: &SqliteBackend,
    session: &simba::backend::SessionId,
    token: u64,
    slot_ms: i64,
    error: &str,
) {
    use simba::backend::Backend;
    use simba::job_store::{Claim, ClaimRequest, Outcome, SlotKind};
    let store = backend.job_store().expect("SQLite has a jobs store");
    let req = ClaimRequest {
        session,
        lease: "evil-job",
        token,
        job: "evil-job",
        slot_ms,
        kind: SlotKind::Scheduled,
        node: "node-x",
        started_ms: slot_ms,
        attempts: 1,
    };
    let Ok(Claim::Claimed(mut r)) = store.claim_run(req).await else { panic!("claim") };
    r.outcome = Outcome::Failed;
    r.error = Some(error.to_owned());
    r.ended_ms = Some(slot_ms + 12);
    assert!(store.finish_run(&r).await.expect("finish"), "recorded");
}

/// Issue 14 item 4: a job's error text holding markup is shown as text on the job page (the
/// history table) and in the jobs page's slot titles, as served and after a live update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_with_markup_is_inert_on_the_jobs_pages() {
    use simba::backend::{Acquire, Backend};
    let _serial = crate::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
    let backend = SqliteBackend::connect(&url).await.expect("sqlite");
    let session = backend.open_session(Duration::from_secs(600)).await.expect("session").id;
    let Ok(Acquire::Won(token)) = backend.acquire(&session, "evil-job").await else { panic!("acquire") };
    let t = chrono::Utc::now().timestamp_millis() - 60_000;
    failed_run(&backend, &session, token, t, ERROR).await;
    let port = free_port();
    let args = ["simba", "dashboard", "--backend", &url, "--listen", &format!("127.0.0.1:{port}")].map(str::to_owned);
    let cli = tokio::spawn(async move {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = simba_cli::run(args, &mut out, &mut err).await;
        (code, String::from_utf8_lossy(&err).into_owned())
    });
    wait_listening(port, Duration::from_secs(20)).await;
    let browser = Browser::start().await;
    let inert = async |what: &str| {
        let injected = browser.eval("return document.querySelectorAll('simba-x, main script').length").await;
        assert_eq!(injected, 0, "{what}: markup from the store became elements");
        assert_eq!(browser.eval("return window.__pwned === undefined").await, true, "{what}: a script ran");
    };
    browser.client.goto(&format!("http://127.0.0.1:{port}/jobs/evil-job")).await.expect("open");
    browser
        .wait_for(
            "the failed record",
            Duration::from_secs(10),
            "return !!document.querySelector('#records tr[data-outcome=\"failed\"]')",
        )
        .await;
    inert("job page").await;
    let shown = browser
        .eval("return document.querySelector('#records tr[data-outcome=\"failed\"] td.error-text').innerText")
        .await;
    assert_eq!(shown, ERROR, "the error is shown as text");
    browser.eval("window.__simbaNoReload = 1; return true").await;
    failed_run(&backend, &session, token, t + 1000, &format!("{ERROR} again")).await;
    let took = browser
        .wait_for(
            "the second record",
            Duration::from_secs(1),
            "return document.querySelectorAll('#records tr[data-outcome=\"failed\"]').length === 2",
        )
        .await;
    eprintln!("/jobs/evil-job: a new record shown after {took:?}");
    assert_eq!(browser.eval("return window.__simbaNoReload === 1").await, true, "reloaded");
    inert("job page after a live update").await;
    let newest = browser.eval("return document.querySelector('#records td.error-text').innerText").await;
    assert_eq!(newest, format!("{ERROR} again"), "newest first");

    browser.client.goto(&format!("http://127.0.0.1:{port}/jobs")).await.expect("open");
    browser
        .wait_for(
            "the bar",
            Duration::from_secs(10),
            "return document.querySelectorAll('tr[data-job=\"evil-job\"] .bar .s').length === 2",
        )
        .await;
    inert("jobs page").await;
    let title = browser.eval("return document.querySelector('tr[data-job=\"evil-job\"] .bar .s').title").await;
    assert!(title.as_str().is_some_and(|t| t.ends_with(ERROR) && t.contains("failed · node-x")), "{title}");
    let no_schedule = browser.eval("return document.querySelector('tr[data-job=\"evil-job\"]').innerText").await;
    assert!(no_schedule.as_str().is_some_and(|t| t.contains("failed")), "{no_schedule}");
    browser.close().await;
    assert!(!cli.is_finished(), "`simba dashboard` stopped early: {:?}", cli.await);
    cli.abort();
}
