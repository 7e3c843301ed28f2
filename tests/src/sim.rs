//! A deterministic simulation of the engine: the core, the shell (`Simba` clients, elections,
//! locks) and the in-memory backend on one single-threaded Tokio runtime whose clock is paused,
//! with a seeded fault layer between each node and the store (docs/adr/0021).
//!
//! One seed decides everything: the fault weather, each node's partitions, pauses and
//! store-clock rate, every call's fault, the workload's random choices and each client's own
//! jitter ([`simba::SimbaBuilder::seed`]). [`run`] returns the seed's [`Outcome`]: its trace
//! (every call, reply, term and action with its virtual instant) and the rule breaks the checker
//! found. Fault draws are keyed by (node, operation, name, how many such calls came before),
//! not by the global order of calls, so that two calls made at the same virtual instant in
//! either order draw the same faults.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use simba::backend::memory::MemoryBackend;
use simba::backend::{
    Acquire, Backend, BackendError, BackendResult, HeldDigest, Join, KeepAlive, SessionGrant, SessionId, StoreSnapshot,
};
use simba::{Election, FnListener, RevokeReason, Simba, SimbaConfig, Term};
use simba_core::mutants::Mutant;
use tokio::time::{Instant, sleep};

/// How long one short run lasts, in virtual time.
pub const SHORT_RUN: Duration = Duration::from_secs(12);
/// Nodes per run.
pub const NODES: usize = 3;
/// The election names every node contends for.
pub const ELECTIONS: [&str; 2] = ["e0", "e1"];
/// The lock every node takes in turn.
pub const LOCK: &str = "l0";

/// The engine's configuration in the simulation: short leases so that a few virtual seconds
/// hold many terms, and a large `drift` so that the store's faster clock (up to
/// `1 / (1 - drift)`, the bound rule D6 allows) opens windows wide enough to catch a deadline
/// computed wrongly.
pub fn sim_config() -> SimbaConfig {
    SimbaConfig::builder()
        .lease_duration(Duration::from_millis(3000))
        .renew_interval(Duration::from_millis(1000))
        .drift(0.2)
        .margin(Duration::from_millis(50))
        .retry_jitter(Duration::from_millis(400))
        .min_backoff(Duration::from_millis(100))
        .build()
        .expect("the simulation's configuration is valid")
}

/// One line of a run's trace: what happened, to which node, at which virtual instant
/// (microseconds since the run began). Session ids are written as `n<node>s<ordinal>`, never as
/// the random ids the store made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Microseconds of virtual time since the run began.
    pub at_us: u64,
    /// The node, or `usize::MAX` for the store.
    pub node: usize,
    /// What happened.
    pub what: String,
}

/// What one seed gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Every event in order.
    pub trace: Vec<Entry>,
    /// The rule breaks found, each naming its rule.
    pub violations: Vec<String>,
    /// Terms granted over the run (all names, all nodes).
    pub terms: usize,
    /// Actions taken under a term.
    pub actions: usize,
}

impl Outcome {
    /// The trace as text, one line per entry (the last `max` entries).
    pub fn render(&self, max: usize) -> String {
        let skip = self.trace.len().saturating_sub(max);
        let mut s = String::new();
        for e in &self.trace[skip..] {
            let who = if e.node == usize::MAX { "store".to_owned() } else { format!("n{}", e.node) };
            s.push_str(&format!("{:>12.6}s {who:>5} {}\n", e.at_us as f64 / 1e6, e.what));
        }
        s
    }
}

/// How a node's names map onto `Simba` clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One client per node for all its names: one session holds several terms.
    Shared,
    /// One client per name on each node: each session holds at most one term.
    PerName,
}

/// What a run varies besides its seed.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Virtual time the workload runs before the clients close.
    pub length: Duration,
    /// A rule broken on purpose in the core for this run (the model's mutants).
    pub mutant: Option<Mutant>,
    /// How names map onto clients.
    pub layout: Layout,
}

impl Default for Options {
    fn default() -> Self {
        Options { length: SHORT_RUN, mutant: None, layout: Layout::PerName }
    }
}

