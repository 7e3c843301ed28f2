//! The dashboard over a real socket: pages, JSON, assets, guards, the event stream, and the
//! action route table with its authorisation (the browser tests are in
//! `tests/tests/dashboard/`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::auth::{Action, ActionError, Control};
use super::history::Tracker;
use super::model::{self, Model};
use super::pages::{self, Page};
use super::server::start;
use super::source::{BoxFuture, JobRead, JobsRead, NodeInfo, Reading, Registered, Source};
use super::{ActionToken, DashboardConfig, serve};
use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, GroupInfo, LeaseInfo, SessionId, SessionInfo, StoreSnapshot};
use crate::job::Schedule;
use crate::job_store::{JobState, Outcome, RunRecord, SlotKind};

pub(super) const TOKEN: &str = "0123456789abcdef0123";

pub(super) fn local() -> DashboardConfig {
    DashboardConfig::new(([127, 0, 0, 1], 0).into())
}

/// One request on its own connection: `(status, head, body)`.
pub(super) async fn request(addr: SocketAddr, raw: &str) -> (u16, String, String) {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    conn.write_all(raw.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf)).await.expect("in time").expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

pub(super) async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    request(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).await
}

pub(super) async fn post(addr: SocketAddr, path: &str, headers: &str) -> (u16, String, String) {
    let raw =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{headers}\r\n");
    request(addr, &raw).await
}

/// A reading with markup in every string the pages show.
pub(super) fn hostile_reading() -> Reading {
    let m = |what: &str| format!("<simba-x>{what}\"'&</simba-x>");
    let (a, b) = (SessionId::new(m("session-a")), SessionId::new(m("session-b")));
    let group = m("group");
    let cluster = StoreSnapshot {
        taken_at: Some(SystemTime::now()),
        sessions: vec![
            SessionInfo { id: a.clone(), age: Some(Duration::from_secs(5)), remaining: Some(Duration::from_secs(9)) },
            SessionInfo { id: b.clone(), age: None, remaining: None },
        ],
        leases: vec![
            LeaseInfo { name: m("lease"), session: a.clone(), token: 7, acquired_at: Some(SystemTime::now()) },
            LeaseInfo { name: format!("{group}.0"), session: b.clone(), token: 2, acquired_at: None },
        ],
        groups: vec![GroupInfo { name: group, members: vec![a.clone(), b.clone()] }],
    }
    .normalized();
    let mut nodes = BTreeMap::new();
    nodes.insert(a, NodeInfo { label: m("node"), this_node: true });
    Reading { cluster, nodes, ..Reading::default() }
}

/// A reading whose holders change between two observations (token history, moves, feed).
fn model_of(readings: &[Reading], error: Option<String>, backend: &str) -> Model {
    let mut tracker = Tracker::default();
    let (mut cluster, mut jobs) = (None, None);
    for (i, r) in readings.iter().enumerate() {
        let now = SystemTime::now() + Duration::from_secs(i as u64);
        tracker.observe(&r.cluster, now);
        cluster = Some(model::cluster(r, &tracker, now));
        jobs = Some(super::jobs::view(r, now));
    }
    Model {
        backend: backend.to_owned(),
        now: SystemTime::now(),
        error,
        last_ok: Some(SystemTime::now()),
        actions: true,
        cluster,
        jobs,
    }
}

