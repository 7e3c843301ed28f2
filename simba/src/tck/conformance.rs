//! The conformance suite (rule B4): one function per behaviour of the [`Backend`] contract,
//! plus engine behaviours that must hold on every store. Every backend runs all of them
//! against a real server through [`conformance_suite!`](crate::conformance_suite).
//!
//! The functions run on real time with short session lifetimes; each uses fresh lease and
//! group names, so suites may share one server.

use std::collections::HashSet;
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::backend::{Acquire, Backend, HeldDigest, Join, KeepAlive};
use crate::{RevokeReason, Simba, SimbaConfig};

/// The session lifetime the suite asks for. ZooKeeper test servers must allow it
/// (`minSessionTimeout` at most this).
pub const TTL: Duration = Duration::from_millis(1500);

/// A unique lease or group name with `prefix`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

async fn open<B: Backend>(b: &B) -> crate::backend::SessionId {
    ok(b.open_session(TTL).await, "open_session").id
}

async fn won<B: Backend>(b: &B, s: &crate::backend::SessionId, name: &str) -> u64 {
    match ok(b.acquire(s, name).await, "acquire") {
        Acquire::Won(t) => t,
        other => panic!("expected to win `{name}`, got {other:?}"),
    }
}

/// S1/B2: a new session is granted a positive lifetime no longer than asked, measured by the
/// store; a keep-alive renews it and the digest of nothing held matches.
pub async fn session_open_and_keep_alive<B: Backend>(b: B) {
    let g = ok(b.open_session(TTL).await, "open_session");
    assert!(!g.remaining.is_zero() && g.remaining <= TTL + Duration::from_millis(50), "granted {:?}", g.remaining);
    sleep(Duration::from_millis(300)).await;
    match ok(b.keep_alive(&g.id, HeldDigest::default()).await, "keep_alive") {
        KeepAlive::Alive { remaining, digest_matches } => {
            assert!(remaining > TTL / 2 && remaining <= TTL + Duration::from_millis(50), "remaining {remaining:?}");
            assert!(digest_matches);
        }
        KeepAlive::Expired => panic!("a fresh session must be alive"),
    }
    ok(b.close_session(&g.id).await, "close_session");
}

/// S2: session ids are never reused.
pub async fn session_ids_are_unique<B: Backend>(b: B) {
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let id = open(&b).await;
        assert!(seen.insert(id.clone()), "session id {id} handed out twice");
        ok(b.close_session(&id).await, "close_session");
    }
}

/// S3: an expired session never comes back: keep-alive and acquire answer Expired, and its
/// lease goes to another session with a higher token.
pub async fn expired_session_never_comes_back<B: Backend>(b: B) {
    let name = unique("s3");
    let a = open(&b).await;
    let t1 = won(&b, &a, &name).await;
    sleep(TTL + Duration::from_millis(700)).await;
    assert_eq!(ok(b.keep_alive(&a, HeldDigest::default()).await, "keep_alive"), KeepAlive::Expired);
    assert_eq!(ok(b.acquire(&a, &unique("s3-other")).await, "acquire"), Acquire::Expired);
    let c = open(&b).await;
    let t2 = won(&b, &c, &name).await;
    assert!(t2 > t1, "token went from {t1} to {t2}");
    assert_eq!(ok(b.keep_alive(&a, HeldDigest::default()).await, "keep_alive"), KeepAlive::Expired);
    // A released lease (its record kept, no holder) is refused too: a fast path for free leases
    // must check the caller's session as the full path does.
    assert!(ok(b.release(&c, &name, t2).await, "release"));
    assert_eq!(ok(b.acquire(&a, &name).await, "acquire a released lease"), Acquire::Expired);
    ok(b.close_session(&c).await, "close_session");
}

