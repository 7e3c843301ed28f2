//! The jobs pages in a real browser (issue 14 phase 2): three node processes on one SQLite
//! file run the 1 s cron job `tick`; the jobs page lists it with a bar that grows; a pause
//! from the page without the token is refused (401), with it the job shows paused and its
//! history gets no `ran` record until it is resumed from the job page; "Run now" there adds a
//! `manual` run.

#![allow(clippy::print_stderr)] // Timings and screenshot paths are printed for the report.

use std::time::{Duration, Instant};

use fantoccini::Locator;

use crate::browser::write_config;
use crate::harness::{Browser, free_port, screenshot_dir, spawn_node, wait_listening};

const TOKEN: &str = "d4c1e7b09a8f63e2c5b14a70";

/// `data-slots` of the `tick` row (0 when absent).
const TICK_SLOTS: &str = "return +(document.querySelector('tr[data-job=\"tick\"]')?.dataset.slots ?? 0)";

/// The newest slot (unix ms) recorded `ran` on the page (bar cells or history rows), or 0.
const NEWEST_RAN: &str = "Math.max(0, ...[...document.querySelectorAll('main [data-outcome=\"ran\"][data-slot-ms]')].map(e => +e.dataset.slotMs))";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_page_bar_grows_and_pause_from_the_page_needs_the_token() {
    let _serial = crate::SERIAL.lock().await;
    let t0 = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path());
    let token_file = dir.path().join("dashboard.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let port = free_port();
    let a = spawn_node(
        dir.path(),
        "a",
        &[
            ("SIMBA_DASHBOARD__LISTEN", format!("127.0.0.1:{port}")),
            ("SIMBA_DASHBOARD__ACTIONS", "true".to_owned()),
            ("SIMBA_DASHBOARD__TOKEN_FILE", token_file.display().to_string()),
        ],
    );
    let b = spawn_node(dir.path(), "b", &[]);
    let c = spawn_node(dir.path(), "c", &[]);
    wait_listening(port, Duration::from_secs(20)).await;
    let browser = Browser::start().await;
    let base = format!("http://127.0.0.1:{port}");

    browser.client.goto(&format!("{base}/jobs")).await.expect("open jobs");
    let took = browser
        .wait_for(
            "tick listed with its schedule and 3 slots",
            Duration::from_secs(30),
            "const r = document.querySelector('tr[data-job=\"tick\"]'); \
             return !!r && r.innerText.includes('* * * * * *') && r.innerText.includes('UTC') \
             && +r.dataset.slots >= 3 && document.querySelector('.live')?.textContent === 'live';",
        )
        .await;
    eprintln!("jobs: tick listed with 3 slots after {took:?}");
    let before = browser.eval(TICK_SLOTS).await.as_u64().unwrap_or(0);
    let took = browser
        .wait_for(
            "the bar grows",
            Duration::from_secs(5),
            &format!("return +(document.querySelector('tr[data-job=\"tick\"]')?.dataset.slots ?? 0) > {before}"),
        )
        .await;
    eprintln!("jobs: the bar grew past {before} slots after {took:?}, without a reload");
    // A bar long enough to read in the screenshot.
    browser.wait_for("12 slots", Duration::from_secs(20), &format!("{TICK_SLOTS} >= 12")).await;
    let cells = browser
        .eval(
            "const r = document.querySelector('tr[data-job=\"tick\"]'); \
             const s = [...r.querySelectorAll('.bar .s')]; \
             return s.length === +r.dataset.slots && s.every(x => x.title.includes('UTC · scheduled · '))",
        )
        .await;
    assert_eq!(cells, true, "one titled cell per slot");
    let holder = browser.eval("return document.querySelector('tr[data-job=\"tick\"]').innerText").await;
    assert!(holder.as_str().is_some_and(|t| t.contains("token ")), "the holder and its token: {holder}");

    // Pause without the token: the page sends the request without a header; refused.
    let pause = Locator::Css("tr[data-job=\"tick\"] button[data-action=\"pause\"]");
    browser.client.find(pause).await.expect("pause button").click().await.expect("click");
    browser
        .wait_for(
            "the refusal",
            Duration::from_secs(5),
            "return document.getElementById('flash')?.dataset.status === '401'",
        )
        .await;
    let flash = browser.eval("return document.getElementById('flash').textContent").await;
    eprintln!("jobs: pause without the token: {flash}");
    assert!(flash.as_str().is_some_and(|t| t.contains("Authorization: Bearer")), "{flash}");
    let paused = browser.eval("return document.querySelector('tr[data-job=\"tick\"]').dataset.paused").await;
    assert_eq!(paused, "false", "refused: not paused");

    // With the token typed into the page's field.
    browser.client.find(Locator::Id("token")).await.expect("token field").send_keys(TOKEN).await.expect("type");
    browser.client.find(pause).await.expect("pause button").click().await.expect("click");
    let clicked = Instant::now();
    browser
        .wait_for("paused", Duration::from_secs(5), "return document.getElementById('flash')?.dataset.status === '200'")
        .await;
    browser
        .wait_for(
            "tick shown paused",
            Duration::from_secs(2),
            "return document.querySelector('tr[data-job=\"tick\"]')?.dataset.paused === 'true'",
        )
        .await;
    eprintln!("jobs: paused from the page, shown paused {:?} after the click", clicked.elapsed());
    let paused_at = chrono::Utc::now().timestamp_millis();
    eprintln!("screenshot {}", browser.screenshot(&screenshot_dir(), "dashboard-jobs").await.display());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let newest = browser.eval(&format!("return {NEWEST_RAN}")).await.as_i64().unwrap_or(0);
    // A run claimed just before the pause may still end: at most the slot of that second.
    assert!(newest <= paused_at + 1000, "a `ran` record after the pause: slot {newest} > {paused_at}");
    eprintln!("jobs: no `ran` slot after the pause for 4 s (newest {} ms before it)", paused_at - newest);

    // The job page: history table; resume from there (the token stayed in this tab).
    browser.client.goto(&format!("{base}/jobs/tick")).await.expect("open the job page");
    browser
        .wait_for(
            "the history table",
            Duration::from_secs(10),
            "return document.querySelectorAll('#records tr[data-outcome=\"ran\"]').length >= 3 \
             && document.querySelector('section.job')?.dataset.paused === 'true'",
        )
        .await;
    let row = browser.eval("return document.querySelector('#records tr[data-outcome=\"ran\"]').innerText").await;
    assert!(row.as_str().is_some_and(|t| t.contains("scheduled") && t.contains("UTC")), "{row}");
    let resume = Locator::Css("section.job button[data-action=\"resume\"]");
    browser.client.find(resume).await.expect("resume button").click().await.expect("click");
    let resumed_at = chrono::Utc::now().timestamp_millis();
    browser
        .wait_for(
            "resumed",
            Duration::from_secs(5),
            "return document.getElementById('flash')?.dataset.status === '200'",
        )
        .await;
    let took = browser
        .wait_for(
            "a new `ran` record after the resume",
            Duration::from_secs(5),
            &format!("return {NEWEST_RAN} > {resumed_at} - 1000"),
        )
        .await;
    eprintln!("job page: resumed; a new `ran` record shown {took:?} later");
    // Run now: the holder runs a `manual` slot within one renewal interval (1 s here).
    let run_now = Locator::Css("section.job button[data-action=\"trigger\"]");
    browser.client.find(run_now).await.expect("run now button").click().await.expect("click");
    let took = browser
        .wait_for(
            "a manual run",
            Duration::from_secs(5),
            "return document.getElementById('flash')?.dataset.status === '200' \
             && !!document.querySelector('#records tr[data-kind=\"manual\"][data-outcome=\"ran\"]')",
        )
        .await;
    eprintln!("job page: run now -> a `manual` record shown {took:?} after the click");
    eprintln!("screenshot {}", browser.screenshot(&screenshot_dir(), "dashboard-job").await.display());
    browser.close().await;
    drop((a, b, c));
    eprintln!("jobs browser test took {:?}", t0.elapsed());
}
