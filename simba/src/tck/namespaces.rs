//! The namespace concern (ADR 0013): two clients in two namespaces on one
//! store never see or touch each other's sessions, leases, groups, release notices or jobs,
//! and the default namespace keeps what it had. Every backend runs it against a real server
//! through [`namespace_suite!`](crate::namespace_suite), with two connections to one store
//! (as two applications would have).
//!
//! Each function uses fresh namespace, lease, group and job names, so suites may share one
//! server.

use std::time::Duration;

use tokio::sync::broadcast;

use super::conformance::{TTL, unique};
use crate::backend::job_store::{Claim, ClaimRequest, Outcome, RunRecord, SharedJobStore, SlotKind};
use crate::backend::namespace::{Namespace, Namespaced};
use crate::backend::{Acquire, Backend, Join, SessionId};
use crate::{Simba, SimbaConfig};

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// A fresh namespace.
fn fresh(prefix: &str) -> Namespace {
    ok(Namespace::new(&unique(prefix)), "a fresh namespace")
}

async fn open(b: &Namespaced, ttl: Duration) -> SessionId {
    ok(b.open_session(ttl).await, "open_session").id
}

async fn won(b: &Namespaced, s: &SessionId, name: &str) -> u64 {
    match ok(b.acquire(s, name).await, "acquire") {
        Acquire::Won(t) => t,
        other => panic!("{}: expected to win `{name}`, got {other:?}", b.describe()),
    }
}

fn store_of(b: &Namespaced) -> SharedJobStore {
    match b.job_store() {
        Some(s) => s,
        None => panic!("{} has no jobs store: Backend::job_store answered None", b.describe()),
    }
}

/// Two namespaces on one store each hold the same lease name at the same time with their
/// own tokens; releasing and winning again in one leaves the other's term as it was; a
/// session's `owned` lists its namespace's names; the same group name has separate
/// members; and the default namespace holds the name too, beside them.
pub async fn namespaces_hold_the_same_lease_independently<B: Backend>(one: B, two: B) {
    let (na, nb) = (fresh("nsa"), fresh("nsb"));
    let a = Namespaced::new(one, na.clone());
    let b = Namespaced::new(two, nb.clone());
    let (sa, sb) = (open(&a, TTL * 4).await, open(&b, TTL * 4).await);
    let name = unique("shared");
    let ta = won(&a, &sa, &name).await;
    let tb = won(&b, &sb, &name).await;
    assert_eq!(ok(a.acquire(&sa, &name).await, "re-acquire"), Acquire::Won(ta), "A's term changed");
    assert!(!ok(b.release(&sa, &name, ta).await, "release across"), "A's session released B's lease");
    assert!(ok(a.release(&sa, &name, ta).await, "release in A"));
    let ta2 = won(&a, &sa, &name).await;
    assert!(ta2 > ta, "T3 in namespace A: {ta2} after {ta}");
    assert_eq!(ok(b.owned(&sb).await, "owned in B"), vec![(name.clone(), tb)], "B's term moved with A's");
    assert_eq!(ok(a.owned(&sa).await, "owned in A"), vec![(name.clone(), ta2)]);
    assert!(ok(b.claim_slot(&sb, &name, tb, 7).await, "claim_slot in B"), "B's fence follows B's token");
    assert!(ok(a.claim_slot(&sa, &name, ta2, 7).await, "claim_slot in A"), "A's slot 7 was taken by B's claim");

    let group = unique("g");
    assert_eq!(ok(a.join_group(&sa, &group).await, "join A"), Join::Joined);
    assert_eq!(ok(b.join_group(&sb, &group).await, "join B"), Join::Joined);
    assert_eq!(ok(a.members(&group).await, "members A"), vec![sa.clone()]);
    assert_eq!(ok(b.members(&group).await, "members B"), vec![sb.clone()]);

    // The default namespace: the same name, not held by either.
    let plain = a.view(None);
    let sd = open(&plain, TTL * 4).await;
    let td = won(&plain, &sd, &name).await;
    assert!(td > 0);
    assert_eq!(ok(plain.members(&group).await, "members default"), Vec::<SessionId>::new());
    for (ns, s) in [(&a, &sa), (&b, &sb), (&plain, &sd)] {
        ok(ns.close_session(s).await, "close");
    }
}

