//! The HTTP side: routes, the event stream, embedded assets and the guards every request
//! passes (host check, size bound, security headers).
//!
//! | method | path | what |
//! | --- | --- | --- |
//! | GET | `/`, `/leases`, `/groups`, `/jobs`, `/jobs/{job}` | the pages (HTML) |
//! | GET | `/schedules?prefix=&handler=&after=`, `/schedules/{id}` | the schedules pages (HTML, read from the schedule store per request, not live) |
//! | GET | `/events/{overview,leases,groups,jobs}`, `/events/job/{job}` | server-sent events: `event: main`, the page's new `<main>` content |
//! | GET | `/api/state` | the model as JSON (the facts of `simba status --json` and what the dashboard observed) |
//! | GET | `/api/jobs` | the jobs as JSON: per job the fields of `simba jobs --json`, schedule, time zone, next fire, holder, and `records` (the last 50, as `simba history --json`) |
//! | GET | `/assets/{app.css, app.js, icon.svg}` | embedded assets |
//! | GET | `/livez`, `/readyz`, `/healthz` | the probes (rule O1): the process serves; the session is live (`/healthz` = `/readyz`) |
//! | GET | `/metrics` | Prometheus text, when built with [`metrics`](super::DashboardBuilder::metrics) (feature `prometheus`) |
//! | POST | `/api/jobs/{job}/{pause, resume, trigger}` | actions, only with `[dashboard] actions = true` |
//! | POST | `/api/schedules/{id}/{pause, resume, trigger}` | the same for a schedule; an optional body `{"note": "..."}` |
//!
//! Every path is relative to where the router is mounted (rule O2): the pages carry a `<base>`
//! built from the mount prefix, and no page, form or script names an absolute path.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, OriginalUri, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use super::auth::{Action, ActionError, Control, authorise};
use super::config::ActionToken;
use super::hub::Hub;
use super::pages::{self, Frame, Page, Tab};
use super::schedule_pages;
use super::schedules::{ListParams, Problem, ScheduleOps};
use crate::probe::Probe;

/// The largest request body accepted (actions carry none).
pub(crate) const MAX_BODY: usize = 1024;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   base-uri 'self'; form-action 'self'; frame-ancestors 'none'";

/// What every handler shares.
pub(crate) struct App {
    pub(crate) hub: Arc<Hub>,
    pub(crate) token: Option<ActionToken>,
    pub(crate) control: Option<Arc<dyn Control>>,
    /// The schedules pages' store and actions.
    pub(crate) schedules: Arc<ScheduleOps>,
    pub(crate) stop: CancellationToken,
    /// The prefix browsers reach the dashboard under, when it is not the one the router was
    /// nested at (a proxy rewrites the path); `None`: found from each request.
    pub(crate) prefix: Option<String>,
    /// Host names accepted besides IP literals and `localhost`, lowercase, without port.
    pub(crate) hosts: Vec<String>,
    /// The session `/readyz` reports; `None` (a dashboard of a backend, no node): whether the
    /// last read of the backend succeeded.
    pub(crate) session: Option<crate::Simba>,
    #[cfg(feature = "prometheus")]
    pub(crate) metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Ends the reader and the event streams when the last clone of the router is dropped.
    pub(crate) _stop_on_drop: tokio_util::sync::DropGuard,
}

type Shared = State<Arc<App>>;

/// The route table.
pub(crate) fn router(app: Arc<App>) -> Router {
    let mut r = Router::new()
        .route("/livez", get(|s: Shared| probe(s, Probe::Live)))
        .route("/readyz", get(|s: Shared| probe(s, Probe::Ready)))
        .route("/healthz", get(|s: Shared| probe(s, Probe::Ready)))
        .route("/", get(|s: Shared, at: Paths| render(s, Page::Overview, at)))
        .route("/leases", get(|s: Shared, at: Paths| render(s, Page::Leases, at)))
        .route("/groups", get(|s: Shared, at: Paths| render(s, Page::Groups, at)))
        .route("/jobs", get(|s: Shared, at: Paths| render(s, Page::Jobs, at)))
        .route("/jobs/{*job}", get(|s: Shared, at: Paths, Path(job): Path<String>| render(s, Page::Job(job), at)))
        .route("/events/{page}", get(events))
        .route("/events/job/{*job}", get(|s: Shared, Path(job): Path<String>| stream(s, Page::Job(job))))
        .route("/api/state", get(state))
        .route("/api/jobs", get(jobs_json))
        .route("/schedules", get(schedules_page))
        .route("/schedules/{id}", get(schedule_page))
        .route("/assets/{name}", get(asset));
    if app.token.is_some() {
        r = r.route("/api/jobs/{job}/{action}", post(act)).route("/api/schedules/{id}/{action}", post(act_schedule));
    }
    #[cfg(feature = "prometheus")]
    if app.metrics.is_some() {
        r = r.route("/metrics", get(metrics));
    }
    let read_only = app.token.is_none();
    r.fallback(not_found)
        .method_not_allowed_fallback(move |m: Method| async move { not_allowed(&m, read_only) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), guard))
        .with_state(app)
}

