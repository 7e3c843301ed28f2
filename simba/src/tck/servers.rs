//! The server suite: what every backend on a real server must survive beyond the
//! [conformance suite](super::conformance), in real time (rules S1, S3, T3, T6, K2 and section
//! 9): a lease taken over by hand, two nodes racing, a renewal that waited for its row, the
//! exact keep-alive digest, graceful handovers, connection errors, and the server killed,
//! restarted and paused longer than the lease. A backend runs it through
//! [`server_suite!`](crate::server_suite).
//!
//! Some scenarios need something a [`Backend`] cannot do through its own interface: write to
//! the store by hand, hold a lock in it, kill or pause the server. A backend's entry gives them
//! as optional hooks on [`ServerHooks`] and lists the ones it gives in the
//! [`server_suite!`](crate::server_suite) call. A scenario whose hook is not listed is **not
//! generated**: the list is the declaration, visible in the entry, of what the backend is not
//! checked for. The list is held to the hooks: the generated test `hooks_are_as_declared`
//! fails when a listed hook is missing from the [`ServerHooks`] (and so does the scenario
//! itself, naming the hook), and when a hook is given but not listed (its scenarios would be
//! left out without anyone noticing). The hook names are those of [`HOOKS`].
//!
//! What is not about a backend's contract stays with the caller: how to find, kill or restart
//! a server process (this project's tests read PID files that `scripts/backends.sh` writes),
//! how to reach the store by hand (SQL, `redis-cli`, a driver), and wire-level byte counting.
//! The hooks receive only what the scenario knows: a backend, a lease name, a session.
//!
//! The scenarios run on short real-time settings ([`config`]: lease [`TTL`] 1.5 s, renewal
//! every 400 ms) and use fresh lease names. Those that disturb the server or time it hold
//! [`SERIAL`], which tests of your own on the same server should take too. Figures (handover
//! times, how a term ended) are logged with `tracing` at `info`.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::broadcast;
use tokio::time::{Instant, sleep, timeout};

use super::conformance::unique;
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
use crate::backend::{Acquire, Backend, BackendError, BackendResult, HeldDigest, KeepAlive, SessionId};
use crate::{Election, RevokeReason, Simba, SimbaConfig, Term};

pub use super::conformance::TTL;

/// Held by every generated test that disturbs a server or measures time against it, so that
/// no two of them run at once (in one test binary). Take it in your own tests on the same
/// servers.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The optional hooks, by the names [`server_suite!`](crate::server_suite) lists them under,
/// with the scenario each one enables.
pub const HOOKS: &[(&str, &str)] = &[
    ("take_over", "manual_takeover_ends_the_term"),
    ("lock_session", "renewal_that_waited_finds_the_session_expired"),
    ("hold_lease", "digest_is_exact_for_huge_tokens"),
    ("lease_record", "tokens_grow_by_one_per_term"),
    ("kill_and_restart", "killed_then_restarted_server"),
    ("pause", "paused_past_the_lease"),
    ("refused", "refused_connection_fails_promptly"),
    ("silent", "silent_server_times_out"),
    ("misconfigured", "misconfigured_urls_are_refused"),
];

/// Lease [`TTL`] (1.5 s), renewal every 400 ms, retry jitter 100 ms: a fault shows within a
/// second or two, and the lease is above a ZooKeeper test server's usual `minSessionTimeout`
/// (400 ms).
pub fn config() -> SimbaConfig {
    SimbaConfig::builder()
        .lease_duration(TTL)
        .renew_interval(Duration::from_millis(400))
        .retry_jitter(Duration::from_millis(100))
        .build()
        .unwrap_or_else(|e| panic!("the server suite's configuration: {e}"))
}

/// A client on `backend` with [`config`].
pub fn client(backend: impl Backend) -> Simba {
    Simba::new(backend, config()).unwrap_or_else(|e| panic!("a client: {e}"))
}

/// A new session of [`TTL`].
pub async fn open(b: &impl Backend) -> SessionId {
    b.open_session(TTL).await.unwrap_or_else(|e| panic!("open_session: {e}")).id
}

/// Acquires `name` for `s`, which must win it; returns the token.
pub async fn won(b: &impl Backend, s: &SessionId, name: &str) -> u64 {
    match b.acquire(s, name).await {
        Ok(Acquire::Won(t)) => t,
        other => panic!("expected to win `{name}`, got {other:?}"),
    }
}

/// The term of `e` as soon as it has one (polled every millisecond); panics after `within`.
pub async fn wait_leader(e: &Election, within: Duration) -> Term {
    let start = Instant::now();
    loop {
        if let Some(t) = e.term() {
            return t;
        }
        assert!(start.elapsed() < within, "`{}` had no leader within {within:?}", e.name());
        sleep(Duration::from_millis(1)).await;
    }
}

/// The next term of `e` (within `within`) after `previous` ended: a new session and a
/// higher token.
async fn next_term(e: &Election, previous: &Term, within: Duration) -> Term {
    let t = wait_leader(e, within).await;
    assert_ne!(t.session_id(), previous.session_id(), "an expired session came back");
    assert!(t.token() > previous.token(), "token went from {} to {}", previous.token(), t.token());
    t
}

