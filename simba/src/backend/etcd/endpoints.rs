//! Several endpoints. The driver balances requests over every endpoint it was given, and
//! sends some to an endpoint that does not answer, where they fail (etcdv3/etcd-client#39): a
//! cluster with one member down would fail every other call. So with more than one endpoint
//! the backend checks each one (a `Status` request on a client of its own, every second) and
//! keeps in the balanced channel only those that answer; when none answers it keeps them all.
//! The checks cost a request per endpoint per second per backend instance, whatever the
//! sessions hold (S1 is about renewals, which do not change).

use std::time::Duration;

use etcd_client::Client;
use futures_util::future::join_all;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::url::{ConnectSpec, chain};

/// How often every endpoint is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a check may take before the endpoint counts as not answering.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoints of a URL, their check clients, and which are in the balanced channel.
pub(super) struct Checker {
    spec: ConnectSpec,
    urls: Vec<String>,
    probes: Vec<Option<Client>>,
    in_channel: Vec<bool>,
}

impl Checker {
    pub(super) fn new(spec: ConnectSpec) -> Self {
        let urls = spec.endpoint_urls();
        let n = urls.len();
        Checker { spec, urls, probes: vec![None; n], in_channel: vec![false; n] }
    }

    /// Checks every endpoint at once: `Ok` for those that answered.
    pub(super) async fn check(&mut self) -> Vec<Result<(), etcd_client::Error>> {
        let spec = &self.spec;
        let checks = self.urls.iter().zip(self.probes.iter_mut()).map(|(url, probe)| async move {
            let answered = timeout(PROBE_TIMEOUT, async {
                let client = match probe.take() {
                    Some(c) => c,
                    None => spec.client(std::slice::from_ref(url)).await?,
                };
                client.clone().status().await?;
                Ok::<_, etcd_client::Error>(client)
            })
            .await
            .unwrap_or_else(|_| {
                Err(etcd_client::Error::EndpointError(format!("{url} did not answer within {PROBE_TIMEOUT:?}")))
            });
            answered.map(|c| *probe = Some(c))
        });
        join_all(checks).await
    }

    /// The endpoints that answered `health`; marks them as the channel's.
    pub(super) fn live(&mut self, health: &[Result<(), etcd_client::Error>]) -> Vec<String> {
        let mut live = Vec::new();
        for (i, h) in health.iter().enumerate() {
            self.in_channel[i] = h.is_ok();
            if h.is_ok() {
                live.push(self.urls[i].clone());
            }
        }
        live
    }

    /// Checks every second and adds to or removes from `client`'s channel, until `stop`.
    pub(super) async fn run(mut self, client: Client, stop: CancellationToken, description: String) {
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = sleep(CHECK_EVERY) => {}
            }
            let health = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                h = self.check() => h,
            };
            let any = health.iter().any(Result::is_ok);
            for (i, h) in health.iter().enumerate() {
                let url = &self.urls[i];
                let change = match (h, self.in_channel[i]) {
                    (Ok(()), false) => client.add_endpoint(url).await.map(|()| true),
                    // Keep every endpoint while none answers: nothing is lost by trying them.
                    (Err(e), true) if any => {
                        tracing::warn!(backend = %description, endpoint = %url, error = %chain(e), "etcd endpoint not answering; sending requests to the others");
                        client.remove_endpoint(url).await.map(|()| false)
                    }
                    _ => continue,
                };
                match change {
                    Ok(now) => {
                        if now {
                            tracing::info!(backend = %description, endpoint = %url, "etcd endpoint answers again");
                        }
                        self.in_channel[i] = now;
                    }
                    Err(e) => {
                        tracing::debug!(backend = %description, endpoint = %url, error = %chain(&e), "cannot change the endpoints")
                    }
                }
            }
        }
    }
}