/// A request's path as the browser sent it (before a service's `nest` stripped its prefix)
/// and as this router sees it.
pub(crate) struct Paths(Uri, Uri);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Paths {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Infallible> {
        let original = parts.extensions.get::<OriginalUri>().map_or_else(|| parts.uri.clone(), |o| o.0.clone());
        Ok(Paths(original, parts.uri.clone()))
    }
}

/// The prefix the browser reached the dashboard under: the configured one, else what the
/// service's router stripped before handing the request on (`nest("/simba", ..)` turns
/// `/simba/leases` into `/leases`: the prefix is `/simba`). `""` at the root.
fn mount_prefix(app: &App, Paths(original, inner): &Paths) -> String {
    if let Some(p) = &app.prefix {
        return p.clone();
    }
    prefix_of(original.path(), inner.path())
}

/// The part of `original` that a `nest` stripped to make `inner`.
fn prefix_of(original: &str, inner: &str) -> String {
    let prefix = match original.strip_suffix(inner) {
        Some(p) => p,
        // `/simba` reaches the nested router as `/`.
        None if inner == "/" => original,
        None => "",
    };
    prefix.trim_end_matches('/').to_owned()
}

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    let mut body: String = msg.into();
    body.push('\n');
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// Refuses requests for another host name (DNS rebinding: a hostile site whose name resolves
/// to this address must not read the pages) and over-long bodies; adds the security headers.
async fn guard(State(app): Shared, req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !host_allowed(host, &app.hosts) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "unexpected Host {host:?}: open the dashboard by its IP address, or allow this name \
                 ([dashboard] allowed_hosts = [\"{}\"], or DashboardBuilder::allowed_hosts)",
                host_name(host)
            ),
        );
    }
    let length = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if length.is_some_and(|n| n > MAX_BODY as u64) {
        return text(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {MAX_BODY} bytes"));
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    res
}

/// An IP literal (with or without port), `localhost`, or one of the `allowed` names (exact,
/// lowercase; any port).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host);
    name.parse::<IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// The name of a `Host` header, without its port (and without the brackets of an IPv6 literal).
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, p)| if p.parse::<u16>().is_ok() { h } else { host }),
    }
}

