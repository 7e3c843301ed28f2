//! Session rules (S, D) and the session rows of the failure table, on paused time against
//! the in-memory backend and the fault-injecting wrapper.

use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::tck::{Fault, Op};
use simba::{Error, Event, RevokeReason, SessionStatus, Simba, SimbaConfig};
use simba_tests::{eventually, faulty_client, faulty_client_with, ms_since};
use tokio::time::{Instant, advance, sleep};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// S1: one keep-alive per renew_interval, with 1 and with 1,000 held leases; nothing else is
/// called while nothing changes.
#[tokio::test(start_paused = true)]
async fn s1_one_keep_alive_per_interval_whatever_the_leases() {
    for leases in [1usize, 1000] {
        let store = MemoryBackend::new();
        let (c, h) = faulty_client(&store, 1);
        let mut guards = Vec::new();
        for i in 0..leases {
            guards.push(c.lock(format!("s1.{i}")).acquire().await.expect("lock"));
        }
        // Let a keep-alive that saw acquisitions in flight settle, then count.
        sleep(S(6)).await;
        h.reset_counts();
        sleep(S(50)).await;
        assert_eq!(h.calls(Op::KeepAlive), 10, "{leases} leases: keep-alives in 50 s at 5 s");
        for op in [Op::Acquire, Op::Release, Op::Owned, Op::OpenSession, Op::CloseSession] {
            assert_eq!(h.calls(op), 0, "{leases} leases: {op:?} called");
        }
        assert!(guards.iter().all(|g| g.term().is_valid()));
        c.close().await;
    }
}

/// S2/S3: after the backend answers Expired the session never comes back: a new session with
/// a new id is opened and the node contends again; the old terms stay ended.
#[tokio::test(start_paused = true)]
async fn s3_expired_session_is_replaced() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let first = c.live().await.expect("live");
    let e = c.election("s3");
    e.start(()).expect("start");
    let t1 = eventually(S(10), "leader", || e.term()).await;
    h.set(Op::KeepAlive, Fault::Expired);
    assert_eq!(t1.revoked().await, RevokeReason::SessionExpired);
    h.clear();
    let t2 = eventually(S(30), "leader again", || e.term()).await;
    assert_ne!(t2.session_id(), &first, "S3: a new session");
    assert!(t2.token() > t1.token());
    assert!(!t1.is_valid(), "T4: an ended term never becomes valid again");
    // The old session really is gone on the store.
    use simba::backend::{Backend, HeldDigest, KeepAlive};
    assert_eq!(store.keep_alive(&first, HeldDigest::default()).await.expect("call"), KeepAlive::Expired);
    c.close().await;
}

/// S4: close() releases every lease of the node at once, and the client refuses further use.
#[tokio::test(start_paused = true)]
async fn s4_close_releases_everything_at_once() {
    let store = MemoryBackend::new();
    let (c, _h) = faulty_client(&store, 1);
    let e = c.election("s4.election");
    e.start(()).expect("start");
    let g = c.lock("s4.lock").acquire().await.expect("lock");
    eventually(S(10), "leader", || e.term()).await;
    let t0 = Instant::now();
    c.close().await;
    assert!(t0.elapsed() < MS(50), "close took {:?}", t0.elapsed());
    assert!(!g.term().is_valid());
    assert_eq!(store.holder("s4.election").map(|h| h.0), Some(None));
    assert_eq!(store.holder("s4.lock").map(|h| h.0), Some(None));
    assert_eq!(c.snapshot().status, SessionStatus::Closed);
    assert!(matches!(c.lock("x").acquire().await, Err(Error::Closed)));
    assert!(matches!(c.election("y").start(()), Err(Error::Closed)));
}