/// The median of `samples` (the upper one of an even number); panics on none.
pub fn median(samples: &[Duration]) -> Duration {
    let mut v = samples.to_vec();
    v.sort();
    match v.get(v.len() / 2) {
        Some(m) => *m,
        None => panic!("the median of no samples"),
    }
}

/// Waits until `rx` hears the release of `name` (panics if the channel closes).
pub async fn recv_name(rx: &mut broadcast::Receiver<String>, name: &str) {
    loop {
        match rx.recv().await {
            Ok(n) if n == name => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => panic!("subscription closed"),
        }
    }
}

/// Waits until `rx`'s channel closes.
pub async fn closed(rx: &mut broadcast::Receiver<String>) {
    while !matches!(rx.recv().await, Err(broadcast::error::RecvError::Closed)) {}
}

/// Releases a new lease of session `s` on `b`, again and again, until `rx` hears one; fails
/// if none is heard within `within` (after a restart: the release subscription must have
/// reconnected by itself).
pub async fn releases_are_heard(
    rx: &mut broadcast::Receiver<String>,
    b: &impl Backend,
    s: &SessionId,
    within: Duration,
) {
    let heard = timeout(within, async {
        loop {
            let probe = unique("after-restart");
            let t = won(b, s, &probe).await;
            assert!(b.release(s, &probe, t).await.unwrap_or_else(|e| panic!("release: {e}")));
            if timeout(Duration::from_millis(300), recv_name(rx, &probe)).await.is_ok() {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "releases are not broadcast after the restart");
}

// ---- the hooks ------------------------------------------------------------------------------

/// A hook: an async function of `A`, boxed once here so that entries pass plain closures.
type Hook<A, T> = Box<dyn Fn(A) -> BoxFuture<'static, T> + Send + Sync>;

/// Boxes `f` as a [`Hook`].
fn hook<A, T, F, Fut>(f: F) -> Hook<A, T>
where
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    Box::new(move |a| Box::pin(f(a)))
}

/// A lease record as hook `lease_record` reads it: holder and token.
type Record = (Option<String>, i64);

/// Hook `silent`: the URL for a port, and what its error must contain.
type UrlAndShown = Box<dyn Fn(u16) -> (String, String) + Send + Sync>;

/// A check of the store's own, run after a restart or a pause with the backend, the term
/// before and the term after.
type After<B> = Hook<(B, Term, Term), ()>;

/// What the server suite needs from one backend on one server: how to connect (required), what
/// the store promises beyond the contract, and the optional hooks of [`HOOKS`]. Every hook
/// takes owned values (a clone of the backend, the lease name) and returns a `'static`
/// future, so a closure with `async move` fits.
///
/// ```no_run
/// use simba::backend::memory::MemoryBackend;
/// use simba::tck::servers::ServerHooks;
///
/// async fn hooks() -> ServerHooks<MemoryBackend> {
///     let store = MemoryBackend::new();
///     ServerHooks::new("memory", move || {
///         let store = store.clone();
///         async move { store }
///     })
///     .tokens_count_terms()
/// }
/// simba::server_suite!(hooks, []);
/// # fn main() {}
/// ```
pub struct ServerHooks<B> {
    server: String,
    connect: Hook<(), B>,
    counts_terms: bool,
    recovers_within: Duration,
    hears_releases_within: Duration,
    take_over: Option<Hook<(B, String), ()>>,
    lock_session: Option<Hook<(B, SessionId), BoxFuture<'static, ()>>>,
    hold_lease: Option<Hook<(B, SessionId, String, i64), ()>>,
    lease_record: Option<Hook<(B, String), Record>>,
    kill_and_restart: Option<(Hook<(), ()>, Hook<(), ()>)>,
    pause: Option<Hook<(), Box<dyn Any + Send>>>,
    after_restart: Option<After<B>>,
    after_pause: Option<After<B>>,
    connect_url: Option<Hook<String, BackendResult<B>>>,
    refused: Option<(String, String)>,
    silent: Option<UrlAndShown>,
    misconfigured: Option<Vec<(String, String)>>,
}

impl<B: Backend + Clone> ServerHooks<B> {
    /// The hooks of the server called `server` (in figures and messages), where `connect`
    /// makes a new backend instance, as another node would: its own connections, its own
    /// release subscription.
    pub fn new<F, Fut>(server: impl Into<String>, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = B> + Send + 'static,
    {
        ServerHooks {
            server: server.into(),
            connect: hook(move |()| connect()),
            counts_terms: false,
            recovers_within: Duration::from_secs(10),
            hears_releases_within: Duration::from_secs(10),
            take_over: None,
            lock_session: None,
            hold_lease: None,
            lease_record: None,
            kill_and_restart: None,
            pause: None,
            after_restart: None,
            after_pause: None,
            connect_url: None,
            refused: None,
            silent: None,
            misconfigured: None,
        }
    }

    /// Declares that the store counts terms: a lease's first term has the token above the
    /// store's token floor (1 on a store that never removed a record, B3) and each term adds one
    /// (the SQL stores, Redis). The scenarios then check the exact tokens; without
    /// it they check that tokens strictly increase (T3).
    pub fn tokens_count_terms(mut self) -> Self {
        self.counts_terms = true;
        self
    }

    /// How long the server may take to serve again after a pause ends (default 10 s).
    pub fn recovers_within(mut self, within: Duration) -> Self {
        self.recovers_within = within;
        self
    }

    /// How long after a restart the backend's release broadcast (K2) may take to carry a
    /// release again, where it has one (default 10 s).
    pub fn hears_releases_within(mut self, within: Duration) -> Self {
        self.hears_releases_within = within;
        self
    }

    /// Hook `take_over`: overwrites the holder of lease `name` by hand in the store with one
    /// that has no session, keeping the lease's token (T6: a manual takeover).
    pub fn take_over<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(B, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.take_over = Some(hook(move |(b, name)| f(b, name)));
        self
    }

    /// Hook `lock_session`: locks session `s`'s record in the store, leaving the session
    /// 200 ms to live on the store's clock, so that a renewal waits for the lock; returns the
    /// function that unlocks it (S3 under lock waits).
    pub fn lock_session<F, Fut, U, UFut>(mut self, f: F) -> Self
    where
        F: Fn(B, SessionId) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = U> + Send + 'static,
        U: FnOnce() -> UFut + Send + 'static,
        UFut: Future<Output = ()> + Send + 'static,
    {
        self.lock_session = Some(Box::new(move |(b, s)| {
            Box::pin(f(b, s).map(|unlock| -> BoxFuture<'static, ()> { Box::pin(unlock()) }))
        }));
        self
    }

    /// Hook `hold_lease`: writes by hand that session `s` holds lease `name` with `token`,
    /// as the backend's own acquisition would have left it.
    pub fn hold_lease<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(B, SessionId, String, i64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.hold_lease = Some(hook(move |(b, s, name, token)| f(b, s, name, token)));
        self
    }

    /// Hook `lease_record`: reads lease `name`'s record by hand: its holder's session id
    /// (`None` when free) and its token. For stores that keep the record after a release
    /// (T3 across releases, closes and restarts).
    pub fn lease_record<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(B, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = (Option<String>, i64)> + Send + 'static,
    {
        self.lease_record = Some(hook(move |(b, name)| f(b, name)));
        self
    }

    /// Hook `kill_and_restart`: `kill` kills the server at once (as kill -9 does), `restart`
    /// starts it again on its data.
    pub fn kill_and_restart<K, KFut, R, RFut>(mut self, kill: K, restart: R) -> Self
    where
        K: Fn() -> KFut + Send + Sync + 'static,
        KFut: Future<Output = ()> + Send + 'static,
        R: Fn() -> RFut + Send + Sync + 'static,
        RFut: Future<Output = ()> + Send + 'static,
    {
        self.kill_and_restart = Some((hook(move |()| kill()), hook(move |()| restart())));
        self
    }

    /// Hook `pause`: pauses the server (every process that serves connections, as SIGSTOP
    /// does) and returns a guard that resumes it when dropped, also when the scenario fails.
    pub fn pause<F, Fut, G>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = G> + Send + 'static,
        G: Send + 'static,
    {
        self.pause = Some(Box::new(move |()| Box::pin(f().map(|guard| -> Box<dyn Any + Send> { Box::new(guard) }))));
        self
    }

    /// Checks of the store's own after `kill_and_restart`'s scenario, given the backend that
    /// lived through the restart, the term before the kill and the term after.
    pub fn after_restart<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(B, Term, Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.after_restart = Some(hook(move |(b, before, after)| f(b, before, after)));
        self
    }

    /// Checks of the store's own after `pause`'s scenario, given the backend, the term before
    /// the pause and the term after.
    pub fn after_pause<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(B, Term, Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.after_pause = Some(hook(move |(b, before, after)| f(b, before, after)));
        self
    }

    /// How the connection scenarios (`refused`, `silent`, `misconfigured`) connect to a URL.
    pub fn connect_url<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = BackendResult<B>> + Send + 'static,
    {
        self.connect_url = Some(hook(f));
        self
    }

    /// Hook `refused`: `url` names a port where nothing listens and carries the password
    /// `s3cret`; `shown` is how errors must show it (without the password).
    pub fn refused(mut self, url: impl Into<String>, shown: impl Into<String>) -> Self {
        self.refused = Some((url.into(), shown.into()));
        self
    }

    /// Hook `silent`: given a loopback port where a server accepts connections and never
    /// answers, the URL to connect to and what its error must contain.
    pub fn silent(mut self, url_and_shown: impl Fn(u16) -> (String, String) + Send + Sync + 'static) -> Self {
        self.silent = Some(Box::new(url_and_shown));
        self
    }

    /// Hook `misconfigured`: URLs that must be refused as misconfigured, each with a text its
    /// error must contain (and none may contain the password `s3cret`).
    pub fn misconfigured(mut self, cases: &[(&str, &str)]) -> Self {
        self.misconfigured = Some(cases.iter().map(|(u, e)| ((*u).to_owned(), (*e).to_owned())).collect());
        self
    }

    /// The names of the optional hooks given, in the order of [`HOOKS`].
    pub fn provided(&self) -> Vec<&'static str> {
        let given = [
            self.take_over.is_some(),
            self.lock_session.is_some(),
            self.hold_lease.is_some(),
            self.lease_record.is_some(),
            self.kill_and_restart.is_some(),
            self.pause.is_some(),
            self.refused.is_some(),
            self.silent.is_some(),
            self.misconfigured.is_some(),
        ];
        HOOKS.iter().zip(given).filter(|(_, g)| *g).map(|((name, _), _)| *name).collect()
    }

    /// A new backend instance.
    pub async fn connect(&self) -> B {
        (self.connect)(()).await
    }

    /// The hook `name`, or a panic that names it: the entry listed it but gave none.
    fn need<'a, T>(&self, hook: &'a Option<T>, name: &str) -> &'a T {
        match hook {
            Some(h) => h,
            None => panic!(
                "{}: the server suite's hook `{name}` is missing: give it with `ServerHooks::{name}`, or take \
                 `{name}` out of the `server_suite!` list",
                self.server
            ),
        }
    }

    fn connect_url_hook(&self) -> &Hook<String, BackendResult<B>> {
        self.need(&self.connect_url, "connect_url")
    }
}

/// The generated test `hooks_are_as_declared`: the hooks that `hooks` gives are exactly
/// `listed` (the names in the entry's [`server_suite!`](crate::server_suite) list), and the
/// hooks that complete another are given with it.
pub fn hooks_are_as_declared<B: Backend + Clone>(hooks: &ServerHooks<B>, listed: &[&str]) {
    let server = &hooks.server;
    for name in listed {
        assert!(
            HOOKS.iter().any(|(h, _)| h == name),
            "{server}: `{name}` is not a hook of the server suite; the hooks are {:?}",
            HOOKS.iter().map(|(h, _)| *h).collect::<Vec<_>>()
        );
    }
    let provided = hooks.provided();
    for name in &provided {
        let scenario = HOOKS.iter().find(|(h, _)| h == name).map_or("", |(_, s)| *s);
        assert!(
            listed.contains(name),
            "{server}: gives the hook `{name}` but its `server_suite!` list leaves it out, so `{scenario}` is not \
             generated: add `{name}` to the list"
        );
    }
    for name in listed {
        assert!(
            provided.contains(name),
            "{server}: `server_suite!` lists the hook `{name}` but the ServerHooks give none: add \
             `ServerHooks::{name}`, or take it out of the list"
        );
    }
    let pairs = [
        (hooks.after_restart.is_some(), hooks.kill_and_restart.is_some(), "after_restart", "kill_and_restart"),
        (hooks.after_pause.is_some(), hooks.pause.is_some(), "after_pause", "pause"),
    ];
    for (extra, base, extra_name, base_name) in pairs {
        assert!(!extra || base, "{server}: `{extra_name}` is given without `{base_name}`, so it never runs");
    }
    let by_url = hooks.refused.is_some() || hooks.silent.is_some() || hooks.misconfigured.is_some();
    assert!(!by_url || hooks.connect_url.is_some(), "{server}: the connection hooks need `ServerHooks::connect_url`");
}

// ---- scenarios ------------------------------------------------------------------------------

/// T6: a client wins a lease; then hook `take_over` overwrites its holder by hand (a manual
/// takeover). The term ends with `TakenOver` at the next renewal (every 400 ms), and as the
/// intruder has no session, the election wins the lease back with a higher token (the next
/// one where the store counts terms).
pub async fn manual_takeover_ends_the_term<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let take_over = hooks.need(&hooks.take_over, "take_over");
    let b = hooks.connect().await;
    let c = client(b.clone());
    let name = unique("takeover");
    let e = c.election(name.clone());
    e.start(()).unwrap_or_else(|e| panic!("start: {e}"));
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    take_over((b, name)).await;
    let taken = Instant::now();
    let reason = timeout(Duration::from_secs(2), t1.revoked()).await.expect("the term must end within 2 s");
    assert_eq!(reason, RevokeReason::TakenOver);
    // Seen at the next renewal (every 400 ms).
    assert!(taken.elapsed() < Duration::from_millis(900), "noticed after {:?}", taken.elapsed());
    let t2 = wait_leader(&e, Duration::from_secs(3)).await;
    if hooks.counts_terms {
        assert_eq!(t2.token(), t1.token() + 1);
    } else {
        assert!(t2.token() > t1.token(), "token went from {} to {}", t1.token(), t2.token());
    }
    e.stop().await;
    c.close().await;
}

/// Two nodes (one backend each) race 100 times each for one lease: never two holders at
/// once, and the tokens of all terms strictly increase; where the store counts terms they
/// are exactly the next integers.
pub async fn two_nodes_never_both_win<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    const ATTEMPTS: usize = 100;
    let name = unique("race");
    let holders = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(2));
    let mut tasks = Vec::new();
    for b in [hooks.connect().await, hooks.connect().await] {
        let s = b.open_session(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("open: {e}")).id;
        let (holders, overlaps, start, name) = (holders.clone(), overlaps.clone(), start.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let (mut tokens, mut held) = (Vec::new(), 0);
            for _ in 0..ATTEMPTS {
                match b.acquire(&s, &name).await.unwrap_or_else(|e| panic!("acquire: {e}")) {
                    Acquire::Won(token) => {
                        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        // Hold it a moment, so that the other node tries while it is taken.
                        sleep(Duration::from_micros(500)).await;
                        holders.fetch_sub(1, Ordering::SeqCst);
                        assert!(b.release(&s, &name, token).await.unwrap_or_else(|e| panic!("release: {e}")));
                        tokens.push(token);
                    }
                    Acquire::Held => held += 1,
                    Acquire::Expired => panic!("session expired"),
                }
                sleep(Duration::from_micros(300)).await;
            }
            b.close_session(&s).await.unwrap_or_else(|e| panic!("close: {e}"));
            (tokens, held)
        }));
    }
    let (mut tokens, mut held) = (Vec::new(), 0);
    for t in tasks {
        let (won, lost) = t.await.unwrap_or_else(|e| panic!("task: {e}"));
        tokens.extend(won);
        held += lost;
    }
    tracing::info!(server = %hooks.server, attempts = ATTEMPTS, terms = tokens.len(), held, "two nodes raced");
    assert!(held > 0 && !tokens.is_empty(), "won {} held {held}", tokens.len());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    tokens.sort_unstable();
    if hooks.counts_terms {
        // +1 per term from the first, which starts above the store's token floor (B3): 1 on a
        // store that never removed a record.
        let first = tokens[0];
        assert_eq!(tokens, (first..first + tokens.len() as u64).collect::<Vec<_>>());
    } else {
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "a token was handed out twice: {tokens:?}");
    }
}

