//! The Redis backend (feature `redis`): sessions are keys with a TTL measured by Redis, leases
//! are hashes whose token never resets, every call is one Lua script (one round trip, atomic on
//! the server), and releases are broadcast with pub/sub so that candidates take over at once.
//!
//! # Key layout
//!
//! With the default key prefix `simba` (see [`RedisOptions::key_prefix`]); ADR 0004 gives the
//! reasoning:
//!
//! | key | type | TTL | content |
//! | --- | --- | --- | --- |
//! | `simba:session:{id}` | string | the session's lifetime (`PEXPIRE`) | the lifetime in ms, so a keep-alive renews with it |
//! | `simba:lease:{name}` | hash | none; removed when idle (B3) | `session` (holder id, absent when free), `token`, `last_slot`, `at` (ms of the last win) |
//! | `simba:lease-floor` | string | none | the highest token of a removed lease hash; a new hash starts at it (T3) |
//! | `simba:owned:{id}` | hash | the session's | lease name -> token, for every lease the session won |
//! | `simba:digest:{id}` | hash | the session's | `count`, `high`, `low`: the digest of the owned entries, kept by acquire and release |
//! | `simba:joined:{id}` | set | the session's | the groups the session joined |
//! | `simba:group:{group}` | set | none | the ids of the group's members |
//! | `simba:released` | pub/sub channel | | names of released leases |
//! | `simba:schedules` | pub/sub channel | | spaces whose schedules changed (`schedules.rs`) |
//!
//! Ownership is derived: a lease is held when its `session` field names a session whose key
//! exists. When a session key expires on Redis's clock (rule B2), all of its leases become free
//! at once with no per-lease write; an expired session never comes back, because nothing
//! recreates its key (S3). The token is incremented with `HINCRBY` when a session wins a lease
//! and never reset: a release only clears `session` (T3). The owned hash is an index from a
//! session to its leases, and the digest hash its summary (count and token sum), which acquire
//! and release update with the entry they add or remove, so that a keep-alive renews the
//! session and answers the digest in one script, with a constant-size request and reply and
//! constant work on the server (S1; BENCHMARKS.md P8). A lease record changed behind the session's
//! back (an operator's `HSET`) is found by the keep-alive's audit, which checks a few owned
//! entries drawn at random against their lease hashes (`AUDIT`, 2, per renewal: every entry of
//! a session holding two leases or fewer), drops a stale one from the digest, and so makes the
//! engine list the session's leases and end that term (T6). Listing rewrites the digest from
//! the lease hashes, so a digest that went wrong by any path is right again after one
//! mismatch. Group sets are cleaned lazily: `members` hides and removes ids whose session key
//! is gone.
//!
//! # Eviction
//!
//! A lease hash evicted under memory pressure would restart its token from 1, and an evicted
//! session key would free its leases while the holder still believes them valid: both break
//! fencing. [`RedisBackend::connect`] therefore reads `maxmemory-policy` and refuses anything
//! but `noeviction` unless [`RedisOptions::allow_eviction`] is set. Where `CONFIG` is disabled
//! (many managed services) it logs a warning and goes on.
//!
//! # Durability
//!
//! A Redis that loses writes (restart without persistence, failover to an asynchronous
//! replica) forgets tokens: the next term of a lease may get a token already used. Run Redis
//! with `appendonly yes` (and `appendfsync always` for the strictest guarantee) if the
//! protected resources rely on tokens across such events, or fence with a resource-side token
//! that survives them.
//!
//! # Redis Cluster
//!
//! Not supported by this backend today (it speaks to one server or one primary). What it would
//! need: every key a script touches must hash to one slot. Acquire reads the session key of
//! whichever session holds the lease, and a keep-alive reads every lease hash its session
//! holds, so sessions and leases cannot be spread over slots by session or by lease; the only
//! layout that works is one hash tag for the whole key space, e.g. key prefix `{simba}` (keys
//! `{simba}:lease:...`), which puts one simba namespace on one shard. That is enough load-wise
//! (one keep-alive per node per renewal period), and separate namespaces (prefixes) spread
//! over shards. Spreading one namespace would need ownership stored per lease (an expiry
//! copied into each lease hash), which makes renewal cost grow with the number of leases
//! (against S1). A Cluster connection would also need the redis crate's `cluster-async`
//! feature, and its failover is asynchronous, with the durability caveat above.