/// S5: the snapshot shows Opening, Live, Suspended and Closed, the session id and the time to
/// the deadline, and each election and term.
#[tokio::test(start_paused = true)]
async fn s5_snapshot_states() {
    let store = MemoryBackend::new();
    let (b, h) = simba::tck::FaultyBackend::new(store.clone());
    h.set(Op::OpenSession, Fault::Fail);
    let c = Simba::builder().backend(b).seed(1).build().expect("client");
    sleep(MS(10)).await;
    let s = c.snapshot();
    assert_eq!(s.status, SessionStatus::Opening);
    assert_eq!(s.session, None);
    h.clear();
    let id = c.live().await.expect("live");
    let e = c.election("s5");
    e.start(()).expect("start");
    let t = eventually(S(10), "leader", || e.term()).await;
    let s = c.snapshot();
    assert_eq!(s.status, SessionStatus::Live);
    assert_eq!(s.session, Some(id));
    assert!(s.time_to_deadline.is_some_and(|d| d > S(9)));
    assert_eq!(s.elections.len(), 1);
    assert_eq!(s.elections[0].state, simba::ElectionState::Leader { token: t.token() });
    assert_eq!(s.terms.len(), 1);
    assert_eq!(s.terms[0].token, t.token());
    h.set(Op::KeepAlive, Fault::Fail);
    sleep(S(6)).await;
    assert_eq!(c.snapshot().status, SessionStatus::Suspended);
    h.clear();
    sleep(S(5)).await;
    assert_eq!(c.snapshot().status, SessionStatus::Live);
    c.close().await;
    assert_eq!(c.snapshot().status, SessionStatus::Closed);
}

/// D1: the deadline is `sent_at + remaining * (1 - drift) - margin` with `sent_at` the time
/// the keep-alive was SENT: a reply that takes 2 s does not move the deadline later.
#[tokio::test(start_paused = true)]
async fn d1_deadline_counts_from_sent_at() {
    let store = MemoryBackend::new();
    let t0 = Instant::now();
    let (c, h) = faulty_client(&store, 1);
    c.live().await.expect("live");
    assert_eq!(c.snapshot().time_to_deadline, Some(MS(14_800)), "open: 15 s * 0.99 - 50 ms");
    h.set(Op::KeepAlive, Fault::DelayReply(S(2)));
    // The keep-alive leaves at t0 + 5 s and its reply lands at t0 + 7 s.
    sleep(S(7) + MS(1) - t0.elapsed()).await;
    assert_eq!(h.call_times(Op::KeepAlive).iter().map(|t| ms_since(t0, *t)).collect::<Vec<_>>(), vec![5000]);
    // Deadline = 5 s + 14.8 s = 19.8 s; now = 7.001 s. From the arrival it would be 21.8 s.
    assert_eq!(c.snapshot().time_to_deadline, Some(MS(12_799)));
    c.close().await;
}

/// D1: the drift is applied to the backend's remaining time (with drift 0.1: 15 * 0.9 - 0.05).
#[tokio::test(start_paused = true)]
async fn d1_drift_shortens_the_deadline() {
    let store = MemoryBackend::new();
    let cfg = SimbaConfig::builder().drift(0.1).build().expect("config");
    let (c, _h) = faulty_client_with(&store, cfg, 1);
    c.live().await.expect("live");
    assert_eq!(c.snapshot().time_to_deadline, Some(MS(13_450)));
    sleep(S(5) + MS(1)).await;
    assert_eq!(c.snapshot().time_to_deadline, Some(MS(13_449)));
    c.close().await;
}

/// D2: a keep-alive that hangs is abandoned after the renewal period, never later than the
/// deadline, so the retries still fit before the deadline.
#[tokio::test(start_paused = true)]
async fn d2_hung_call_times_out_after_the_period() {
    let store = MemoryBackend::new();
    let t0 = Instant::now();
    let (c, h) = faulty_client(&store, 1);
    c.live().await.expect("live");
    let mut events = c.events();
    h.set(Op::KeepAlive, Fault::Hang);
    sleep(S(20)).await;
    // Sent at 5 s, times out at 10 s (period 5 s); D5 backoff (14.8 - 10) / 2 = 2.4 s -> 12.4 s,
    // which times out at the deadline (14.8 s) and the session ends; the next session's first
    // keep-alive leaves 5 s later.
    let times: Vec<u128> = h.call_times(Op::KeepAlive).iter().map(|t| ms_since(t0, *t)).collect();
    assert_eq!(&times[..3], &[5000, 12_400, 19_800]);
    let mut ended = None;
    while let Ok(e) = events.try_recv() {
        if let Event::SessionEnded { reason, .. } = e {
            ended.get_or_insert(reason);
        }
    }
    assert_eq!(ended, Some(RevokeReason::DeadlinePassed));
    c.close().await;
}