/// S3 under lock waits: hook `lock_session` locks the session's record (leaving it 200 ms
/// to live) until the function it returned unlocks it. A renewal started meanwhile waits for the
/// record, and once it gets it, finds the session expired.
pub async fn renewal_that_waited_finds_the_session_expired<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let lock = hooks.need(&hooks.lock_session, "lock_session");
    let b = hooks.connect().await;
    let s = b.open_session(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("open: {e}")).id;
    let unlock = lock((b.clone(), s.clone())).await;
    let renewal = tokio::spawn({
        let (b, s) = (b.clone(), s.clone());
        async move { b.keep_alive(&s, HeldDigest::default()).await }
    });
    sleep(Duration::from_millis(600)).await;
    assert!(!renewal.is_finished(), "the renewal did not wait for the row");
    unlock.await;
    let answer = timeout(Duration::from_secs(3), renewal).await.expect("the renewal ends").expect("task");
    assert_eq!(answer.expect("keep_alive"), KeepAlive::Expired, "a session that expired during the wait came back");
    assert_eq!(b.keep_alive(&s, HeldDigest::default()).await.expect("keep_alive"), KeepAlive::Expired);
    assert_eq!(b.acquire(&s, &unique("s3")).await.expect("acquire"), Acquire::Expired);
}

