//! The schedules pages over a real socket, on the memory backend: the listing's pages and
//! filters, a schedule's sections, the 404 naming the nearest id, the actions with and without
//! the token and the audit records they leave, a backend without a schedule store, and the
//! escaping of what operators typed (notes, payloads, names).

use std::net::SocketAddr;

use super::tests::{HOSTILE_ERROR, TOKEN, get, local, post, record, request};
use super::{ActionToken, serve};
use crate::admin::Schedules;
use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::job_store::Outcome;
use crate::schedule_store::{AuditAction, Schedule, ScheduleSpec, job_name};

/// Markup in what an operator can type: a pause note, an actor's name, a payload's string.
const HOSTILE_NOTE: &str = "<simba-x>note\"'&</simba-x><script>window.__pwned=1</script>";
const HOSTILE_WHO: &str = "<simba-x>who\"'&</simba-x>";
const HOSTILE_PAYLOAD: &str = r#"{"x": "</pre><script>window.__pwned=1</script><simba-x>payload</simba-x>"}"#;

/// 60 `tenant-NNN.report` schedules (handler `report`, weekly in Berlin) and 2 `zz-N.cleanup`
/// (handler `cleanup`, every 5 minutes); `tenant-000.report` has a failed slot in its history.
async fn store_with_schedules() -> MemoryBackend {
    let backend = MemoryBackend::new();
    let api = Schedules::for_backend(&backend).expect("the memory backend keeps schedules");
    for i in 0..60 {
        let s = Schedule::new(
            format!("tenant-{i:03}.report"),
            "report",
            ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin"),
        )
        .with_payload(format!(r#"{{"tenant": {i}}}"#));
        api.create(s, "alice").await.expect("create");
    }
    for i in 1..=2 {
        let s = Schedule::new(
            format!("zz-{i}.cleanup"),
            "cleanup",
            ScheduleSpec::fixed_rate(std::time::Duration::from_secs(300)),
        );
        api.create(s, "bob").await.expect("create");
    }
    let jobs = backend.job_store().expect("jobs store");
    let failed = record(&job_name("tenant-000.report"), 1_764_000_000_000, Outcome::Missed, Some(HOSTILE_ERROR));
    assert!(jobs.append(&failed).await.expect("append"), "recorded");
    backend
}

/// The ids of the listing's rows, in order.
fn row_ids(page: &str) -> Vec<String> {
    page.split("<tr data-schedule=\"").skip(1).filter_map(|s| s.split('"').next()).map(str::to_owned).collect()
}

/// `POST path` with `headers` and a JSON `body`.
async fn post_json(addr: SocketAddr, path: &str, headers: &str, body: &str) -> (u16, String, String) {
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    request(addr, &raw).await
}

/// Ordered by id, 50 a page, the next page after the last id; filters by id prefix and handler;
/// each row's last run from `schedule/<id>`; a bad query is a 400 page saying why; the
/// navigation links the page.
#[tokio::test]
async fn the_listing_pages_and_filters_by_prefix_and_handler() {
    let server = serve(store_with_schedules().await, "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    let (code, _, page) = get(addr, "/schedules").await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<a class=\"tab active\" href=\"schedules\">Schedules</a>"), "in the navigation: {page}");
    let ids = row_ids(&page);
    assert_eq!(ids.len(), 50, "{ids:?}");
    assert_eq!((ids[0].as_str(), ids[49].as_str()), ("tenant-000.report", "tenant-049.report"));
    assert!(page.contains("href=\"schedules?after=tenant-049.report\""), "the next page's link: {page}");
    let first = page.split("data-schedule=\"tenant-001.report\"").next().unwrap_or_default();
    assert!(first.contains("class=\"oc o-missed\""), "tenant-000's last run: {first}");
    assert!(page.contains("href=\"schedules/tenant-000.report\""), "{page}");

    let (code, _, page) = get(addr, "/schedules?after=tenant-049.report").await;
    assert_eq!(code, 200, "{page}");
    let ids = row_ids(&page);
    assert_eq!(ids.len(), 12, "{ids:?}");
    assert_eq!((ids[0].as_str(), ids[11].as_str()), ("tenant-050.report", "zz-2.cleanup"));
    assert!(!page.contains("id=\"next-page\""), "the last page: {page}");
    assert!(page.contains("every 5m"), "{page}");

    let (_, _, page) = get(addr, "/schedules?prefix=tenant-05&handler=").await;
    assert_eq!(row_ids(&page), (50..60).map(|i| format!("tenant-{i:03}.report")).collect::<Vec<_>>());
    assert!(page.contains("name=\"prefix\" value=\"tenant-05\""), "the form keeps the search: {page}");
    let (_, _, page) = get(addr, "/schedules?handler=cleanup").await;
    assert_eq!(row_ids(&page), ["zz-1.cleanup", "zz-2.cleanup"]);
    let (_, _, page) = get(addr, "/schedules?handler=cleanup&prefix=tenant").await;
    assert!(row_ids(&page).is_empty() && page.contains("No schedule matches."), "{page}");

    for (query, says) in [
        ("prefix=%3Cb%3Ex", "as a prefix, invalid schedule id"),
        ("handler=a%20b", "invalid handler"),
        ("after=no%20such", "as the page cursor `after`"),
    ] {
        let (code, _, page) = get(addr, &format!("/schedules?{query}")).await;
        assert_eq!(code, 400, "{query}: {page}");
        assert!(page.contains("id=\"refused\"") && page.contains(says), "{query}: {page}");
        assert!(!page.contains("<b>"), "escaped: {page}");
    }
    server.stop().await;
}

/// A schedule's page: definition, next 5 fires, history of `schedule/<id>` (the job page's
/// table), audit trail; a missing id is a 404 naming the nearest; an invalid one a 400.
#[tokio::test]
async fn a_schedule_page_shows_its_sections_and_a_missing_id_names_the_nearest() {
    let server = serve(store_with_schedules().await, "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    let (code, _, page) = get(addr, "/schedules/tenant-000.report").await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("data-schedule=\"tenant-000.report\" data-paused=\"false\""), "{page}");
    assert!(page.contains("0 0 9 * * MON") && page.contains("Europe/Berlin"), "{page}");
    assert!(page.contains("<pre id=\"payload\">{&quot;tenant&quot;: 0}</pre>"), "{page}");
    assert!(page.contains("misfire skip"), "{page}");
    let fires = page.split("<ol id=\"fires\">").nth(1).and_then(|f| f.split("</ol>").next()).unwrap_or_default();
    assert_eq!(fires.matches("<li").count(), 5, "{fires}");
    assert!(fires.contains(":00:00.000 UTC"), "{fires}");
    assert!(page.contains("History of <code>schedule/tenant-000.report</code>"), "{page}");
    assert!(page.contains("<tbody id=\"records\"><tr data-outcome=\"missed\""), "the history table: {page}");
    assert!(page.contains("<tr data-action=\"create\">") && page.contains("alice"), "the audit trail: {page}");
    assert!(!page.contains("data-action=\"pause\""), "no buttons when read-only: {page}");
    assert!(!page.contains("data-events="), "not a live page: {page}");

    let (code, _, page) = get(addr, "/schedules/tenant-000.reprot").await;
    assert_eq!(code, 404, "{page}");
    assert!(page.contains("<a id=\"nearest\" href=\"schedules/tenant-000.report\">"), "{page}");
    let (code, _, page) = get(addr, "/schedules/%3Cscript%3Ealert(1)%3C%2Fscript%3E").await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("&lt;script&gt;alert(1)") && !page.contains("<script>alert"), "{page}");
    server.stop().await;
}

