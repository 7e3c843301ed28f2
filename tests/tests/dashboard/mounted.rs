//! The dashboard nested in a service, in a real browser (rules O2 and O3): the router under
//! `/simba` on the service's port, reached by a host name the way an ingress passes it
//! (Chromium resolves `simba.test` and `evil.test` to 127.0.0.1). The pages render, their
//! assets and event stream load from under the prefix, an action posts there, and a host that
//! is not allowed gets 421. The schedules tab: the search form submits under the prefix, a
//! schedule's page opens from the listing, and a pause with its note posts and reloads.

#![allow(clippy::print_stderr)] // Timings are printed for the report.

use std::time::Duration;

use fantoccini::Locator;

use crate::harness::Browser;
use crate::mount::{TOKEN, nested_service};

/// Every resource the page loaded, as the browser names them (`performance` entries).
const RESOURCES: &str = "return performance.getEntriesByType('resource').map(e => e.name)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o2_o3_the_nested_dashboard_works_by_host_name_under_its_prefix() {
    let _serial = crate::SERIAL.lock().await;
    let (running, addr) = nested_service().await;
    let port = addr.port();

    let rules = "--host-resolver-rules=MAP simba.test 127.0.0.1, MAP evil.test 127.0.0.1".to_owned();
    let browser = Browser::start_with(&[rules]).await;
    let base = format!("http://simba.test:{port}/simba");

    browser.client.goto(&base).await.expect("open the overview");
    let took = browser
        .wait_for(
            "the overview, live over its event stream",
            Duration::from_secs(20),
            "return document.querySelectorAll('#sessions tr[data-session]').length === 1 \
             && document.querySelector('.live')?.textContent === 'live';",
        )
        .await;
    eprintln!("mounted: overview live under /simba by host name after {took:?}");
    assert_eq!(browser.eval("return document.baseURI").await, format!("{base}/"));
    let styled = browser.eval("return getComputedStyle(document.querySelector('header.top')).display").await;
    assert_ne!(styled, "inline", "app.css applies (a header is inline without it)");

    // Through the navigation, as a person would: the links resolve under the prefix.
    browser.client.find(Locator::Css("nav a[href=\"jobs\"]")).await.expect("jobs tab").click().await.expect("click");
    browser
        .wait_for(
            "the jobs page, live, with tick",
            Duration::from_secs(20),
            "return location.pathname === '/simba/jobs' && !!document.querySelector('tr[data-job=\"tick\"]') \
             && document.querySelector('.live')?.textContent === 'live';",
        )
        .await;
    let resources = browser.eval(RESOURCES).await;
    let names: Vec<&str> = resources.as_array().expect("a list").iter().filter_map(|v| v.as_str()).collect();
    assert!(names.iter().any(|n| n.ends_with("/simba/assets/app.js")), "{names:?}");
    // An open event stream is not in the resource timings until it ends: the page is live (an
    // event came), and the only stream it opens resolves under the prefix.
    let events = browser.eval("return new URL(document.body.dataset.events, document.baseURI).href").await;
    assert_eq!(events, format!("{base}/events/jobs"));
    let prefix = format!("{base}/");
    assert!(names.iter().all(|n| n.starts_with(&prefix)), "every resource from under /simba: {names:?}");

    // An action posts under the prefix too, with the token typed into the page.
    browser.client.find(Locator::Id("token")).await.expect("token field").send_keys(TOKEN).await.expect("type");
    let pause = Locator::Css("tr[data-job=\"tick\"] button[data-action=\"pause\"]");
    browser.client.find(pause).await.expect("pause button").click().await.expect("click");
    browser
        .wait_for(
            "tick paused from the nested page",
            Duration::from_secs(10),
            "return document.getElementById('flash')?.dataset.status === '200' \
             && document.querySelector('tr[data-job=\"tick\"]')?.dataset.paused === 'true';",
        )
        .await;
    eprintln!("mounted: pause posted under /simba and shown paused");

    schedules_tab(&browser, &running).await;

    // The same port by a name that is not allowed: refused (DNS rebinding).
    browser.client.goto(&format!("http://evil.test:{port}/simba/jobs")).await.expect("open by another name");
    let text = browser.eval("return document.body.innerText").await;
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("unexpected Host \"evil.test:") && text.contains("allowed_hosts"), "{text}");
    assert_eq!(browser.eval("return document.querySelectorAll('main').length").await, 0, "no page for evil.test");
    eprintln!("mounted: evil.test refused: {}", text.lines().next().unwrap_or_default());
    browser.close().await;
    running.shutdown().await;
}

