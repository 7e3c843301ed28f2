//! Engine bugs found by the protocol model (SPEC V1, `tests/tests/engine/model_check.rs`), each
//! replayed deterministically on paused time against the in-memory backend and the
//! fault-injecting wrapper. The model's engine mutants `AbandonFreesSlot` and
//! `ReconcileStaleSnapshot` describe them; `docs/adr/0006-protocol-model.md` tells the story.

use std::time::Duration;

use simba::Term;
use simba::backend::memory::MemoryBackend;
use simba::backend::{Acquire, Backend};
use simba::tck::{Fault, Op};
use simba_tests::{Journal, Recorder, eventually, faulty_client};
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// K3 (with K4 and T7): an attempt abandoned by `step_down` stays in flight until its reply
/// or its timeout. The next attempt is sent only after the abandoned one's reply came back
/// (and released what it won), so that late `Won` cannot release the lease under a term the
/// next attempt adopted. Before the fix, `abandon()` freed the slot at once: the next
/// attempt won the same token (the session already held the lease) and adopted it, then the
/// abandoned attempt's late reply released the lease while that term was valid.
#[tokio::test(start_paused = true)]
async fn k3_abandoned_attempt_stays_in_flight_until_its_reply() {
    let name = "k3.abandoned";
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    // The store grants the lease at once; the reply takes 2 s (within the 5 s call timeout).
    h.set(Op::Acquire, Fault::DelayReply(S(2)));
    let e = a.election(name);
    e.start(()).expect("start");
    sleep(MS(500)).await;
    assert_eq!(h.calls(Op::Acquire), 1);
    assert_eq!(store.holder(name), Some((Some(sid.clone()), 1)), "the store granted token 1");
    h.clear();
    // Abandons the attempt in flight and contends again at once.
    e.step_down(Duration::ZERO).await.expect("step down");
    // For 6 s: whenever the election holds a valid term, the store holds the lease for it.
    let mut led = Vec::new();
    for _ in 0..600 {
        if let Some(t) = e.term().filter(Term::is_valid) {
            assert_eq!(
                store.holder(name),
                Some((Some(t.session_id().clone()), t.token())),
                "K3/T7: term {} is valid but the store no longer holds the lease for it",
                t.token()
            );
            if !led.contains(&t.token()) {
                led.push(t.token());
            }
        }
        sleep(MS(10)).await;
    }
    assert!(!led.is_empty(), "the election never led again");
    let times = h.call_times(Op::Acquire);
    assert!(times.len() >= 2, "no second attempt: {times:?}");
    assert!(
        times[1] - times[0] >= S(2),
        "K3: the next attempt was sent {:?} after the abandoned one, before its reply came back",
        times[1] - times[0]
    );
    a.close().await;
}

/// T2, T3 (with T6): a keep-alive whose digest does not match makes the engine list what the
/// session owns; only the terms held when that listing was asked for are judged by it. Before
/// the fix, a term adopted while the listing was under way was missing from it, so it was
/// revoked as `TakenOver`, and the election then won the same token again as a new term.
#[tokio::test(start_paused = true)]
async fn t3_term_adopted_after_the_owned_listing_is_not_judged_by_it() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    // A lease the session owns but no term knows (as after a lost acquire reply): the next
    // keep-alive's digest does not match, and the engine lists what the session owns.
    assert_eq!(store.acquire(&sid, "t3.orphan").await.expect("acquire"), Acquire::Won(1));
    // The store takes the listing at once; its answer takes 2 s.
    h.set(Op::Owned, Fault::DelayReply(S(2)));
    eventually(S(10), "owned() called", || (h.calls(Op::Owned) > 0).then_some(())).await;
    // Meanwhile an election wins and adopts a term the listing cannot know about.
    let journal = Journal::default();
    let e = a.election("t3.term");
    e.start(Recorder { journal: journal.clone() }).expect("start");
    let t1 = eventually(S(1), "leader", || e.term()).await;
    sleep(S(3)).await;
    assert_eq!(t1.revoke_reason(), None, "T6: term {} was judged by a listing taken before it", t1.token());
    assert!(t1.is_valid());
    assert_eq!(store.holder("t3.term"), Some((Some(sid.clone()), t1.token())));
    assert_eq!(store.holder("t3.orphan").map(|x| x.0), Some(None), "K4: the orphan was not released");
    let elected: Vec<String> = journal.entries().into_iter().filter(|x| x.starts_with("elected")).collect();
    assert_eq!(elected.len(), 1, "T2/T3: the same lease became a new term: {elected:?}");
    a.close().await;
}