/// `inspect` (`simba status`, the dashboard) in a namespace lists only its sessions (idle
/// ones too), leases and groups, under the names its nodes use; the default namespace lists
/// none of them; [`list`](crate::backend::namespace::list) (`simba namespaces`) finds both namespaces with what they hold.
pub async fn namespaces_see_only_their_own_sessions<B: Backend>(one: B, two: B) {
    let (na, nb) = (fresh("nsa"), fresh("nsb"));
    let a = Namespaced::new(one, na.clone());
    let b = Namespaced::new(two, nb.clone());
    let (sa, idle_a, sb) = (open(&a, TTL * 4).await, open(&a, TTL * 4).await, open(&b, TTL * 4).await);
    let name = unique("seen");
    let ta = won(&a, &sa, &name).await;
    let tb = won(&b, &sb, &name).await;
    let group = unique("g");
    assert_eq!(ok(b.join_group(&sb, &group).await, "join B"), Join::Joined);

    let snap_a = ok(a.inspect().await, "inspect A");
    let ids_a: Vec<&SessionId> = snap_a.sessions.iter().map(|s| &s.id).collect();
    assert!(ids_a.contains(&&sa), "A's holder is missing from A's snapshot: {ids_a:?}");
    assert!(ids_a.contains(&&idle_a), "A's idle session is missing from A's snapshot: {ids_a:?}");
    assert!(!ids_a.contains(&&sb), "B's session shows in A's snapshot");
    assert_eq!(snap_a.lease(&name).map(|l| (&l.session, l.token)), Some((&sa, ta)));
    assert_eq!(snap_a.leases.len(), 1, "A sees leases not its own: {:?}", snap_a.leases);
    assert!(snap_a.groups.is_empty(), "A sees groups not its own: {:?}", snap_a.groups);

    let snap_b = ok(b.inspect().await, "inspect B");
    assert_eq!(snap_b.sessions.iter().map(|s| &s.id).collect::<Vec<_>>(), vec![&sb]);
    assert_eq!(snap_b.lease(&name).map(|l| (&l.session, l.token)), Some((&sb, tb)));
    assert_eq!(snap_b.members(&group), std::slice::from_ref(&sb));

    let plain = a.view(None);
    let snap_d = ok(plain.inspect().await, "inspect default");
    for s in [&sa, &idle_a, &sb] {
        assert!(snap_d.session(s).is_none(), "a namespaced session {s} shows in the default namespace");
    }
    assert!(snap_d.leases.iter().all(|l| l.session != sa && l.session != sb), "namespaced leases show in the default");
    assert!(snap_d.groups.iter().all(|g| !g.name.contains(crate::backend::namespace::SEPARATOR)));

    let all = ok(plain.namespaces().await, "list namespaces");
    let find = |ns: &Namespace| all.iter().find(|i| i.name.as_deref() == Some(ns.as_str())).cloned();
    let ia = find(&na).unwrap_or_else(|| panic!("namespace {na} is not listed: {all:?}"));
    let ib = find(&nb).unwrap_or_else(|| panic!("namespace {nb} is not listed: {all:?}"));
    assert_eq!((ia.sessions, ia.leases, ia.groups), (2, 1, 0), "{ia:?}");
    assert_eq!((ib.sessions, ib.leases, ib.groups), (1, 1, 1), "{ib:?}");
    for (ns, s) in [(&a, &sa), (&a, &idle_a), (&b, &sb)] {
        ok(ns.close_session(s).await, "close");
    }
}

fn request<'a>(s: &'a SessionId, lease: &'a str, token: u64, job: &'a str, slot_ms: i64) -> ClaimRequest<'a> {
    ClaimRequest {
        session: s,
        lease,
        token,
        job,
        slot_ms,
        kind: SlotKind::Scheduled,
        node: "tck-node",
        started_ms: slot_ms + 1,
        attempts: 1,
    }
}

