//! Candidate rules (K), handover order (H) and callbacks (L) on paused time against the
//! in-memory backend and the fault-injecting wrapper.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::tck::{Fault, Op};
use simba::{Error, FnListener, RevokeReason, Simba, Term};
use simba_tests::{Journal, Recorder, eventually, faulty_client, ms_since};
use tokio::time::{Instant, sleep};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// K1: a candidate retries every renew_interval / 2 + uniform[0, retry_jitter): between 2.5 s
/// and 5 s with the defaults.
#[tokio::test(start_paused = true)]
async fn k1_candidate_retry_interval() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, hb) = faulty_client(&store, 2);
    let ea = a.election("k1");
    ea.start(()).expect("start");
    eventually(S(5), "leader", || ea.term()).await;
    let eb = b.election("k1");
    eb.start(()).expect("start");
    sleep(S(120)).await;
    let times = hb.call_times(Op::Acquire);
    assert!(times.len() > 20, "{} attempts", times.len());
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    for g in &gaps {
        assert!(*g >= MS(2500) && *g < S(5), "retry gap {g:?}");
    }
    let distinct: std::collections::HashSet<_> = gaps.iter().collect();
    assert!(distinct.len() > 5, "the jitter must vary the gaps");
    a.close().await;
    b.close().await;
}

/// K2 and failure table "leader stops gracefully": the memory backend broadcasts releases,
/// so a candidate takes over at once, not at its next attempt.
#[tokio::test(start_paused = true)]
async fn k2_release_broadcast_takes_over_at_once() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    let ea = a.election("k2");
    ea.start(()).expect("start");
    let ta = eventually(S(5), "leader", || ea.term()).await;
    let eb = b.election("k2");
    eb.start(()).expect("start");
    sleep(S(7)).await;
    let stopped = Instant::now();
    ea.stop().await;
    let tb = eventually(S(10), "takeover", || eb.term()).await;
    assert!(stopped.elapsed() < MS(20), "takeover took {:?}", stopped.elapsed());
    assert!(tb.token() > ta.token());
    a.close().await;
    b.close().await;
}

/// K3: at most one acquire request in flight per election, even when the backend is slow.
#[tokio::test(start_paused = true)]
async fn k3_one_attempt_in_flight() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    a.live().await.expect("live");
    h.set(Op::Acquire, Fault::DelayRequest(S(60)));
    let e = a.election("k3");
    e.start(()).expect("start");
    sleep(S(4)).await;
    assert_eq!(h.calls(Op::Acquire), 1, "a second attempt while the first is in flight");
    // The attempt times out after the renewal period (D2); only then comes the next.
    sleep(S(5)).await;
    let times = h.call_times(Op::Acquire);
    assert!(times.windows(2).all(|w| w[1] - w[0] >= S(5)), "attempts overlapped: {times:?}");
    a.close().await;
}

/// K4: a reply that comes after its attempt timed out is never adopted; when the election
/// has moved on, what the attempt won is found at the next keep-alive (the digest no longer
/// matches) and released with its token.
#[tokio::test(start_paused = true)]
async fn k4_late_reply_is_released_not_adopted() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    a.live().await.expect("live");
    let journal = Journal::default();
    // The store grants the lease at once, but the reply arrives 8 s later, after the
    // attempt's 5 s timeout (D2).
    h.set(Op::Acquire, Fault::DelayReply(S(8)));
    let e = a.election("k4");
    e.start(Recorder { journal: journal.clone() }).expect("start");
    sleep(S(6)).await;
    assert!(e.term().is_none());
    assert!(journal.entries().is_empty(), "a late win was adopted: {:?}", journal.entries());
    e.stop().await;
    assert_eq!(store.holder("k4").map(|x| x.0.is_some()), Some(true), "the store did grant the lease");
    sleep(S(10)).await;
    assert_eq!(store.holder("k4"), Some((None, 1)), "the abandoned win was not released");
    assert!(journal.entries().is_empty());
    a.close().await;
}

/// A store whose first release is not acknowledged: the reply is lost and the store applies
/// the release a second later (a request that sat in a socket). Until then the session still
/// holds the lease, so a new acquisition answers `Won` with the released token (the backend
/// contract: a session that holds the lease re-acquires it with its token); adopting it would
/// give a term that the late release then ends on the store without the engine knowing.
struct RegressingStore {
    inner: MemoryBackend,
    armed: AtomicBool,
}