/// Security: markup in any rendered string is escaped on every page and in
/// every event-stream fragment.
#[test]
fn markup_in_every_rendered_string_is_escaped() {
    let first = hostile_reading();
    let mut second = first.clone();
    // The lease changes hands and the partition moves, so history, feed and moves render too.
    let (a, b) = (second.cluster.sessions[0].id.clone(), second.cluster.sessions[1].id.clone());
    for l in &mut second.cluster.leases {
        if l.session == a {
            (l.session, l.token) = (b.clone(), 8);
        } else {
            (l.session, l.token) = (a.clone(), 3);
        }
    }
    let model = model_of(&[first, second], Some("<simba-x>error\"'&</simba-x>".into()), "<simba-x>backend</simba-x>");
    for page in Page::ALL {
        let html = pages::page(&page, &model, "").into_string();
        assert!(!html.contains("<simba-x"), "{page:?} renders raw markup:\n{html}");
        assert!(html.contains("&lt;simba-x&gt;"), "{page:?} shows the escaped text");
        let main = pages::main(&page, &model).into_string();
        assert!(!main.contains("<simba-x") && !main.contains("\"'&<"), "{page:?}");
    }
    let overview = pages::main(&Page::Overview, &model).into_string();
    for field in ["session-a", "node", "lease", "group", "error"] {
        assert!(overview.contains(&format!("&lt;simba-x&gt;{field}&quot;'&amp;&lt;/simba-x&gt;")), "{field}");
    }
    let leases = pages::main(&Page::Leases, &model).into_string();
    assert!(leases.contains("token 7") && leases.contains("token 8"), "the feed shows the change:\n{leases}");
    let groups = pages::main(&Page::Groups, &model).into_string();
    assert!(groups.contains("data-group=\"&lt;simba-x&gt;group&quot;'&amp;&lt;/simba-x&gt;\""), "{groups}");
    assert!(groups.contains("Moved in the last 10 s"), "the move is listed");
}

async fn memory_cluster() -> (MemoryBackend, SessionId) {
    let backend = MemoryBackend::new();
    let s = backend.open_session(Duration::from_secs(60)).await.expect("session").id;
    backend.acquire(&s, "report").await.expect("acquire");
    backend.join_group(&s, "parts").await.expect("join");
    backend.acquire(&s, "parts.0").await.expect("acquire");
    (backend, s)
}