/// The same job name in two namespaces has its own history, pause state, run-now requests
/// and listing; the default namespace keeps the records written without a namespace (an
/// older build's) and sees none of the namespaces'.
pub async fn namespaces_keep_separate_job_histories<B: Backend>(one: B, two: B) {
    const T0: i64 = 1_790_000_000_000;
    let (na, nb) = (fresh("nsa"), fresh("nsb"));
    let a = Namespaced::new(one, na.clone());
    let b = Namespaced::new(two, nb.clone());
    let plain = a.view(None);
    let (ja, jb, jd) = (store_of(&a), store_of(&b), store_of(&plain));
    let job = unique("job");
    // An older build's record: the default namespace, written with the plain name.
    let old = RunRecord::not_run(job.clone(), T0 - 1000, Outcome::Missed);
    assert!(ok(jd.append(&old).await, "append in the default namespace"));

    let (sa, sb) = (open(&a, Duration::from_secs(30)).await, open(&b, Duration::from_secs(30)).await);
    let lease = unique("jl");
    let (ta, tb) = (won(&a, &sa, &lease).await, won(&b, &sb, &lease).await);
    assert!(!ok(jb.set_paused(&job, true).await, "pause in B"), "B's job was paused before");
    let ra = match ok(ja.claim_run(request(&sa, &lease, ta, &job, T0)).await, "claim in A") {
        Claim::Claimed(r) => r,
        other => panic!("A's claim answered {other:?}: B's pause or slot leaked into A"),
    };
    assert_eq!(ra.job, job, "the record names the job as A's nodes do");
    assert_eq!(ok(jb.claim_run(request(&sb, &lease, tb, &job, T0)).await, "claim in B"), Claim::Paused);
    let finished = RunRecord { outcome: Outcome::Ran, ended_ms: Some(T0 + 5), ..ra.clone() };
    assert!(ok(ja.finish_run(&finished).await, "finish in A"));
    let made = ok(ja.trigger(&job, "ns-request", T0 + 10).await, "trigger in A");
    assert!(matches!(made, crate::job_store::Triggered::Requested(ref r) if r.id > 0), "{made:?}");

    let ha = ok(ja.history(&job, 10).await, "history A");
    assert_eq!(ha.iter().map(|r| (r.slot_ms, r.outcome)).collect::<Vec<_>>(), vec![(T0, Outcome::Ran)]);
    assert!(ok(jb.history(&job, 10).await, "history B").is_empty(), "B sees A's records");
    let hd = ok(jd.history(&job, 10).await, "history default");
    assert_eq!(hd, vec![old.clone()], "the default namespace lost or gained records");

    let sta = ok(ja.job(&job).await, "job A").unwrap_or_else(|| panic!("A does not know its job"));
    let stb = ok(jb.job(&job).await, "job B").unwrap_or_else(|| panic!("B does not know its job"));
    assert!(!sta.paused && stb.paused, "pause leaked: A {sta:?}, B {stb:?}");
    assert!(sta.trigger_pending_ms.is_some() && stb.trigger_pending_ms.is_none(), "run-now leaked: B {stb:?}");
    assert_eq!(sta.job, job);
    let std = ok(jd.job(&job).await, "job default").unwrap_or_else(|| panic!("the old record is gone"));
    assert!(!std.paused && std.trigger_pending_ms.is_none(), "the default namespace's job changed: {std:?}");

    let names = |l: Vec<crate::job_store::JobState>| l.into_iter().map(|s| s.job).collect::<Vec<_>>();
    assert!(names(ok(ja.jobs().await, "jobs A")).contains(&job));
    assert_eq!(names(ok(jb.jobs().await, "jobs B")), vec![job.clone()], "B lists jobs not its own");
    let listed_d = names(ok(jd.jobs().await, "jobs default"));
    assert!(listed_d.contains(&job), "the default namespace no longer lists its old job");
    assert!(listed_d.iter().all(|j| !j.contains(crate::backend::namespace::SEPARATOR)), "{listed_d:?}");
    for (ns, s) in [(&a, &sa), (&b, &sb)] {
        ok(ns.close_session(s).await, "close");
    }
}

