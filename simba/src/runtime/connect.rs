//! The runtime's one client: the builder's backend, or `[backend] url` connected with retries
//! while the backend is unavailable, until `[backend] start_timeout`.

use std::future::Future;

use super::config::RuntimeConfig;
use crate::backend::BackendUrl;
use crate::{Error, Simba};

/// Makes the client from the builder's backend, given a client builder with the
/// configuration's settings (timing, jitter seed, namespace, metric labels).
pub(super) type MakeClient = Box<dyn FnOnce(crate::SimbaBuilder) -> Result<Simba, Error> + Send>;

/// A client builder with the configuration's settings and `seed`.
fn client(config: &RuntimeConfig, seed: Option<u64>) -> crate::SimbaBuilder {
    let mut b = Simba::builder().config(config.session).lease_labels(config.metrics.lease_labels);
    if let Some(ns) = &config.namespace {
        b = b.namespace(ns.clone());
    }
    match seed {
        Some(s) => b.seed(s),
        None => b,
    }
}

/// The runtime's one client: built by the builder's backend, or connected to `[backend] url`.
pub(super) async fn connect(
    backend: Option<MakeClient>,
    seed: Option<u64>,
    config: &RuntimeConfig,
    url: &BackendUrl,
) -> Result<Simba, Error> {
    match backend {
        Some(make) => make(client(config, seed)),
        None => connect_within(config, url, || client(config, seed).backend_url(url.clone()).connect()).await,
    }
}

/// Rule B7: says at `warn` what the configuration leaves in plain text or unverified: the
/// backend URL's transport (when the runtime connects it; a builder's backend is the
/// application's), and listeners beyond loopback.
pub(super) fn warn_transport(config: &RuntimeConfig, url: Option<&BackendUrl>) {
    for w in url.map(crate::backend::transport_warnings).unwrap_or_default() {
        tracing::warn!(backend = %url.map_or("", BackendUrl::redacted), setting = w.setting, "{}", w.detail);
    }
    for w in config.listener_warnings() {
        tracing::warn!("{w}");
    }
}

/// Whether `e` is a backend that could not be reached (worth another try), as opposed to one
/// that answered how it is misconfigured, or a configuration error.
fn unavailable(e: &Error) -> bool {
    matches!(e, Error::Backend { source: crate::backend::BackendError::Unavailable { .. }, .. })
}

/// `attempt` until it succeeds, fails for a reason other than an unavailable backend, or
/// `[backend] start_timeout` has passed since the first try. Between tries it waits the
/// session's backoff: `min_backoff`, doubling up to `renew_interval` (as a session that
/// cannot open does). A node started while its database restarts waits for it instead of
/// exiting, which would leave its jobs without this node until someone restarts it.
async fn connect_within<F, Fut>(config: &RuntimeConfig, url: &BackendUrl, mut attempt: F) -> Result<Simba, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Simba, Error>>,
{
    use crate::engine::session::error_chain;
    let url = url.redacted();
    let started = tokio::time::Instant::now();
    let mut backoff = config.session.min_backoff();
    let mut tries = 1u32;
    loop {
        let e = match attempt().await {
            Ok(simba) => {
                if tries > 1 {
                    tracing::info!(url = %url, tries, waited = ?started.elapsed(), "the backend is reachable");
                }
                return Ok(simba);
            }
            Err(e) => e,
        };
        let waited = started.elapsed();
        if !unavailable(&e) {
            tracing::error!(url = %url, error = %error_chain(&e), "cannot connect to the backend");
            return Err(e);
        }
        if waited >= config.start_timeout {
            tracing::error!(
                url = %url, error = %error_chain(&e), tries, waited = ?waited, start_timeout = ?config.start_timeout,
                "cannot connect to the backend: still unavailable when [backend] start_timeout ran out; check that the \
                 server is up and reachable from here, or raise start_timeout to wait longer"
            );
            return Err(e);
        }
        let wait = backoff.min(config.start_timeout - waited);
        tracing::warn!(
            url = %url, error = %error_chain(&e), tries, retry_in = ?wait, start_timeout = ?config.start_timeout,
            "the backend is unavailable; trying again until [backend] start_timeout runs out"
        );
        tokio::time::sleep(wait).await;
        backoff = config.session.next_open_backoff(backoff);
        tries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that answers `Unavailable` for the first `down` tries: the start's connect
    /// retries it on the session's backoff (100 ms doubling up to the 400 ms renewal interval
    /// here) until `[backend] start_timeout`, on paused time.
    async fn connect_after(down: u32, start_timeout: &str) -> (Result<Simba, Error>, u32, std::time::Duration) {
        let text = format!(
            "[backend]\nurl = \"memory://\"\nstart_timeout = \"{start_timeout}\"\n\n\
             [session]\nlease_duration = \"2s\"\nrenew_interval = \"400ms\"\n"
        );
        let config = RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).expect("config");
        let tries = std::sync::atomic::AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let url = BackendUrl::new(config.backend_url.as_str());
        let r = connect_within(&config, &url, || async {
            if tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < down {
                return Err(Error::Backend {
                    op: "connect",
                    name: None,
                    source: crate::backend::BackendError::Unavailable { message: "refused".into(), source: None },
                });
            }
            Simba::connect_in(&config.backend_url, None, config.session).await
        })
        .await;
        (r, tries.into_inner(), started.elapsed())
    }

    /// A node started while its backend restarts waits for it: three refusals, then the
    /// fourth try connects after 100 + 200 + 400 ms.
    #[tokio::test(start_paused = true)]
    async fn start_waits_for_an_unavailable_backend() {
        let (r, tries, waited) = connect_after(3, "60s").await;
        assert!(r.is_ok(), "{:?}", r.err());
        assert_eq!((tries, waited), (4, std::time::Duration::from_millis(700)));
    }

    /// Still unavailable when `start_timeout` runs out: the last error, at the timeout (100 +
    /// 200 + 400 + 300 ms, the last wait cut to what was left), after five tries.
    #[tokio::test(start_paused = true)]
    async fn start_gives_up_at_start_timeout() {
        let (r, tries, waited) = connect_after(u32::MAX, "1s").await;
        let e = r.expect_err("unavailable to the end");
        assert!(unavailable(&e), "{e}");
        assert_eq!((tries, waited), (5, std::time::Duration::from_secs(1)));
        let (r, tries, waited) = connect_after(u32::MAX, "0s").await;
        assert!(r.is_err());
        assert_eq!((tries, waited), (1, std::time::Duration::ZERO), "0s: one try");
    }

    /// A misconfigured backend (or any other error) fails at once: waiting cannot fix it.
    #[tokio::test(start_paused = true)]
    async fn start_fails_at_once_on_a_misconfigured_backend() {
        let config = RuntimeConfig::default();
        let tries = std::sync::atomic::AtomicU32::new(0);
        let url = BackendUrl::new(config.backend_url.as_str());
        let r = connect_within(&config, &url, || async {
            tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Error::Backend {
                op: "connect",
                name: None,
                source: crate::backend::BackendError::Misconfigured("password authentication failed".into()),
            })
        })
        .await;
        assert!(r.is_err());
        assert_eq!(tries.into_inner(), 1);
    }
}