impl simba::backend::Backend for RegressingStore {
    async fn open_session(&self, ttl: Duration) -> simba::backend::BackendResult<simba::backend::SessionGrant> {
        self.inner.open_session(ttl).await
    }
    async fn keep_alive(
        &self,
        s: &simba::backend::SessionId,
        d: simba::backend::HeldDigest,
    ) -> simba::backend::BackendResult<simba::backend::KeepAlive> {
        self.inner.keep_alive(s, d).await
    }
    async fn acquire(
        &self,
        s: &simba::backend::SessionId,
        n: &str,
    ) -> simba::backend::BackendResult<simba::backend::Acquire> {
        self.inner.acquire(s, n).await
    }
    async fn release(&self, s: &simba::backend::SessionId, n: &str, t: u64) -> simba::backend::BackendResult<bool> {
        if self.armed.swap(false, Ordering::SeqCst) {
            let (inner, s, n) = (self.inner.clone(), s.clone(), n.to_owned());
            tokio::spawn(async move {
                sleep(S(1)).await;
                let _ = inner.release(&s, &n, t).await;
            });
            return Err(simba::backend::BackendError::Unavailable { message: "reply lost".into(), source: None });
        }
        self.inner.release(s, n, t).await
    }
    async fn close_session(&self, s: &simba::backend::SessionId) -> simba::backend::BackendResult<()> {
        self.inner.close_session(s).await
    }
    async fn owned(&self, s: &simba::backend::SessionId) -> simba::backend::BackendResult<Vec<(String, u64)>> {
        self.inner.owned(s).await
    }
    async fn claim_slot(
        &self,
        s: &simba::backend::SessionId,
        n: &str,
        t: u64,
        slot: i64,
    ) -> simba::backend::BackendResult<bool> {
        self.inner.claim_slot(s, n, t, slot).await
    }
    async fn join_group(
        &self,
        s: &simba::backend::SessionId,
        g: &str,
    ) -> simba::backend::BackendResult<simba::backend::Join> {
        self.inner.join_group(s, g).await
    }
    async fn leave_group(&self, s: &simba::backend::SessionId, g: &str) -> simba::backend::BackendResult<()> {
        self.inner.leave_group(s, g).await
    }
    async fn members(&self, g: &str) -> simba::backend::BackendResult<Vec<simba::backend::SessionId>> {
        self.inner.members(g).await
    }
    async fn inspect(&self) -> simba::backend::BackendResult<simba::backend::StoreSnapshot> {
        self.inner.inspect().await
    }
    async fn remove_idle_leases(
        &self,
        prefix: &str,
        idle_for: std::time::Duration,
        limit: usize,
    ) -> simba::backend::BackendResult<usize> {
        self.inner.remove_idle_leases(prefix, idle_for, limit).await
    }
    fn describe(&self) -> String {
        "regressing".into()
    }
}

/// K4: a won token that is not greater than every token this session released for the name
/// (and whose release the store has not acknowledged) is not adopted: the term would not be
/// fenced off from the previous one, and the late release would end it on the store.
#[tokio::test(start_paused = true)]
async fn k4_stale_token_is_not_adopted() {
    let store = RegressingStore { inner: MemoryBackend::new(), armed: AtomicBool::new(true) };
    let a = Simba::builder().backend(store).seed(1).build().expect("client");
    let g = a.lock("k4c").acquire().await.expect("lock");
    let first = g.term().token();
    assert!(g.release().await.is_err(), "the store lost the release's reply");
    // The store still holds the lease for the session and answers the released token again;
    // the engine must refuse it and win a fresh one.
    let g = a.lock("k4c").acquire().await.expect("lock");
    assert!(g.term().token() > first, "adopted token {} after releasing {first}", g.term().token());
    sleep(S(2)).await;
    assert!(g.term().is_valid(), "the late release of token {first} did not end the new term");
    a.close().await;
}

/// K4: an attempt abandoned by stop() releases what it wins.
#[tokio::test(start_paused = true)]
async fn k4_abandoned_attempt_releases_its_win() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    a.live().await.expect("live");
    h.set(Op::Acquire, Fault::DelayRequest(S(1)));
    let e = a.election("k4b");
    e.start(()).expect("start");
    sleep(MS(500)).await;
    e.stop().await;
    sleep(S(2)).await;
    let (holder, token) = store.holder("k4b").expect("the attempt reached the store");
    assert_eq!(holder, None, "the abandoned win was not released (token {token})");
    a.close().await;
}