mod connect;
mod inspect;
mod jobs;
mod link;
mod lua;
mod schedule_scripts;
mod schedules;
mod scripts;
mod subscriber;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lua::Lua;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::broadcast;
use tokio::time::timeout;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};
use connect::{call_error, check_eviction_policy, check_url, check_version, connect_error, describe_info, no_answer};
use scripts::{AUDIT, SCRIPTS, token_sum};
use subscriber::Subscriber;

/// The default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "simba";

/// The longest session lifetime stored, about 34 years (a bound, not a setting).
const MAX_TTL_MS: u64 = 1 << 40;

/// How many released names a slow subscriber may fall behind before it skips some (it then
/// retries every lease it waits for, so nothing is lost).
const RELEASE_CAPACITY: usize = 1024;

/// How many keys one step of a removal of idle leases asks `SCAN` for (its `COUNT`).
const IDLE_PAGE: &str = "1000";

/// The most `SCAN` steps one removal of idle leases takes (so about 100,000 keys read).
const IDLE_STEPS: usize = 100;

/// Attempts at drawing a fresh random session id before giving up (a collision of 128-bit
/// ids never happens in practice; the loop only makes the code total).
const OPEN_ATTEMPTS: usize = 3;

/// The URL parameter of [`RedisOptions::wait_replicas`].
const WAIT_REPLICAS: &str = "wait_replicas";
/// The URL parameter of [`RedisOptions::wait_timeout`], in milliseconds.
const WAIT_TIMEOUT_MS: &str = "wait_timeout_ms";
/// The scheme of a URL that names Sentinels and a service instead of one server (rule B9).
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel";
/// [`RedisOptions::wait_timeout`]'s default.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_millis(500);

/// How the backend connects and what it accepts. Build it with [`RedisOptions::default`] and
/// the setters.
///
/// ```
/// use std::time::Duration;
/// use simba::backend::redis::RedisOptions;
///
/// let options = RedisOptions::default().key_prefix("billing-simba").connect_timeout(Duration::from_secs(2));
/// assert!(!options.allow_eviction);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Accept a server whose `maxmemory-policy` is not `noeviction`, with a warning.
    /// Default `false`: such a server is refused, because an evicted lease hash restarts its
    /// tokens from 1 and an evicted session frees its leases early.
    pub allow_eviction: bool,
    /// Prefix of every key and of the release channel (default `simba`). Processes that
    /// contend for the same leases must use the same prefix; different applications on one
    /// server can use different ones. A hash tag such as `{simba}` keeps every key in one
    /// Redis Cluster slot (see the module documentation).
    pub key_prefix: String,
    /// Bound on establishing a connection, including the first one made by
    /// [`RedisBackend::connect`] (default 5 s).
    pub connect_timeout: Duration,
    /// Bound on waiting for any reply (default 10 s; `None`: no bound). The engine times its
    /// calls out on its own, after at most one renewal period (rule D2), so this mostly
    /// bounds calls made outside the engine; a bound shorter than the renewal period only
    /// makes a slow call fail (and be retried) sooner.
    pub response_timeout: Option<Duration>,
    /// How many replicas must acknowledge every write before a call answers (Redis `WAIT`
    /// after each script; default 0: none, Redis's own asynchronous replication). With a
    /// replica promoted after a failover, writes it never received are lost: a token granted
    /// again, a slot claimed again, a session renewed for less long. With `wait_replicas = 1`
    /// and one replica per primary, a call answers only once its writes are on the replica
    /// (a write the replica did not acknowledge within [`wait_timeout`](Self::wait_timeout)
    /// fails the call, so no grant is told that a promotion could take back): the mode to use
    /// with Sentinel or any failover that promotes a replica. URL: `wait_replicas=N`.
    pub wait_replicas: u32,
    /// How long a call waits for [`wait_replicas`](Self::wait_replicas) acknowledgements
    /// (default 500 ms; keep it below the renewal period). URL: `wait_timeout_ms=T`.
    pub wait_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            allow_eviction: false,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Some(Duration::from_secs(10)),
            wait_replicas: 0,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