/// Pages, JSON and assets are served; no secret of the URL reaches them; no listing.
#[tokio::test]
async fn pages_json_and_assets_hold_no_secret() {
    let (backend, s) = memory_cluster().await;
    let url = "postgres://simba:hunter2@db:5432/simba?sslpassword=k3y-s3cret&sslmode=require";
    let server = serve(backend, url, &local()).await.expect("serve");
    let addr = server.local_addr();
    for path in ["/", "/leases", "/groups", "/api/state"] {
        let (code, head, body) = get(addr, path).await;
        assert_eq!(code, 200, "{path}: {head}");
        assert!(!body.contains("hunter2") && !body.contains("k3y-s3cret"), "{path} leaks a secret");
        assert!(body.contains("postgres://simba:***@db:5432/simba"), "{path} names the backend, redacted");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("content-security-policy: default-src 'none'; script-src 'self'"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    let (_, _, overview) = get(addr, "/").await;
    assert!(overview.contains(&format!("data-session=\"{s}\"")), "{overview}");
    let (_, _, json) = get(addr, "/api/state").await;
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["cluster"]["sessions"][0]["id"], s.as_str());
    assert_eq!(v["cluster"]["leases"][1]["name"], "report");
    assert_eq!(v["cluster"]["groups"][0]["balanced"], true);
    assert_eq!(v["actions"], false);
    for (path, kind) in
        [("/assets/app.css", "text/css"), ("/assets/app.js", "text/javascript"), ("/assets/icon.svg", "image/svg")]
    {
        let (code, head, _) = get(addr, path).await;
        assert_eq!(code, 200, "{path}");
        assert!(head.to_ascii_lowercase().contains(&format!("content-type: {kind}")), "{head}");
    }
    for path in ["/assets/", "/assets", "/assets/../Cargo.toml", "/assets/%2e%2e%2fCargo.toml", "/src/", "/events/nope"]
    {
        let (code, _, body) = get(addr, path).await;
        assert_eq!(code, 404, "{path}: {body}");
    }
    server.stop().await;
}

/// Read-only unless configured; other hosts (DNS rebinding) and large bodies are refused.
#[tokio::test]
async fn read_only_host_check_and_size_bound() {
    let (backend, _) = memory_cluster().await;
    let server = serve(backend, "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    let (code, head, body) = post(addr, "/api/jobs/report/pause", &format!("Authorization: Bearer {TOKEN}\r\n")).await;
    assert_eq!(code, 405, "{body}");
    assert!(body.contains("read-only") && head.to_ascii_lowercase().contains("allow: get, head"), "{head}\n{body}");
    let (code, _, body) = post(addr, "/", "").await;
    assert_eq!(code, 405, "{body}");
    let raw = "GET / HTTP/1.1\r\nHost: evil.example:9465\r\nConnection: close\r\n\r\n";
    let (code, _, body) = request(addr, raw).await;
    assert_eq!(code, 421, "{body}");
    let raw = format!("POST / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n");
    let (code, _, body) = request(addr, &raw).await;
    assert_eq!(code, 413, "{body}");
    server.stop().await;
}

/// Records what it is asked.
#[derive(Default)]
struct Recorder(Mutex<Vec<(String, Action)>>);

impl Control for Recorder {
    fn act(&self, job: &str, action: Action) -> BoxFuture<'_, Result<String, ActionError>> {
        let job = job.to_owned();
        Box::pin(async move {
            if job == "ghost" {
                return Err(ActionError::UnknownJob("no job `ghost`: jobs are report".into()));
            }
            if job == "broken" {
                return Err(ActionError::Failed("the store refused".into()));
            }
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((job.clone(), action));
            Ok(format!("{} {job}: done", action.name()))
        })
    }
}

pub(super) struct Fixed(pub(super) Reading);

impl Source for Fixed {
    fn read(&self) -> BoxFuture<'_, Result<Reading, String>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
    fn describe(&self) -> String {
        "memory://".into()
    }
}

/// Actions: POST only with `actions = true`, the token only in the header
/// and compared in constant time, cross-site requests refused; the route table reaches the
/// job control with the right action.
#[tokio::test]
async fn actions_are_authorised_then_dispatched() {
    let control = Arc::new(Recorder::default());
    let config = local().with_actions(ActionToken::new(TOKEN).expect("token"));
    let source = Arc::new(Fixed(hostile_reading()));
    let server = start(source, Some(Arc::clone(&control) as Arc<dyn Control>), &config).await.expect("start");
    let addr = server.local_addr();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let pause = "/api/jobs/report/pause".to_owned();
    let cases: Vec<(String, String, u16)> = vec![
        (pause.clone(), String::new(), 401),
        (pause.clone(), "Authorization: Bearer 0123456789abcdef0124\r\n".into(), 403),
        (pause.clone(), format!("Authorization: {TOKEN}\r\n"), 401),
        (format!("{pause}?token={TOKEN}"), auth.clone(), 400),
        (pause.clone(), format!("{auth}Origin: http://evil.example\r\n"), 403),
        (pause.clone(), format!("{auth}Sec-Fetch-Site: cross-site\r\n"), 403),
        ("/api/jobs/report/delete".into(), auth.clone(), 404),
        ("/api/jobs/no%2Fslash/pause".into(), auth.clone(), 400),
        ("/api/jobs/ghost/trigger".into(), auth.clone(), 404),
        ("/api/jobs/broken/trigger".into(), auth.clone(), 502),
    ];
    for (path, headers, want) in &cases {
        let (code, _, body) = post(addr, path, headers).await;
        assert_eq!(code, *want, "{path} {headers:?}: {body}");
    }
    assert!(control.0.lock().expect("lock").is_empty(), "nothing refused or failed was recorded");
    for action in Action::ALL {
        let path = format!("/api/jobs/report/{}", action.name());
        let (code, _, body) = post(addr, &path, &format!("{auth}Origin: http://{addr}\r\n")).await;
        assert_eq!(code, 200, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v["ok"], true);
        assert_eq!(v["action"], action.name());
    }
    let done = control.0.lock().expect("lock").clone();
    assert_eq!(done, Action::ALL.iter().map(|a| ("report".to_owned(), *a)).collect::<Vec<_>>());
    let (code, _, _) = get(addr, "/").await;
    assert_eq!(code, 200, "pages still served");
    server.stop().await;

    // With actions on but no job control (today's runtime): authorised, then 501.
    let server = start(Arc::new(Fixed(hostile_reading())), None, &config).await.expect("start");
    let (code, _, body) = post(server.local_addr(), "/api/jobs/report/pause", &auth).await;
    assert_eq!(code, 501, "{body}");
    let (code, _, _) = post(server.local_addr(), "/api/jobs/report/pause", "").await;
    assert_eq!(code, 401, "the token is checked first");
    server.stop().await;
}

/// Live: a change in the store reaches an open event stream within a second.
#[tokio::test]
async fn a_change_reaches_the_event_stream_within_a_second() {
    let (backend, s) = memory_cluster().await;
    let server = serve(backend.clone(), "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET /events/leases HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    conn.write_all(req.as_bytes()).await.expect("write");
    let mut seen = String::new();
    let mut read_until = async |needle: &str, within: Duration| {
        let deadline = tokio::time::Instant::now() + within;
        let mut buf = [0u8; 8192];
        while !seen.contains(needle) {
            let n = tokio::time::timeout_at(deadline, conn.read(&mut buf)).await.expect(needle).expect("read");
            assert!(n > 0, "stream closed");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    read_until("event: main", Duration::from_secs(5)).await;
    let changed = tokio::time::Instant::now();
    backend.acquire(&s, "fresh-lease").await.expect("acquire");
    read_until("data-lease=\"fresh-lease\"", Duration::from_secs(1)).await;
    let took = changed.elapsed();
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(conn);
    server.stop().await;
}

/// A record of `job` at `slot_ms` with `outcome`.
pub(super) fn record(job: &str, slot_ms: i64, outcome: Outcome, error: Option<&str>) -> RunRecord {
    RunRecord {
        job: job.to_owned(),
        slot_ms,
        kind: SlotKind::Scheduled,
        outcome,
        attempt: 1,
        attempts: 1,
        session: "s1".into(),
        node: "node-a".into(),
        token: 4,
        started_ms: Some(slot_ms),
        ended_ms: Some(slot_ms + 250),
        error: error.map(str::to_owned),
        request_key: None,
        payload_override: None,
    }
}

const HOSTILE_JOB: &str = "<simba-x>job\"'&</simba-x>";
pub(super) const HOSTILE_ERROR: &str = "<script>window.__pwned=1</script><simba-x>boom</simba-x>";

/// A store with a registered cron job `report` (three slots, the last failed with markup in
/// its error, held by session a) and a hostile job name that only the store knows.
fn jobs_reading() -> Reading {
    let mut r = hostile_reading();
    let holder = r.cluster.sessions[0].id.clone();
    r.cluster.leases.push(LeaseInfo { name: "report".into(), session: holder, token: 9, acquired_at: None });
    let t = 1_764_608_400_000; // 2025-12-01 17:00:00 UTC
    let records = vec![
        record("report", t + 2000, Outcome::Failed, Some(HOSTILE_ERROR)),
        record("report", t + 1000, Outcome::Missed, None),
        record("report", t, Outcome::Ran, None),
    ];
    let report = JobState {
        job: "report".into(),
        paused: false,
        last_slot_ms: Some(t + 2000),
        last: Some(records[0].clone()),
        trigger_pending_ms: None,
    };
    let hostile = JobState { job: HOSTILE_JOB.into(), paused: true, ..JobState::default() };
    r.jobs = JobsRead::Read(vec![JobRead { state: report, records }, JobRead { state: hostile, records: vec![] }]);
    r.registry = vec![Registered {
        name: "report".into(),
        lease: "report".into(),
        partitions: None,
        schedule: Some(Schedule::cron_in("0 */5 * * * *", "Europe/Berlin")),
    }];
    r
}

/// The jobs page shows schedule, zone, next fire, holder, last outcome
/// and a bar of the slots (oldest left, a title each); the job page the history table; every
/// job name and error text escaped (an error holding `<script>` is text).
#[test]
fn jobs_pages_show_the_store_and_escape_names_and_errors() {
    let model = model_of(&[jobs_reading()], None, "memory://");
    let jobs = pages::main(&Page::Jobs, &model).into_string();
    assert!(!jobs.contains("<simba-x") && !jobs.contains("<script>"), "raw markup:\n{jobs}");
    assert!(jobs.contains("data-job=\"&lt;simba-x&gt;job&quot;'&amp;&lt;/simba-x&gt;\""), "{jobs}");
    assert!(jobs.contains("<code>0 */5 * * * *</code>") && jobs.contains("Europe/Berlin"), "schedule:\n{jobs}");
    assert!(jobs.contains("data-slots=\"3\""), "{jobs}");
    let row = jobs.split("<tr data-job=\"report\"").nth(1).expect("the report row");
    let bar = row.split("class=\"bar\"").nth(1).expect("a bar");
    let order: Vec<&str> = bar.match_indices("data-outcome=\"").map(|(i, _)| &bar[i + 14..i + 18]).take(3).collect();
    assert_eq!(order, ["ran\"", "miss", "fail"], "oldest left:\n{bar}");
    assert!(
        bar.contains(
            "title=\"2025-12-01 17:00:02.000 UTC · scheduled · failed · node-a · token 4 · 250ms · &lt;script&gt;"
        ),
        "{bar}"
    );
    assert!(jobs.contains("token 9"), "the holder's token:\n{jobs}");
    assert!(jobs.contains("class=\"badge warn paused\""), "the hostile job is paused");
    // Buttons only for names an action can carry.
    assert!(jobs.contains("data-job=\"report\" data-action=\"pause\""), "{jobs}");
    assert_eq!(jobs.matches("data-action=\"trigger\"").count(), 1, "no button for an invalid name");
    let next = model.jobs.as_ref().and_then(|v| v.rows().iter().find(|j| j.name == "report").and_then(|j| j.next_fire));
    let next = next.expect("a cron job has a next fire");
    let secs = next.duration_since(SystemTime::UNIX_EPOCH).expect("after 1970").as_secs();
    assert_eq!(secs % 300, 0, "on a five-minute slot");
    assert!(next > SystemTime::now() && next < SystemTime::now() + Duration::from_secs(301));

    let job = pages::main(&Page::Job("report".into()), &model).into_string();
    assert!(!job.contains("<script>") && !job.contains("<simba-x"), "{job}");
    assert!(job.contains("&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;simba-x&gt;boom"), "{job}");
    assert_eq!(job.matches("<tr data-outcome=").count(), 3, "{job}");
    assert!(job.contains("data-slot-ms=\"1764608402000\"") && job.contains("node-a"), "{job}");
    let page = pages::page(&Page::Job(HOSTILE_JOB.into()), &model, "/simba").into_string();
    assert!(!page.contains("<simba-x"), "{page}");
    assert!(page.contains("data-events=\"events/job/%3Csimba-x%3Ejob%22%27%26%3C/simba-x%3E\""), "{page}");
    let unknown = pages::main(&Page::Job("nope".into()), &model).into_string();
    assert!(unknown.contains("No job named <code>nope</code>"), "{unknown}");

    let read_only = Model { actions: false, ..model.clone() };
    let jobs = pages::page(&Page::Jobs, &read_only, "").into_string();
    assert!(!jobs.contains("data-action") && !jobs.contains("id=\"token\""), "read-only: no buttons\n{jobs}");
    let v = super::jobs::to_json(model.jobs.as_ref());
    assert_eq!(v["store"], true);
    assert_eq!(v["jobs"][0]["job"], HOSTILE_JOB, "ordered by name");
    assert_eq!(v["jobs"][0]["paused"], true);
    assert_eq!(v["jobs"][1]["job"], "report");
    assert_eq!(v["jobs"][1]["time_zone"], "Europe/Berlin");
    assert_eq!(v["jobs"][1]["records"][0]["error"], HOSTILE_ERROR);
    assert_eq!(v["jobs"][1]["holder"]["token"], 9);
}

/// A backend without a jobs store: the jobs pages say so; no error.
#[test]
fn a_backend_without_a_jobs_store_says_so() {
    let model = model_of(&[hostile_reading()], None, "memory://");
    for page in [Page::Jobs, Page::Job("report".into())] {
        let html = pages::main(&page, &model).into_string();
        assert!(html.contains("This backend keeps no job history"), "{html}");
        assert!(!html.contains("role=\"alert\""), "{html}");
    }
    assert_eq!(super::jobs::to_json(model.jobs.as_ref())["store"], false);
}

/// Actions reach the jobs store through `admin::Jobs`: pause shows on the page and in
/// `/api/jobs`, an unknown job is 404 naming the nearest, a store failure 502; the jobs
/// pages and their event streams are served.
#[tokio::test]
async fn actions_pause_resume_and_trigger_the_store() {
    let (backend, _) = memory_cluster().await;
    let store = backend.job_store().expect("the memory backend has a jobs store");
    store.trigger("report", "dashboard-test", 1).await.expect("a job the store knows");
    let config = local().with_actions(ActionToken::new(TOKEN).expect("token"));
    let server = serve(backend, "memory://", &config).await.expect("serve");
    let addr = server.local_addr();
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let (code, _, body) = post(addr, "/api/jobs/report/pause", &auth).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("paused `report`"), "{body}");
    assert!(store.job("report").await.expect("job").is_some_and(|j| j.paused), "paused in the store");
    // The action asked for a read: the page shows it within one refresh.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let (_, _, json) = get(addr, "/api/jobs").await;
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        assert_eq!(v["jobs"][0]["job"], "report");
        if v["jobs"][0]["paused"] == true {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not shown paused: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, _, page) = get(addr, "/jobs").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("data-job=\"report\" data-paused=\"true\"") && page.contains("data-action=\"resume\""),
        "{page}"
    );
    let (code, _, page) = get(addr, "/jobs/report").await;
    assert_eq!(code, 200);
    assert!(page.contains("data-events=\"events/job/report\""), "{page}");
    let (code, _, body) = post(addr, "/api/jobs/reprot/pause", &auth).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("unknown job `reprot`: did you mean `report`?"), "{body}");
    let (code, _, body) = post(addr, "/api/jobs/report/resume", &auth).await;
    assert_eq!(code, 200, "{body}");
    assert!(!store.job("report").await.expect("job").is_some_and(|j| j.paused), "resumed");
    let (code, _, body) = post(addr, "/api/jobs/report/trigger", &auth).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("request 2"), "{body}");
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    conn.write_all(format!("GET /events/job/report HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 65536];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await.expect("in time").expect("read");
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"), "{head}");
    drop(conn);
    server.stop().await;

    let e = crate::admin::AdminError::Store(crate::backend::BackendError::Protocol("bad row for s3cret".into()));
    assert_eq!(
        super::jobs::action_error(e, &["s3cret".to_owned()]),
        ActionError::Failed("the jobs store failed: backend protocol error: bad row for ***".into())
    );
}

/// Rule J7 as the jobs page shows it: the runtime's plan (`simba.toml` overriding the
/// schedule, a disabled job left out: `runtime::plan`'s test) listed by name; a failing store
/// shows its error and the registered jobs.
#[test]
fn the_registry_follows_the_configuration_and_a_store_failure_shows() {
    use crate::job::{JobSettings, Misfire, RunPolicy};
    // The settings the runtime's plan gives for `report` (its schedule overridden in Tokyo)
    // and `billing`; `off` is disabled, so the plan has no settings for it.
    let policy = RunPolicy::default();
    let tokyo = Schedule::cron_in("0 */10 * * * *", "Asia/Tokyo");
    let plan = [
        JobSettings::scheduled("report", "report-lease", &tokyo, Misfire::Skip, &policy),
        JobSettings::partitioned("billing", "bill", 4, None, Misfire::Skip, &policy),
    ];
    let registry = super::source::registered(&plan);
    let names: Vec<&str> = registry.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["billing", "report"], "listed by name");
    assert_eq!(registry[1].schedule, Some(Schedule::cron_in("0 */10 * * * *", "Asia/Tokyo")));
    assert_eq!((registry[0].lease.as_str(), registry[0].partitions), ("bill", Some(4)));

    let mut reading = hostile_reading();
    let holder = reading.cluster.sessions[1].id.clone();
    reading.cluster.leases.push(LeaseInfo {
        name: "report-lease".into(),
        session: holder,
        token: 5,
        acquired_at: None,
    });
    reading.registry = registry;
    reading.jobs = JobsRead::Failed("cannot read the jobs store: <simba-x>down</simba-x>".into());
    let model = model_of(&[reading], None, "memory://");
    let html = pages::main(&Page::Jobs, &model).into_string();
    assert!(html.contains("Cannot read the jobs store") && html.contains("&lt;simba-x&gt;down"), "{html}");
    assert!(html.contains("<code>0 */10 * * * *</code>") && html.contains("Asia/Tokyo"), "{html}");
    assert!(html.contains("worker (no schedule)") && html.contains("not run yet"), "{html}");
    let report = model.jobs.as_ref().and_then(|v| v.rows().iter().find(|j| j.name == "report").cloned());
    assert_eq!(report.and_then(|r| r.holder).map(|(_, t)| t), Some(5), "the holder of the job's own lease");
}

/// Reads `conn` until it closes: how long that took from `start` and whether a byte came.
async fn closed_after(conn: &mut TcpStream, start: tokio::time::Instant) -> (Duration, usize) {
    let mut buf = [0u8; 4096];
    let mut got = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (start.elapsed(), got),
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("the connection stayed open 30 s"),
        }
    }
}