/// Runs `seed` on a fresh single-threaded runtime with paused time and returns its outcome.
/// The same seed and options give the same outcome.
pub fn run(seed: u64, opts: Options) -> Outcome {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // Tokio draws from its own generator where `select!` picks a first branch and where a
    // `watch` channel spreads its waiters; only `--cfg tokio_unstable` (set for this
    // repository's builds by .cargo/config.toml) lets it be seeded (docs/adr/0021). Without it
    // the schedule within one virtual instant is not replayed.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let rt = builder.build().expect("a current-thread runtime");
    simba_core::mutants::with(opts.mutant, || rt.block_on(simulate(seed, opts)))
}

/// SplitMix64: the simulation's one hash, stable across runs and platforms.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn key(parts: &[u64]) -> u64 {
    parts.iter().fold(0x5151_5151, |acc, p| mix(acc ^ mix(*p)))
}

fn text_hash(s: &str) -> u64 {
    // SipHash with fixed keys: the same value in every process.
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// A backend operation, as the fault layer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Open,
    KeepAlive,
    Acquire,
    Release,
    Close,
    Owned,
    Other,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// The request is lost: no answer ever (the engine's timeout ends the call).
    LoseRequest,
    /// The store is unreachable: an error at once.
    Error,
    /// The store applies the request; its reply is lost.
    LoseReply,
    /// The request reaches the store this much later (calls overtake each other: reordering).
    DelayRequest(Duration),
    /// The reply comes back this much later.
    DelayReply(Duration),
}

/// The fault weather of a seed: how often each fault hits, per mille.
#[derive(Debug, Clone, Copy)]
struct Weather {
    lose_request: u64,
    error: u64,
    lose_reply: u64,
    delay_request: u64,
    delay_reply: u64,
    max_delay_us: u64,
}

/// One node's plan: when it is cut from the store, when it stalls, how fast the store's clock
/// runs against its own.
#[derive(Debug, Clone)]
struct NodePlan {
    /// The store expires this node's sessions after `ttl / rate` (rate in `[1, 1 / (1 - drift)]`):
    /// the store's clock runs faster than the node's by that factor (D6's bound).
    rate: f64,
    /// Windows in which every call of the node fails (`false`) or goes unanswered (`true`).
    partitions: Vec<(Duration, Duration, bool)>,
    /// Windows in which the node's calls and replies stall until the window ends.
    pauses: Vec<(Duration, Duration)>,
}

struct Plan {
    weather: Weather,
    nodes: Vec<NodePlan>,
}

fn plan(seed: u64, length: Duration, drift: f64) -> Plan {
    let mut rng = StdRng::seed_from_u64(key(&[seed, 1]));
    let storm = rng.random_range(0..4u64);
    let weather = Weather {
        lose_request: storm * 8,
        error: storm * 10,
        lose_reply: storm * 8,
        delay_request: 40 + storm * 40,
        delay_reply: 40 + storm * 40,
        max_delay_us: rng.random_range(50_000..1_500_000),
    };
    let len_ms = length.as_millis() as u64;
    let window = |rng: &mut StdRng, max_ms: u64| {
        let start = rng.random_range(0..len_ms);
        let d = rng.random_range(50..max_ms);
        (Duration::from_millis(start), Duration::from_millis(start + d))
    };
    let nodes = (0..NODES)
        .map(|_| {
            let rate = if rng.random_bool(0.5) { 1.0 / (1.0 - drift) } else { 1.0 + rng.random_range(0.0..drift) };
            let partitions = (0..rng.random_range(0..3))
                .map(|_| {
                    let (a, b) = window(&mut rng, 4000);
                    (a, b, rng.random_bool(0.5))
                })
                .collect();
            let pauses = (0..rng.random_range(0..3)).map(|_| window(&mut rng, 3000)).collect();
            NodePlan { rate, partitions, pauses }
        })
        .collect();
    Plan { weather, nodes }
}

/// A session the store granted, as the simulation tracks it.
struct Tracked {
    id: SessionId,
    ttl: Duration,
    renewed_at: Instant,
    expired: bool,
}

