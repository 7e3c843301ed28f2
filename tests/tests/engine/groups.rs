//! The public pieces partitioned jobs are built on (issue 12 item 11: jobs use only the
//! client's public API): group membership (`Simba::group`), one lock attempt without waiting
//! (`Lock::try_acquire_now`), a handover that revokes before it releases (`LockGuard::revoke`),
//! and a cron slot claimed with a term (`Simba::claim_slot`).

use std::time::Duration;

use simba::RevokeReason;
use simba::backend::memory::MemoryBackend;
use simba_tests::faulty_client;
use tokio::time::{Instant, sleep};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// J6's membership: each client joins with its session on `members()`; both see both; a
/// closed client's membership ends with its session; a new session of a client joins again.
#[tokio::test(start_paused = true)]
async fn j6_group_membership_follows_sessions() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    a.live().await.expect("live");
    b.live().await.expect("live");
    let (ga, gb) = (a.group("billing"), b.group("billing"));
    let va = ga.members().await.expect("members").expect("live");
    let vb = gb.members().await.expect("members").expect("live");
    assert_eq!(va.members.len(), 1, "b has not joined yet: {va:?}");
    assert_eq!(vb.members.len(), 2);
    let va = ga.members().await.expect("members").expect("live");
    assert_eq!(va.members, vb.members, "both see both");
    assert!(va.members.contains(&va.me) && va.members.contains(&vb.me));
    // b's session is expired by the store: its membership goes with it, and b's next session
    // joins again on its next look.
    store.expire_session(&vb.me);
    let va = ga.members().await.expect("members").expect("live");
    assert_eq!(va.members, vec![va.me.clone()]);
    sleep(S(10)).await;
    let vb2 = gb.members().await.expect("members").expect("a new session");
    assert_ne!(vb2.me, vb.me);
    assert_eq!(vb2.members.len(), 2, "{vb2:?}");
    gb.leave().await;
    assert_eq!(ga.members().await.expect("members").expect("live").members.len(), 1, "b left");
    a.close().await;
    b.close().await;
}

/// The group's watch wakes at once when a lease of the group (`{group}.{i}`) is released
/// (K2's broadcast), not for another lease, and otherwise after the K1 candidate delay.
#[tokio::test(start_paused = true)]
async fn j6_group_watch_wakes_on_the_groups_releases_and_after_the_candidate_delay() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    a.live().await.expect("live");
    b.live().await.expect("live");
    let other = b.lock("other").acquire().await.expect("lock");
    let part = b.lock("billing.3").acquire().await.expect("lock");
    let mut watch = a.group("billing").watch();
    let t0 = Instant::now();
    let waker = tokio::spawn(async move {
        sleep(MS(100)).await;
        other.release().await.expect("release");
        sleep(MS(100)).await;
        part.release().await.expect("release");
    });
    watch.changed().await;
    assert_eq!(t0.elapsed(), MS(200), "woken by billing.3's release, not by `other`'s");
    assert_eq!(watch.take_released(), vec!["billing.3".to_owned()], "the release heard, for the next round (J6)");
    assert!(watch.take_released().is_empty(), "taken once");
    waker.await.expect("join");
    let t1 = Instant::now();
    watch.changed().await;
    let waited = t1.elapsed();
    let (half, jitter) = (a.config().renew_interval() / 2, a.config().retry_jitter());
    assert!(waited >= half && waited < half + jitter, "K1: renew_interval / 2 + [0, retry_jitter), waited {waited:?}");
    // A burst of releases (a member leaving) wakes once and is taken together.
    let guards = [
        b.lock("billing.5").acquire().await.expect("lock"),
        b.lock("billing.6").acquire().await.expect("lock"),
        b.lock("billing.7").acquire().await.expect("lock"),
    ];
    for g in guards {
        g.release().await.expect("release");
    }
    let t2 = Instant::now();
    watch.changed().await;
    assert_eq!(t2.elapsed(), MS(0), "the queued releases wake at once");
    assert_eq!(watch.take_released(), vec!["billing.5", "billing.6", "billing.7"], "all three, in order");
    a.close().await;
    b.close().await;
}

/// `try_acquire_now` makes one attempt: the lock when the lease is free, `None` at once when
/// another node holds it (no waiting); `revoke` ends the term locally first (its work sees
/// `cancelled`), and `release` afterwards keeps that reason and frees the lease.
#[tokio::test(start_paused = true)]
async fn h1_try_acquire_now_then_revoke_before_release() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    a.live().await.expect("live");
    b.live().await.expect("live");
    let g = a.lock("p.0").try_acquire_now().await.expect("try").expect("free: taken");
    let t0 = Instant::now();
    assert!(b.lock("p.0").try_acquire_now().await.expect("try").is_none());
    assert_eq!(t0.elapsed(), Duration::ZERO, "no waiting");
    let term = g.term().clone();
    assert!(g.revoke(RevokeReason::SteppedDown));
    assert!(!term.is_valid());
    term.cancelled().await;
    assert_eq!(term.revoke_reason(), Some(RevokeReason::SteppedDown));
    assert!(store.holder("p.0").is_some_and(|(h, _)| h.is_some()), "revoked, not yet released");
    g.release().await.expect("release");
    assert_eq!(term.revoke_reason(), Some(RevokeReason::SteppedDown), "release keeps the first reason");
    assert_eq!(store.holder("p.0").map(|(h, _)| h), Some(None), "released");
    let g2 = b.lock("p.0").try_acquire_now().await.expect("try").expect("free again");
    assert!(g2.term().token() > term.token());
    a.close().await;
    b.close().await;
}

/// `claim_slot`: a slot is claimed once, fenced by the term: a later slot after it, never the
/// same or an earlier one, and nothing once the term is gone.
#[tokio::test(start_paused = true)]
async fn j5_claim_slot_is_fenced_and_monotonic() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    a.live().await.expect("live");
    let g = a.lock("cron.job").acquire().await.expect("lock");
    let t = g.term().clone();
    assert!(a.claim_slot(&t, 1_000).await.expect("claim"));
    assert!(!a.claim_slot(&t, 1_000).await.expect("claim"), "the same slot twice");
    assert!(!a.claim_slot(&t, 999).await.expect("claim"), "an earlier slot");
    assert!(a.claim_slot(&t, 2_000).await.expect("claim"));
    g.release().await.expect("release");
    assert!(!a.claim_slot(&t, 3_000).await.expect("claim"), "a released term claims nothing");
    let g = b.lock("cron.job").acquire().await.expect("lock");
    assert!(!b.claim_slot(g.term(), 2_000).await.expect("claim"), "the next holder never reruns a slot");
    assert!(b.claim_slot(g.term(), 3_000).await.expect("claim"));
    assert!(a.random_unit() < 1.0 && a.random_unit() >= 0.0);
    a.close().await;
    b.close().await;
}