/// `/livez`, `/readyz`, `/healthz`: the same answers as the metrics listener's
/// ([`crate::probe`]).
async fn probe(State(app): Shared, probe: Probe) -> Response {
    let answer = match (&app.session, probe) {
        (Some(simba), _) => crate::probe::answer(probe, simba.session_status()),
        (None, Probe::Live) => crate::probe::answer(probe, crate::SessionStatus::Opening),
        (None, Probe::Ready) => backend_ready(&*app.hub.fresh().await),
    };
    let code = if answer.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut res = text(code, answer.body.trim_end());
    res.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// Readiness of a dashboard that runs no session (`simba dashboard`, or built with
/// [`backend`](super::DashboardBuilder::backend)): its last read of the backend succeeded.
fn backend_ready(model: &super::model::Model) -> crate::probe::Answer {
    match (&model.error, model.last_ok) {
        (None, Some(_)) => crate::probe::Answer { ok: true, body: "ready: the backend answers\n".into() },
        (Some(e), _) => crate::probe::Answer { ok: false, body: format!("not ready: the backend failed: {e}\n") },
        (None, None) => crate::probe::Answer { ok: false, body: "not ready: no read of the backend yet\n".into() },
    }
}

#[cfg(feature = "prometheus")]
async fn metrics(State(app): Shared) -> Response {
    let Some(handle) = &app.metrics else { return text(StatusCode::NOT_FOUND, "metrics are not served here") };
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
}

async fn render(State(app): Shared, page: Page, at: Paths) -> Response {
    let model = app.hub.fresh().await;
    let base = mount_prefix(&app, &at);
    let html = pages::page(&page, &model, &base).into_string();
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn state(State(app): Shared) -> Response {
    let model = app.hub.fresh().await;
    ([(header::CONTENT_TYPE, "application/json")], model.to_json().to_string()).into_response()
}

async fn jobs_json(State(app): Shared) -> Response {
    let model = app.hub.fresh().await;
    ([(header::CONTENT_TYPE, "application/json")], super::jobs::to_json(model.jobs.as_ref()).to_string())
        .into_response()
}

async fn events(app: Shared, Path(slug): Path<String>) -> Response {
    let Some(page) = Page::from_slug(&slug) else {
        return text(StatusCode::NOT_FOUND, "no such page: overview, leases, groups, jobs or job/NAME");
    };
    stream(app, page).await
}

async fn stream(State(app): Shared, page: Page) -> Response {
    let rx = app.hub.subscribe();
    let stop = app.stop.clone();
    let stream = futures_util::stream::unfold((rx, String::new(), stop), move |(mut rx, last, stop)| {
        let page = page.clone();
        async move {
            loop {
                let model = std::sync::Arc::clone(&rx.borrow_and_update());
                // A carriage return cannot cross an event stream; nothing on the page needs one.
                let html = pages::main(&page, &model).into_string().replace('\r', "");
                if html != last {
                    let event = Event::default().event("main").data(&html);
                    return Some((Ok::<_, Infallible>(event), (rx, html, stop)));
                }
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    changed = rx.changed() => changed.ok()?,
                }
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

async fn asset(Path(name): Path<String>) -> Response {
    let (kind, body) = match name.as_str() {
        "app.css" => ("text/css; charset=utf-8", include_str!("assets/app.css")),
        "app.js" => ("text/javascript; charset=utf-8", include_str!("assets/app.js")),
        "icon.svg" => ("image/svg+xml", include_str!("assets/icon.svg")),
        _ => return text(StatusCode::NOT_FOUND, "no such asset"),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    match method {
        Method::GET | Method::HEAD => text(
            StatusCode::NOT_FOUND,
            crate::probe::not_found(uri.path(), "; pages: /, /leases, /groups, /jobs, /schedules").trim_end(),
        ),
        m => not_allowed(&m, true),
    }
}

fn not_allowed(method: &Method, read_only: bool) -> Response {
    let msg = if read_only {
        format!("{method} refused: this dashboard is read-only (actions are off: [dashboard] actions = false)")
    } else {
        format!(
            "{method} refused: actions are POST /api/jobs/JOB/{{pause,resume,trigger}} and \
             /api/schedules/ID/{{pause,resume,trigger}}"
        )
    };
    let mut res = text(StatusCode::METHOD_NOT_ALLOWED, msg);
    let allow = if read_only { "GET, HEAD" } else { "GET, HEAD, POST" };
    res.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    res
}

/// The refusal of a request that may not act: actions off (405), or [`authorise`]'s refusals;
/// `None` when it may.
fn refusal(app: &App, headers: &HeaderMap, uri: &Uri) -> Option<Response> {
    let Some(token) = &app.token else { return Some(not_allowed(&Method::POST, true)) };
    let (code, msg) = authorise(headers, uri, token).err()?;
    let mut res = text(code, msg);
    if code == StatusCode::UNAUTHORIZED {
        res.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    Some(res)
}

fn unknown_action(action: &str) -> Response {
    text(StatusCode::NOT_FOUND, format!("unknown action {action:?}: use pause, resume or trigger"))
}

fn json_answer(code: StatusCode, body: &serde_json::Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], Body::from(body.to_string())).into_response()
}

async fn act(
    State(app): Shared,
    Path((job, action)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
    _body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&app, &headers, &uri) {
        return refused;
    }
    let Some(action) = Action::from_name(&action) else { return unknown_action(&action) };
    if let Some(problem) = crate::name_problem(&job) {
        return text(StatusCode::BAD_REQUEST, format!("invalid job name: {problem}"));
    }
    let Some(control) = &app.control else {
        return text(
            StatusCode::NOT_IMPLEMENTED,
            format!("cannot {} `{job}`: this backend keeps no job control (it has no jobs store)", action.name()),
        );
    };
    let result = control.act(&job, action).await;
    app.hub.poke();
    let (code, ok, message) = match result {
        Ok(m) => (StatusCode::OK, true, m),
        Err(ActionError::UnknownJob(m)) => (StatusCode::NOT_FOUND, false, m),
        Err(ActionError::Failed(m)) => (StatusCode::BAD_GATEWAY, false, m),
    };
    json_answer(code, &serde_json::json!({"ok": ok, "job": job, "action": action.name(), "message": message}))
}

/// The body of a schedule action: empty, or `{"note": "..."}` (a blank note is none).
fn note_of(body: &[u8]) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    struct NoteBody {
        note: Option<String>,
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let parsed: NoteBody = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not {{\"note\": \"...\"}} ({e}): send that JSON, or no body"))?;
    Ok(parsed.note.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()))
}

/// `POST /api/schedules/{id}/{action}`: the job actions' checks, then pause (its note the
/// reason), resume or run now through `admin::Schedules`, recorded as `dashboard`.
async fn act_schedule(
    State(app): Shared,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if let Some(refused) = refusal(&app, &headers, &uri) {
        return refused;
    }
    let Some(action) = Action::from_name(&action) else { return unknown_action(&action) };
    let note = match note_of(&body) {
        Ok(n) => n,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let result = app.schedules.act(&id, action, note.as_deref()).await;
    app.hub.poke();
    let (code, ok, message) = match result {
        Ok(m) => (StatusCode::OK, true, m),
        Err(p) => {
            let code = if let Problem::NoStore(_) = p { StatusCode::NOT_IMPLEMENTED } else { status_of(Some(&p)) };
            (code, false, p.to_string())
        }
    };
    json_answer(code, &serde_json::json!({"ok": ok, "schedule": id, "action": action.name(), "message": message}))
}

/// The status of a schedules page: 200 with something to show (a backend without schedules
/// too: its page says so), else what went wrong.
fn status_of(problem: Option<&Problem>) -> StatusCode {
    match problem {
        None | Some(Problem::NoStore(_)) => StatusCode::OK,
        Some(Problem::Invalid(_)) => StatusCode::BAD_REQUEST,
        Some(Problem::NotFound { .. }) => StatusCode::NOT_FOUND,
        Some(Problem::Failed(_)) => StatusCode::BAD_GATEWAY,
    }
}

/// A schedules page: `content` in the layout, with `code`.
fn schedule_html(
    app: &App,
    at: &Paths,
    code: StatusCode,
    title: String,
    slug: &'static str,
    content: maud::Markup,
) -> Response {
    let frame = Frame { title, slug, events: None, tab: Tab::Schedules };
    let html = pages::layout(&frame, &app.hub.latest(), &mount_prefix(app, at), content).into_string();
    (code, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// `GET /schedules`: the search form and one page of schedules; a refused query is a 400
/// page that says why.
async fn schedules_page(State(app): Shared, at: Paths, uri: Uri) -> Response {
    let (params, listing) = match ListParams::parse(uri.query()) {
        Ok(params) => {
            let listing = app.schedules.list(&params).await;
            (params, listing)
        }
        Err(p) => (ListParams::default(), Err(p)),
    };
    let code = status_of(listing.as_ref().err());
    schedule_html(&app, &at, code, "Schedules".into(), "schedules", schedule_pages::list_page(&params, &listing))
}

/// `GET /schedules/{id}`: one schedule's page; a missing id is a 404 page naming the nearest.
async fn schedule_page(State(app): Shared, at: Paths, Path(id): Path<String>) -> Response {
    let (code, content) = match app.schedules.detail(&id).await {
        Ok(d) => (StatusCode::OK, schedule_pages::detail_page(&d, app.token.is_some())),
        Err(p) => (status_of(Some(&p)), schedule_pages::problem(&p)),
    };
    schedule_html(&app, &at, code, format!("Schedule {id}"), "schedule", content)
}

#[cfg(test)]
mod tests {
    use super::{host_allowed, prefix_of};

    #[test]
    fn o2_the_prefix_is_what_the_service_stripped() {
        assert_eq!(prefix_of("/simba/leases", "/leases"), "/simba");
        assert_eq!(prefix_of("/simba", "/"), "/simba");
        assert_eq!(prefix_of("/a/b/jobs/g/3", "/jobs/g/3"), "/a/b");
        assert_eq!(prefix_of("/leases", "/leases"), "");
        assert_eq!(prefix_of("/", "/"), "");
    }

    #[test]
    fn hosts() {
        for ok in ["127.0.0.1:9465", "127.0.0.1", "[::1]:9465", "[::1]", "localhost:9465", "LOCALHOST", "10.1.2.3:80"] {
            assert!(host_allowed(ok, &[]), "{ok}");
        }
        for bad in ["", "evil.example", "evil.example:9465", "127.0.0.1.evil.example:9465", "[evil]:1"] {
            assert!(!host_allowed(bad, &[]), "{bad}");
        }
    }

    #[test]
    fn o3_allowed_host_names_are_exact() {
        let allowed = ["simba.example.com".to_owned()];
        for ok in ["simba.example.com", "SIMBA.example.com:443", "simba.example.com:9465", "127.0.0.1:1"] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in ["evil.example", "simba.example.com.evil.example", "x.simba.example.com", "example.com", ""] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }
}