/// S1: the digest's wrapping sum is exact for tokens far above 2^32 (and 2^53, where doubles
/// round). Hook `hold_lease` writes three leases of token `i64::MAX - 1` for a session, a
/// sum that wraps. The keep-alive digest matches exactly that (not a token one unit off),
/// `owned` lists every lease, and after a release the rest matches; then the session is closed.
pub async fn digest_is_exact_for_huge_tokens<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let hold = hooks.need(&hooks.hold_lease, "hold_lease");
    let b = hooks.connect().await;
    let s = open(&b).await;
    let big = i64::MAX - 1;
    let names = [unique("big"), unique("big"), unique("big")];
    for n in &names {
        hold((b.clone(), s.clone(), n.clone(), big)).await;
    }
    let t = big as u64;
    let all: Vec<(String, u64)> = names.iter().map(|n| (n.clone(), t)).collect();
    let digest = HeldDigest::of(&all);
    assert!(digest.token_sum < t, "the test needs a sum that wraps");
    let alive = |r| matches!(r, KeepAlive::Alive { digest_matches: true, .. });
    assert!(alive(b.keep_alive(&s, digest).await.expect("keep_alive")));
    // One unit off in one token must not match.
    let mut off = HeldDigest::of(&all[..2]);
    off.add(t - 1);
    assert!(!alive(b.keep_alive(&s, off).await.expect("keep_alive")));
    let mut owned = b.owned(&s).await.expect("owned");
    owned.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(owned, expected);
    assert!(b.release(&s, &names[0], t).await.expect("release"));
    assert!(alive(b.keep_alive(&s, HeldDigest::of(&all[1..])).await.expect("keep_alive")));
    b.close_session(&s).await.expect("close");
}