#[derive(Default)]
struct State {
    trace: Vec<Entry>,
    counters: HashMap<(usize, Op, String), u64>,
    /// Sessions by (node, ordinal), and each id's (node, ordinal).
    sessions: BTreeMap<(usize, u32), Tracked>,
    names: HashMap<SessionId, (usize, u32)>,
    opened: [u32; NODES],
    terms: Vec<(usize, Term)>,
    actions: Vec<(Instant, usize, Term)>,
    violations: Vec<String>,
    calm: bool,
}

/// The shared world of one run: the store, the plan and the record.
pub struct World {
    seed: u64,
    start: Instant,
    store: MemoryBackend,
    plan: Plan,
    st: Mutex<State>,
}

impl World {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn since(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    fn note(&self, node: usize, what: String) {
        let at_us = self.since(Instant::now()).as_micros() as u64;
        self.lock().trace.push(Entry { at_us, node, what });
    }

    fn violation(&self, what: String) {
        self.note(usize::MAX, format!("VIOLATION {what}"));
        self.lock().violations.push(what);
    }

    fn session_name(&self, id: &SessionId) -> String {
        match self.lock().names.get(id) {
            Some((n, o)) => format!("n{n}s{o}"),
            None => "unknown-session".to_owned(),
        }
    }

    fn draw(&self, node: usize, op: Op, name: &str) -> Fault {
        let n = {
            let mut st = self.lock();
            if st.calm {
                return Fault::None;
            }
            let c = st.counters.entry((node, op, name.to_owned())).or_insert(0);
            *c += 1;
            *c
        };
        let h = key(&[self.seed, 2, node as u64, op as u64, text_hash(name), n]);
        let mut w = self.plan.weather;
        if op == Op::Owned {
            // The listing a digest mismatch asks for is slow as often as not, so that terms are
            // adopted while it is under way (T3's snapshot rule).
            w.delay_request = w.delay_request.max(250);
            w.delay_reply = w.delay_reply.max(250);
        }
        let roll = h % 1000;
        let delay = Duration::from_micros((h >> 20) % w.max_delay_us.max(1));
        let mut edge = w.lose_request;
        if roll < edge {
            return Fault::LoseRequest;
        }
        edge += w.error;
        if roll < edge {
            return Fault::Error;
        }
        edge += w.lose_reply;
        if roll < edge {
            return Fault::LoseReply;
        }
        edge += w.delay_request;
        if roll < edge {
            return Fault::DelayRequest(delay);
        }
        edge += w.delay_reply;
        if roll < edge {
            return Fault::DelayReply(delay);
        }
        Fault::None
    }

    /// The partition the node is in now: `Some(hang)`.
    fn partitioned(&self, node: usize) -> Option<bool> {
        if self.lock().calm {
            return None;
        }
        let now = self.since(Instant::now());
        self.plan.nodes[node].partitions.iter().find(|(a, b, _)| *a <= now && now < *b).map(|p| p.2)
    }

    /// Stalls while the node is paused.
    async fn stall(&self, node: usize) {
        loop {
            if self.lock().calm {
                return;
            }
            let now = self.since(Instant::now());
            match self.plan.nodes[node].pauses.iter().find(|(a, b)| *a <= now && now < *b) {
                Some((_, end)) => sleep(*end - now).await,
                None => return,
            }
        }
    }

    /// Expires, on the store, every session whose time is up on the store's clock (faster
    /// than its node's by the node's rate).
    fn enforce_expiry(&self) {
        let now = Instant::now();
        let due: Vec<((usize, u32), SessionId)> = {
            let mut st = self.lock();
            let mut due = Vec::new();
            for (k, s) in st.sessions.iter_mut() {
                let ends = s.renewed_at + s.ttl.div_f64(self.plan.nodes[k.0].rate);
                if !s.expired && now >= ends {
                    s.expired = true;
                    due.push((*k, s.id.clone()));
                }
            }
            due
        };
        for ((n, o), id) in due {
            self.store.expire_session(&id);
            self.note(usize::MAX, format!("expires n{n}s{o} (store clock)"));
        }
    }

    fn opened(&self, node: usize, grant: &SessionGrant) {
        let mut st = self.lock();
        st.opened[node] += 1;
        let o = st.opened[node];
        st.names.insert(grant.id.clone(), (node, o));
        st.sessions.insert(
            (node, o),
            Tracked { id: grant.id.clone(), ttl: grant.remaining, renewed_at: Instant::now(), expired: false },
        );
        drop(st);
        self.note(usize::MAX, format!("opens n{node}s{o} for {:?}", grant.remaining));
    }

    fn renewed(&self, id: &SessionId) {
        let mut st = self.lock();
        let Some(k) = st.names.get(id).copied() else { return };
        if let Some(s) = st.sessions.get_mut(&k)
            && !s.expired
        {
            s.renewed_at = Instant::now();
        }
    }

    /// A node acts under `term` (a write a fenced resource would take): the term must be the
    /// store's holder now (D6: the local deadline comes first; K4: no stale token adopted).
    fn act(&self, node: usize, term: &Term) {
        self.enforce_expiry();
        let holder = self.store.holder(term.name());
        let ok = matches!(&holder, Some((Some(s), t)) if s == term.session_id() && *t == term.token());
        let seen = match &holder {
            Some((Some(s), t)) => format!("{} token {t}", self.session_name(s)),
            Some((None, t)) => format!("nobody (last token {t})"),
            None => "nothing".to_owned(),
        };
        self.note(node, format!("acts on {} token {}", term.name(), term.token()));
        self.lock().actions.push((Instant::now(), node, term.clone()));
        if !ok {
            self.violation(format!(
                "D6/K4: n{node} acts on {} with token {} (local deadline in {:?}) while the store has {seen}",
                term.name(),
                term.token(),
                term.deadline().saturating_duration_since(Instant::now()),
            ));
        }
    }

    fn granted(&self, node: usize, term: &Term) {
        self.note(
            node,
            format!("elected {} token {} session {}", term.name(), term.token(), self.session_name(term.session_id())),
        );
        self.lock().terms.push((node, term.clone()));
    }
}

/// One node's view of the store: the seeded fault layer around the shared in-memory store.
struct SimBackend {
    node: usize,
    world: Arc<World>,
}

impl SimBackend {
    async fn call<T: Debug>(
        &self,
        op: Op,
        name: &str,
        fut: impl Future<Output = BackendResult<T>>,
        commit: impl FnOnce(&World, &T),
    ) -> BackendResult<T> {
        let w = &*self.world;
        let fault = w.draw(self.node, op, name);
        w.note(self.node, format!("calls {op:?} {name} {fault:?}"));
        match w.partitioned(self.node) {
            Some(true) => std::future::pending::<()>().await,
            Some(false) => return Err(BackendError::Unavailable { message: "partitioned".into(), source: None }),
            None => {}
        }
        w.stall(self.node).await;
        match fault {
            Fault::LoseRequest => std::future::pending::<()>().await,
            Fault::Error => return Err(BackendError::Unavailable { message: "injected".into(), source: None }),
            Fault::DelayRequest(d) => sleep(d).await,
            _ => {}
        }
        w.enforce_expiry();
        let r = fut.await;
        if let Ok(v) = &r {
            commit(w, v);
        }
        w.note(usize::MAX, format!("answers n{} {op:?} {name}: {}", self.node, summary(&r)));
        match fault {
            Fault::LoseReply => std::future::pending::<()>().await,
            Fault::DelayReply(d) => sleep(d).await,
            _ => {}
        }
        w.stall(self.node).await;
        r
    }
}

fn summary<T: Debug>(r: &BackendResult<T>) -> String {
    match r {
        Ok(v) => {
            let s = format!("{v:?}");
            // A grant carries the store's random id: name it by node and ordinal instead.
            if s.starts_with("SessionGrant") { "granted".to_owned() } else { s }
        }
        Err(e) => format!("error {e}"),
    }
}

fn no_commit<T>(_: &World, _: &T) {}

impl Backend for SimBackend {
    async fn open_session(&self, ttl: Duration) -> BackendResult<SessionGrant> {
        let node = self.node;
        self.call(Op::Open, "", self.world.store.open_session(ttl), |w, g| w.opened(node, g)).await
    }
    async fn keep_alive(&self, session: &SessionId, held: HeldDigest) -> BackendResult<KeepAlive> {
        let commit = |w: &World, k: &KeepAlive| {
            if matches!(k, KeepAlive::Alive { .. }) {
                w.renewed(session)
            }
        };
        self.call(Op::KeepAlive, "", self.world.store.keep_alive(session, held), commit).await
    }
    async fn acquire(&self, session: &SessionId, name: &str) -> BackendResult<Acquire> {
        self.call(Op::Acquire, name, self.world.store.acquire(session, name), no_commit).await
    }
    async fn release(&self, session: &SessionId, name: &str, token: u64) -> BackendResult<bool> {
        self.call(Op::Release, name, self.world.store.release(session, name, token), no_commit).await
    }
    async fn close_session(&self, session: &SessionId) -> BackendResult<()> {
        self.call(Op::Close, "", self.world.store.close_session(session), no_commit).await
    }
    async fn owned(&self, session: &SessionId) -> BackendResult<Vec<(String, u64)>> {
        self.call(Op::Owned, "", self.world.store.owned(session), no_commit).await
    }
    async fn claim_slot(&self, session: &SessionId, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        self.call(Op::Other, name, self.world.store.claim_slot(session, name, token, slot), no_commit).await
    }
    async fn join_group(&self, session: &SessionId, group: &str) -> BackendResult<Join> {
        self.call(Op::Other, group, self.world.store.join_group(session, group), no_commit).await
    }
    async fn leave_group(&self, session: &SessionId, group: &str) -> BackendResult<()> {
        self.call(Op::Other, group, self.world.store.leave_group(session, group), no_commit).await
    }
    async fn members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        self.world.store.members(group).await
    }
    async fn inspect(&self) -> BackendResult<StoreSnapshot> {
        self.world.store.inspect().await
    }
    async fn remove_idle_leases(&self, prefix: &str, idle_for: Duration, limit: usize) -> BackendResult<usize> {
        self.world.store.remove_idle_leases(prefix, idle_for, limit).await
    }
    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.world.store.subscribe_releases()
    }
    fn describe(&self) -> String {
        format!("sim(n{})", self.node)
    }
}