/// The job registries nodes publish stay in their namespace: each
/// namespace, and the default one, lists only its own sessions' registries, text intact.
pub async fn namespaces_keep_separate_registries<B: Backend>(one: B, two: B) {
    let (na, nb) = (fresh("nsa"), fresh("nsb"));
    let a = Namespaced::new(one, na.clone());
    let b = Namespaced::new(two, nb.clone());
    let plain = a.view(None);
    let (ja, jb, jd) = (store_of(&a), store_of(&b), store_of(&plain));
    let long = Duration::from_secs(30);
    let (sa, sb, sd) = (open(&a, long).await, open(&b, long).await, open(&plain, long).await);
    let text = |who: &str| format!("{{\"node\": \"{who}~x\"}}");
    assert!(ok(ja.publish_registry(&sa, &text("a")).await, "publish A"));
    assert!(ok(jb.publish_registry(&sb, &text("b")).await, "publish B"));
    assert!(ok(jd.publish_registry(&sd, &text("d")).await, "publish default"));
    let mine = [&sa, &sb, &sd];
    let seen = |all: Vec<(SessionId, String)>| -> Vec<(SessionId, String)> {
        all.into_iter().filter(|(s, _)| mine.contains(&s)).collect()
    };
    assert_eq!(seen(ok(ja.registries().await, "registries A")), vec![(sa.clone(), text("a"))]);
    assert_eq!(seen(ok(jb.registries().await, "registries B")), vec![(sb.clone(), text("b"))]);
    assert_eq!(seen(ok(jd.registries().await, "registries default")), vec![(sd.clone(), text("d"))]);
    ok(a.close_session(&sa).await, "close");
    ok(b.close_session(&sb).await, "close");
    ok(plain.close_session(&sd).await, "close");
}

/// A release (and a job control change) in one namespace reaches that namespace's
/// subscribers under its own name and never another namespace's: where the store
/// broadcasts at all.
pub async fn namespace_broadcasts_stay_in_their_namespace<B: Backend>(one: B, two: B) {
    let (na, nb) = (fresh("nsa"), fresh("nsb"));
    let a = Namespaced::new(one, na.clone());
    let b = Namespaced::new(two, nb.clone());
    let (Some(mut rx_a), Some(mut rx_b)) = (a.subscribe_releases(), b.subscribe_releases()) else {
        // A store without release broadcasts: nothing to leak (the conformance suite checks
        // that the capability is declared as it is).
        assert!(a.subscribe_releases().is_none() && b.subscribe_releases().is_none());
        return;
    };
    let (sa, sb) = (open(&a, TTL * 4).await, open(&b, TTL * 4).await);
    let name = unique("bc");
    let (ta, tb) = (won(&a, &sa, &name).await, won(&b, &sb, &name).await);
    // Subscriptions may take a moment to be in place on the server (ZooKeeper watches,
    // etcd watch streams): release in A, then in B, once each is heard where it belongs.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ok(a.release(&sa, &name, ta).await, "release in A"));
    assert_eq!(next(&mut rx_a, Duration::from_secs(10)).await.as_deref(), Some(name.as_str()), "A missed its release");
    assert!(ok(b.release(&sb, &name, tb).await, "release in B"));
    assert_eq!(next(&mut rx_b, Duration::from_secs(10)).await.as_deref(), Some(name.as_str()), "B missed its release");
    // A's release came first on the store: had it leaked into B, B would now hear a second one.
    let extra = next(&mut rx_b, Duration::from_secs(1)).await;
    assert_eq!(extra, None, "B heard a release that was not B's");
    assert_eq!(next(&mut rx_a, Duration::from_secs(1)).await, None, "A heard B's release");

    let stores = a.job_store().zip(b.job_store());
    if let Some((Some(mut ca), ja, jb)) = stores.map(|(ja, jb)| (ja.subscribe_control(), ja, jb)) {
        let job = unique("cj");
        tokio::time::sleep(Duration::from_millis(300)).await;
        ok(jb.set_paused(&job, true).await, "pause in B");
        ok(ja.set_paused(&job, true).await, "pause in A");
        assert_eq!(next(&mut ca, Duration::from_secs(10)).await.as_deref(), Some(job.as_str()));
        assert_eq!(next(&mut ca, Duration::from_secs(1)).await, None, "A heard B's control change");
    }
    ok(a.close_session(&sa).await, "close");
    ok(b.close_session(&sb).await, "close");
}

