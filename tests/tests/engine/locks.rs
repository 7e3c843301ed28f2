//! Locks: `acquire`, `try_acquire(timeout)`, local queueing, release with the token, release
//! on drop, and a lock lost to the session.

use std::time::Duration;

use simba::RevokeReason;
use simba::backend::SessionId;
use simba::backend::memory::MemoryBackend;
use simba::tck::{Fault, FaultHandle, Op};
use simba_tests::faulty_client;
use tokio::time::{Instant, sleep, sleep_until};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// try_acquire gives up after its timeout while another node holds the lock, and gets it
/// at once (K2 broadcast) when the holder releases within the timeout.
#[tokio::test(start_paused = true)]
async fn try_acquire_times_out_or_wins_on_release() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    let held = a.lock("batch").acquire().await.expect("a locks");
    let t0 = Instant::now();
    assert!(b.lock("batch").try_acquire(S(3)).await.expect("try").is_none());
    assert_eq!(t0.elapsed(), S(3), "gave up exactly at the timeout");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("batch").try_acquire(S(10)).await }
    });
    sleep(S(1)).await;
    let released_at = Instant::now();
    held.release().await.expect("release");
    let g = waiter.await.expect("join").expect("try").expect("won after the release");
    assert!(released_at.elapsed() < MS(10), "took {:?}", released_at.elapsed());
    assert!(g.term().token() > 1);
    a.close().await;
    b.close().await;
}

/// Tasks of one process queue locally: the second waits for the first guard.
#[tokio::test(start_paused = true)]
async fn local_tasks_queue() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let first = a.lock("q").acquire().await.expect("first");
    h.reset_counts();
    let second = tokio::spawn({
        let a = a.clone();
        async move { a.lock("q").acquire().await }
    });
    sleep(S(30)).await;
    assert!(!second.is_finished(), "the second task got the lock while the first held it");
    assert_eq!(h.calls(Op::Acquire), 0, "the second task contended against its own process");
    let t1 = first.term().clone();
    drop(first); // released in the background on drop
    let g = second.await.expect("join").expect("second");
    assert_eq!(t1.revoke_reason(), Some(RevokeReason::Stopped));
    assert!(g.term().token() > t1.token());
    a.close().await;
}

/// A lock whose session is lost ends its term (DeadlinePassed) and is not released by the
/// guard afterwards (it is not the node's to release any more).
#[tokio::test(start_paused = true)]
async fn lock_lost_with_the_session() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let g = a.lock("lost").acquire().await.expect("lock");
    h.set(Op::KeepAlive, Fault::Fail);
    assert_eq!(g.term().revoked().await, RevokeReason::DeadlinePassed);
    h.clear();
    h.reset_counts();
    g.release().await.expect("release");
    assert_eq!(h.calls(Op::Release), 0, "released a lease the node no longer owns");
    a.close().await;
}

/// Issue 15 item 7: tasks of one process that keep re-locking a name do not starve another
/// node's candidate. Two tasks of `a` lock, hold 100 ms and release in a loop; `b` asks for the
/// lock while `a` has it. Once the name has passed between `a`'s tasks for half a renewal
/// interval, `a`'s next waiter gives way (`simba_core::timing::lock_courtesy`) and `b`, woken by the
/// release, takes it: `b` waits at most half an interval, one section and one courtesy.
#[tokio::test(start_paused = true)]
async fn issue15_7_a_busy_process_does_not_starve_another_nodes_candidate() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    a.live().await.expect("live");
    b.live().await.expect("live");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = Vec::new();
    for _ in 0..2 {
        let (a, stop) = (a.clone(), std::sync::Arc::clone(&stop));
        loops.push(tokio::spawn(async move {
            let mut sections = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let g = a.lock("hot").acquire().await.expect("a locks");
                sleep(MS(100)).await;
                g.release().await.expect("release");
                sections += 1;
            }
            sections
        }));
    }
    sleep(MS(50)).await;
    let renew = a.config().renew_interval();
    let bound = renew / 2 + MS(100) + simba_core::timing::lock_courtesy(renew);
    let t0 = Instant::now();
    let g = b.lock("hot").try_acquire(bound * 10).await.expect("try");
    let g =
        g.unwrap_or_else(|| panic!("b starved: no turn in {:?} while a's tasks passed the lock around", bound * 10));
    let waited = t0.elapsed();
    assert!(waited <= bound, "b waited {waited:?}, more than {bound:?}");
    g.release().await.expect("release");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut sections = 0;
    for l in loops {
        sections += l.await.expect("join");
    }
    assert!(sections >= 20, "a kept working meanwhile: {sections} sections");
    a.close().await;
    b.close().await;
}

