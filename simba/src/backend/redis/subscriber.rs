//! The release subscription (rule K2): one background task per backend instance listens on
//! the release channel and forwards each released lease name to a broadcast channel.
//!
//! The task holds no reference to the backend: it stops when the backend's last clone drops
//! (through a cancellation token the backend cancels on drop), so tests and short-lived
//! clients leak no task. A lost connection is re-established with a capped backoff; releases
//! published meanwhile are missed, which only delays a takeover until the candidate's next
//! attempt (K1). A server that stops answering without closing the connection (a paused
//! server, a black-holed link) is detected by a periodic `PING`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

/// First delay before reconnecting; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often an idle subscription checks that the server still answers.
const PING_EVERY: Duration = Duration::from_secs(10);

/// What the task needs; none of it keeps the backend alive.
pub(super) struct Subscriber {
    /// The server to subscribe on, asked again at every (re)subscription.
    pub(super) link: Arc<super::link::Link>,
    pub(super) channel: String,
    pub(super) releases: broadcast::Sender<String>,
    pub(super) stop: CancellationToken,
    pub(super) description: Arc<str>,
    /// Bounds connecting, subscribing and each ping.
    pub(super) call_timeout: Duration,
    /// Set to `true` once subscribed (and back to `false` while reconnecting), for callers
    /// that wait for the subscription before publishing (the jobs store).
    pub(super) ready: Option<tokio::sync::watch::Sender<bool>>,
}

impl Subscriber {
    /// Runs until `stop` is cancelled.
    pub(super) async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        let mut failures = 0u32;
        loop {
            let attempt = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                r = self.subscribe() => r,
            };
            match attempt {
                Ok(pubsub) => {
                    if failures > 0 {
                        tracing::info!(backend = %self.description, channel = %self.channel, "release subscription restored");
                    } else {
                        tracing::debug!(backend = %self.description, channel = %self.channel, "subscribed to releases");
                    }
                    backoff = MIN_BACKOFF;
                    failures = 0;
                    self.ready.as_ref().map(|r| r.send_replace(true));
                    let why = self.forward(pubsub).await;
                    self.ready.as_ref().map(|r| r.send_replace(false));
                    let Some(why) = why else { return };
                    tracing::warn!(
                        backend = %self.description,
                        reason = %why,
                        "release subscription lost; reconnecting (candidates fall back to periodic attempts meanwhile)"
                    );
                }
                Err(e) => {
                    failures += 1;
                    // Once per outage at warn level; the engine's own calls report the outage.
                    if failures == 1 {
                        tracing::warn!(backend = %self.description, error = %e, "cannot subscribe to releases; retrying");
                    } else {
                        tracing::debug!(backend = %self.description, error = %e, failures, "cannot subscribe to releases; retrying");
                    }
                }
            }
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn subscribe(&self) -> Result<redis::aio::PubSub, String> {
        let mut pubsub = timeout(self.call_timeout, self.link.client().get_async_pubsub())
            .await
            .map_err(|_| format!("no connection within {:?}", self.call_timeout))?
            .map_err(|e| e.to_string())?;
        timeout(self.call_timeout, pubsub.subscribe(&self.channel))
            .await
            .map_err(|_| format!("SUBSCRIBE not answered within {:?}", self.call_timeout))?
            .map_err(|e| e.to_string())?;
        Ok(pubsub)
    }

    /// Forwards messages until the connection is lost (returns why) or `stop` is cancelled
    /// (returns `None`).
    async fn forward(&self, pubsub: redis::aio::PubSub) -> Option<String> {
        let (mut sink, mut stream) = pubsub.split();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return None,
                msg = stream.next() => match msg {
                    Some(msg) => match msg.get_payload::<String>() {
                        // No receiver is not an error: nobody is contending right now.
                        Ok(name) => { let _ = self.releases.send(name); }
                        Err(e) => tracing::debug!(backend = %self.description, error = %e, "ignoring a malformed release message"),
                    },
                    None => return Some("the connection closed".to_owned()),
                },
                _ = ping.tick() => {
                    let answered = tokio::select! {
                        biased;
                        _ = self.stop.cancelled() => return None,
                        r = timeout(self.call_timeout, sink.ping::<redis::Value>()) => r,
                    };
                    match answered {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Some(format!("PING failed: {e}")),
                        Err(_) => return Some(format!("PING not answered within {:?}", self.call_timeout)),
                    }
                }
            }
        }
    }
}