impl RedisOptions {
    /// Sets [`allow_eviction`](Self::allow_eviction).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`response_timeout`](Self::response_timeout).
    pub fn response_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets [`wait_replicas`](Self::wait_replicas) and [`wait_timeout`](Self::wait_timeout).
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    /// The options with the URL's `wait_replicas` and `wait_timeout_ms` parameters applied.
    fn with_url_params(mut self, url: &crate::backend::BackendUrl) -> BackendResult<Self> {
        let number = |key: &str, v: &str| {
            v.parse::<u32>().map_err(|_| {
                BackendError::Misconfigured(format!(
                    "Redis URL {}: {key}={v} is not a whole number: use e.g. {key}=1",
                    url.redacted()
                ))
            })
        };
        if let Some(v) = url.param(WAIT_REPLICAS) {
            self.wait_replicas = number(WAIT_REPLICAS, v)?;
        }
        if let Some(v) = url.param(WAIT_TIMEOUT_MS) {
            self.wait_timeout = Duration::from_millis(u64::from(number(WAIT_TIMEOUT_MS, v)?));
        }
        Ok(self)
    }

    fn validate(&self) -> BackendResult<()> {
        if self.key_prefix.is_empty() || self.key_prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(BackendError::Misconfigured(format!(
                "invalid Redis key prefix {:?}: use a non-empty prefix without spaces, such as `simba`",
                self.key_prefix
            )));
        }
        if self.wait_replicas > 0 && self.wait_timeout.is_zero() {
            return Err(BackendError::Misconfigured(
                "Redis wait_timeout must be positive when wait_replicas is set: use e.g. 500 ms".to_owned(),
            ));
        }
        if self.connect_timeout.is_zero() || self.response_timeout.is_some_and(|t| t.is_zero()) {
            return Err(BackendError::Misconfigured(
                "Redis connect and response timeouts must be positive: use e.g. 5s and 10s".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The Redis backend. Cheap to clone: clones share one multiplexed connection (reconnected
/// automatically) and one release subscription.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use simba::backend::redis::{RedisBackend, RedisOptions};
/// use simba::{Simba, SimbaConfig};
///
/// let backend = RedisBackend::connect_with("redis://127.0.0.1:6379/0", RedisOptions::default()).await?;
/// let simba = Simba::new(backend, SimbaConfig::default())?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    /// The server the calls go to, and how it follows a Sentinel failover.
    link: Arc<link::Link>,
    keys: Keys,
    /// The server as `redis://[user@]host:port/db`, never with a password.
    description: Arc<str>,
    connect_timeout: Duration,
    /// `WAIT` after every script: replicas and timeout ([`RedisOptions::wait_replicas`]).
    wait: Option<(u32, Duration)>,
    /// The sender of the release subscription, once somebody subscribed.
    releases: Mutex<Option<broadcast::Sender<String>>>,
    /// The sender of the schedule changes' subscription, once somebody subscribed.
    schedule_changes: Mutex<Option<broadcast::Sender<String>>>,
    /// Where the last removal of idle leases stopped its walk: the name prefix and the
    /// `SCAN` cursor, so that each removal reads a bounded number of keys.
    idle_walk: Mutex<(String, String)>,
    /// Stops the subscription task when the last clone drops.
    subscriber_stop: CancellationToken,
    _stop_on_drop: DropGuard,
}

/// Key names (see the module documentation).
struct Keys {
    prefix: String,
    session: String,
    lease: String,
    owned: String,
    digest: String,
    joined: String,
    group: String,
    channel: String,
    /// The token floor (B3): the highest token of a removed lease hash.
    floor: String,
}

impl Keys {
    fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
            session: format!("{prefix}:session:"),
            lease: format!("{prefix}:lease:"),
            owned: format!("{prefix}:owned:"),
            digest: format!("{prefix}:digest:"),
            joined: format!("{prefix}:joined:"),
            group: format!("{prefix}:group:"),
            channel: format!("{prefix}:released"),
            floor: format!("{prefix}:lease-floor"),
        }
    }

    fn session(&self, id: &SessionId) -> String {
        format!("{}{id}", self.session)
    }
    fn lease(&self, name: &str) -> String {
        format!("{}{name}", self.lease)
    }
    fn owned(&self, id: &SessionId) -> String {
        format!("{}{id}", self.owned)
    }
    fn digest(&self, id: &SessionId) -> String {
        format!("{}{id}", self.digest)
    }
    fn joined(&self, id: &SessionId) -> String {
        format!("{}{id}", self.joined)
    }
    fn group(&self, group: &str) -> String {
        format!("{}{group}", self.group)
    }
}

impl RedisBackend {
    /// A receiver of `channel`'s messages: the subscription task of `slot`, started at the
    /// first call (one connection per channel and backend, whatever the number of callers).
    fn subscription(
        &self,
        slot: &Mutex<Option<broadcast::Sender<String>>>,
        channel: String,
        what: &str,
    ) -> Option<broadcast::Receiver<String>> {
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = &*slot {
            return Some(tx.subscribe());
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(backend = %self.inner.description, "no Tokio runtime: {what} will not be broadcast to this client");
            return None;
        };
        let (tx, rx) = broadcast::channel(RELEASE_CAPACITY);
        runtime.spawn(
            Subscriber {
                link: Arc::clone(&self.inner.link),
                channel,
                releases: tx.clone(),
                stop: self.inner.subscriber_stop.clone(),
                description: Arc::clone(&self.inner.description),
                call_timeout: self.inner.connect_timeout,
                ready: None,
            }
            .run(),
        );
        *slot = Some(tx);
        Some(rx)
    }

    /// The channel a schedule write publishes its space on (`{prefix}:schedules`, rule A11).
    pub(crate) fn schedules_channel(&self) -> String {
        format!("{}:schedules", self.keys().prefix)
    }

    /// Receivers of the spaces whose schedules changed ([`schedules_channel`](Self::schedules_channel)).
    pub(crate) fn subscribe_schedule_changes(&self) -> Option<broadcast::Receiver<String>> {
        self.subscription(&self.inner.schedule_changes, self.schedules_channel(), "schedule changes")
    }

    /// Publishes on `channel` (a hint: a failure is logged, not returned).
    pub(crate) async fn publish(&self, channel: &str, message: &str) {
        let mut conn = self.inner.link.conn();
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel).arg(message);
        match timeout(self.inner.connect_timeout, cmd.query_async::<i64>(&mut conn)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(backend = %self.inner.description, %channel, error = %e, "cannot publish; holders poll")
            }
            Err(_) => {
                tracing::debug!(backend = %self.inner.description, %channel, "no answer to a publish; holders poll")
            }
        }
    }
    /// Connects to the server at `url` with the default [`RedisOptions`].
    ///
    /// `url` is `redis://[user[:password]@]host[:port][/db]` or `rediss://...` (TLS with
    /// rustls; the server certificate is checked against the system's roots, or against the
    /// PEM file of the `ca_file=` parameter; `cert_file=` and `key_file=` give a client
    /// certificate; the driver builds its TLS configuration from the process's rustls provider,
    /// which the application installs, see
    /// [`install_tls_provider`](crate::backend::install_tls_provider)). The user and password are Redis ACL credentials. Fails with
    /// [`BackendError::Misconfigured`] for a malformed URL, wrong credentials or an evicting
    /// server (see the module documentation), and with [`BackendError::Unavailable`] when the
    /// server does not answer within the connect timeout (5 s). Errors name the server
    /// without the password.
    pub async fn connect(url: &str) -> BackendResult<Self> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to the server at `url` with `options`; see [`connect`](Self::connect).
    pub async fn connect_with(url: &str, options: RedisOptions) -> BackendResult<Self> {
        Self::connect_url(&crate::backend::BackendUrl::new(url), options).await
    }

