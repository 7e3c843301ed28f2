//! The server the backend's calls go to (rule B9). With `redis://` it is the URL's one server;
//! the multiplexed connection reconnects to it by itself. With `redis+sentinel://` it is the
//! primary that the Sentinels name for the URL's service: asked at connect, and asked again
//! after a call fails the way a failover makes calls fail (the connection refused, dropped or
//! timed out, or a `READONLY` answer from a server demoted to replica), at most once per
//! [`LOOK_EVERY`]. When the Sentinels name another primary, the calls and the subscriptions
//! move to it; until then they keep the one they have (the Sentinels have not promoted yet).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use tokio::time::{Instant, timeout};

use super::connect::describe_info;
use crate::backend::{BackendError, BackendResult};

/// The shortest time between two questions to the Sentinels after failed calls.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Where to ask for the primary: the Sentinels and the service's name.
pub(super) struct Sentinels {
    sentinel: tokio::sync::Mutex<Sentinel>,
    service: String,
    node: SentinelNodeConnectionInfo,
    /// The Sentinels and the service as shown (`redis+sentinel://h1:26379,h2:26379/service`).
    shown: String,
}

impl Sentinels {
    /// The Sentinels at `addresses` (`host:port`), for service `service`, whose primary is
    /// reached with `node` (database, user, password).
    pub(super) fn new(
        addresses: &[String],
        service: &str,
        node: SentinelNodeConnectionInfo,
        shown: String,
    ) -> BackendResult<Self> {
        let urls: Vec<String> = addresses.iter().map(|a| format!("redis://{a}")).collect();
        let sentinel = Sentinel::build(urls)
            .map_err(|e| BackendError::Misconfigured(format!("invalid Sentinel addresses in {shown}: {e}")))?;
        Ok(Sentinels { sentinel: tokio::sync::Mutex::new(sentinel), service: service.to_owned(), node, shown })
    }

    /// A client of the primary the Sentinels name now (it is asked whether it is one).
    pub(super) async fn primary(&self, within: Duration) -> BackendResult<redis::Client> {
        let mut sentinel = self.sentinel.lock().await;
        match timeout(within, sentinel.async_master_for(&self.service, Some(&self.node))).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(BackendError::unavailable(
                format!(
                    "{}: no Sentinel named a primary for `{}` that answers as one; check the Sentinels, the service \
                     name and that a primary runs",
                    self.shown, self.service
                ),
                e,
            )),
            Err(_) => Err(BackendError::Unavailable {
                message: format!("{}: no Sentinel answered within {within:?}", self.shown),
                source: None,
            }),
        }
    }
}

/// At most one start per period: whether something may start now.
struct Throttle {
    every: Duration,
    /// When it last started.
    last: std::sync::Mutex<Option<Instant>>,
}

impl Throttle {
    fn new(every: Duration) -> Self {
        Throttle { every, last: std::sync::Mutex::new(None) }
    }

    /// Whether it may start now (it did not within the period); if so, counts it as started.
    fn due(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < self.every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

/// The server now: its client (for subscriptions) and the multiplexed connection.
#[derive(Clone)]
struct Current {
    client: redis::Client,
    conn: ConnectionManager,
}

/// The connection the calls use, and, with Sentinels, how it follows a failover.
pub(super) struct Link {
    current: RwLock<Current>,
    sentinels: Option<Sentinels>,
    config: ConnectionManagerConfig,
    connect_timeout: Duration,
    /// When the Sentinels may be asked again after a failed call.
    looks: Throttle,
    /// Held while one look runs, so two never overlap.
    looking: tokio::sync::Mutex<()>,
}

impl Link {
    /// A link to `client`'s server over `conn`; `sentinels` when the URL named Sentinels.
    pub(super) fn new(
        client: redis::Client,
        conn: ConnectionManager,
        sentinels: Option<Sentinels>,
        config: ConnectionManagerConfig,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Link {
            current: RwLock::new(Current { client, conn }),
            sentinels,
            config,
            connect_timeout,
            looks: Throttle::new(LOOK_EVERY),
            looking: tokio::sync::Mutex::new(()),
        })
    }

    /// The multiplexed connection to the server now (a cheap clone).
    pub(super) fn conn(&self) -> ConnectionManager {
        self.current.read().unwrap_or_else(PoisonError::into_inner).conn.clone()
    }

    /// A client of the server now, for a subscription's own connection.
    pub(super) fn client(&self) -> redis::Client {
        self.current.read().unwrap_or_else(PoisonError::into_inner).client.clone()
    }

    /// After a call failed with `e`: with Sentinels, and when `e` is what a failover causes,
    /// asks them for the primary in the background ([`look`](Self::look)), at most once per
    /// [`LOOK_EVERY`] (a burst of failed calls starts one look, not one each); the failed
    /// call does not wait for it.
    pub(super) fn failed(self: &Arc<Self>, e: &redis::RedisError) {
        if self.sentinels.is_none() || !failover_like(e) || !self.looks.due() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let link = Arc::clone(self);
            runtime.spawn(async move { link.look().await });
        }
    }