/// D5: after failed renewals the client retries after clamp(remaining / 2, min_backoff,
/// renew_interval) until the deadline, then ends the session (DeadlinePassed).
#[tokio::test(start_paused = true)]
async fn d5_backoff_halves_the_remaining_time() {
    let store = MemoryBackend::new();
    let t0 = Instant::now();
    let (c, h) = faulty_client(&store, 1);
    c.live().await.expect("live");
    let e = c.election("d5");
    e.start(()).expect("start");
    let t = eventually(S(3), "leader", || e.term()).await;
    h.set(Op::KeepAlive, Fault::Fail);
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    assert_eq!(ms_since(t0, Instant::now()), 14_800, "revoked exactly at the local deadline");
    let times: Vec<u128> = h.call_times(Op::KeepAlive).iter().map(|t| ms_since(t0, *t)).collect();
    // 5 s, then half the time left to 14.8 s each time (timers fire on whole milliseconds,
    // rounding up): 9.9, 12.35, 13.575, 14.188, 14.494, 14.647, then the 100 ms floor.
    assert_eq!(times, vec![5000, 9900, 12_350, 13_575, 14_188, 14_494, 14_647, 14_747]);
    c.close().await;
}

/// D3: once the local deadline passed, a late keep-alive reply does not extend it: the
/// session ends with DeadlinePassed and a new session is opened.
#[tokio::test(start_paused = true)]
async fn d3_late_reply_does_not_revive() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let first = c.live().await.expect("live");
    let e = c.election("d3");
    e.start(()).expect("start");
    let t = eventually(S(3), "leader", || e.term()).await;
    // Every reply lands 12 s after it was sent: past the 14.8 s deadline.
    h.set(Op::KeepAlive, Fault::DelayReply(S(12)));
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    h.clear();
    sleep(S(30)).await;
    assert!(!t.is_valid());
    let now = c.session_id().expect("a new session");
    assert_ne!(now, first);
    c.close().await;
}

/// D4: a backend that grants less than lease_duration (ZooKeeper's maxSessionTimeout) makes
/// the client renew every third of the local validity, publish one SessionLeaseShortened per
/// session, and keep its terms (no DeadlinePassed).
#[tokio::test(start_paused = true)]
async fn d4_shortened_grant_renews_faster() {
    let store = MemoryBackend::with_max_session_ttl(S(6));
    let t0 = Instant::now();
    let (c, h) = faulty_client(&store, 1);
    let mut events = c.events();
    c.live().await.expect("live");
    let e = c.election("d4");
    e.start(()).expect("start");
    let t = eventually(S(3), "leader", || e.term()).await;
    sleep(S(60)).await;
    assert!(t.is_valid(), "the term must survive a capped session");
    // Validity 6 * 0.99 - 0.05 = 5.89 s; a third is 1.963 s (timers fire on whole
    // milliseconds, rounding up, and each period counts from the previous send).
    let times: Vec<u128> = h.call_times(Op::KeepAlive).iter().map(|t| ms_since(t0, *t)).collect();
    assert_eq!(&times[..3], &[1964, 3928, 5892]);
    let mut shortened = 0;
    while let Ok(ev) = events.try_recv() {
        if let Event::SessionLeaseShortened { granted, renew_every, .. } = ev {
            assert_eq!(granted, S(6));
            assert_eq!(renew_every, MS(5890) / 3);
            shortened += 1;
        }
    }
    assert_eq!(shortened, 1, "one SessionLeaseShortened per session");
    c.close().await;
}