/// S4: closing a session frees its leases at once; it is expired afterwards.
pub async fn close_frees_everything<B: Backend>(b: B) {
    let (n1, n2) = (unique("s4a"), unique("s4b"));
    let a = open(&b).await;
    let t1 = won(&b, &a, &n1).await;
    won(&b, &a, &n2).await;
    ok(b.close_session(&a).await, "close_session");
    assert_eq!(ok(b.keep_alive(&a, HeldDigest::default()).await, "keep_alive"), KeepAlive::Expired);
    let c = open(&b).await;
    assert!(won(&b, &c, &n1).await > t1);
    won(&b, &c, &n2).await;
    ok(b.close_session(&c).await, "close_session");
    ok(b.close_session(&c).await, "closing twice");
}

/// T3: tokens are positive and strictly increase from term to term, across sessions.
pub async fn tokens_strictly_increase<B: Backend>(b: B) {
    let name = unique("t3");
    let mut last = 0;
    for _ in 0..5 {
        let s = open(&b).await;
        let t = won(&b, &s, &name).await;
        assert!(t > last, "token {t} after {last}");
        assert!(ok(b.release(&s, &name, t).await, "release"));
        let t2 = won(&b, &s, &name).await;
        assert!(t2 > t, "winning again after a release must give a new token: {t2} after {t}");
        last = t2;
        ok(b.close_session(&s).await, "close_session");
    }
}

/// A lease held by a live session is refused to others; re-acquiring one's own lease answers
/// the same token.
pub async fn held_lease_is_exclusive<B: Backend>(b: B) {
    let name = unique("excl");
    let a = open(&b).await;
    let c = open(&b).await;
    let t = won(&b, &a, &name).await;
    assert_eq!(ok(b.acquire(&c, &name).await, "acquire"), Acquire::Held);
    assert_eq!(ok(b.acquire(&a, &name).await, "re-acquire"), Acquire::Won(t));
    ok(b.close_session(&a).await, "close");
    ok(b.close_session(&c).await, "close");
}

/// T7: a release carries the token; a wrong token or another session releases nothing.
pub async fn release_checks_session_and_token<B: Backend>(b: B) {
    let name = unique("t7");
    let a = open(&b).await;
    let c = open(&b).await;
    let t = won(&b, &a, &name).await;
    assert!(!ok(b.release(&a, &name, t + 1).await, "release"), "wrong token released the lease");
    assert!(!ok(b.release(&a, &name, t - 1).await, "release"), "stale token released the lease");
    assert!(!ok(b.release(&c, &name, t).await, "release"), "another session released the lease");
    assert_eq!(ok(b.acquire(&c, &name).await, "acquire"), Acquire::Held);
    assert!(ok(b.release(&a, &name, t).await, "release"));
    assert!(!ok(b.release(&a, &name, t).await, "release"), "a second release must do nothing");
    assert!(won(&b, &c, &name).await > t);
    ok(b.close_session(&a).await, "close");
    ok(b.close_session(&c).await, "close");
}

/// A crashed holder (no close, no renewal) loses its lease when its session expires on the
/// store, not before the lifetime the store granted (`TTL`, or less where the store grants
/// less: etcd grants whole seconds).
pub async fn crashed_holder_lease_frees_on_expiry<B: Backend>(b: B) {
    let name = unique("crash");
    let grant = ok(b.open_session(TTL).await, "open_session");
    let a = grant.id;
    let t = won(&b, &a, &name).await;
    let c = open(&b).await;
    let start = Instant::now();
    let t2 = loop {
        match ok(b.acquire(&c, &name).await, "acquire") {
            Acquire::Won(t2) => break t2,
            Acquire::Held => {}
            Acquire::Expired => panic!("the live session was expired"),
        }
        assert!(start.elapsed() < TTL * 4, "lease not freed {:?} after its holder stopped renewing", start.elapsed());
        let _ = b.keep_alive(&c, HeldDigest::default()).await;
        sleep(Duration::from_millis(100)).await;
    };
    assert!(t2 > t);
    let granted = grant.remaining.min(TTL);
    assert!(start.elapsed() >= granted - Duration::from_millis(200), "freed after only {:?}", start.elapsed());
    ok(b.close_session(&c).await, "close");
}

