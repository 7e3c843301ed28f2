//! The alert webhook (rule R13 of docs/SPEC.md; feature `webhook`): `[alerts] webhook` in
//! `simba.toml` names a URL, and every alert the runtime raises (R12) is POSTed to it as one
//! JSON object, in the order raised, by one task per runtime.
//!
//! The hook only queues (it runs on a job's record writer, which must not wait on a network):
//! at most [`QUEUE`] alerts wait, and one that finds the queue full is dropped, logged and
//! counted. Each alert is tried up to [`ATTEMPTS`] times, [`BACKOFF`] apart and doubling, while
//! the receiver cannot be reached, does not answer within the configured timeout, or answers
//! 408, 429 or 5xx; any other 4xx gives it up at once (the request itself is wrong). Every try
//! of one alert carries the same `Idempotency-Key` (`<job>/<slot_ms>/<kind>`), so a receiver
//! that saw a try whose answer was lost can drop the next.
//!
//! Transport: HTTP/1.1 on hyper's connection API, one connection per alert (alerts are rare; a
//! pool would keep sockets open for nothing); `https` over rustls with the Mozilla roots
//! (`webpki-roots`) and the process's crypto provider if it has one, ring otherwise (simba
//! installs none, see `backend::tls_provider`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::alert::Alert;
use super::webhook_url::WebhookUrl;

/// How many alerts wait for the webhook at most; the next one is dropped.
pub(crate) const QUEUE: usize = 1_000;

/// How many times one alert is tried.
pub(crate) const ATTEMPTS: u32 = 4;

/// The pause before the second try; it doubles before each next one.
pub(crate) const BACKOFF: Duration = Duration::from_secs(1);

/// The sending side: what the alert hook calls.
pub(crate) struct Webhook {
    tx: mpsc::Sender<Alert>,
}

impl Webhook {
    /// Starts the delivery task for `url` (inside a Tokio runtime), each try bounded by
    /// `timeout`. The task ends once the hook is dropped and its queue is delivered. `Err`:
    /// the process's rustls provider cannot make a TLS client.
    pub(crate) fn start(url: &WebhookUrl, timeout: Duration, ca_file: Option<&Path>) -> Result<Self, String> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let tls = tls_connector(ca_file)?;
        let target = Target { uri: url.uri().clone(), shown: url.to_string(), timeout, tls };
        tokio::spawn(deliver_all(target, rx));
        Ok(Webhook { tx })
    }

    /// Queues `alert` for delivery; a full queue drops it (logged, counted).
    pub(crate) fn queue(&self, alert: &Alert) {
        match self.tx.try_send(alert.clone()) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(a)) => {
                crate::metrics::alert_webhook("dropped");
                tracing::warn!(job = %a.job, kind = a.kind.as_str(), slot = %a.slot, "the alert webhook's queue is full ({QUEUE} alerts): this alert is dropped");
            }
            Err(mpsc::error::TrySendError::Closed(a)) => {
                crate::metrics::alert_webhook("dropped");
                tracing::warn!(job = %a.job, kind = a.kind.as_str(), "the alert webhook's task has stopped: this alert is dropped");
            }
        }
    }
}

/// Where alerts go, and how.
struct Target {
    uri: Uri,
    /// The URL as logs show it (its path and query masked: they often hold a token).
    shown: String,
    timeout: Duration,
    tls: tokio_rustls::TlsConnector,
}

/// Delivers the queued alerts one after the other until the hook is gone.
async fn deliver_all(target: Target, mut rx: mpsc::Receiver<Alert>) {
    while let Some(alert) = rx.recv().await {
        let result = deliver(&target, &alert).await;
        crate::metrics::alert_webhook(if result.is_ok() { "delivered" } else { "failed" });
        if let Err(e) = result {
            tracing::warn!(job = %alert.job, kind = alert.kind.as_str(), slot = %alert.slot, url = %target.shown, error = %e, "the alert webhook did not take this alert; it is given up");
        }
    }
}

/// One alert, tried until the receiver takes it, refuses it, or [`ATTEMPTS`] tries failed.
async fn deliver(target: &Target, alert: &Alert) -> Result<(), String> {
    let body = Bytes::from(body(alert).to_string());
    let key = idempotency_key(alert);
    let mut pause = BACKOFF;
    let mut attempt = 1;
    loop {
        let answer = tokio::time::timeout(target.timeout, post(target, body.clone(), &key)).await;
        let error = match answer {
            Ok(Ok(status)) if status.is_success() => return Ok(()),
            Ok(Ok(status)) if !retryable(status) => return Err(format!("the receiver answered {status}")),
            Ok(Ok(status)) => format!("the receiver answered {status}"),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {}", humantime::format_duration(target.timeout)),
        };
        if attempt >= ATTEMPTS {
            return Err(format!("{error} ({ATTEMPTS} tries)"));
        }
        tracing::debug!(job = %alert.job, attempt, url = %target.shown, %error, "the alert webhook will try again");
        tokio::time::sleep(pause).await;
        pause *= 2;
        attempt += 1;
    }
}