/// Rule O12: on the dashboard's own listener, a client that dribbles its request head is cut
/// off at [`super::HEAD_DEADLINE`]; a page's event stream outlives it; more idle connections
/// than [`super::MAX_CONNECTIONS`] close the oldest, and a page still answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o12_the_listener_cuts_dribbled_heads_keeps_event_streams_and_caps_connections() {
    let (backend, _s) = memory_cluster().await;
    let server = serve(backend, "memory://", &local()).await.expect("serve");
    let addr = server.local_addr();
    let deadline = super::HEAD_DEADLINE;

    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET /events/leases HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");

    // One byte a second of a request head that would take a minute.
    let start = tokio::time::Instant::now();
    let (mut read, mut write) = TcpStream::connect(addr).await.expect("connect").into_split();
    let head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nX-Pad: {}\r\n\r\n", "x".repeat(40));
    let dribble = tokio::spawn(async move {
        for b in head.bytes() {
            if write.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let mut buf = [0u8; 4096];
    let mut got = 0;
    let after = loop {
        match tokio::time::timeout(Duration::from_secs(30), read.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break start.elapsed(),
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("a dribbled head held its connection 30 s"),
        }
    };
    dribble.abort();
    assert!(
        after >= deadline - Duration::from_secs(1) && after < deadline + Duration::from_secs(2),
        "cut off after {after:?}"
    );
    assert_eq!(got, 0, "a head never completed gets no answer");

    // The event stream opened before the dribble is still open, past the head deadline.
    let mut seen = vec![0u8; 65536];
    let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut seen)).await.expect("a frame").expect("read");
    assert!(n > 0, "the event stream closed at the head deadline");

    // More idle connections than the cap: the oldest close (the event stream among them),
    // and a page answers at once.
    let cap = super::MAX_CONNECTIONS;
    let mut idle = Vec::new();
    for _ in 0..cap + 8 {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = tokio::time::Instant::now();
    let (code, _, _) = get(addr, "/").await;
    assert_eq!(code, 200);
    assert!(asked.elapsed() < Duration::from_secs(1), "a page past the idle ones took {:?}", asked.elapsed());
    let (_, _) = closed_after(&mut stream, tokio::time::Instant::now()).await;
    let mut closed = 0;
    for conn in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(20), conn.read(&mut byte)).await {
            closed += 1;
        }
    }
    // The stream went first; then eight idle ones (one over the cap each, with the stream's
    // place taken), then one for the page.
    assert!((8..=10).contains(&closed), "{closed} of {} idle connections closed", idle.len());
    server.stop().await;
}