/// Issue 15 item 7 with three processes: each has two tasks that lock one name, hold it for a
/// section and release it, in a loop. The name goes round: a process whose streak ended by
/// giving way waits a courtesy before it tries again after the next release
/// (`simba_core::timing::lock_courtesy`), so the process that has waited longest takes it, and no
/// task waits longer than the two other processes' streaks, each at most half a renewal
/// interval, a section and a courtesy, plus its own process's streak end.
#[tokio::test(start_paused = true)]
#[allow(clippy::print_stderr)] // The figures, for the note.
async fn issue15_7_three_busy_processes_take_turns() {
    const SECTION: Duration = Duration::from_millis(20);
    let store = MemoryBackend::new();
    let clients: Vec<_> = (1..=3).map(|seed| faulty_client(&store, seed).0).collect();
    for c in &clients {
        c.live().await.expect("live");
    }
    let renew = clients[0].config().renew_interval();
    let courtesy = simba_core::timing::lock_courtesy(renew);
    let end = Instant::now() + renew * 12;
    let holders = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut loops = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for _ in 0..2 {
            let (c, holders) = (c.clone(), std::sync::Arc::clone(&holders));
            loops.push(tokio::spawn(async move {
                let mut worst = Duration::ZERO;
                while Instant::now() < end {
                    let asked = Instant::now();
                    let g = c.lock("round").acquire().await.expect("lock");
                    worst = worst.max(asked.elapsed());
                    holders.lock().expect("holders").push(i);
                    sleep(SECTION).await;
                    g.release().await.expect("release");
                }
                worst
            }));
        }
    }
    let mut worst = Duration::ZERO;
    for l in loops {
        worst = worst.max(l.await.expect("join"));
    }
    let holders = holders.lock().expect("holders").clone();
    let handoffs = holders.windows(2).filter(|w| w[0] != w[1]).count();
    // The turns as (process, sections in a row), for the message.
    let mut turns: Vec<(usize, usize)> = Vec::new();
    for &h in &holders {
        match turns.last_mut() {
            Some((p, n)) if *p == h => *n += 1,
            _ => turns.push((h, 1)),
        }
    }
    let streak = renew / 2 + SECTION + courtesy;
    let bound = streak * 2 + courtesy + SECTION * 2;
    assert!(worst <= bound, "a task waited {worst:?}, more than {bound:?} ({handoffs} handoffs; turns: {turns:?})");
    assert!(handoffs >= 20, "{handoffs} handoffs in {} sections", holders.len());
    eprintln!(
        "three processes: worst wait {worst:?} (bound {bound:?}), {handoffs} handoffs in {} sections",
        holders.len()
    );
    for c in &clients {
        c.close().await;
    }
}

/// H1 for a lock with work under it (`LockGuard::hand_over`, as partition groups hand a
/// partition over): the term is revoked first, the lease stays held while the work finishes,
/// and it is released with its token only after the work returned; then another node takes it
/// at once (K2).
#[tokio::test(start_paused = true)]
async fn h1_lock_hand_over_releases_after_the_work_returned() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    b.live().await.expect("b live");
    let g = a.lock("part.0").acquire().await.expect("lock");
    let term = g.term().clone();
    let work = tokio::spawn({
        let term = term.clone();
        async move {
            term.cancelled().await;
            sleep(MS(200)).await; // cleanup after the cancellation
            Instant::now()
        }
    });
    let probe = tokio::spawn({
        let b = b.clone();
        async move {
            sleep(MS(100)).await;
            b.lock("part.0").try_acquire_now().await.expect("probe").is_none()
        }
    });
    h.reset_counts();
    let t0 = Instant::now();
    g.hand_over(RevokeReason::SteppedDown, work).await.expect("hand over");
    assert_eq!(t0.elapsed(), MS(200), "waited for the work, not longer");
    assert!(probe.await.expect("join"), "the lease was free while the work still ran");
    assert_eq!(term.revoke_reason(), Some(RevokeReason::SteppedDown));
    assert_eq!(h.calls(Op::Release), 1, "released once, with the token");
    let next = b.lock("part.0").try_acquire_now().await.expect("try").expect("free after the handover");
    assert!(next.term().token() > term.token());
    a.close().await;
    b.close().await;
}