/// Failure table, "backend unreachable": Suspended with retries; at the local deadline every
/// term is revoked (DeadlinePassed); nothing runs as leader meanwhile; a new session opens
/// when the backend answers again.
#[tokio::test(start_paused = true)]
async fn fail_backend_unreachable() {
    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let first = c.live().await.expect("live");
    let e = c.election("unreachable");
    e.start(()).expect("start");
    let t = eventually(S(3), "leader", || e.term()).await;
    h.set_all(Fault::Fail);
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    sleep(S(60)).await;
    assert!(e.term().is_none(), "nothing runs as leader while the backend is unreachable");
    assert_eq!(c.snapshot().status, SessionStatus::Opening);
    h.clear();
    let t2 = eventually(S(40), "leader after recovery", || e.term()).await;
    assert_ne!(t2.session_id(), &first);
    assert!(t2.token() > t.token());
    c.close().await;
}

/// Failure table, "leader paused longer than the lease": on waking, `is_valid()` is already
/// false before any engine task ran, and the engine revokes the term.
#[tokio::test(start_paused = true)]
async fn fail_paused_leader_wakes_invalid() {
    let store = MemoryBackend::new();
    let (c, _h) = faulty_client(&store, 1);
    let e = c.election("paused");
    e.start(()).expect("start");
    let t = eventually(S(3), "leader", || e.term()).await;
    // The whole process stops for 20 s: no task runs, then the clock has moved.
    advance(S(20)).await;
    assert!(!t.is_valid(), "T4: invalid on the first read after the pause");
    assert_eq!(t.remaining(), Duration::ZERO);
    assert_eq!(t.revoked().await, RevokeReason::DeadlinePassed);
    c.close().await;
}

/// Failure table, "leader crashes": its session expires after lease_duration and a candidate
/// acquires on its next attempt, within the failover bound.
#[tokio::test(start_paused = true)]
async fn fail_leader_crash_failover_within_bound() {
    let store = MemoryBackend::new();
    let (a, _) = faulty_client(&store, 1);
    let (b, _) = faulty_client(&store, 2);
    let ea = a.election("crash");
    ea.start(()).expect("start");
    let ta = eventually(S(3), "leader", || ea.term()).await;
    let eb = b.election("crash");
    eb.start(()).expect("start");
    sleep(S(1)).await;
    a.crash_for_tests();
    let crashed_at = Instant::now();
    let tb = eventually(S(40), "failover", || eb.term()).await;
    let took = crashed_at.elapsed();
    assert!(tb.token() > ta.token());
    assert!(took >= S(13), "taken over after only {took:?}: the old session was still live");
    assert!(took <= a.config().failover_bound(), "failover took {took:?}");
    b.close().await;
}

/// D6: the local deadline comes before the backend's expiry whenever the clocks' rates
/// differ by at most `drift`, for any request delay; with drift ignored it does not.
#[test]
fn d6_local_deadline_precedes_backend_expiry() {
    fn safe(drift: f64, assumed_drift: f64) -> bool {
        let remaining = 15.0;
        let margin = 0.0;
        for rate in [1.0 - drift, 1.0, 1.0 + drift] {
            // `rate`: node-clock seconds per backend-clock second.
            for delay in [0.0, 0.5, 3.0] {
                // Backend receives at backend time `delay` and expires the session at
                // `delay + remaining`. The node sent at 0 and counts its local validity.
                let local = remaining * (1.0 - assumed_drift) - margin;
                let deadline_in_backend_time = local / rate;
                if deadline_in_backend_time > delay + remaining {
                    return false;
                }
            }
        }
        true
    }
    assert!(safe(0.01, 0.01));
    assert!(safe(0.05, 0.05));
    assert!(!safe(0.01, 0.0), "ignoring drift under a real rate difference must be unsafe");
}

