//! Actions: the route table, who may call it, and what carries them out.
//!
//! An action is `POST /api/jobs/{job}/{action}` with header `Authorization: Bearer TOKEN`.
//! Why that is CSRF-safe: a browser attaches no `Authorization` header by itself (the token
//! lives in no cookie), a cross-origin script cannot add one without a CORS preflight that
//! this server never approves, and requests a browser marks cross-site (`Sec-Fetch-Site`,
//! `Origin`) are refused before the token is even looked at. A token in the URL is refused
//! outright: URLs end up in logs and histories.

use axum::http::{HeaderMap, StatusCode, Uri, header};
use subtle::ConstantTimeEq;

use super::config::ActionToken;
use super::source::BoxFuture;

/// What an operator can ask of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Pause,
    Resume,
    Trigger,
}

impl Action {
    /// The route table: `POST /api/jobs/{job}/{name}`.
    pub(crate) const ALL: [Action; 3] = [Action::Pause, Action::Resume, Action::Trigger];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Trigger => "trigger",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// Why an action was not done.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ActionError {
    /// No job has this name.
    UnknownJob(String),
    /// The store refused or failed.
    Failed(String),
}

/// Carries actions out (`super::jobs::JobsControl`, on the backend's jobs store).
pub(crate) trait Control: Send + Sync + 'static {
    /// Does `action` on `job`; the text says what happened, for the page.
    fn act(&self, job: &str, action: Action) -> BoxFuture<'_, Result<String, ActionError>>;
}

/// A refusal: status and a message that says what to do.
pub(crate) type Refusal = (StatusCode, String);

/// Checks that a request may act: same-site, no token in the URL, and the right token in
/// the `Authorization` header, compared in constant time.
pub(crate) fn authorise(headers: &HeaderMap, uri: &Uri, token: &ActionToken) -> Result<(), Refusal> {
    let refuse = |code: StatusCode, m: &str| Err((code, m.to_owned()));
    if uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| crate::secret::is_secret_key(kv.split('=').next().unwrap_or(kv))))
    {
        return refuse(
            StatusCode::BAD_REQUEST,
            "never put the token in a URL: send it as the header `Authorization: Bearer TOKEN`",
        );
    }
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if site.is_some_and(|s| s != "same-origin" && s != "none") {
        return refuse(StatusCode::FORBIDDEN, "cross-site request refused: act from the dashboard's own pages");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        let origin_host = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, h)| h);
        if origin_host != Some(host) {
            return refuse(StatusCode::FORBIDDEN, "cross-origin request refused: act from the dashboard's own pages");
        }
    }
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return refuse(StatusCode::UNAUTHORIZED, "this action needs the header `Authorization: Bearer TOKEN`");
    };
    let given = value.as_bytes().strip_prefix(b"Bearer ").unwrap_or_default();
    if given.is_empty() {
        return refuse(StatusCode::UNAUTHORIZED, "write the header as `Authorization: Bearer TOKEN`");
    }
    if bool::from(given.ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        refuse(StatusCode::FORBIDDEN, "wrong token: use the one in the dashboard's token_file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn token() -> ActionToken {
        ActionToken::new("0123456789abcdef").expect("token")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9465"));
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    fn code(h: &HeaderMap, uri: &str) -> Option<StatusCode> {
        authorise(h, &uri.parse().expect("uri"), &token()).err().map(|(c, _)| c)
    }

    const URI: &str = "/api/jobs/report/pause";

    #[test]
    fn the_right_token_in_the_header_is_accepted() {
        assert_eq!(code(&headers(&[("authorization", "Bearer 0123456789abcdef")]), URI), None);
        let same = headers(&[
            ("authorization", "Bearer 0123456789abcdef"),
            ("origin", "http://127.0.0.1:9465"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(code(&same, URI), None);
    }

    #[test]
    fn missing_or_wrong_tokens_are_refused() {
        assert_eq!(code(&headers(&[]), URI), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(code(&headers(&[("authorization", "0123456789abcdef")]), URI), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(code(&headers(&[("authorization", "Bearer ")]), URI), Some(StatusCode::UNAUTHORIZED));
        for wrong in ["0123456789abcdeX", "0123456789abcdef0", "0123456789abcde", "x"] {
            let h = headers(&[("authorization", &format!("Bearer {wrong}"))]);
            assert_eq!(code(&h, URI), Some(StatusCode::FORBIDDEN), "{wrong}");
        }
    }

    #[test]
    fn a_token_in_the_url_is_refused_even_when_right() {
        let h = headers(&[("authorization", "Bearer 0123456789abcdef")]);
        assert_eq!(code(&h, "/api/jobs/report/pause?token=0123456789abcdef"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(code(&h, "/api/jobs/report/pause?x=1&access_token=a"), Some(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn cross_site_requests_are_refused_even_with_the_token() {
        let t = ("authorization", "Bearer 0123456789abcdef");
        assert_eq!(code(&headers(&[t, ("sec-fetch-site", "cross-site")]), URI), Some(StatusCode::FORBIDDEN));
        assert_eq!(code(&headers(&[t, ("sec-fetch-site", "same-site")]), URI), Some(StatusCode::FORBIDDEN));
        assert_eq!(code(&headers(&[t, ("origin", "http://evil.example")]), URI), Some(StatusCode::FORBIDDEN));
        assert_eq!(code(&headers(&[t, ("origin", "null")]), URI), Some(StatusCode::FORBIDDEN));
    }

    #[test]
    fn the_route_table_names_each_action_once() {
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(a));
        }
        assert_eq!(Action::from_name("delete"), None);
    }
}
