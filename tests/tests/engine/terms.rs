//! Term rules (T2-T7) on paused time against the in-memory backend.

use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::tck::{Fault, Op};
use simba::{Error, RevokeReason};
use simba_tests::{Journal, eventually, faulty_client};
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// T2/T3: winning the same name twice gives two different terms whose tokens are positive
/// and strictly increasing.
#[tokio::test(start_paused = true)]
async fn t2_t3_each_win_is_a_new_term_with_a_higher_token() {
    let store = MemoryBackend::new();
    let (c, _) = faulty_client(&store, 1);
    let mut last: Option<simba::Term> = None;
    for _ in 0..5 {
        let g = c.lock("t2").acquire().await.expect("lock");
        let t = g.term().clone();
        assert!(t.token() > 0);
        if let Some(prev) = &last {
            assert_ne!(&t, prev, "T2: a new term");
            assert!(t.token() > prev.token(), "T3: {} after {}", t.token(), prev.token());
            assert!(!prev.is_valid());
        }
        g.release().await.expect("release");
        last = Some(t);
    }
    c.close().await;
}

/// T3: the token is constant during a term, across many renewals.
#[tokio::test(start_paused = true)]
async fn t3_token_constant_during_the_term() {
    let store = MemoryBackend::new();
    let (c, _) = faulty_client(&store, 1);
    let g = c.lock("t3").acquire().await.expect("lock");
    let token = g.term().token();
    sleep(S(60)).await;
    assert!(g.term().is_valid());
    assert_eq!(g.term().token(), token);
    assert_eq!(store.holder("t3").map(|h| h.1), Some(token));
    c.close().await;
}

/// T4: validity and remaining are pure functions of the clock and the session deadline;
/// an ended term never becomes valid again, even when the node wins the lease again.
#[tokio::test(start_paused = true)]
async fn t4_validity_is_pure_and_final() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let g = c.lock("t4").acquire().await.expect("lock");
    let t = g.term().clone();
    let r0 = t.remaining();
    assert!(r0 > S(14) && r0 <= MS(14_800));
    sleep(S(1)).await;
    assert_eq!(t.remaining(), r0 - S(1), "remaining counts down with the monotonic clock");
    h.set(Op::KeepAlive, Fault::Fail);
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    assert!(!t.is_valid());
    assert_eq!(t.remaining(), Duration::ZERO);
    h.clear();
    drop(g);
    let g2 = c.lock("t4").acquire().await.expect("lock again");
    assert!(g2.term().is_valid());
    assert!(!t.is_valid(), "the old term stays ended");
    c.close().await;
}

/// T5: ensure_valid(min) fails unless the term stays valid for more than `min`.
#[tokio::test(start_paused = true)]
async fn t5_ensure_valid_threshold() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let g = c.lock("t5").acquire().await.expect("lock");
    let t = g.term().clone();
    h.set(Op::KeepAlive, Fault::Fail);
    // Deadline at 14.8 s after the session opened.
    sleep(S(12)).await;
    let left = t.remaining();
    assert!(t.ensure_valid(left - MS(1)).is_ok());
    let err = t.ensure_valid(left).expect_err("not MORE than min");
    assert!(matches!(err, Error::TermExpired { ref name, token, .. } if name == "t5" && token == t.token()));
    assert!(err.to_string().contains("stop this step"), "{err}");
    t.revoked().await;
    assert!(t.ensure_valid(Duration::ZERO).is_err());
    c.close().await;
}

/// T6: revoked() completes exactly once, with the same reason for every caller, for each
/// reason.
#[tokio::test(start_paused = true)]
async fn t6_revoked_reasons() {
    // Stopped: lock released.
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let g = c.lock("t6.stopped").acquire().await.expect("lock");
    let t = g.term().clone();
    let waiter = tokio::spawn({
        let t = t.clone();
        async move { t.revoked().await }
    });
    g.release().await.expect("release");
    assert_eq!(waiter.await.expect("join"), RevokeReason::Stopped);
    assert_eq!(t.revoked().await, RevokeReason::Stopped);
    assert_eq!(t.revoke_reason(), Some(RevokeReason::Stopped));

    // SteppedDown.
    let e = c.election("t6.stepped");
    e.start(()).expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    e.step_down(S(1)).await.expect("step down");
    assert_eq!(t.revoked().await, RevokeReason::SteppedDown);

    // TakenOver: somebody overwrote the lease record in the store.
    let g = c.lock("t6.taken").acquire().await.expect("lock");
    let t = g.term().clone();
    store.force_holder("t6.taken", None);
    assert_eq!(t.revoked().await, RevokeReason::TakenOver);
    assert!(!t.is_valid());
    drop(g);

    // SessionExpired.
    let g = c.lock("t6.expired").acquire().await.expect("lock");
    let t = g.term().clone();
    h.set(Op::KeepAlive, Fault::Expired);
    assert_eq!(t.revoked().await, RevokeReason::SessionExpired);
    h.clear();
    drop(g);

    // DeadlinePassed.
    let g = c.lock("t6.deadline").acquire().await.expect("lock");
    let t = g.term().clone();
    h.set(Op::KeepAlive, Fault::Hang);
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    // Once: later events do not change it.
    h.set(Op::KeepAlive, Fault::Expired);
    sleep(S(30)).await;
    assert_eq!(t.revoke_reason(), Some(RevokeReason::DeadlinePassed));
    c.close().await;
}

/// T7: a term is revoked before its lease is released, and the release carries the token: at
/// the moment the backend sees the release, the term is already invalid.
#[tokio::test(start_paused = true)]
async fn t7_revoke_before_release_with_token() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let g = c.lock("t7").acquire().await.expect("lock");
    let t = g.term().clone();
    let journal = Journal::default();
    let (j, t2) = (journal.clone(), t.clone());
    h.on_call(move |op| {
        if op == Op::Release {
            j.push(format!("release seen, term valid = {}", t2.is_valid()));
        }
    });
    h.set(Op::Release, Fault::DelayRequest(MS(100)));
    let release = tokio::spawn(g.release());
    sleep(MS(50)).await;
    assert!(!t.is_valid(), "revoked before the release completes");
    assert_eq!(store.holder("t7").map(|h| h.0.is_some()), Some(true), "still held on the store meanwhile");
    release.await.expect("join").expect("release");
    assert_eq!(journal.entries(), vec!["release seen, term valid = false".to_owned()]);
    assert_eq!(store.holder("t7"), Some((None, t.token())), "released with the term's token");
    c.close().await;
}