/// Issue 13 item 4: a grant too short to be used (less than the margin after drift) is not
/// answered by opening another session at once, in a loop: the next open waits the doubling
/// open backoff (100 ms, capped at renew_interval), as after a failed open.
#[tokio::test(start_paused = true)]
async fn issue13_4_grant_too_short_backs_off() {
    // 10 ms granted: 10 ms * 0.99 - 50 ms margin leaves nothing.
    let store = MemoryBackend::with_max_session_ttl(MS(10));
    let t0 = Instant::now();
    let (c, h) = faulty_client(&store, 1);
    sleep(S(10)).await;
    let times: Vec<u128> = h.call_times(Op::OpenSession).iter().map(|t| ms_since(t0, *t)).collect();
    assert_eq!(times, vec![0, 100, 300, 700, 1500, 3100, 6300], "opens back off: 100, 200, 400 ms, ...");
    assert_eq!(c.session_id(), None, "no unusable session is published");
    assert_eq!(c.snapshot().status, SessionStatus::Opening);
    c.close().await;
}

/// Issue 13 item 2 (D2 under D4): every backend call times out after the CURRENT renewal
/// period, the one the backend shortened. Capped at 6 s, the period is 5.89 s / 3 = 1.963 s: an
/// acquisition whose request takes 3 s is abandoned at 1.963 s (with the configured 5 s, or the
/// 5.89 s deadline, it would have gone through and won), and the next attempt comes only after
/// the K1 delay (>= 2.5 s), past the 4 s the caller waits.
#[tokio::test(start_paused = true)]
async fn issue13_2_d2_timeout_follows_the_shortened_period() {
    let store = MemoryBackend::with_max_session_ttl(S(6));
    let (c, h) = faulty_client(&store, 1);
    c.live().await.expect("live");
    h.set(Op::Acquire, Fault::DelayRequest(S(3)));
    let got = c.lock("d2.d4").try_acquire(S(4)).await.expect("try_acquire");
    assert!(got.is_none(), "D2: the 3 s acquisition must time out after the 1.963 s period");
    assert_eq!(h.calls(Op::Acquire), 1);
    assert_eq!(store.holder("d2.d4").and_then(|(s, _)| s), None, "the timed-out request never reached the store");
    // A request that fits in the shortened period still wins.
    h.set(Op::Acquire, Fault::DelayRequest(MS(1500)));
    let g = c.lock("d2.d4").try_acquire(S(10)).await.expect("try_acquire").expect("won within the period");
    assert!(g.term().is_valid());
    g.release().await.expect("release");
    c.close().await;
}

/// Issue 13 item 4: the actor's logs carry the current session's id once, in a span
/// `simba{backend, session}` of that session alone; after sessions are re-opened a log line
/// lists only the session it belongs to (not every past id).
#[tokio::test(start_paused = true)]
async fn issue13_4_span_names_only_the_current_session() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("capture").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let out = Capture::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let store = MemoryBackend::new();
    let (c, h) = faulty_client(&store, 1);
    let mut ids = vec![c.live().await.expect("live")];
    for _ in 0..3 {
        h.set(Op::KeepAlive, Fault::Expired);
        let old = ids.last().cloned();
        let next = eventually(S(30), "a new session", || c.session_id().filter(|s| Some(s) != old.as_ref())).await;
        h.clear();
        ids.push(next);
    }
    c.close().await;

    let text = String::from_utf8(out.0.lock().expect("capture").clone()).expect("utf-8");
    let opened: Vec<&str> = text.lines().filter(|l| l.contains("session opened")).collect();
    assert_eq!(opened.len(), ids.len(), "one `session opened` per session:\n{text}");
    for (line, id) in opened.iter().zip(&ids) {
        assert!(
            line.contains(&format!("simba{{backend=faulty(memory://) session={id}}}: ")),
            "span of the current session only: {line}"
        );
    }
    for line in text.lines().filter(|l| l.contains("simba{")) {
        let span = &line[line.find("simba{").expect("span")..line.find("}: ").expect("span end")];
        assert!(span.matches("session=").count() <= 1, "a log line lists past sessions: {line}");
    }
}