async fn simulate(seed: u64, opts: Options) -> Outcome {
    let config = sim_config();
    let world = Arc::new(World {
        seed,
        start: Instant::now(),
        store: MemoryBackend::new(),
        plan: plan(seed, opts.length, config.drift()),
        st: Mutex::new(State::default()),
    });
    let mut clients: Vec<Arc<Simba>> = Vec::new();
    let mut tasks = Vec::new();
    for node in 0..NODES {
        // One client per node, or one per name (then no client holds two terms).
        let mut client_for = |i: u64| -> Arc<Simba> {
            if opts.layout == Layout::PerName || clients.len() <= node {
                let c = Simba::builder()
                    .backend(SimBackend { node, world: Arc::clone(&world) })
                    .config(config)
                    .seed(key(&[seed, 3, node as u64, i]))
                    .build()
                    .expect("a simulated client");
                clients.push(Arc::new(c));
            }
            Arc::clone(clients.last().expect("a client was just built"))
        };
        for (i, name) in ELECTIONS.iter().enumerate() {
            let e = Arc::new(client_for(i as u64).election(*name));
            let (w1, w2) = (Arc::clone(&world), Arc::clone(&world));
            let listener = FnListener::new(
                move |t: &Term| w1.granted(node, t),
                move |t: &Term, r: RevokeReason| {
                    w2.note(node, format!("revoked {} token {} {r:?}", t.name(), t.token()))
                },
            );
            e.start(listener).expect("start an election");
            let rng = StdRng::seed_from_u64(key(&[seed, 4, node as u64, i as u64]));
            tasks.push(tokio::spawn(leader(Arc::clone(&world), node, e, rng)));
        }
        let rng = StdRng::seed_from_u64(key(&[seed, 5, node as u64]));
        let client = client_for(ELECTIONS.len() as u64);
        tasks.push(tokio::spawn(locker(Arc::clone(&world), node, client, rng)));
    }
    sleep(opts.length).await;
    for t in &tasks {
        t.abort();
    }
    world.lock().calm = true;
    world.note(usize::MAX, "calm: faults off, clients close".into());
    for c in &clients {
        let _ = tokio::time::timeout(Duration::from_secs(30), c.close()).await;
    }
    check(&world);
    let st = world.lock();
    Outcome {
        seed,
        trace: st.trace.clone(),
        violations: st.violations.clone(),
        terms: st.terms.len(),
        actions: st.actions.len(),
    }
}