    /// The driver's client of a `redis://` or `rediss://` URL (its TLS files read).
    fn client_of(url: &crate::backend::BackendUrl) -> BackendResult<redis::Client> {
        let shown = url.redacted().to_owned();
        check_url(url)?;
        let (text, certificates) = connect::tls_files(url)?;
        let text = crate::secret::strip_params(&text, &[WAIT_REPLICAS, WAIT_TIMEOUT_MS]);
        let opened = match certificates {
            Some(c) => redis::Client::build_with_tls(text.as_str(), c),
            None => redis::Client::open(text.as_str()),
        };
        opened.map_err(|e| {
            let hint = if e.to_string().contains("TLS") {
                "rediss:// needs TLS support in the redis crate: enable its `tokio-native-tls-comp` or \
                 `tokio-rustls-comp` feature, or use redis:// on a trusted network"
            } else {
                "expected redis://[user[:password]@]host[:port][/db] or rediss://..."
            };
            BackendError::Misconfigured(format!("invalid Redis URL {shown}: {e}; {hint}"))
        })
    }

    /// [`connect_with`](Self::connect_with) to a parsed URL.
    pub(crate) async fn connect_url(url: &crate::backend::BackendUrl, options: RedisOptions) -> BackendResult<Self> {
        let options = options.with_url_params(url)?;
        options.validate()?;
        let ct = options.connect_timeout;
        let (client, sentinels) = if url.scheme().eq_ignore_ascii_case(SENTINEL_SCHEME) {
            let shown = url.redacted().to_owned();
            let (addresses, service, node) = link::sentinel_target(url.secret_text(), &shown)?;
            let sentinels = link::Sentinels::new(&addresses, &service, node, shown)?;
            (sentinels.primary(ct).await?, Some(sentinels))
        } else {
            (Self::client_of(url)?, None)
        };
        let description: Arc<str> = match &sentinels {
            Some(_) => format!(
                "{} (primary {})",
                url.redacted(),
                describe_info(client.get_connection_info()).unwrap_or_default()
            )
            .into(),
            None => describe_info(client.get_connection_info()).unwrap_or_else(|| url.redacted().to_owned()).into(),
        };
        // The redis crate builds its TLS configuration from the process's rustls provider and
        // takes none: without one it would panic (or install one for the whole process), and
        // simba installs none (backend::tls_provider): say what to add instead.
        if matches!(client.get_connection_info().addr(), redis::ConnectionAddr::TcpTls { .. }) {
            crate::backend::require_process_provider("redis", &format!("Redis at {description}"))?;
        }

        // One plain connection first: its single attempt reports the real cause (refused,
        // unknown host, bad password) within the connect timeout, and it reads the eviction
        // policy before any key is written.
        let probe_config =
            redis::AsyncConnectionConfig::new().set_connection_timeout(Some(ct)).set_response_timeout(Some(ct));
        let mut probe = match timeout(ct, client.get_multiplexed_async_connection_with_config(&probe_config)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_error(&description, &e)),
            Err(_) => return Err(no_answer(&description, ct)),
        };
        check_version(&mut probe, &description, ct).await?;
        check_eviction_policy(&mut probe, &description, options.allow_eviction, ct).await?;
        drop(probe);