/// Pause (with its note), resume and run now behind the token, refused as the job actions
/// are; each leaves an audit record by `dashboard`; an unknown id is a 404 naming the nearest.
#[tokio::test]
async fn actions_pause_resume_and_run_now_behind_the_token() {
    let backend = store_with_schedules().await;
    let api = Schedules::for_backend(&backend).expect("schedules");
    let config = local().with_actions(ActionToken::new(TOKEN).expect("token"));
    let server = serve(backend.clone(), "memory://", &config).await.expect("serve");
    let addr = server.local_addr();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let pause = "/api/schedules/tenant-001.report/pause";
    let note = r#"{"note": "billing freeze"}"#;
    for (path, headers, want) in [
        (pause.to_owned(), String::new(), 401),
        (pause.to_owned(), "Authorization: Bearer 0123456789abcdef0124\r\n".to_owned(), 403),
        (format!("{pause}?token={TOKEN}"), auth.clone(), 400),
        (pause.to_owned(), format!("{auth}Origin: http://evil.example\r\n"), 403),
        (pause.to_owned(), format!("{auth}Sec-Fetch-Site: cross-site\r\n"), 403),
        ("/api/schedules/tenant-001.report/delete".to_owned(), auth.clone(), 404),
    ] {
        let (code, _, body) = post_json(addr, &path, &headers, note).await;
        assert_eq!(code, want, "{path} {headers:?}: {body}");
    }
    assert!(!api.get("tenant-001.report").await.expect("get").paused, "nothing refused was done");

    let (code, _, body) = post_json(addr, pause, &format!("{auth}Origin: http://{addr}\r\n"), note).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!((v["ok"].as_bool(), v["schedule"].as_str()), (Some(true), Some("tenant-001.report")));
    let s = api.get("tenant-001.report").await.expect("get");
    assert_eq!((s.paused, s.pause_note.as_deref()), (true, Some("billing freeze")));
    let last = &api.audit(Some("tenant-001.report"), 1).await.expect("audit")[0];
    assert_eq!(
        (last.who.as_str(), last.action, last.note.as_deref()),
        ("dashboard", AuditAction::Pause, Some("billing freeze"))
    );
    let (_, _, page) = get(addr, "/schedules/tenant-001.report").await;
    assert!(page.contains("data-action=\"resume\"") && page.contains("billing freeze"), "{page}");

    let (code, _, body) = post(addr, "/api/schedules/tenant-001.report/resume", &auth).await;
    assert_eq!(code, 200, "{body}");
    assert!(!api.get("tenant-001.report").await.expect("get").paused, "resumed");
    let (code, _, body) =
        post_json(addr, "/api/schedules/tenant-001.report/trigger", &auth, r#"{"note": "rerun"}"#).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("schedule/tenant-001.report"), "{body}");
    let last = &api.audit(Some("tenant-001.report"), 1).await.expect("audit")[0];
    assert_eq!((last.who.as_str(), last.action), ("dashboard", AuditAction::Trigger));
    assert!(last.note.as_deref().is_some_and(|n| n.starts_with("request ") && n.ends_with(": rerun")), "{last:?}");
    let jobs = backend.job_store().expect("jobs store");
    let state = jobs.job(&job_name("tenant-001.report")).await.expect("job").expect("known");
    assert!(state.trigger_pending_ms.is_some(), "a run is requested: {state:?}");

    let (code, _, body) = post(addr, "/api/schedules/tenant-001.reprot/pause", &auth).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("did you mean `tenant-001.report`?"), "{body}");
    let (code, _, body) = post_json(addr, pause, &auth, "not json").await;
    assert_eq!(code, 400, "{body}");
    server.stop().await;

    let server = serve(backend, "memory://", &local()).await.expect("serve");
    let (code, _, body) = post(server.local_addr(), pause, &auth).await;
    assert_eq!(code, 405, "read-only: {body}");
    server.stop().await;
}