/// S1/T6: the keep-alive digest matches what the session holds and stops matching when a
/// lease is no longer the session's; `owned` lists the leases.
pub async fn keep_alive_digest_and_owned<B: Backend>(b: B) {
    let (n1, n2) = (unique("dg1"), unique("dg2"));
    let a = open(&b).await;
    let t1 = won(&b, &a, &n1).await;
    let t2 = won(&b, &a, &n2).await;
    let mut d = HeldDigest::default();
    d.add(t1);
    d.add(t2);
    assert!(matches!(ok(b.keep_alive(&a, d).await, "keep_alive"), KeepAlive::Alive { digest_matches: true, .. }));
    let mut wrong = HeldDigest::default();
    wrong.add(t1);
    assert!(matches!(ok(b.keep_alive(&a, wrong).await, "keep_alive"), KeepAlive::Alive { digest_matches: false, .. }));
    let mut owned = ok(b.owned(&a).await, "owned");
    owned.sort();
    let mut expected = vec![(n1.clone(), t1), (n2.clone(), t2)];
    expected.sort();
    assert_eq!(owned, expected);
    ok(b.close_session(&a).await, "close");
}

/// J5 support: a slot is claimed at most once, only with the holder's token, only forward.
pub async fn claim_slot_is_fenced_and_monotonic<B: Backend>(b: B) {
    let name = unique("slot");
    let a = open(&b).await;
    let t = won(&b, &a, &name).await;
    assert!(ok(b.claim_slot(&a, &name, t, 100).await, "claim_slot"));
    assert!(!ok(b.claim_slot(&a, &name, t, 100).await, "claim_slot"), "slot 100 claimed twice");
    assert!(!ok(b.claim_slot(&a, &name, t, 99).await, "claim_slot"), "an earlier slot was claimed");
    assert!(!ok(b.claim_slot(&a, &name, t + 1, 101).await, "claim_slot"), "a wrong token claimed a slot");
    assert!(ok(b.claim_slot(&a, &name, t, 101).await, "claim_slot"));
    assert!(ok(b.release(&a, &name, t).await, "release"));
    let c = open(&b).await;
    let t2 = won(&b, &c, &name).await;
    assert!(!ok(b.claim_slot(&a, &name, t, 102).await, "claim_slot"), "a released term claimed a slot");
    assert!(!ok(b.claim_slot(&c, &name, t2, 101).await, "claim_slot"), "a slot ran twice across a failover");
    assert!(ok(b.claim_slot(&c, &name, t2, 102).await, "claim_slot"));
    ok(b.close_session(&a).await, "close");
    ok(b.close_session(&c).await, "close");
}

/// J6 support: membership lists live sessions and ends with the session.
pub async fn group_membership_follows_sessions<B: Backend>(b: B) {
    let g = unique("grp");
    let a = open(&b).await;
    let c = open(&b).await;
    assert_eq!(ok(b.join_group(&a, &g).await, "join_group"), Join::Joined);
    assert_eq!(ok(b.join_group(&c, &g).await, "join_group"), Join::Joined);
    assert_eq!(ok(b.join_group(&c, &g).await, "joining twice"), Join::Joined);
    let mut expected = vec![a.clone(), c.clone()];
    expected.sort();
    assert_eq!(ok(b.members(&g).await, "members"), expected);
    ok(b.leave_group(&c, &g).await, "leave_group");
    assert_eq!(ok(b.members(&g).await, "members"), vec![a.clone()]);
    assert_eq!(ok(b.join_group(&c, &g).await, "join_group"), Join::Joined);
    ok(b.close_session(&c).await, "close");
    assert_eq!(ok(b.members(&g).await, "members"), vec![a.clone()]);
    sleep(TTL + Duration::from_millis(700)).await;
    assert!(ok(b.members(&g).await, "members").is_empty(), "an expired session is still a member");
    assert!(ok(b.members(&unique("empty")).await, "members").is_empty());
}