/// Whether a try answered `status` is worth another: 408, 429 and the server errors.
fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// The key every try of `alert` carries: one per slot and kind.
pub(crate) fn idempotency_key(alert: &Alert) -> String {
    format!("{}/{}/{}", alert.job, alert.slot.timestamp_millis(), alert.kind.as_str())
}

/// The JSON object an alert is POSTed as.
pub(crate) fn body(alert: &Alert) -> serde_json::Value {
    serde_json::json!({
        "kind": alert.kind.as_str(),
        "job": alert.job,
        "slot": alert.slot.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "slot_ms": alert.slot.timestamp_millis(),
        "outcome": alert.outcome.as_str(),
        "node": alert.node,
        "token": alert.token,
        "reason": alert.reason,
        "lateness_ms": alert.lateness.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// One POST of `body` on a new connection; the answer's status.
async fn post(target: &Target, body: Bytes, key: &str) -> Result<StatusCode, String> {
    let uri = &target.uri;
    let host = uri.host().ok_or("the URL has no host")?;
    // An IPv6 address without its brackets, as sockets and TLS name it.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = TcpStream::connect((bare, port)).await.map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = Request::post(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::USER_AGENT, concat!("simba/", env!("CARGO_PKG_VERSION")))
        .header("idempotency-key", key)
        .body(Full::new(body))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    if https {
        let name = rustls::pki_types::ServerName::try_from(bare.to_owned())
            .map_err(|e| format!("invalid server name {bare:?}: {e}"))?;
        let tls = target.tls.connect(name, tcp).await.map_err(|e| {
            let hint = if e.to_string().contains("UnknownIssuer") {
                " (the receiver's certificate is not signed by a trusted CA: give its CA as [alerts] webhook_ca_file)"
            } else {
                ""
            };
            format!("TLS: {e}{hint}")
        })?;
        send(tls, req).await
    } else {
        send(tcp, req).await
    }
}

/// Sends `req` on `io` (HTTP/1.1) and reads the whole answer.
async fn send<I>(io: I, req: Request<Full<Bytes>>) -> Result<StatusCode, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| format!("HTTP: {e}"))?;
    let conn = tokio::spawn(conn);
    let answer = sender.send_request(req).await.map_err(|e| format!("HTTP: {e}"));
    let status = match answer {
        Ok(res) => {
            let status = res.status();
            // The body is read so the receiver is not cut off mid-answer; its content is ignored.
            let _ = res.into_body().collect().await;
            Ok(status)
        }
        Err(e) => Err(e),
    };
    drop(sender);
    conn.abort();
    status
}

/// The TLS client: the process's rustls provider if it has one, else ring; the certificates of
/// `ca_file` as its roots, else the Mozilla roots.
fn tls_connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let roots = match ca_file {
        None => rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
        Some(path) => {
            let shown = path.display();
            let pem = crate::secret::read_pem("CA file", path)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("the CA file {shown}: {e}"))?;
                roots.add(cert).map_err(|e| format!("the CA file {shown}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("the CA file {shown} holds no certificate"));
            }
            roots
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the process's rustls provider cannot be used: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::AlertKind;
    use crate::job_store::Outcome;

    fn alert() -> Alert {
        Alert {
            kind: AlertKind::Late,
            job: "schedule/report-4711".into(),
            slot: chrono::DateTime::from_timestamp_millis(1_796_520_000_000).unwrap_or_default(),
            outcome: Outcome::Running,
            node: "vm-a".into(),
            token: 7,
            reason: None,
            lateness: Some(Duration::from_millis(6_250)),
        }
    }

    /// R13: the body names every field of the alert; the key is one per slot and kind.
    #[test]
    fn r13_an_alert_is_one_json_object_and_one_key_per_slot_and_kind() {
        let b = body(&alert());
        assert_eq!(b["kind"], "late");
        assert_eq!(b["job"], "schedule/report-4711");
        assert_eq!(b["slot"], "2026-12-06T01:20:00.000Z");
        assert_eq!(b["slot_ms"], 1_796_520_000_000_i64);
        assert_eq!(b["outcome"], "running");
        assert_eq!(b["node"], "vm-a");
        assert_eq!(b["token"], 7);
        assert!(b["reason"].is_null());
        assert_eq!(b["lateness_ms"], 6_250);
        assert_eq!(idempotency_key(&alert()), "schedule/report-4711/1796520000000/late");
    }

    /// R13: 408, 429 and 5xx are tried again; the other answers are final.
    #[test]
    fn r13_which_answers_are_tried_again() {
        for (code, again) in
            [(200, false), (400, false), (404, false), (408, true), (429, true), (500, true), (503, true)]
        {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            assert_eq!(retryable(status), again, "{code}");
        }
    }
}