/// H1, H5 for a lock with work that ignores cancellation: aborted when the deadline the term
/// had when it was revoked passes, not later.
#[tokio::test(start_paused = true)]
async fn h5_lock_hand_over_aborts_work_at_the_terms_deadline() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let g = a.lock("stubborn").acquire().await.expect("lock");
    let deadline = g.term().deadline();
    let (alive_tx, alive_rx) = tokio::sync::oneshot::channel::<()>();
    let work = tokio::spawn(async move {
        let _alive = alive_tx; // dropped when the task is aborted
        std::future::pending::<()>().await
    });
    g.hand_over(RevokeReason::Stopped, work).await.expect("hand over");
    assert_eq!(Instant::now(), deadline, "aborted exactly at the term's deadline");
    assert!(alive_rx.await.is_err(), "the work was aborted");
    a.close().await;
}

/// K2 for a lock (K5: a lock contends as a candidate, K1-K4): a lock waiting for its retry
/// after a lost attempt is woken when its session changes, as an election is, and tries at
/// once instead of at its retry instant. Here the lease frees without a release to hear (the
/// store's record is cleared) and the waiter's session is replaced: it wins as soon as the
/// new session is live, not 2.5 s or more after its lost attempt.
#[tokio::test(start_paused = true)]
async fn k2_a_waiting_lock_is_woken_by_a_new_session() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, hb) = faulty_client(&store, 2);
    let first = b.live().await.expect("b live");
    let held = a.lock("k2.session").acquire().await.expect("a locks");
    // B's keep-alives come every 5 s from its session's opening; its attempt loses at 4 s,
    // so its retry instant is at 6.5 s or later, after the next keep-alive.
    sleep(S(4)).await;
    let mut events = b.events();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("k2.session").try_acquire(S(60)).await }
    });
    sleep(MS(100)).await;
    assert_eq!(hb.calls(Op::Acquire), 1, "one lost attempt, then a wait for the retry");
    let attempted_at = hb.call_times(Op::Acquire)[0];
    // The lease frees without a release broadcast, and B's session expires in the store.
    store.force_holder("k2.session", None);
    store.expire_session(&first);
    let opened_at = loop {
        match events.recv().await.expect("events") {
            simba::Event::SessionOpened { session, .. } if session != first => break Instant::now(),
            _ => {}
        }
    };
    let g = waiter.await.expect("join").expect("try").expect("won on the new session");
    assert!(opened_at.elapsed() < MS(20), "won {:?} after the new session opened", opened_at.elapsed());
    assert!(attempted_at.elapsed() < MS(2500), "waited for the retry instant: {:?}", attempted_at.elapsed());
    assert_ne!(g.term().session_id(), &first);
    drop(held);
    a.close().await;
    b.close().await;
}

/// K5, K6: `try_acquire_now` never waits: while another task of this process holds the name,
/// it answers `None` at once, without a call to the store, instead of queueing behind the
/// holder (a partition group's loop would stall until that holder let go).
#[tokio::test(start_paused = true)]
async fn k5_try_acquire_now_does_not_wait_for_a_local_holder() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let held = a.lock("k5.now").acquire().await.expect("lock");
    h.reset_counts();
    let t0 = Instant::now();
    let probe = tokio::time::timeout(S(1), a.lock("k5.now").try_acquire_now()).await;
    let probe = probe.expect("try_acquire_now waited for the local holder").expect("try");
    assert!(probe.is_none(), "the name is held by another task of this process");
    assert_eq!(t0.elapsed(), Duration::ZERO, "answered at once");
    assert_eq!(h.calls(Op::Acquire), 0, "no attempt while a local task holds the name");
    held.release().await.expect("release");
    let g = a.lock("k5.now").try_acquire_now().await.expect("try").expect("free once released");
    g.release().await.expect("release");
    a.close().await;
}

/// How an acquisition that has not won within 500 ms is given up.
#[derive(Clone, Copy, Debug)]
enum GiveUp {
    /// Its `acquire()` future is dropped.
    Drop,
    /// `try_acquire(500 ms)` times out.
    Timeout,
}