/// S3 for groups: a session that was closed, or that expired, joins nothing: `join_group`
/// answers [`Join::Expired`] (not an error), and the group does not list it.
pub async fn join_of_an_ended_session_answers_expired<B: Backend>(b: B) {
    let g = unique("grp-ended");
    let closed = open(&b).await;
    ok(b.close_session(&closed).await, "close_session");
    assert_eq!(ok(b.join_group(&closed, &g).await, "join_group"), Join::Expired, "a closed session joined");
    let expired = open(&b).await;
    sleep(TTL + Duration::from_millis(700)).await;
    assert_eq!(ok(b.join_group(&expired, &g).await, "join_group"), Join::Expired, "an expired session joined");
    assert!(ok(b.members(&g).await, "members").is_empty(), "an ended session is listed as a member");
    let live = open(&b).await;
    assert_eq!(ok(b.join_group(&live, &g).await, "join_group"), Join::Joined);
    assert_eq!(ok(b.members(&g).await, "members"), vec![live.clone()]);
    ok(b.close_session(&live).await, "close_session");
}

/// What a backend's suite entry declares it supports; the suite holds it to that
/// declaration, so a backend that stops doing what it declared fails instead of skipping.
///
/// ```
/// use simba::tck::conformance::Capabilities;
///
/// let postgres = Capabilities::NONE.with_release_broadcast().with_kept_lease_records();
/// assert!(postgres.release_broadcast() && postgres.keeps_lease_records());
/// assert!(!Capabilities::NONE.release_broadcast());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    release_broadcast: bool,
    kept_lease_records: bool,
}

impl Capabilities {
    /// Nothing optional: the backend offers no release broadcast, and its lease records end
    /// with their terms.
    pub const NONE: Capabilities = Capabilities { release_broadcast: false, kept_lease_records: false };

    /// The backend keeps a lease's record after its term (SQL rows, Redis hashes, memory), so
    /// [`Backend::remove_idle_leases`] has idle records to remove (B3).
    pub const fn with_kept_lease_records(mut self) -> Self {
        self.kept_lease_records = true;
        self
    }

    /// Whether the backend declared that it keeps lease records after their terms.
    pub const fn keeps_lease_records(&self) -> bool {
        self.kept_lease_records
    }

    /// The backend broadcasts released lease names (`Backend::subscribe_releases`, K2).
    pub const fn with_release_broadcast(mut self) -> Self {
        self.release_broadcast = true;
        self
    }

    /// Whether the backend declared a release broadcast.
    pub const fn release_broadcast(&self) -> bool {
        self.release_broadcast
    }
}

/// What a suite entry's builder returns: the backend, and whatever must live as long as the
/// test and be cleaned up after it (a temporary directory, a server process). A builder may
/// return the backend alone or a `(backend, guard)` pair; the guard drops when the test ends,
/// also when it fails.
pub struct Built<B> {
    /// The backend under test.
    pub backend: B,
    /// Dropped when the test ends.
    pub guard: Box<dyn std::any::Any + Send>,
}

impl<B: Backend> From<B> for Built<B> {
    fn from(backend: B) -> Self {
        Built { backend, guard: Box::new(()) }
    }
}

impl<B: Backend, G: Send + 'static> From<(B, G)> for Built<B> {
    fn from((backend, guard): (B, G)) -> Self {
        Built { backend, guard: Box::new(guard) }
    }
}