async fn next(rx: &mut broadcast::Receiver<String>, within: Duration) -> Option<String> {
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Ok(n)) => return Some(n),
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
        }
    }
}

/// Two clients (`Simba`) in two namespaces hold a lock of the same name at once, each with
/// a valid term.
pub async fn namespaced_clients_hold_the_same_lock_at_once<B: Backend>(one: B, two: B) {
    let config = ok(
        SimbaConfig::builder().lease_duration(Duration::from_secs(3)).renew_interval(Duration::from_secs(1)).build(),
        "config",
    );
    let ca = ok(Simba::builder().backend(one).namespace(fresh("nsa")).config(config).build(), "client A");
    let cb = ok(Simba::builder().backend(two).namespace(fresh("nsb")).config(config).build(), "client B");
    let name = unique("lock");
    let within = Duration::from_secs(20);
    let ga = ok(ok(tokio::time::timeout(within, ca.lock(&name).acquire()).await, "lock A in time"), "lock A");
    let gb = ok(ok(tokio::time::timeout(within, cb.lock(&name).acquire()).await, "lock B in time"), "lock B");
    assert!(ga.term().is_valid() && gb.term().is_valid(), "both terms are valid at once");
    assert_eq!(ga.term().name(), gb.term().name());
    ok(ga.release().await, "release A");
    ok(gb.release().await, "release B");
    ca.close().await;
    cb.close().await;
}

/// B3: a removal of idle lease records in one namespace takes only that namespace's records.
/// Both namespaces release the same name; A's removal takes as many records as B's then does
/// (one each where the store keeps records, none on ZooKeeper and etcd): had A's taken B's too,
/// A's would count two and B's none. Each namespace then wins the name above its old token.
pub async fn namespaces_remove_only_their_own_idle_leases<B: Backend>(one: B, two: B) {
    let a = Namespaced::new(one, fresh("nsa"));
    let b = Namespaced::new(two, fresh("nsb"));
    let (sa, sb) = (open(&a, TTL * 4).await, open(&b, TTL * 4).await);
    let name = unique("idle");
    let ta = won(&a, &sa, &name).await;
    let tb = won(&b, &sb, &name).await;
    assert!(ok(a.release(&sa, &name, ta).await, "release in A"));
    assert!(ok(b.release(&sb, &name, tb).await, "release in B"));
    let in_a = ok(a.remove_idle_leases("", Duration::ZERO, 100).await, "remove in A");
    let in_b = ok(b.remove_idle_leases("", Duration::ZERO, 100).await, "remove in B");
    assert!(in_a <= 1, "A's removal took {in_a} records: more than its namespace holds");
    assert_eq!(in_a, in_b, "A's removal took {in_a} records and left B's removal {in_b}");
    assert!(won(&a, &sa, &name).await > ta, "T3 in A across the removal");
    assert!(won(&b, &sb, &name).await > tb, "T3 in B across the removal");
    for (ns, s) in [(&a, &sa), (&b, &sb)] {
        ok(ns.close_session(s).await, "close");
    }
}

/// Runs the namespace concern against a backend. `$make` is an async
/// function returning a fresh connection to one shared store (as for
/// [`conformance_suite!`](crate::conformance_suite)); each test calls it twice.
#[macro_export]
macro_rules! namespace_suite {
    ($make:expr) => {
        $crate::namespace_suite!(@tests $make;
            namespaces_hold_the_same_lease_independently,
            namespaces_see_only_their_own_sessions,
            namespaces_keep_separate_job_histories,
            namespace_broadcasts_stay_in_their_namespace,
            namespaced_clients_hold_the_same_lock_at_once,
            namespaces_keep_separate_registries,
            namespaces_remove_only_their_own_idle_leases
        );
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let one = $crate::tck::conformance::Built::from(($make)().await);
                let two = $crate::tck::conformance::Built::from(($make)().await);
                $crate::tck::namespaces::$name(one.backend, two.backend).await;
            }
        )*
    };
}