/// Gives up an acquisition of `name` after 500 ms as `how` says (failing if it won), clears
/// the faults, and spawns the next acquisition of the name.
async fn give_up_then_spawn_next(
    a: &simba::Simba,
    h: &FaultHandle,
    name: &'static str,
    how: GiveUp,
) -> tokio::task::JoinHandle<Result<simba::LockGuard, simba::Error>> {
    let won = match how {
        GiveUp::Drop => !given_up_after(a, name, MS(500)).await,
        GiveUp::Timeout => a.lock(name).try_acquire(MS(500)).await.expect("try").is_some(),
    };
    assert!(!won, "won before it was given up ({how:?})");
    h.clear();
    tokio::spawn({
        let a = a.clone();
        async move { a.lock(name).acquire().await }
    })
}

/// K3/T7: 3 s after it was taken, the lock's term is valid and the store holds it for the
/// session.
async fn assert_held_for_good(store: &MemoryBackend, name: &str, sid: &SessionId, g: &simba::LockGuard) {
    sleep(S(3)).await;
    assert!(g.term().is_valid());
    assert_eq!(
        store.holder(name),
        Some((Some(sid.clone()), g.term().token())),
        "K3/T7: the lock's term is valid but the store no longer holds it"
    );
}

/// K3 from the caller's side: an `acquire()` future dropped while its store call is in flight
/// leaves the call to finish on its own (the attempt's task). The request still
/// reaches the store, the name's slot stays taken until its reply (the next acquisition is
/// sent only then), the grant that comes for nobody is released (K4), and the next
/// acquisition gets a term the store holds.
#[tokio::test(start_paused = true)]
async fn k3_dropped_acquire_finishes_its_call_and_releases_the_late_grant() {
    let name = "k3.dropped";
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    // The request reaches the store 2 s after it was sent, within the 5 s call timeout.
    h.set(Op::Acquire, Fault::DelayRequest(S(2)));
    let t0 = Instant::now();
    let next = give_up_then_spawn_next(&a, &h, name, GiveUp::Drop).await;
    assert_eq!(h.calls(Op::Acquire), 1);
    assert_eq!(store.holder(name), None, "the request reached the store before its delay");
    sleep(MS(1400)).await;
    assert_eq!(h.calls(Op::Acquire), 1, "K3: a second acquisition while the dropped one is in flight");
    assert!(!next.is_finished());
    let g =
        tokio::time::timeout(S(10), next).await.expect("K3: the slot was never freed").expect("join").expect("lock");
    let times = h.call_times(Op::Acquire);
    assert!(times.len() >= 2, "no second acquisition: {times:?}");
    assert!(times[1] - t0 >= S(2), "K3: the next acquisition was sent {:?} in, before the reply", times[1] - t0);
    assert!(h.calls(Op::Release) >= 1, "K4: the grant the dropped call got was never released");
    assert!(g.term().token() > 1, "K4: the next lock adopted the dropped call's token 1");
    assert_held_for_good(&store, name, &sid, &g).await;
    a.close().await;
}

/// K3 and K4 for an attempt given up while its reply is due: the store grants the lease at
/// once but the reply takes 2 s. The given-up attempt's call finishes on a task of its own and
/// keeps the name's slot until that reply; its win, which answers nobody, is released (K4);
/// only then is the next acquisition sent, and it gets a new term the store holds. Fails if
/// giving the attempt up freed the slot at once (a second acquisition before 2 s), or lost its
/// late win (the slot is never freed, or the win is not released and the next lock adopts
/// token 1 again).
async fn k3_k4_given_up_attempt_keeps_the_slot_until_its_reply(how: GiveUp) {
    let name = "k3.reply";
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    h.set(Op::Acquire, Fault::DelayReply(S(2)));
    let t0 = Instant::now();
    let next = give_up_then_spawn_next(&a, &h, name, how).await;
    assert_eq!(store.holder(name), Some((Some(sid.clone()), 1)), "the store granted token 1 at once");
    sleep_until(t0 + MS(1990)).await;
    assert_eq!(h.calls(Op::Acquire), 1, "K3: a second acquisition before the given-up one's reply");
    assert_eq!(h.calls(Op::Release), 0, "nothing to release before the reply");
    assert!(!next.is_finished());
    let g = tokio::time::timeout(S(10), next)
        .await
        .expect("K3: the slot was not freed at the given-up attempt's reply")
        .expect("join")
        .expect("lock");
    let times = h.call_times(Op::Acquire);
    assert!(times[1] - t0 >= S(2), "K3: the next acquisition was sent {:?} in, before the reply", times[1] - t0);
    assert!(h.calls(Op::Release) >= 1, "K4: the given-up attempt's late win was never released");
    assert!(g.term().token() > 1, "K4: the next lock adopted the given-up attempt's token 1");
    assert_held_for_good(&store, name, &sid, &g).await;
    a.close().await;
}