/// Counts its reads.
#[derive(Default)]
struct Counting(std::sync::atomic::AtomicUsize);

impl Source for Counting {
    fn read(&self) -> BoxFuture<'_, Result<Reading, String>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { Ok(Reading::default()) })
    }
    fn describe(&self) -> String {
        "memory://".into()
    }
}

/// Rule O13: a dashboard nobody looks at never reads the store; a request reads once; an
/// open event stream reads every `REFRESH`; when the last viewer leaves, reading stops.
#[tokio::test(start_paused = true)]
async fn o13_the_store_is_read_only_while_someone_looks() {
    use super::hub::{Hub, REFRESH};
    let source = Arc::new(Counting::default());
    let reads = || source.0.load(std::sync::atomic::Ordering::SeqCst);
    let hub = Hub::new("memory://".into(), false);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(Arc::clone(&hub).run(Arc::clone(&source) as Arc<dyn Source>, stop.clone()));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(reads(), 0, "no viewer, no request: no read");

    let _ = hub.fresh().await;
    assert_eq!(reads(), 1, "a request reads once");
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(reads(), 1, "and then nothing while nobody looks");

    let viewer = hub.subscribe();
    tokio::time::sleep(REFRESH * 10 + REFRESH / 2).await;
    let watched = reads() - 1;
    assert!((10..=11).contains(&watched), "{watched} reads in ten refresh periods with a viewer");
    drop(viewer);
    tokio::time::sleep(REFRESH * 2).await;
    let after = reads();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(reads(), after, "the last viewer left: reading stopped");
    stop.cancel();
}