        // The connection the calls use: multiplexed, reconnected in the background after a
        // failure, retrying with a backoff capped at 1 s so that a restarted server is found
        // again quickly.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(ct))
            .set_response_timeout(options.response_timeout)
            .set_max_delay(Duration::from_secs(1));
        let conn = match timeout(ct, ConnectionManager::new_with_config(client.clone(), config.clone())).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_error(&description, &e)),
            Err(_) => return Err(no_answer(&description, ct)),
        };
        let link = link::Link::new(client, conn, sentinels, config, ct);
        let subscriber_stop = CancellationToken::new();
        let backend = RedisBackend {
            inner: Arc::new(Inner {
                link,
                keys: Keys::new(&options.key_prefix),
                description,
                connect_timeout: ct,
                wait: (options.wait_replicas > 0).then_some((options.wait_replicas, options.wait_timeout)),
                releases: Mutex::new(None),
                schedule_changes: Mutex::new(None),
                idle_walk: Mutex::new((String::new(), "0".to_owned())),
                _stop_on_drop: subscriber_stop.clone().drop_guard(),
                subscriber_stop,
            }),
        };
        tracing::debug!(backend = %backend.inner.description, prefix = %options.key_prefix, "Redis backend ready");
        Ok(backend)
    }

    /// The key prefix in use.
    pub fn key_prefix(&self) -> &str {
        &self.inner.keys.prefix
    }

    /// The key of lease `name`'s hash (fields `session`, `token`, `last_slot`), for operators
    /// and tests that inspect the store.
    pub fn lease_key(&self, name: &str) -> String {
        self.inner.keys.lease(name)
    }

    /// The key of `session`'s TTL key.
    pub fn session_key(&self, session: &SessionId) -> String {
        self.inner.keys.session(session)
    }

    /// The pub/sub channel on which released lease names are published.
    pub fn release_channel(&self) -> &str {
        &self.inner.keys.channel
    }

    fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Runs `script` (one `EVALSHA`, plus a `SCRIPT LOAD` the first time a server sees it)
    /// and converts its reply. `what` names the call in errors.
    async fn eval<T: redis::FromRedisValue, const K: usize, const A: usize>(
        &self,
        script: &Lua,
        keys: [String; K],
        args: [&str; A],
        what: &'static str,
    ) -> BackendResult<T> {
        let mut invocation = script.script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        let mut conn = self.inner.link.conn();
        let reply = invocation.invoke_async(&mut conn).await.map_err(|e| self.call_failed(what, e))?;
        if script.writes {
            self.replicated(&mut conn, what).await?;
        }
        Ok(reply)
    }

    /// With [`RedisOptions::wait_replicas`] set: waits until that many replicas acknowledged
    /// every write made on `conn` so far (one `WAIT`), and fails the call (`Unavailable`: the
    /// caller tries again, and every script is safe to repeat) when fewer did within the
    /// timeout: a write only the primary holds is not answered as done (rule B8).
    pub(super) async fn replicated(&self, conn: &mut ConnectionManager, what: &'static str) -> BackendResult<()> {
        let Some((replicas, wait)) = self.inner.wait else { return Ok(()) };
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let acked: i64 =
            redis::cmd("WAIT").arg(replicas).arg(ms).query_async(conn).await.map_err(|e| self.call_failed(what, e))?;
        if acked < i64::from(replicas) {
            return Err(BackendError::Unavailable {
                message: format!(
                    "{}: {what}: {acked} of {replicas} replicas acknowledged the write within {wait:?} \
                     (wait_replicas): not answered as done; try again once the replica is back",
                    self.inner.description
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// The error of call `what` that failed with `e`; with Sentinels, a failure that a
    /// failover causes makes the backend ask them for the primary (rule B9).
    pub(super) fn call_failed(&self, what: &'static str, e: redis::RedisError) -> BackendError {
        self.inner.link.failed(&e);
        call_error(&self.inner.description, what, e)
    }

    fn protocol(&self, what: &str, reply: impl fmt::Debug) -> BackendError {
        BackendError::Protocol(format!("{}: unexpected reply to {what}: {reply:?}", self.inner.description))
    }

    fn non_negative(&self, what: &str, v: i64) -> BackendResult<u64> {
        u64::try_from(v).map_err(|_| self.protocol(what, v))
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("server", &self.inner.description)
            .field("key_prefix", &self.inner.keys.prefix)
            .finish_non_exhaustive()
    }
}

impl Backend for RedisBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(MAX_TTL_MS).clamp(1, MAX_TTL_MS).to_string();
        for _ in 0..OPEN_ATTEMPTS {
            let id = SessionId::random();
            let remaining: i64 =
                self.eval(&SCRIPTS.open_session, [self.keys().session(&id)], [&ttl_ms], "open a session").await?;
            if remaining >= 0 {
                return Ok(SessionGrant { id, remaining: Duration::from_millis(remaining.unsigned_abs()) });
            }
            tracing::warn!(backend = %self.inner.description, session = %id, "a random session id was already in use; drawing another");
        }
        Err(BackendError::Protocol(format!(
            "{}: {OPEN_ATTEMPTS} random session ids in a row already existed: check that nothing else writes `{}*` keys",
            self.inner.description,
            self.keys().session
        )))
    }

    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let k = self.keys();
        let what = "renew a session";
        let audit = AUDIT.to_string();
        let reply: (i64, i64, String, String, String) = self
            .eval(
                &SCRIPTS.keep_alive,
                [k.session(session), k.owned(session), k.joined(session), k.digest(session)],
                [session.as_str(), &k.lease, &audit],
                what,
            )
            .await?;
        match reply {
            (0, ..) => Ok(KeepAlive::Expired),
            (1, remaining, ref count, ref high, ref low) => {
                let remaining = Duration::from_millis(self.non_negative(what, remaining)?);
                // A sum that is not a non-negative integer (never written so by the scripts) is a
                // digest that differs: the engine lists the leases, which rewrites it.
                let sum = |v: &str| v.parse::<u64>().ok();
                let listed = match (sum(count), sum(high), sum(low)) {
                    (Some(count), Some(high), Some(low)) => Some(HeldDigest { count, token_sum: token_sum(high, low) }),
                    _ => None,
                };
                Ok(KeepAlive::Alive { remaining, digest_matches: listed == Some(held) })
            }
            _ => Err(self.protocol(what, reply)),
        }
    }

    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        let k = self.keys();
        let what = "acquire a lease";
        let reply: (i64, String) = self
            .eval(
                &SCRIPTS.acquire,
                [k.session(session), k.lease(name), k.owned(session), k.digest(session), k.floor.clone()],
                [session.as_str(), name, &k.session],
                what,
            )
            .await?;
        match reply {
            (-1, _) => Ok(Acquire::Expired),
            (0, _) => Ok(Acquire::Held),
            (1, ref token) => match token.parse::<u64>() {
                Ok(t) if t > 0 => Ok(Acquire::Won(t)),
                _ => Err(self.protocol(what, reply)),
            },
            _ => Err(self.protocol(what, reply)),
        }
    }

    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        let k = self.keys();
        let token = token.to_string();
        let args = [session.as_str(), &token, name, &k.channel];
        let released: i64 = self
            .eval(&SCRIPTS.release, [k.lease(name), k.owned(session), k.digest(session)], args, "release a lease")
            .await?;
        Ok(released == 1)
    }

    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        let k = self.keys();
        let keys = [k.session(session), k.owned(session), k.joined(session), k.digest(session)];
        let args = [session.as_str(), &k.lease, &k.group, &k.channel];
        let freed: i64 = self.eval(&SCRIPTS.close_session, keys, args, "close a session").await?;
        tracing::debug!(backend = %self.inner.description, %session, freed, "session closed on Redis");
        Ok(())
    }

    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        let k = self.keys();
        let what = "list a session's leases";
        let flat: Vec<String> = self
            .eval(
                &SCRIPTS.owned,
                [k.session(session), k.owned(session), k.digest(session)],
                [session.as_str(), &k.lease],
                what,
            )
            .await?;
        if !flat.len().is_multiple_of(2) {
            return Err(self.protocol(what, flat));
        }
        let mut owned = Vec::with_capacity(flat.len() / 2);
        let mut it = flat.into_iter();
        while let (Some(name), Some(token)) = (it.next(), it.next()) {
            let Ok(token) = token.parse::<u64>() else {
                return Err(self.protocol(what, (name, token)));
            };
            owned.push((name, token));
        }
        owned.sort();
        Ok(owned)
    }

    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let k = self.keys();
        let (token, slot) = (token.to_string(), slot.to_string());
        let args = [session.as_str(), &token, &slot];
        let claimed: i64 =
            self.eval(&SCRIPTS.claim_slot, [k.session(session), k.lease(name)], args, "claim a slot").await?;
        Ok(claimed == 1)
    }

    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        let k = self.keys();
        let keys = [k.session(session), k.group(group), k.joined(session)];
        let joined: i64 = self.eval(&SCRIPTS.join_group, keys, [session.as_str(), group], "join a group").await?;
        Ok(if joined == 1 { Join::Joined } else { Join::Expired })
    }

    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        let k = self.keys();
        let keys = [k.group(group), k.joined(session)];
        let _: i64 = self.eval(&SCRIPTS.leave_group, keys, [session.as_str(), group], "leave a group").await?;
        Ok(())
    }

    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let k = self.keys();
        let ids: Vec<String> =
            self.eval(&SCRIPTS.members, [k.group(group)], [k.session.as_str()], "list group members").await?;
        let mut ids: Vec<SessionId> = ids.into_iter().map(SessionId::new).collect();
        ids.sort();
        Ok(ids)
    }

    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.inspect_store().await
    }

    /// `SCAN` steps of 1,000 keys over the lease hashes, each step one script that removes
    /// what it found idle and raises the floor; at most 100 steps per call, resumed where the
    /// last call stopped, so a call reads a bounded number of keys however
    /// many names the store holds.
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        let k = self.keys();
        let idle_ms = u64::try_from(idle_for.as_millis()).unwrap_or(u64::MAX).to_string();
        let mut cursor = {
            let walk = self.inner.idle_walk.lock().unwrap_or_else(PoisonError::into_inner);
            if walk.0 == prefix { walk.1.clone() } else { "0".to_owned() }
        };
        let mut removed = 0;
        for _ in 0..IDLE_STEPS {
            if removed >= limit {
                break;
            }
            let budget = (limit - removed).to_string();
            let args = [k.lease.as_str(), prefix, &cursor, IDLE_PAGE, &idle_ms, &k.session, &budget];
            let (next, n): (String, u64) =
                self.eval(&SCRIPTS.remove_idle, [k.floor.clone()], args, "remove idle leases").await?;
            removed += usize::try_from(n).unwrap_or(usize::MAX);
            cursor = next;
            if cursor == "0" {
                break;
            }
        }
        *self.inner.idle_walk.lock().unwrap_or_else(PoisonError::into_inner) = (prefix.to_owned(), cursor);
        Ok(removed)
    }

    /// Released lease names, from one pub/sub subscription per backend instance (shared by
    /// its clones), started on the first call. `None` outside a Tokio runtime.
    fn job_store(&self) -> Option<crate::backend::job_store::SharedJobStore> {
        Some(crate::backend::job_store::SharedJobStore::new(jobs::RedisJobStore::new(self.clone())))
    }

    /// Schedules stored as data (ADR 0020), beside the other keys under the key prefix (see
    /// `schedules.rs` for the layout).
    fn schedule_store(&self) -> Option<crate::backend::schedule_store::SharedScheduleStore> {
        Some(crate::backend::schedule_store::SharedScheduleStore::new(schedules::RedisScheduleStore::new(self.clone())))
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<String>> {
        self.subscription(&self.inner.releases, self.keys().channel.clone(), "releases")
    }

    fn describe(&self) -> String {
        self.inner.description.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(RedisOptions::default().validate().is_ok());
        assert!(RedisOptions::default().key_prefix("").validate().is_err());
        assert!(RedisOptions::default().key_prefix("a b").validate().is_err());
        assert!(RedisOptions::default().connect_timeout(Duration::ZERO).validate().is_err());
        assert!(RedisOptions::default().response_timeout(Some(Duration::ZERO)).validate().is_err());
        assert!(RedisOptions::default().key_prefix("{simba}").response_timeout(None).validate().is_ok());
        assert!(RedisOptions::default().wait_replicas(1, Duration::ZERO).validate().is_err());
        assert!(RedisOptions::default().wait_replicas(0, Duration::ZERO).validate().is_ok());
    }

    /// Rule B8: the URL's `wait_replicas` and `wait_timeout_ms` set the mode; a value that is
    /// not a whole number is refused, naming the parameter and an example.
    #[test]
    fn b8_wait_replicas_comes_from_the_url() {
        let url = |text: &str| crate::backend::BackendUrl::new(text);
        let o =
            RedisOptions::default().with_url_params(&url("redis://h/0?wait_replicas=2&wait_timeout_ms=250")).unwrap();
        assert_eq!((o.wait_replicas, o.wait_timeout), (2, Duration::from_millis(250)));
        let o = RedisOptions::default().with_url_params(&url("redis://h/0")).unwrap();
        assert_eq!((o.wait_replicas, o.wait_timeout), (0, DEFAULT_WAIT_TIMEOUT));
        let e = RedisOptions::default().with_url_params(&url("redis://:pw@h/0?wait_replicas=one")).unwrap_err();
        assert!(
            matches!(&e, BackendError::Misconfigured(m) if m.contains("wait_replicas=one") && m.contains("wait_replicas=1") && !m.contains("pw")),
            "{e}"
        );
    }

    #[test]
    fn key_layout() {
        let k = Keys::new("simba");
        let id = SessionId::new("00ff");
        assert_eq!(k.session(&id), "simba:session:00ff");
        assert_eq!(k.lease("billing.3"), "simba:lease:billing.3");
        assert_eq!(k.owned(&id), "simba:owned:00ff");
        assert_eq!(k.joined(&id), "simba:joined:00ff");
        assert_eq!(k.group("billing"), "simba:group:billing");
        assert_eq!(k.channel, "simba:released");
    }
}