/// B3, T3: idle lease records are removed, and tokens still never go back. Under one fresh
/// prefix: a name won three times and released, a name held throughout, and a job's name with a
/// claimed slot, released. Nothing is idle for an hour yet; idle at once, exactly the released
/// name without a ledger goes (where the store keeps records at all: elsewhere nothing is
/// there to remove). After it, the same name and a new one win tokens above every token
/// removed; the held lease is still held with its token; the ledger still refuses the old
/// slot. The prefix and the limit bound what goes.
pub async fn idle_lease_records_are_removed_above_the_floor<B: Backend>(b: B, caps: Capabilities) {
    let p = format!("{}.", unique("b3"));
    let (a, held, ledger, fresh) = (format!("{p}a"), format!("{p}held"), format!("{p}ledger"), format!("{p}new"));
    let kept = usize::from(caps.keeps_lease_records());
    let s1 = open(&b).await;
    let mut ta = 0;
    for _ in 0..3 {
        ta = won(&b, &s1, &a).await;
        assert!(ok(b.release(&s1, &a, ta).await, "release"), "release of `{a}`");
    }
    let th = won(&b, &s1, &held).await;
    let tl = won(&b, &s1, &ledger).await;
    assert!(ok(b.claim_slot(&s1, &ledger, tl, 5).await, "claim_slot"), "claim of slot 5");
    assert!(ok(b.release(&s1, &ledger, tl).await, "release"), "release of `{ledger}`");
    let remove = |prefix: &str, idle: Duration, limit: usize| {
        let (b, prefix) = (&b, prefix.to_owned());
        async move { ok(b.remove_idle_leases(&prefix, idle, limit).await, "remove_idle_leases") }
    };
    assert_eq!(remove(&p, Duration::from_secs(3600), 100).await, 0, "nothing was idle for an hour");
    assert_eq!(remove(&p, Duration::ZERO, 100).await, kept, "only the released name without a ledger goes");
    assert_eq!(remove(&p, Duration::ZERO, 100).await, 0, "nothing is left to remove");
    let ta2 = won(&b, &s1, &a).await;
    assert!(ta2 > ta, "`{a}` won token {ta2} after its record with token {ta} was removed");
    let tf = won(&b, &s1, &fresh).await;
    assert!(tf > ta, "a new name won token {tf}, not above the removed token {ta}");
    let s2 = open(&b).await;
    assert_eq!(ok(b.acquire(&s2, &held).await, "acquire"), Acquire::Held, "the held lease stays held");
    assert!(ok(b.owned(&s1).await, "owned").contains(&(held.clone(), th)), "the holder still lists `{held}`");
    let tl2 = won(&b, &s2, &ledger).await;
    assert!(tl2 > tl, "the job's name won token {tl2} after {tl}");
    assert!(!ok(b.claim_slot(&s2, &ledger, tl2, 5).await, "claim_slot"), "the ledger still holds slot 5");
    assert!(ok(b.claim_slot(&s2, &ledger, tl2, 6).await, "claim_slot"), "slot 6 is claimed");
    // Two idle names inside the prefix and one outside it: the limit takes one at a time, and
    // the one outside stays until its own prefix is asked for.
    let outside = unique("b3-outside");
    let to = won(&b, &s1, &outside).await;
    for (name, token) in [(&a, ta2), (&fresh, tf), (&outside, to)] {
        assert!(ok(b.release(&s1, name, token).await, "release"), "release of `{name}`");
    }
    assert_eq!(remove(&p, Duration::ZERO, 1).await, kept, "the limit bounds one removal");
    assert_eq!(remove(&p, Duration::ZERO, 100).await, kept, "the second idle name of the prefix");
    assert_eq!(remove(&p, Duration::ZERO, 100).await, 0, "the name outside the prefix is not taken");
    assert_eq!(remove(&outside, Duration::ZERO, 100).await, kept, "its own prefix takes it");
    assert!(won(&b, &s1, &outside).await > to, "`{outside}` starts above its removed token");
    for s in [s1, s2] {
        ok(b.close_session(&s).await, "close_session");
    }
}

