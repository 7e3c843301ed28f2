//! The HTTP side: routes, the event stream, embedded assets and the guards every request
//! passes (host check, size bound, security headers).
//!
//! | method | path | what |
//! | --- | --- | --- |
//! | GET | `/`, `/leases`, `/groups`, `/jobs`, `/jobs/{job}` | the pages (HTML) |
//! | GET | `/events/{overview,leases,groups,jobs}`, `/events/job/{job}` | server-sent events: `event: main`, the page's new `<main>` content |
//! | GET | `/api/state` | the model as JSON (the facts of `simba status --json` and what the dashboard observed) |
//! | GET | `/api/jobs` | the jobs as JSON: per job the fields of `simba jobs --json`, schedule, time zone, next fire, holder, and `records` (the last 50, as `simba history --json`) |
//! | GET | `/assets/{app.css, app.js, icon.svg}` | embedded assets |
//! | POST | `/api/jobs/{job}/{pause, resume, trigger}` | actions, only with `[dashboard] actions = true` |

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use super::auth::{Action, ActionError, Control, authorise};
use super::config::ActionToken;
use super::hub::Hub;
use super::pages::{self, Page};

/// The largest request body accepted (actions carry none).
pub(crate) const MAX_BODY: usize = 1024;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What every handler shares.
pub(crate) struct App {
    pub(crate) hub: Arc<Hub>,
    pub(crate) token: Option<ActionToken>,
    pub(crate) control: Option<Arc<dyn Control>>,
    pub(crate) stop: CancellationToken,
}

type Shared = State<Arc<App>>;

/// The route table.
pub(crate) fn router(app: Arc<App>) -> Router {
    let mut r = Router::new()
        .route("/", get(|s: Shared| render(s, Page::Overview)))
        .route("/leases", get(|s: Shared| render(s, Page::Leases)))
        .route("/groups", get(|s: Shared| render(s, Page::Groups)))
        .route("/jobs", get(|s: Shared| render(s, Page::Jobs)))
        .route("/jobs/{*job}", get(|s: Shared, Path(job): Path<String>| render(s, Page::Job(job))))
        .route("/events/{page}", get(events))
        .route("/events/job/{*job}", get(|s: Shared, Path(job): Path<String>| stream(s, Page::Job(job))))
        .route("/api/state", get(state))
        .route("/api/jobs", get(jobs_json))
        .route("/assets/{name}", get(asset));
    if app.token.is_some() {
        r = r.route("/api/jobs/{job}/{action}", post(act));
    }
    let read_only = app.token.is_none();
    r.fallback(not_found)
        .method_not_allowed_fallback(move |m: Method| async move { not_allowed(&m, read_only) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(guard))
        .with_state(app)
}

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    let mut body: String = msg.into();
    body.push('\n');
    (code, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// Refuses requests for another host name (DNS rebinding: a hostile site whose name resolves
/// to this address must not read the pages) and over-long bodies; adds the security headers.
async fn guard(req: Request, next: Next) -> Response {
    let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !host_allowed(host) {
        return text(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "unexpected Host {host:?}: open the dashboard by its IP address (a proxy must pass Host as the \
                 listen address)"
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

/// An IP literal (with or without port) or `localhost`.
fn host_allowed(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, p)| if p.parse::<u16>().is_ok() { h } else { host }),
    };
    name.parse::<IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost")
}

async fn render(State(app): Shared, page: Page) -> Response {
    let model = app.hub.fresh().await;
    let html = pages::page(&page, &model).into_string();
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
        Method::GET | Method::HEAD => {
            text(StatusCode::NOT_FOUND, format!("no such page {}: try /, /leases, /groups or /jobs", uri.path()))
        }
        m => not_allowed(&m, true),
    }
}

fn not_allowed(method: &Method, read_only: bool) -> Response {
    let msg = if read_only {
        format!("{method} refused: this dashboard is read-only (actions are off: [dashboard] actions = false)")
    } else {
        format!("{method} refused: actions are POST /api/jobs/JOB/{{pause,resume,trigger}}")
    };
    let mut res = text(StatusCode::METHOD_NOT_ALLOWED, msg);
    let allow = if read_only { "GET, HEAD" } else { "GET, HEAD, POST" };
    res.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    res
}

async fn act(
    State(app): Shared,
    Path((job, action)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
    _body: Bytes,
) -> Response {
    let Some(token) = &app.token else { return not_allowed(&Method::POST, true) };
    if let Err((code, msg)) = authorise(&headers, &uri, token) {
        let mut res = text(code, msg);
        if code == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return res;
    }
    let Some(action) = Action::from_name(&action) else {
        return text(StatusCode::NOT_FOUND, format!("unknown action {action:?}: use pause, resume or trigger"));
    };
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
    let body = serde_json::json!({"ok": ok, "job": job, "action": action.name(), "message": message});
    (code, [(header::CONTENT_TYPE, "application/json")], Body::from(body.to_string())).into_response()
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    #[test]
    fn hosts() {
        for ok in ["127.0.0.1:9465", "127.0.0.1", "[::1]:9465", "[::1]", "localhost:9465", "LOCALHOST", "10.1.2.3:80"] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in ["", "evil.example", "evil.example:9465", "127.0.0.1.evil.example:9465", "[evil]:1"] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }
}