/// A leader's work: act under the election's term now and then, and step down once in a while
/// (handover).
async fn leader(world: Arc<World>, node: usize, e: Arc<Election>, mut rng: StdRng) {
    loop {
        sleep(Duration::from_micros(rng.random_range(20_000..300_000))).await;
        if let Some(t) = e.term()
            && t.is_valid()
        {
            world.act(node, &t);
            if rng.random_bool(0.02) {
                world.note(node, format!("steps down from {}", e.name()));
                let _ = e.step_down(Duration::from_millis(rng.random_range(100..2000))).await;
            }
        }
    }
}

/// A lock user: take the lock, act under it for a while, release it, again.
async fn locker(world: Arc<World>, node: usize, client: Arc<Simba>, mut rng: StdRng) {
    let lock = client.lock(LOCK);
    loop {
        match lock.try_acquire(Duration::from_millis(rng.random_range(200..2000))).await {
            Ok(Some(g)) => {
                world.granted(node, g.term());
                let until = Instant::now() + Duration::from_millis(rng.random_range(50..2500));
                while Instant::now() < until && g.term().is_valid() {
                    world.act(node, g.term());
                    sleep(Duration::from_micros(rng.random_range(10_000..200_000))).await;
                }
                world.note(node, format!("releases {LOCK} token {}", g.term().token()));
                let _ = g.release().await;
            }
            Ok(None) => {}
            Err(e) => world.note(node, format!("lock error: {e}")),
        }
        sleep(Duration::from_micros(rng.random_range(0..500_000))).await;
    }
}