/// B3, T3 under contention: removals of idle records run back to back while four sessions
/// take and release four names of one prefix for a second (within the sessions' lifetime); each name's tokens, in the order
/// they were won, strictly increase (a removal racing an acquisition of the same name never
/// lets the new record start at or below a removed token), and, where the store keeps records,
/// removals did happen. A failed call (a deadlock the database broke) is counted and tried
/// again, as the engine does.
pub async fn idle_removal_racing_acquisitions_keeps_tokens_increasing<B: Backend + Clone>(b: B, caps: Capabilities) {
    let p = format!("{}.", unique("b3race"));
    let names: Vec<String> = (0..4).map(|i| format!("{p}{i}")).collect();
    let until = Instant::now() + TTL / 2;
    let mut workers = Vec::new();
    for w in 0..4_usize {
        let (b, names, s) = (b.clone(), names.clone(), open(&b).await);
        workers.push(tokio::spawn(async move {
            let (mut wins, mut failed) = (Vec::new(), 0_u32);
            for k in 0.. {
                if Instant::now() >= until {
                    break;
                }
                let name = &names[(w + k) % names.len()];
                match b.acquire(&s, name).await {
                    Ok(Acquire::Won(t)) => {
                        wins.push((name.clone(), t, Instant::now()));
                        loop {
                            match b.release(&s, name, t).await {
                                Ok(true) => break,
                                Ok(false) => panic!("the release of `{name}` with token {t} was refused"),
                                Err(_) if failed < 100 => failed += 1,
                                Err(e) => panic!("release failed 100 times: {e}"),
                            }
                        }
                    }
                    Ok(Acquire::Held) => {}
                    Ok(Acquire::Expired) => panic!("session {s} expired while it worked"),
                    Err(_) => failed += 1,
                }
            }
            ok(b.close_session(&s).await, "close_session");
            (wins, failed)
        }));
    }
    let (mut removed, mut failed) = (0, 0_u32);
    while Instant::now() < until {
        match b.remove_idle_leases(&p, Duration::ZERO, 100).await {
            Ok(n) => removed += n,
            Err(_) => failed += 1,
        }
    }
    let mut wins = Vec::new();
    for w in workers {
        let (mine, f) = ok(w.await, "worker");
        wins.extend(mine);
        failed += f;
    }
    assert!(failed < 100, "{failed} calls failed");
    assert!(!caps.keeps_lease_records() || removed > 0, "no record was removed while the sessions worked");
    wins.sort_by_key(|(name, _, at)| (name.clone(), *at));
    for pair in wins.windows(2) {
        let ((n1, t1, _), (n2, t2, _)) = (&pair[0], &pair[1]);
        assert!(n1 != n2 || t2 > t1, "`{n1}` won token {t2} after {t1} ({removed} records removed meanwhile)");
    }
}

/// K2: a backend that declares a release broadcast offers a subscription and a release is
/// heard on it; one that does not declare it offers none (a broadcast the engine would use
/// but the suite would never check).
pub async fn releases_are_broadcast_as_declared<B: Backend>(b: B, caps: Capabilities) {
    let rx = b.subscribe_releases();
    if !caps.release_broadcast() {
        assert!(
            rx.is_none(),
            "`{}` offers a release subscription but its suite entry does not declare it: pass `Capabilities::NONE.with_release_broadcast()`",
            b.describe()
        );
        return;
    }
    let Some(mut rx) = rx else {
        panic!("`{}` declares a release broadcast but `subscribe_releases` returned None", b.describe())
    };
    let name = unique("k2");
    let a = open(&b).await;
    let t = won(&b, &a, &name).await;
    // Let a subscription that connects asynchronously settle.
    sleep(Duration::from_millis(200)).await;
    assert!(ok(b.release(&a, &name, t).await, "release"));
    let heard = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match rx.recv().await {
                Ok(n) if n == name => return true,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(heard, Ok(true), "the release of `{name}` was not broadcast");
    ok(b.close_session(&a).await, "close");
}

/// Many sessions racing for one free lease: exactly one wins.
pub async fn concurrent_acquire_has_one_winner<B: Backend + Clone>(b: B) {
    let name = unique("race");
    let mut sessions = Vec::new();
    for _ in 0..8 {
        sessions.push(open(&b).await);
    }
    let tasks: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (b, s, n) = (b.clone(), s.clone(), name.clone());
            tokio::spawn(async move { b.acquire(&s, &n).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(Acquire::Won(_))) => winners += 1,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("acquire failed: {e}"),
            Err(e) => panic!("task failed: {e}"),
        }
    }
    assert_eq!(winners, 1);
    for s in sessions {
        ok(b.close_session(&s).await, "close");
    }
}

/// T1: the longest valid name, with every allowed character, works as any other.
pub async fn every_valid_name_works<B: Backend>(b: B) {
    let tail = format!("{:016x}", rand::random::<u64>());
    let name = format!("Az09._:-{}{}", "x".repeat(128 - 8 - tail.len()), tail);
    assert_eq!(name.len(), 128);
    let a = open(&b).await;
    let t = won(&b, &a, &name).await;
    assert_eq!(ok(b.owned(&a).await, "owned"), vec![(name.clone(), t)]);
    assert!(ok(b.release(&a, &name, t).await, "release"));
    ok(b.close_session(&a).await, "close");
}