/// T3 on a store that keeps lease records (hook `lease_record`) and counts terms: `+1` per
/// term, across releases, closes and new sessions, and on another node; the record survives
/// all of them (only the holder is cleared). The first token is above the store's token floor
/// (B3): 1 on a store that never removed a record.
pub async fn tokens_grow_by_one_per_term<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let record = hooks.need(&hooks.lease_record, "lease_record");
    let b = hooks.connect().await;
    let lease_row = async |name: &str| record((b.clone(), name.to_owned())).await;
    let name = unique("t3");
    let s = open(&b).await;
    let first = won(&b, &s, &name).await;
    assert!(first >= 1);
    let row = |n: u64| i64::try_from(first + n).unwrap_or(i64::MAX);
    assert!(b.release(&s, &name, first).await.expect("release"));
    assert_eq!(lease_row(&name).await, (None, row(0)));
    assert_eq!(won(&b, &s, &name).await, first + 1);
    b.close_session(&s).await.expect("close");
    assert_eq!(lease_row(&name).await, (None, row(1)));
    let s2 = open(&b).await;
    assert_eq!(won(&b, &s2, &name).await, first + 2);
    assert_eq!(lease_row(&name).await, (Some(s2.as_str().to_owned()), row(2)));
    // A second backend (another node) continues the same sequence.
    let other = hooks.connect().await;
    b.close_session(&s2).await.expect("close");
    let s3 = open(&other).await;
    assert_eq!(won(&other, &s3, &name).await, first + 3);
    other.close_session(&s3).await.expect("close");
    assert_eq!(lease_row(&name).await, (None, row(3)));
}