/// H1: stop() with a running task: revoke + signal, wait for the task, release with the
/// token, on_revoked(Stopped), then complete, in this order.
#[tokio::test(start_paused = true)]
async fn h1_handover_order_on_stop() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let journal = Journal::default();
    let j = journal.clone();
    h.on_call(move |op| {
        if op == Op::Release {
            j.push("release");
        }
    });
    let (j1, j2, j3) = (journal.clone(), journal.clone(), journal.clone());
    let e = a.election("h1");
    e.run_while_leader_with(
        move |term: Term| {
            let j = j1.clone();
            async move {
                term.cancelled().await;
                j.push(format!("task saw cancel, valid = {}", term.is_valid()));
                // Finishing the current step takes a while; the lease stays held meanwhile.
                sleep(S(2)).await;
                j.push("task returned");
                Ok::<(), simba::BoxError>(())
            }
        },
        FnListener::new(
            move |_t: &Term| j2.push("on_elected"),
            move |_t: &Term, r| j3.push(format!("on_revoked {r:?}")),
        ),
    )
    .expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    let t0 = Instant::now();
    let stop = tokio::spawn(async move {
        e.stop().await;
    });
    sleep(S(1)).await;
    assert!(!t.is_valid());
    assert_eq!(store.holder("h1").map(|x| x.0.is_some()), Some(true), "released before the task returned");
    stop.await.expect("join");
    journal.push("stop completed");
    assert_eq!(ms_since(t0, Instant::now()), 2000);
    assert_eq!(
        journal.entries(),
        vec![
            "on_elected",
            "task saw cancel, valid = false",
            "task returned",
            "release",
            "on_revoked Stopped",
            "stop completed"
        ]
    );
    assert_eq!(store.holder("h1"), Some((None, t.token())));
    a.close().await;
}

/// H1/H5: a task that ignores cancellation is aborted when the local deadline passes, so it
/// delays the handover by at most the term's remaining time.
#[tokio::test(start_paused = true)]
async fn h5_task_ignoring_cancel_is_aborted_at_the_deadline() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let aborted = Arc::new(AtomicBool::new(true));
    let flag = aborted.clone();
    let e = a.election("h5");
    e.run_while_leader(move |_term: Term| {
        let flag = flag.clone();
        async move {
            sleep(S(3600)).await; // ignores the term
            flag.store(false, Ordering::SeqCst);
            Ok::<(), simba::BoxError>(())
        }
    })
    .expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    // Renewals stop, so the deadline is fixed: at most 14.8 s after the last renewal.
    h.set(Op::KeepAlive, Fault::Hang);
    let t0 = Instant::now();
    let deadline = t0 + t.remaining();
    e.stop().await;
    assert!(Instant::now() <= deadline, "stop waited past the local deadline");
    assert!(t0.elapsed() > S(9), "stop did not wait for the task");
    assert!(aborted.load(Ordering::SeqCst));
    a.close().await;
}

/// H2: a term without a task is released at once on stop().
#[tokio::test(start_paused = true)]
async fn h2_term_without_task_released_at_once() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let e = a.election("h2");
    e.start(()).expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    let t0 = Instant::now();
    e.stop().await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(store.holder("h2"), Some((None, t.token())));
    a.close().await;
}

/// H3: a term lost to the deadline does not wait for the task: the task is cancelled and the
/// term revoked at once.
#[tokio::test(start_paused = true)]
async fn h3_lost_term_does_not_wait() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let journal = Journal::default();
    let j = journal.clone();
    let e = a.election("h3");
    e.run_while_leader_with(
        |_term: Term| async move {
            sleep(S(3600)).await; // ignores the term
            Ok::<(), simba::BoxError>(())
        },
        FnListener::new(
            |_t: &Term| {},
            move |_t: &Term, r| j.push(format!("on_revoked {r:?} at {:?}", Instant::now())),
        ),
    )
    .expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    h.set(Op::KeepAlive, Fault::Fail);
    let reason = t.revoked().await;
    let revoked_at = Instant::now();
    assert_eq!(reason, RevokeReason::DeadlinePassed);
    sleep(MS(1)).await;
    assert_eq!(journal.entries(), vec![format!("on_revoked DeadlinePassed at {revoked_at:?}")]);
    a.close().await;
}