/// ADR 0007: `inspect` is a read-only snapshot. It lists live sessions (with times no larger
/// than granted), held leases with their holder and token, and groups with their live
/// members; it drops what was released, closed or expired; and polling it never keeps a
/// session alive.
pub async fn inspect_is_a_read_only_snapshot<B: Backend>(b: B) {
    let (lease, group) = (unique("inspect"), unique("inspect-g"));
    let a = open(&b).await;
    let c = open(&b).await;
    let t = won(&b, &a, &lease).await;
    assert_eq!(ok(b.join_group(&a, &group).await, "join_group a"), Join::Joined);
    assert_eq!(ok(b.join_group(&c, &group).await, "join_group c"), Join::Joined);
    let snap = ok(b.inspect().await, "inspect");
    let Some(l) = snap.lease(&lease) else { panic!("held lease `{lease}` not listed: {snap:?}") };
    assert_eq!((&l.session, l.token), (&a, t), "holder and token of `{lease}`");
    if let (Some(at), Some(now)) = (l.acquired_at, snap.taken_at) {
        let held = now.duration_since(at).unwrap_or_default();
        assert!(held < Duration::from_secs(10), "held for {held:?} on the store's clock");
    }
    let mut both = vec![a.clone(), c.clone()];
    both.sort();
    assert_eq!(snap.members(&group), both.as_slice(), "members of `{group}`");
    for id in &both {
        let Some(s) = snap.session(id) else { panic!("live session {id} not listed: {snap:?}") };
        assert!(s.remaining.is_none_or(|r| r <= TTL + Duration::from_millis(50)), "{s:?}");
        assert!(s.age.is_none_or(|r| r < Duration::from_secs(10)), "{s:?}");
    }
    assert!(snap.leases.windows(2).all(|w| w[0].name < w[1].name), "leases not ordered by name");
    assert!(snap.sessions.windows(2).all(|w| w[0].id < w[1].id), "sessions not ordered by id");
    // Released and closed: gone from the snapshot.
    assert!(ok(b.release(&a, &lease, t).await, "release"));
    ok(b.close_session(&c).await, "close_session");
    let snap = ok(b.inspect().await, "inspect");
    assert!(snap.lease(&lease).is_none(), "released lease still listed");
    assert_eq!(snap.members(&group), std::slice::from_ref(&a), "closed session still a member");
    assert!(snap.session(&c).is_none(), "closed session still listed");
    // Polled but never renewed, `a` expires: inspect does not renew.
    let start = Instant::now();
    while start.elapsed() < TTL + Duration::from_millis(700) {
        ok(b.inspect().await, "inspect");
        sleep(Duration::from_millis(150)).await;
    }
    let snap = ok(b.inspect().await, "inspect");
    assert!(snap.session(&a).is_none() && snap.members(&group).is_empty(), "expired session listed: {snap:?}");
    assert_eq!(ok(b.keep_alive(&a, HeldDigest::default()).await, "keep_alive"), KeepAlive::Expired);
}

fn engine_config() -> SimbaConfig {
    SimbaConfig::builder()
        .lease_duration(TTL)
        .renew_interval(Duration::from_millis(400))
        .retry_jitter(Duration::from_millis(100))
        .build()
        .unwrap_or_default()
}

