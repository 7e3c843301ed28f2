//! The watch on the lease prefix: one per backend instance. It feeds the [`Mirror`] (what
//! this backend's sessions hold, for the keep-alive digest) and broadcasts every deleted lease
//! key (releases, closed and expired sessions) to [`Backend::subscribe_releases`] (rule K2).
//!
//! The task holds no reference to the backend: it stops when the backend's last clone drops
//! (a cancellation token cancelled on drop). A lost stream is made again with a capped
//! backoff and resumes at the last revision it delivered (whose events are applied again,
//! harmlessly: a stream may break between two fragments of one revision), so no change is
//! missed unless the server compacted that history meanwhile; then the mirror is told of the
//! gap. Responses are fragmented by the server when large (a revoked lease deletes all of its
//! keys in one revision). A stream that stays silent is probed with a progress request: one
//! that does not answer is dropped and made again.
//!
//! [`Backend::subscribe_releases`]: crate::backend::Backend::subscribe_releases

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchStream};
use tokio::sync::broadcast;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::mirror::Mirror;
use super::url::{CONNECT_TIMEOUT, chain};

/// First delay before watching again; doubles up to the second.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// Silence after which the stream is probed with a progress request.
const QUIET: Duration = Duration::from_secs(10);

/// What the task needs; none of it keeps the backend alive.
pub(super) struct Watcher {
    pub(super) client: Client,
    /// `{prefix}/lease/`.
    pub(super) prefix: String,
    pub(super) mirror: Arc<Mirror>,
    pub(super) releases: broadcast::Sender<String>,
    pub(super) stop: CancellationToken,
    pub(super) description: Arc<str>,
}

/// Why a stream ended.
enum Ended {
    Stopped,
    /// The history to resume from was compacted.
    Compacted,
    Lost(String),
}

impl Watcher {
    /// Opens a stream that delivers every change of the lease prefix after revision `after`,
    /// and waits until the server confirms it (`Ok(None)`: that history is compacted).
    pub(super) async fn open(&self, after: i64) -> Result<Option<WatchStream>, etcd_client::Error> {
        let options = WatchOptions::new().with_prefix().with_fragment().with_start_revision(after + 1);
        let mut stream = self.client.clone().watch(self.prefix.as_str(), Some(options)).await?;
        loop {
            match stream.message().await? {
                Some(r) if r.canceled() && r.compact_revision() > 0 => return Ok(None),
                Some(r) if r.canceled() => {
                    return Err(etcd_client::Error::WatchError(format!("watch refused: {}", r.cancel_reason())));
                }
                Some(r) if r.created() => return Ok(Some(stream)),
                Some(_) => {}
                None => return Err(etcd_client::Error::WatchError("the watch stream closed".to_owned())),
            }
        }
    }

    /// The store's current revision (a one-key read).
    pub(super) async fn revision(&self) -> Result<i64, etcd_client::Error> {
        let r = self.client.clone().get(self.prefix.as_str(), Some(GetOptions::new().with_count_only())).await?;
        Ok(r.header().map_or(0, |h| h.revision()))
    }

    /// Forwards `first` (opened by `connect`), then watches again whenever a stream ends,
    /// until `stop` is cancelled.
    pub(super) async fn run(self, first: WatchStream) {
        let mut stream = Some(first);
        let mut backoff = BACKOFF.0;
        let mut gap = false;
        loop {
            if let Some(s) = stream.take() {
                backoff = BACKOFF.0;
                match self.forward(s).await {
                    Ended::Stopped => return,
                    Ended::Compacted => gap = true,
                    Ended::Lost(why) => {
                        tracing::warn!(backend = %self.description, reason = %why, "lease watch lost; watching again");
                    }
                }
                self.mirror.not_watching();
            }
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                r = timeout(CONNECT_TIMEOUT, self.reopen(gap)) => match r {
                    Ok(Ok(Some(s))) => {
                        stream = Some(s);
                        gap = false;
                        continue;
                    }
                    Ok(Ok(None)) => gap = true,
                    Ok(Err(e)) => tracing::debug!(backend = %self.description, error = %chain(&e), "cannot watch lease changes yet"),
                    Err(_) => tracing::debug!(backend = %self.description, "no answer to a new lease watch"),
                },
            }
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }

    /// Watches again: from the last revision delivered, or (after a gap) from now on.
    async fn reopen(&self, gap: bool) -> Result<Option<WatchStream>, etcd_client::Error> {
        if gap {
            let now = self.revision().await?;
            let s = self.open(now).await?;
            if s.is_some() {
                tracing::warn!(backend = %self.description, "lease watch resumed after a compacted gap: sessions list their leases again");
                self.mirror.watching(Some(now), true);
            }
            return Ok(s);
        }
        let s = self.open(self.mirror.watched_to() - 1).await?;
        if s.is_some() {
            tracing::info!(backend = %self.description, "lease watch restored");
            self.mirror.watching(None, false);
        }
        Ok(s)
    }

    async fn forward(&self, stream: WatchStream) -> Ended {
        let (mut requests, mut responses) = stream.split();
        let mut probing = false;
        loop {
            let wait = if probing { CONNECT_TIMEOUT } else { QUIET };
            let message = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return Ended::Stopped,
                m = timeout(wait, responses.message()) => m,
            };
            match message {
                Err(_) if probing => return Ended::Lost(format!("no answer to a progress request within {wait:?}")),
                Err(_) => {
                    if let Err(e) = requests.request_progress().await {
                        return Ended::Lost(chain(&e));
                    }
                    probing = true;
                }
                Ok(Ok(Some(r))) => {
                    probing = false;
                    if r.canceled() {
                        return if r.compact_revision() > 0 {
                            Ended::Compacted
                        } else {
                            Ended::Lost(format!("the server cancelled the watch: {}", r.cancel_reason()))
                        };
                    }
                    for e in r.events() {
                        self.event(e);
                    }
                }
                Ok(Ok(None)) => return Ended::Lost("the stream closed".to_owned()),
                Ok(Err(e)) => return Ended::Lost(chain(&e)),
            }
        }
    }

    fn event(&self, e: &etcd_client::Event) {
        let Some(kv) = e.kv() else { return };
        let Some(name) = std::str::from_utf8(kv.key()).ok().and_then(|k| k.strip_prefix(self.prefix.as_str())) else {
            return;
        };
        if name.contains('/') {
            return;
        }
        match e.event_type() {
            EventType::Put => {
                let holder = u64::try_from(kv.create_revision()).ok().filter(|_| kv.lease() != 0);
                self.mirror.watched(name, kv.mod_revision(), holder.map(|t| (kv.lease(), t)));
            }
            EventType::Delete => {
                self.mirror.watched(name, kv.mod_revision(), None);
                // No receiver is not an error: nobody is contending right now.
                let _ = self.releases.send(name.to_owned());
            }
        }
    }
}