/// H4: step_down(cooldown) keeps the election started but out of contention for the
/// cooldown; another node takes over; afterwards the node contends again.
#[tokio::test(start_paused = true)]
async fn h4_step_down_cooldown() {
    let store = MemoryBackend::new();
    let (a, ha) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    let ea = a.election("h4");
    ea.start(()).expect("start");
    let t1 = eventually(S(5), "leader", || ea.term()).await;
    let eb = b.election("h4");
    eb.start(()).expect("start");
    ea.step_down(S(30)).await.expect("step down");
    assert_eq!(t1.revoke_reason(), Some(RevokeReason::SteppedDown));
    let t2 = eventually(S(1), "b takes over", || eb.term()).await;
    ha.reset_counts();
    sleep(S(29)).await;
    assert_eq!(ha.calls(Op::Acquire), 0, "contended during the cooldown");
    assert!(matches!(a.snapshot().elections[0].state, simba::ElectionState::CoolingDown { .. }));
    eb.stop().await;
    let t3 = eventually(S(10), "a leads again", || ea.term()).await;
    assert!(t3.token() > t2.token());
    a.close().await;
    b.close().await;
}

/// L1: every on_elected is followed by exactly one on_revoked for the same term, through
/// step-downs, takeovers, expiries, deadlines and a final stop.
#[tokio::test(start_paused = true)]
async fn l1_callbacks_are_paired() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let journal = Journal::default();
    let e = a.election("l1");
    e.start(Recorder { journal: journal.clone() }).expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    e.step_down(S(1)).await.expect("step down");
    let t = eventually(S(10), "leader", || e.term().filter(|x| x.token() > t.token())).await;
    store.force_holder("l1", None);
    t.revoked().await;
    let t = eventually(S(10), "leader", || e.term().filter(|x| x.token() > t.token())).await;
    h.set(Op::KeepAlive, Fault::Expired);
    t.revoked().await;
    h.clear();
    let t = eventually(S(20), "leader", || e.term().filter(|x| x.token() > t.token())).await;
    h.set(Op::KeepAlive, Fault::Fail);
    t.revoked().await;
    h.clear();
    eventually(S(30), "leader", || e.term().filter(|x| x.token() > t.token())).await;
    e.stop().await;
    let entries = journal.entries();
    assert_eq!(entries.len(), 10, "{entries:?}");
    for pair in entries.chunks(2) {
        let tok = pair[0].strip_prefix("elected:").expect("elected first");
        assert!(pair[1].starts_with(&format!("revoked:{tok}:")), "{pair:?}");
    }
    let reasons: Vec<&str> = entries.iter().skip(1).step_by(2).map(|s| s.rsplit(':').next().unwrap_or("")).collect();
    assert_eq!(reasons, vec!["SteppedDown", "TakenOver", "SessionExpired", "DeadlinePassed", "Stopped"]);
    a.close().await;
}

/// L2: callbacks run one at a time, in order, with no internal lock held: a callback can
/// call back into the client.
#[tokio::test(start_paused = true)]
async fn l2_callbacks_serial_without_locks() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let journal = Journal::default();
    let (j1, j2) = (journal.clone(), journal.clone());
    let (c1, c2) = (a.clone(), a.clone());
    let e = a.election("l2");
    e.start(FnListener::new(
        move |t: &Term| {
            // Would deadlock if the engine held its state lock while calling us.
            let snap = c1.snapshot();
            j1.push(format!("elected:{} terms={}", t.token(), snap.terms.len()));
        },
        move |t: &Term, _| {
            let _ = c2.snapshot();
            j2.push(format!("revoked:{}", t.token()));
        },
    ))
    .expect("start");
    for _ in 0..3 {
        eventually(S(10), "leader", || e.term()).await;
        e.step_down(Duration::ZERO).await.expect("step down");
    }
    e.stop().await;
    let entries = journal.entries();
    // Three step-downs, and the term won again before stop().
    assert_eq!(entries.len(), 8, "{entries:?}");
    for (i, pair) in entries.chunks(2).enumerate() {
        let tok = i + 1;
        assert_eq!(pair[0], format!("elected:{tok} terms=1"));
        assert_eq!(pair[1], format!("revoked:{tok}"));
    }
    a.close().await;
}

/// L3: stop() completes after the last on_revoked ran; afterwards the listener hears
/// nothing, even when the lease frees up again.
#[tokio::test(start_paused = true)]
async fn l3_stop_completes_after_the_last_callback() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let journal = Journal::default();
    let e = a.election("l3");
    e.start(Recorder { journal: journal.clone() }).expect("start");
    let t = eventually(S(5), "leader", || e.term()).await;
    e.stop().await;
    assert_eq!(journal.entries(), vec![format!("elected:{}", t.token()), format!("revoked:{}:Stopped", t.token())]);
    sleep(S(60)).await;
    assert_eq!(journal.entries().len(), 2);
    a.close().await;
}