/// Engine on this store: two clients, one leader; `stop()` hands over (H1) and the other
/// takes over with a higher token; a crashed leader is replaced after its session expires on
/// the store (section 9, first row).
pub async fn engine_handover_and_failover<B: Backend>(b1: B, b2: B) {
    let name = unique("engine");
    let c1 = ok(Simba::new(b1, engine_config()), "client 1");
    let c2 = ok(Simba::new(b2, engine_config()), "client 2");
    let e1 = c1.election(name.clone());
    let e2 = c2.election(name.clone());
    ok(e1.start(()), "start 1");
    let t1 = wait_leader(&e1, Duration::from_secs(5)).await;
    ok(e2.start(()), "start 2");
    sleep(Duration::from_millis(500)).await;
    assert!(e2.term().is_none(), "two leaders");
    e1.stop().await;
    assert_eq!(t1.revoke_reason(), Some(RevokeReason::Stopped));
    let t2 = wait_leader(&e2, Duration::from_secs(3)).await;
    assert!(t2.token() > t1.token());
    // Crash client 2: no renewal, no close, no release.
    c2.crash_for_tests();
    let e3 = c1.election(name.clone());
    ok(e3.start(()), "start 3");
    let start = Instant::now();
    let t3 = wait_leader(&e3, TTL * 4).await;
    assert!(t3.token() > t2.token());
    assert!(!t2.is_valid(), "the crashed leader's term is still valid when another took over");
    assert!(
        start.elapsed() <= engine_config().failover_bound() + Duration::from_secs(1),
        "failover took {:?}",
        start.elapsed()
    );
    c1.close().await;
}

async fn wait_leader(e: &crate::Election, within: Duration) -> crate::Term {
    let start = Instant::now();
    loop {
        if let Some(t) = e.term() {
            return t;
        }
        assert!(start.elapsed() < within, "`{}` had no leader within {within:?}", e.name());
        sleep(Duration::from_millis(20)).await;
    }
}

/// Expands to one `#[tokio::test]` per behaviour of the conformance suite, for the backend
/// that `$make` (an async fn or closure returning a future of a backend, or of a
/// `(backend, cleanup guard)` pair, see [`Built`](crate::tck::conformance::Built)) builds,
/// holding it to the [`Capabilities`](crate::tck::conformance::Capabilities) it declares.
///
/// ```no_run
/// use simba::backend::memory::MemoryBackend;
/// use simba::tck::conformance::Capabilities;
///
/// async fn make() -> MemoryBackend {
///     MemoryBackend::new()
/// }
/// simba::conformance_suite!(make, Capabilities::NONE.with_release_broadcast());
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr, $caps:expr) => {
        $crate::conformance_suite!(@tests $make;
            session_open_and_keep_alive,
            session_ids_are_unique,
            expired_session_never_comes_back,
            close_frees_everything,
            tokens_strictly_increase,
            held_lease_is_exclusive,
            release_checks_session_and_token,
            crashed_holder_lease_frees_on_expiry,
            keep_alive_digest_and_owned,
            claim_slot_is_fenced_and_monotonic,
            group_membership_follows_sessions,
            join_of_an_ended_session_answers_expired,
            concurrent_acquire_has_one_winner,
            every_valid_name_works,
            inspect_is_a_read_only_snapshot
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn releases_are_broadcast_as_declared() {
            let built = $crate::tck::conformance::Built::from(($make)().await);
            let caps: $crate::tck::conformance::Capabilities = $caps;
            $crate::tck::conformance::releases_are_broadcast_as_declared(built.backend, caps).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn idle_lease_records_are_removed_above_the_floor() {
            let built = $crate::tck::conformance::Built::from(($make)().await);
            let caps: $crate::tck::conformance::Capabilities = $caps;
            $crate::tck::conformance::idle_lease_records_are_removed_above_the_floor(built.backend, caps).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn idle_removal_racing_acquisitions_keeps_tokens_increasing() {
            let built = $crate::tck::conformance::Built::from(($make)().await);
            let caps: $crate::tck::conformance::Capabilities = $caps;
            $crate::tck::conformance::idle_removal_racing_acquisitions_keeps_tokens_increasing(built.backend, caps)
                .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn engine_handover_and_failover() {
            let one = $crate::tck::conformance::Built::from(($make)().await);
            let two = $crate::tck::conformance::Built::from(($make)().await);
            $crate::tck::conformance::engine_handover_and_failover(one.backend, two.backend).await;
        }
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let built = $crate::tck::conformance::Built::from(($make)().await);
                $crate::tck::conformance::$name(built.backend).await;
            }
        )*
    };
}