/// Notes, payloads and names that hold markup are escaped on both pages and in a 404.
#[tokio::test]
async fn markup_in_notes_payloads_and_names_is_escaped() {
    let backend = store_with_schedules().await;
    let api = Schedules::for_backend(&backend).expect("schedules");
    let s =
        Schedule::new("hostile", "report", ScheduleSpec::cron("0 0 9 * * MON", "UTC")).with_payload(HOSTILE_PAYLOAD);
    api.create(s, HOSTILE_WHO).await.expect("create");
    api.pause("hostile", HOSTILE_WHO, Some(HOSTILE_NOTE)).await.expect("pause");
    let server = serve(backend, "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    for path in ["/schedules?prefix=hostile", "/schedules/hostile", "/schedules/tenant-000.report"] {
        let (code, _, page) = get(addr, path).await;
        assert_eq!(code, 200, "{path}: {page}");
        assert!(!page.contains("<simba-x>") && !page.contains("<script>window"), "{path} is not escaped: {page}");
    }
    let (_, _, page) = get(addr, "/schedules/hostile").await;
    assert!(page.contains("&lt;simba-x&gt;note&quot;'&amp;&lt;/simba-x&gt;"), "the note, escaped: {page}");
    assert!(page.contains("&lt;simba-x&gt;who&quot;'&amp;&lt;/simba-x&gt;"), "the actor, escaped: {page}");
    assert!(page.contains("&lt;/pre&gt;&lt;script&gt;window.__pwned=1"), "the payload, escaped: {page}");
    let (_, _, page) = get(addr, "/schedules/tenant-000.report").await;
    assert!(page.contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;"), "the history's error, escaped: {page}");
    let (code, _, page) = get(addr, "/schedules/%3Csimba-x%3E").await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("&lt;simba-x&gt;") && !page.contains("<simba-x>"), "{page}");
    server.stop().await;
}

/// A backend without a schedule store: the pages say so (200, no alert); actions are 501.
#[cfg(feature = "tck")]
#[tokio::test]
async fn a_backend_without_a_schedule_store_says_so() {
    let (backend, _) = crate::tck::FaultyBackend::new(MemoryBackend::new());
    let config = local().with_actions(ActionToken::new(TOKEN).expect("token"));
    let server = serve(backend.with_job_store().without_schedule_store(), "memory://", &config).await.expect("serve");
    let addr = server.local_addr();
    for path in ["/schedules", "/schedules?prefix=x", "/schedules/x"] {
        let (code, _, page) = get(addr, path).await;
        assert_eq!(code, 200, "{path}: {page}");
        assert!(page.contains("id=\"no-schedules\"") && page.contains("keeps no schedules"), "{path}: {page}");
        assert!(!page.contains("role=\"alert\""), "{path}: {page}");
    }
    let (code, _, body) = post(addr, "/api/schedules/x/pause", &format!("Authorization: Bearer {TOKEN}\r\n")).await;
    assert_eq!(code, 501, "{body}");
    server.stop().await;
}