/// K2: 20 graceful handovers of one lease between two clients: each time a candidate waits
/// on the lease, the leader stops, and the time from `stop()` to the start of the candidate's
/// term is a sample. The median is well under the renewal interval (an eighth of it), and no
/// handover waited for the candidate's next periodic attempt (`renew_interval / 2`): the store
/// broadcasts releases, or the backend watches the lease a candidate waits for.
pub async fn graceful_handovers_are_immediate<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let clients = [client(hooks.connect().await), client(hooks.connect().await)];
    let name = unique("handover");
    let mut leader = clients[0].election(name.clone());
    leader.start(()).expect("start");
    let mut last = wait_leader(&leader, Duration::from_secs(5)).await;
    let mut samples = Vec::new();
    for i in 1..=20 {
        let candidate = clients[i % 2].election(name.clone());
        candidate.start(()).expect("start candidate");
        // The candidate's first attempt finds the lease held; it now waits for a release (on
        // stores that broadcast them) or for its next attempt, 200 to 300 ms later.
        sleep(Duration::from_millis(150)).await;
        assert!(candidate.term().is_none(), "two leaders");
        let t0 = Instant::now();
        leader.stop().await;
        let term = wait_leader(&candidate, Duration::from_secs(2)).await;
        assert!(term.token() > last.token());
        samples.push(term.started_at().saturating_duration_since(t0));
        last = term;
        leader = candidate;
    }
    leader.stop().await;
    for c in &clients {
        c.close().await;
    }
    samples.sort();
    let (median, renew) = (median(&samples), config().renew_interval());
    let slowest = samples.last().copied().unwrap_or_default();
    tracing::info!(server = %hooks.server, ?median, min = ?samples[0], max = ?slowest, ?renew,
        "graceful handovers, stop() to the other node's term start");
    assert!(median < renew / 8, "median handover {median:?} is not well under the renewal interval {renew:?}");
    let next_attempt = renew / 2;
    assert!(slowest < next_attempt, "a handover waited for the next attempt ({next_attempt:?}): {samples:?}");
}

/// Section 9: hook `kill_and_restart` kills the server while a term runs. The term ends while
/// the server is down (`DeadlinePassed`; `SessionExpired` if a renewal got through first);
/// then the server restarts, and a new session wins a new term with a higher token. Where
/// the store keeps lease records (hook `lease_record`), the record holds the new term; where
/// the backend offers a release subscription, that of the backend that lived through the
/// restart still works (it reconnected by itself) and hears the backend's releases. Then the
/// entry's `after_restart` checks run (a release made by another node, for one).
pub async fn killed_then_restarted_server<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let (kill, restart) = hooks.need(&hooks.kill_and_restart, "kill_and_restart");
    let b = hooks.connect().await;
    let c = client(b.clone());
    let name = unique("fault");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    kill(()).await;
    let reason = timeout(TTL * 3, t1.revoked()).await.expect("the term must end while the server is down");
    assert!(matches!(reason, RevokeReason::DeadlinePassed | RevokeReason::SessionExpired), "{reason:?}");
    restart(()).await;
    let t2 = next_term(&e, &t1, Duration::from_secs(20)).await;
    tracing::info!(server = %hooks.server, ?reason, from = t1.token(), to = t2.token(), "killed and restarted server");
    if let Some(record) = &hooks.lease_record {
        let (holder, token) = record((b.clone(), name.clone())).await;
        assert_eq!((holder.as_deref(), token), (Some(t2.session_id().as_str()), t2.token() as i64));
    }
    if let Some(mut rx) = b.subscribe_releases() {
        let s = open(&b).await;
        releases_are_heard(&mut rx, &b, &s, hooks.hears_releases_within).await;
        b.close_session(&s).await.expect("close");
    }
    if let Some(after) = &hooks.after_restart {
        after((b.clone(), t1, t2)).await;
    }
    e.stop().await;
    c.close().await;
}