    /// Asks the Sentinels for the primary and moves to it when it is another server. Never
    /// fails: the next call reports what still fails.
    async fn look(&self) {
        let Some(sentinels) = &self.sentinels else { return };
        let _one = self.looking.lock().await;
        let client = match sentinels.primary(self.connect_timeout).await {
            Ok(client) => client,
            Err(e) => {
                tracing::debug!(sentinels = %sentinels.shown, error = %e, "no primary named yet; keeping the server");
                return;
            }
        };
        let now = self.client();
        if client.get_connection_info().addr() == now.get_connection_info().addr() {
            return;
        }
        let from = describe_info(now.get_connection_info()).unwrap_or_default();
        let to = describe_info(client.get_connection_info()).unwrap_or_default();
        match timeout(self.connect_timeout, ConnectionManager::new_with_config(client.clone(), self.config.clone()))
            .await
        {
            Ok(Ok(conn)) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Current { client, conn };
                tracing::warn!(sentinels = %sentinels.shown, %from, %to, "the Sentinels name a new primary; calls move to it");
            }
            Ok(Err(e)) => {
                tracing::warn!(sentinels = %sentinels.shown, %to, error = %e, "cannot connect to the new primary yet")
            }
            Err(_) => tracing::warn!(sentinels = %sentinels.shown, %to, "the new primary did not answer yet"),
        }
    }
}

/// Whether `e` is how calls fail across a failover: the server gone or silent, or demoted.
fn failover_like(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.to_string().contains("READONLY")
}

/// The default port of a Sentinel.
const SENTINEL_PORT: u16 = 26379;

/// What a `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db]` URL
/// names: the Sentinels, the service, and how to reach its primary.
pub(super) fn sentinel_target(
    text: &str,
    shown: &str,
) -> BackendResult<(Vec<String>, String, SentinelNodeConnectionInfo)> {
    let expected = "expected redis+sentinel://[user[:password]@]host[:26379][,host[:port]...]/service[/db]";
    let bad = |why: &str| BackendError::Misconfigured(format!("invalid Redis Sentinel URL {shown}: {why}; {expected}"));
    let rest = text.split_once("://").map(|(_, r)| r).ok_or_else(|| bad("no scheme"))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut addresses = Vec::new();
    for host in hosts.split(',') {
        let bare_v6 = host.starts_with('[') && host.ends_with(']');
        let (name, port) = match host.rsplit_once(':') {
            Some((n, p)) if !bare_v6 => (n, p.parse::<u16>().map_err(|_| bad(&format!("`{p}` is not a port")))?),
            _ => (host, SENTINEL_PORT),
        };
        if name.is_empty() {
            return Err(bad("a Sentinel without a host"));
        }
        addresses.push(format!("{name}:{port}"));
    }
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let service = segments.next().ok_or_else(|| bad("no service name (the name the Sentinels monitor)"))?;
    let db = match segments.next() {
        Some(d) => d.parse::<i64>().map_err(|_| bad(&format!("`{d}` is not a database number")))?,
        None => 0,
    };
    if segments.next().is_some() {
        return Err(bad("more than a service and a database in the path"));
    }
    let mut redis = redis::RedisConnectionInfo::default().set_db(db);
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        if !user.is_empty() {
            redis = redis.set_username(crate::secret::decode_percent(user));
        }
        if !password.is_empty() {
            redis = redis.set_password(crate::secret::decode_percent(password));
        }
    }
    let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis);
    Ok((addresses, crate::secret::decode_percent(service), node))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Rule B9: the Sentinels, the service and the database of a `redis+sentinel://` URL; bad
    /// ones refused naming the fault and the form.
    #[test]
    fn b9_a_sentinel_url_names_the_sentinels_and_the_service() {
        let (hosts, service, _) = sentinel_target("redis+sentinel://a:1,b,[::1]:3,[::2]/billing/2", "shown").unwrap();
        assert_eq!(hosts, ["a:1", "b:26379", "[::1]:3", "[::2]:26379"]);
        assert_eq!(service, "billing");
        let (hosts, service, _) = sentinel_target("redis+sentinel://u:p%40w@s1/svc?wait_replicas=1", "shown").unwrap();
        assert_eq!((hosts.as_slice(), service.as_str()), (["s1:26379".to_owned()].as_slice(), "svc"));
        for (url, why) in [
            ("redis+sentinel://s1", "no service name"),
            ("redis+sentinel://s1:x/svc", "`x` is not a port"),
            ("redis+sentinel://s1/svc/zero", "`zero` is not a database number"),
            ("redis+sentinel://s1,/svc", "a Sentinel without a host"),
            ("redis+sentinel://s1/svc/0/more", "more than a service"),
        ] {
            let e = sentinel_target(url, "SHOWN").unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("SHOWN") && e.contains("expected redis+sentinel://"), "{url}: {e}");
        }
    }

    /// Rule B9: a burst of failed calls asks the Sentinels once per [`LOOK_EVERY`] (250 ms):
    /// the first failure starts a look, the others within 250 ms of it start none, the first
    /// one 250 ms later starts the next.
    #[tokio::test(start_paused = true)]
    async fn b9_failed_calls_ask_the_sentinels_at_most_once_per_250_ms() {
        assert_eq!(LOOK_EVERY, Duration::from_millis(250));
        let looks = Throttle::new(LOOK_EVERY);
        let mut started = Vec::new();
        let t0 = Instant::now();
        // A failed call every 10 ms for 1 s.
        for _ in 0..100 {
            if looks.due() {
                started.push(t0.elapsed().as_millis());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(started, [0, 250, 500, 750]);
    }
}
