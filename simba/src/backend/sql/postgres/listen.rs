//! The listener of the PostgreSQL backend: one task per backend instance that `LISTEN`s on a
//! connection of its own for releases and for job control changes and forwards every notified
//! name to the subscribers of its channel, reconnecting with backoff when the connection fails,
//! until the backend's last clone is dropped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;

use super::{CONTROL_CHANNEL, RELEASE_CHANNEL, SCHEDULES_CHANNEL};
use crate::backend::sql::server::CONNECT_TIMEOUT;

/// Backoff of the release listener between reconnection attempts.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Where the listener forwards what each channel notifies.
pub(super) struct Channels {
    /// Names of released leases ([`RELEASE_CHANNEL`]).
    pub(super) releases: broadcast::Sender<String>,
    /// Names of jobs whose control changed ([`CONTROL_CHANNEL`]), and an empty name each time
    /// the listener starts listening, since what changed while it did not was not heard.
    pub(super) controls: broadcast::Sender<String>,
    /// Spaces whose schedules changed ([`SCHEDULES_CHANNEL`]).
    pub(super) schedules: broadcast::Sender<String>,
}

/// The listener: `LISTEN`s on a connection of its own and forwards every notified name,
/// reconnecting with backoff when the connection fails, until `stop` is cancelled.
pub(super) async fn forward_releases(
    options: PgConnectOptions,
    channels: Channels,
    stop: CancellationToken,
    description: Arc<str>,
    ready: oneshot::Sender<()>,
) {
    // A pool of one connection of its own: the listener holds it for ever.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(CONNECT_TIMEOUT)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut ready = Some(ready);
    let mut backoff = LISTEN_BACKOFF.0;
    loop {
        let Err(error) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listen(&pool, &channels, &description, &mut ready, &mut backoff) => r,
        };
        tracing::warn!(backend = %description, error = %error, retry_in = ?backoff, "listener failed; reconnecting");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
    }
}

/// One connection's life of the listener: returns only when it fails or loses its
/// connection.
async fn listen(
    pool: &PgPool,
    channels: &Channels,
    description: &str,
    ready: &mut Option<oneshot::Sender<()>>,
    backoff: &mut Duration,
) -> Result<Infallible, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    let channel_names = [RELEASE_CHANNEL, CONTROL_CHANNEL, SCHEDULES_CHANNEL];
    listener.listen_all(channel_names).await?;
    tracing::debug!(backend = %description, channels = ?channel_names, "listening");
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    // Only now, once listening: a subscriber that reads the control version after this wake
    // sees every change made before it, and hears every one made after.
    let _ = channels.controls.send(String::new());
    *backoff = LISTEN_BACKOFF.0;
    loop {
        // Not `recv`, which reconnects by itself: the caller reconnects, so that the wake
        // above follows every new LISTEN.
        let Some(notification) = listener.try_recv().await? else {
            return Err(sqlx::Error::Protocol("the listening connection was lost".to_owned()));
        };
        let to = match notification.channel() {
            CONTROL_CHANNEL => &channels.controls,
            SCHEDULES_CHANNEL => &channels.schedules,
            _ => &channels.releases,
        };
        let _ = to.send(notification.payload().to_owned());
    }
}