/// After the run: per name, the terms' validity intervals `[started_at, deadline)` are disjoint
/// across all nodes (D6, the safety of the lease scheme), tokens strictly increase from term to
/// term (T2, T3), and every action fell inside its term (T4).
fn check(world: &World) {
    let (terms, actions) = {
        let st = world.lock();
        (st.terms.clone(), st.actions.clone())
    };
    let mut names: BTreeMap<String, Vec<(usize, Term)>> = BTreeMap::new();
    for (n, t) in terms {
        names.entry(t.name().to_owned()).or_default().push((n, t));
    }
    for (name, mut ts) in names {
        ts.sort_by_key(|(n, t)| (t.started_at(), *n, t.token()));
        // The term valid longest so far (overlap), and the one started last (tokens).
        let mut longest: Option<(usize, Term)> = None;
        let mut previous: Option<(usize, Term)> = None;
        for (n, t) in ts {
            if let Some((pn, p)) = &longest
                && t.started_at() < p.deadline()
            {
                world.violation(format!(
                    "D6: n{n} holds {name} token {} from {:?} while n{pn}'s term token {} is valid until {:?}",
                    t.token(),
                    world.since(t.started_at()),
                    p.token(),
                    world.since(p.deadline())
                ));
            }
            if let Some((pn, p)) = &previous
                && t.token() <= p.token()
            {
                world.violation(format!(
                    "T2/T3: n{n} holds {name} token {} after n{pn} held token {}",
                    t.token(),
                    p.token()
                ));
            }
            if longest.as_ref().is_none_or(|(_, p)| t.deadline() > p.deadline()) {
                longest = Some((n, t.clone()));
            }
            previous = Some((n, t));
        }
    }
    for (at, n, t) in actions {
        // An action at the instant the term ended came before its end (a step-down right after it).
        if at < t.started_at() || at > t.deadline() {
            world.violation(format!(
                "T4: n{n} acted on {} token {} at {:?}, outside its term [{:?}, {:?}]",
                t.name(),
                t.token(),
                world.since(at),
                world.since(t.started_at()),
                world.since(t.deadline())
            ));
        }
    }
}