/// K3, K4 for an `acquire()` future dropped while its reply is due.
#[tokio::test(start_paused = true)]
async fn k3_k4_dropped_attempt_keeps_the_slot_until_its_reply_and_releases_its_win() {
    k3_k4_given_up_attempt_keeps_the_slot_until_its_reply(GiveUp::Drop).await;
}

/// K3, K4 for a `try_acquire` whose timeout passes while its reply is due.
#[tokio::test(start_paused = true)]
async fn k3_k4_timed_out_attempt_keeps_the_slot_until_its_reply_and_releases_its_win() {
    k3_k4_given_up_attempt_keeps_the_slot_until_its_reply(GiveUp::Timeout).await;
}

/// K3 for an attempt dropped while its call gets no answer: the slot is kept until the call's
/// D2 timeout (5 s with the defaults) and no longer; the next acquisition is sent then and
/// wins. Fails if dropping freed the slot at once (a second acquisition before 5 s) or never
/// (the next lock waits for good).
#[tokio::test(start_paused = true)]
async fn k3_abandoned_attempt_keeps_the_slot_until_its_timeout() {
    let name = "k3.timeout";
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    h.set(Op::Acquire, Fault::DelayRequest(S(60)));
    let t0 = Instant::now();
    let next = give_up_then_spawn_next(&a, &h, name, GiveUp::Drop).await;
    sleep_until(t0 + MS(4990)).await;
    assert_eq!(h.calls(Op::Acquire), 1, "K3: a second acquisition before the dropped one's timeout");
    assert!(!next.is_finished());
    let g = tokio::time::timeout(S(1), next)
        .await
        .expect("K3: the slot was not freed at the dropped attempt's timeout")
        .expect("join")
        .expect("lock");
    let times = h.call_times(Op::Acquire);
    assert!(times[1] - t0 >= S(5), "K3: the next acquisition was sent {:?} in, before the timeout", times[1] - t0);
    assert_held_for_good(&store, name, &sid, &g).await;
    a.close().await;
}

/// K3: an acquisition that waits for the name's slot (behind a dropped one whose request takes
/// 2 s to reach the store) can itself be given up while it waits: it
/// holds nothing, so dropping it neither frees the slot (a third acquisition still waits for
/// the first one's reply) nor sends anything later.
#[tokio::test(start_paused = true)]
async fn k3_attempt_waiting_for_the_slot_is_given_up_without_a_call() {
    let name = "k3.waiting";
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let sid = a.live().await.expect("live");
    let slow = || h.set(Op::Acquire, Fault::DelayRequest(S(2)));
    // The first dropped attempt's call is under way; the second waits for its slot, dropped.
    slow();
    let t0 = Instant::now();
    assert!(given_up_after(&a, name, MS(500)).await, "won before the drop");
    h.clear();
    assert!(given_up_after(&a, name, MS(500)).await, "the waiting attempt won");
    sleep_until(t0 + S(3)).await;
    assert_eq!(h.calls(Op::Acquire), 1, "the attempt given up while it waited sent its call later");
    assert_eq!(store.holder(name), Some((None, 1)), "K4: the dropped attempt's win was not released");
    // Again, now with a third acquisition behind the waiting one that is given up.
    slow();
    let t1 = Instant::now();
    assert!(given_up_after(&a, name, MS(500)).await, "won before the drop");
    h.clear();
    assert!(given_up_after(&a, name, MS(500)).await, "the waiting attempt won");
    let next = tokio::spawn({
        let a = a.clone();
        async move { a.lock(name).acquire().await }
    });
    sleep_until(t1 + MS(1990)).await;
    assert_eq!(h.calls(Op::Acquire), 2, "K3: giving up the waiting attempt freed the slot of the one in flight");
    let g =
        tokio::time::timeout(S(10), next).await.expect("K3: the slot was never freed").expect("join").expect("lock");
    assert!(h.call_times(Op::Acquire)[2] - t1 >= S(2), "K3: the third acquisition went before the reply");
    sleep(S(3)).await;
    assert!(g.term().is_valid());
    assert_eq!(store.holder(name), Some((Some(sid), g.term().token())));
    a.close().await;
}

/// Whether `acquire()` of `name` was given up (its future dropped) after `d` without a lock.
async fn given_up_after(a: &simba::Simba, name: &str, d: Duration) -> bool {
    tokio::time::timeout(d, a.lock(name).acquire()).await.is_err()
}