/// Section 9: hook `pause` pauses the server longer than the lease while a term runs.
/// Renewals time out, the term ends with `DeadlinePassed` at its local deadline (not later),
/// and nothing is leader while the server is paused, kept so well past the lease that the
/// session expires on the server's clock too. Once it resumes, a new session wins a new term
/// (within [`ServerHooks::recovers_within`]) with a higher token. Then the entry's
/// `after_pause` checks run.
pub async fn paused_past_the_lease<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let pause = hooks.need(&hooks.pause, "pause");
    let b = hooks.connect().await;
    let c = client(b.clone());
    let e = c.election(unique("fault"));
    e.start(()).expect("start");
    let term = wait_leader(&e, Duration::from_secs(5)).await;
    {
        let _paused = pause(()).await;
        let stopped_at = Instant::now();
        // A reply already on its way may still land; after that nothing extends the deadline.
        sleep(Duration::from_millis(50)).await;
        assert!(term.is_valid(), "the term ended within 50 ms of the pause");
        let deadline = Instant::now() + term.remaining();
        let reason = timeout(TTL * 2, term.revoked()).await.expect("the term must end while the server is paused");
        let ended = Instant::now();
        assert_eq!(reason, RevokeReason::DeadlinePassed);
        assert!(!term.is_valid() && term.remaining().is_zero());
        let late = ended.saturating_duration_since(deadline);
        let early = deadline.saturating_duration_since(ended);
        tracing::info!(server = %hooks.server, ?late, ?early, "paused server: the term ended after its local deadline");
        assert!(early < Duration::from_millis(5), "ended {early:?} before the local deadline");
        assert!(late < Duration::from_millis(100), "ended {late:?} after the local deadline");
        while stopped_at.elapsed() < TTL + Duration::from_secs(1) {
            assert!(e.term().is_none(), "a leader while the server is paused");
            sleep(Duration::from_millis(50)).await;
        }
    }
    let next = next_term(&e, &term, hooks.recovers_within).await;
    tracing::info!(server = %hooks.server, from = term.token(), to = next.token(), "paused server resumed");
    if let Some(after) = &hooks.after_pause {
        after((b.clone(), term, next)).await;
    }
    e.stop().await;
    c.close().await;
}

/// A connection to a port where nothing listens (hook `refused`) fails within 6 s as
/// unavailable, with an error that shows the server as the hook says (without the password
/// `s3cret` of the URL) and says the connection was refused.
pub async fn refused_connection_fails_promptly<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let (url, shown) = hooks.need(&hooks.refused, "refused");
    let start = Instant::now();
    let Err(err) = hooks.connect_url_hook()(url.clone()).await else {
        panic!("connected to {shown}, where nothing listens")
    };
    let msg = err.to_string();
    tracing::info!(server = %hooks.server, %msg, "refused");
    assert!(start.elapsed() < Duration::from_secs(6), "took {:?}", start.elapsed());
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(msg.contains(shown.as_str()) && !msg.contains("s3cret"), "{msg}");
    assert!(msg.to_lowercase().contains("refused"), "the cause is missing: {msg}");
}

/// A server that accepts connections and never answers, on a free loopback port (hook
/// `silent`): connecting fails after the connect timeout (4 to 7 s), with an error that
/// contains what the hook says.
pub async fn silent_server_times_out<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let url_and_shown = hooks.need(&hooks.silent, "silent");
    // Never accepted: the kernel completes the TCP handshake, the server's never comes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let (url, shown) = url_and_shown(port);
    let start = Instant::now();
    let Err(err) = hooks.connect_url_hook()(url).await else { panic!("connected to a silent server") };
    let took = start.elapsed();
    tracing::info!(server = %hooks.server, ?took, %err, "silent server");
    assert!(took >= Duration::from_secs(4) && took < Duration::from_secs(7), "took {took:?}");
    assert!(err.to_string().contains(&shown), "{err}");
    drop(silent);
}

/// Each URL of hook `misconfigured` is refused as misconfigured, with an error that contains
/// the text given with it and not the password `s3cret`.
pub async fn misconfigured_urls_are_refused<B: Backend + Clone>(hooks: &ServerHooks<B>) {
    let cases = hooks.need(&hooks.misconfigured, "misconfigured");
    let connect = hooks.connect_url_hook();
    for (url, expected) in cases {
        let Err(err) = connect(url.clone()).await else { panic!("{url}: connected") };
        let msg = err.to_string();
        assert!(matches!(err, BackendError::Misconfigured(_)), "{url}: {err:?}");
        assert!(msg.contains(expected.as_str()) && !msg.contains("s3cret"), "{url}: {msg}");
    }
}