/// The schedules tab of the nested dashboard (the token already typed in this tab): the
/// search form (a GET form, allowed by the CSP's `form-action 'self'`), a schedule's page
/// from the listing, and a pause with its note, after which the page reloads and shows it.
async fn schedules_tab(browser: &Browser, running: &simba::runtime::RunningRuntime) {
    use simba::schedule_store::{Schedule, ScheduleSpec};
    let api = simba::admin::Schedules::for_client(running.simba()).expect("the memory backend keeps schedules");
    for id in ["tenant-4711.report", "tenant-4712.report"] {
        let weekly = Schedule::new(id, "report", ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin"));
        api.create(weekly, "alice").await.expect("create");
    }
    browser.client.find(Locator::Css("nav a[href=\"schedules\"]")).await.expect("tab").click().await.expect("click");
    browser
        .wait_for(
            "the schedules page with both schedules",
            Duration::from_secs(10),
            "return location.pathname === '/simba/schedules' \
             && document.querySelectorAll('tr[data-schedule]').length === 2 \
             && document.querySelector('nav a.active')?.textContent === 'Schedules';",
        )
        .await;
    let prefix = browser.client.find(Locator::Css("input[name=\"prefix\"]")).await.expect("prefix field");
    prefix.send_keys("tenant-4711").await.expect("type");
    browser.client.find(Locator::Css("#search button")).await.expect("search").click().await.expect("click");
    browser
        .wait_for(
            "the search by prefix",
            Duration::from_secs(10),
            "return location.pathname === '/simba/schedules' && location.search.includes('prefix=tenant-4711') \
             && document.querySelectorAll('tr[data-schedule]').length === 1;",
        )
        .await;
    let link = Locator::Css("tr[data-schedule=\"tenant-4711.report\"] a");
    browser.client.find(link).await.expect("the schedule's link").click().await.expect("click");
    browser
        .wait_for(
            "the schedule's page with its next 5 fires",
            Duration::from_secs(10),
            "return location.pathname === '/simba/schedules/tenant-4711.report' \
             && document.querySelectorAll('#fires li').length === 5;",
        )
        .await;
    browser
        .client
        .find(Locator::Id("note"))
        .await
        .expect("note field")
        .send_keys("billing freeze")
        .await
        .expect("type");
    let pause = Locator::Css("button[data-schedule=\"tenant-4711.report\"][data-action=\"pause\"]");
    browser.client.find(pause).await.expect("pause button").click().await.expect("click");
    browser
        .wait_for(
            "the schedule paused with its note, after the reload",
            Duration::from_secs(10),
            "return document.querySelector('section.schedule')?.dataset.paused === 'true' \
             && document.getElementById('flash')?.dataset.status === '200' \
             && !!document.querySelector('button[data-action=\"resume\"]') \
             && (document.querySelector('#audit tr[data-action=\"pause\"]')?.textContent ?? '').includes('billing freeze');",
        )
        .await;
    let s = api.get("tenant-4711.report").await.expect("get");
    assert_eq!((s.paused, s.pause_note.as_deref()), (true, Some("billing freeze")));
    eprintln!("mounted: schedules searched, opened and paused with a note under /simba");
}