/// L4: starting an election whose name is already started on this client fails, and
/// nothing is started; after stop() it can start again.
#[tokio::test(start_paused = true)]
async fn l4_already_started() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let e = a.election("l4");
    e.start(()).expect("start");
    let err = a.election("l4").start(()).expect_err("second start");
    assert!(matches!(err, Error::AlreadyStarted { ref name } if name == "l4"), "{err}");
    assert!(err.to_string().contains("already in use"), "{err}");
    let err = a.lock("l4").acquire().await.expect_err("lock on an election's name");
    assert!(matches!(err, Error::AlreadyStarted { .. }));
    e.stop().await;
    a.election("l4").start(()).expect("start again after stop");
    a.close().await;
}

/// L5: stop() and close() called from inside the leader task or a callback do not wait for
/// that task (which would wait for itself).
#[tokio::test(start_paused = true)]
async fn l5_stop_from_inside_does_not_deadlock() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let e = Arc::new(a.election("l5"));
    let e2 = Arc::clone(&e);
    e.run_while_leader(move |term: Term| {
        let e = Arc::clone(&e2);
        async move {
            e.stop().await; // from inside the task
            term.cancelled().await;
            Ok::<(), simba::BoxError>(())
        }
    })
    .expect("start");
    eventually(S(10), "stopped by its own task", || a.snapshot().elections.is_empty().then_some(())).await;

    let c = a.clone();
    let e3 = a.election("l5.callback");
    e3.start(FnListener::new(
        move |_t: &Term| {
            let c = c.clone();
            // close() from a callback: spawn, since callbacks are synchronous.
            tokio::spawn(async move { c.close().await });
        },
        |_t: &Term, _| {},
    ))
    .expect("start");
    eventually(S(10), "closed from a callback", || (a.snapshot().status == simba::SessionStatus::Closed).then_some(()))
        .await;
}

/// L6: when on_elected cannot be dispatched (the callback runner is full), the term's work
/// does not start: the lease is given up for one lease period and no on_revoked is
/// delivered for that term.
#[tokio::test(start_paused = true)]
async fn l6_undeliverable_on_elected_gives_the_lease_up() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    let journal = Journal::default();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let e = a.election("l6").callback_capacity(0);
    e.run_while_leader_with(
        move |_t: Term| {
            r.store(true, Ordering::SeqCst);
            async { Ok::<(), simba::BoxError>(()) }
        },
        Recorder { journal: journal.clone() },
    )
    .expect("start");
    sleep(S(40)).await;
    assert!(!ran.load(Ordering::SeqCst), "the task ran for a term nobody knew about");
    assert!(journal.entries().is_empty(), "{:?}", journal.entries());
    let acquires = h.call_times(Op::Acquire);
    let releases = h.call_times(Op::Release);
    assert!(acquires.len() >= 2 && releases.len() >= 2);
    assert!(acquires.windows(2).all(|w| w[1] - w[0] >= S(15)), "the lease was not given up for one lease period");
    assert_eq!(store.holder("l6").map(|x| x.0), Some(None));
    a.close().await;
}

/// Bad input: an invalid name is refused before any backend call; nothing starts.
#[tokio::test(start_paused = true)]
async fn bad_input_invalid_name() {
    let store = MemoryBackend::new();
    let (a, h) = faulty_client(&store, 1);
    a.live().await.expect("live");
    h.reset_counts();
    let err = a.election("no/slash").start(()).expect_err("invalid");
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    assert!(err.to_string().contains("may only contain"), "{err}");
    let err = a.lock("").acquire().await.expect_err("invalid");
    assert!(matches!(err, Error::InvalidName { .. }));
    assert!(a.snapshot().elections.is_empty());
    assert_eq!(h.calls(Op::Acquire), 0);
    a.election("ok").start(()).expect("a valid name still works");
    a.close().await;
}

/// Bad input: no runtime, no backend.
#[test]
fn bad_input_builder() {
    let err = Simba::new(MemoryBackend::new(), simba::SimbaConfig::default()).expect_err("no runtime");
    assert!(matches!(err, Error::NoRuntime), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let err = Simba::builder().build().expect_err("no backend");
        assert!(err.to_string().contains("no backend"), "{err}");
        let err = Simba::connect("nosuch://x", simba::SimbaConfig::default()).await.expect_err("unknown scheme");
        assert!(err.to_string().contains("unsupported backend URL `nosuch`"), "{err}");
    });
}