/// Expands to the server suite's tests for the backend whose [`ServerHooks`] `$make` (an async
/// fn or closure) returns, one `#[tokio::test]` per scenario: those that need no optional hook
/// (`two_nodes_never_both_win`, `graceful_handovers_are_immediate`), one per hook listed in
/// `[...]` (the names of [`HOOKS`]), and `hooks_are_as_declared`, which holds the list to the
/// hooks given. A hook not listed generates nothing: the list says what the backend is not
/// checked for. Call it once per module.
///
/// ```no_run
/// use simba::backend::memory::MemoryBackend;
/// use simba::tck::servers::ServerHooks;
///
/// async fn hooks() -> ServerHooks<MemoryBackend> {
///     let store = MemoryBackend::new();
///     ServerHooks::new("memory", move || {
///         let store = store.clone();
///         async move { store }
///     })
/// }
/// simba::server_suite!(hooks, []);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! server_suite {
    ($make:expr, [$($hook:ident),* $(,)?]) => {
        #[tokio::test]
        async fn hooks_are_as_declared() {
            let hooks = ($make)().await;
            $crate::tck::servers::hooks_are_as_declared(&hooks, &[$(stringify!($hook)),*]);
        }
        $crate::server_suite!(@serial $make, 4, two_nodes_never_both_win);
        $crate::server_suite!(@serial $make, 2, graceful_handovers_are_immediate);
        $( $crate::server_suite!(@hook $make, $hook); )*
    };
    (@hook $make:expr, take_over) => { $crate::server_suite!(@serial $make, 2, manual_takeover_ends_the_term); };
    (@hook $make:expr, lock_session) => {
        $crate::server_suite!(@serial $make, 2, renewal_that_waited_finds_the_session_expired);
    };
    (@hook $make:expr, hold_lease) => { $crate::server_suite!(@serial $make, 2, digest_is_exact_for_huge_tokens); };
    (@hook $make:expr, lease_record) => { $crate::server_suite!(@serial $make, 2, tokens_grow_by_one_per_term); };
    (@hook $make:expr, kill_and_restart) => { $crate::server_suite!(@serial $make, 2, killed_then_restarted_server); };
    (@hook $make:expr, pause) => { $crate::server_suite!(@serial $make, 2, paused_past_the_lease); };
    // The connection scenarios touch no server: they need not wait for the others.
    (@hook $make:expr, refused) => { $crate::server_suite!(@free $make, refused_connection_fails_promptly); };
    (@hook $make:expr, silent) => { $crate::server_suite!(@free $make, silent_server_times_out); };
    (@hook $make:expr, misconfigured) => { $crate::server_suite!(@free $make, misconfigured_urls_are_refused); };
    (@hook $make:expr, $other:ident) => {
        compile_error!(concat!(
            "`", stringify!($other), "` is not a hook of the server suite; the hooks are take_over, lock_session, ",
            "hold_lease, lease_record, kill_and_restart, pause, refused, silent, misconfigured"
        ));
    };
    (@serial $make:expr, $threads:literal, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
        async fn $name() {
            let _serial = $crate::tck::servers::SERIAL.lock().await;
            let hooks = ($make)().await;
            $crate::tck::servers::$name(&hooks).await;
        }
    };
    (@free $make:expr, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let hooks = ($make)().await;
            $crate::tck::servers::$name(&hooks).await;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    fn memory() -> ServerHooks<MemoryBackend> {
        let store = MemoryBackend::new();
        ServerHooks::new("memory", move || {
            let store = store.clone();
            async move { store }
        })
    }

    /// The in-memory store as a backend author's entry would be: no server, so no process
    /// hooks; its lease records are read through `MemoryBackend::holder`.
    async fn hooks() -> ServerHooks<MemoryBackend> {
        memory().tokens_count_terms().lease_record(|b: MemoryBackend, name| async move {
            match b.holder(&name) {
                Some((holder, token)) => (holder.map(|s| s.as_str().to_owned()), token as i64),
                None => panic!("no record of `{name}`"),
            }
        })
    }

    /// The suite as an entry generates it (in a module of its own: it defines a test named
    /// `hooks_are_as_declared`).
    mod memory_suite {
        use super::hooks;

        crate::server_suite!(hooks, [lease_record]);
    }

    #[test]
    fn the_list_matches_the_hooks() {
        hooks_are_as_declared(&memory(), &[]);
        let all = memory()
            .take_over(|_, _| async {})
            .pause(|| async {})
            .connect_url(|_| async { Ok(MemoryBackend::new()) })
            .refused("memory://", "memory://");
        assert_eq!(all.provided(), ["take_over", "pause", "refused"]);
        hooks_are_as_declared(&all, &["refused", "pause", "take_over"]);
    }

    #[test]
    #[should_panic(expected = "gives the hook `pause` but its `server_suite!` list leaves it out")]
    fn a_hook_given_but_not_listed_fails() {
        hooks_are_as_declared(&memory().pause(|| async {}), &[]);
    }

    #[test]
    #[should_panic(expected = "lists the hook `take_over` but the ServerHooks give none")]
    fn a_hook_listed_but_not_given_fails() {
        hooks_are_as_declared(&memory(), &["take_over"]);
    }

    #[test]
    #[should_panic(expected = "`takeover` is not a hook of the server suite")]
    fn an_unknown_hook_fails() {
        hooks_are_as_declared(&memory(), &["takeover"]);
    }

    #[test]
    #[should_panic(expected = "`after_pause` is given without `pause`")]
    fn a_check_after_a_missing_hook_fails() {
        hooks_are_as_declared(&memory().after_pause(|_, _, _| async {}), &[]);
    }

    #[test]
    #[should_panic(expected = "the connection hooks need `ServerHooks::connect_url`")]
    fn connection_hooks_without_a_way_to_connect_fail() {
        hooks_are_as_declared(&memory().misconfigured(&[("x", "y")]), &["misconfigured"]);
    }

    #[tokio::test]
    #[should_panic(expected = "the server suite's hook `take_over` is missing")]
    async fn a_scenario_without_its_hook_fails_naming_it() {
        manual_takeover_ends_the_term(&memory()).await;
    }
}
