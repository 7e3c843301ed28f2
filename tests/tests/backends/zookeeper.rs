//! ZooKeeper-specific behaviour on the private servers of `scripts/backends.sh`, on real time:
//! D4 against a capped `maxSessionTimeout`, server-side expiry, manual takeover, the
//! `ephemeralOwner` check, S1 request counts, graceful handover latency, and (in one test,
//! because it disturbs the shared server) pause / kill -9 / restart of the server.
//!
//! Every test that uses the main server (`SIMBA_TEST_ZK_URL`) takes [`MAIN`], so that the
//! disruptive test never pauses the server under a measurement. Run with `--nocapture` to
//! see the figures.

#![allow(clippy::print_stderr, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::time::Duration;

use simba::backend::zookeeper::{ZooKeeperBackend, zookeeper_client as zk};
use simba::backend::{Acquire, Backend, HeldDigest, KeepAlive, SessionId};
use simba::tck::conformance::unique;
use simba::tck::servers::{self as suite, ServerHooks, config, wait_leader};
use simba::{Election, Event, RevokeReason, Simba, SimbaConfig};
use simba_tests::proxy::{FaultProxy, Mode};
use simba_tests::servers::{self, Paused, Server};
use tokio::time::{Instant, sleep, timeout};

/// Serialises the tests on the main server.
use crate::SERIAL as MAIN;

async fn backend(url: &str) -> ZooKeeperBackend {
    servers::connected(url, ZooKeeperBackend::connect(url).await)
}

/// The server suite with no optional hook: ZooKeeper's takeover by hand, pause and restart
/// differ from the suite's (a takeover creates a node of another session, whose czxid is the
/// next token; a restart shorter than the lease keeps the session), so this file checks them
/// in its own tests below.
async fn hooks() -> ServerHooks<ZooKeeperBackend> {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else {
        panic!("SIMBA_TEST_ZK_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    ServerHooks::new("ZooKeeper", move || {
        let url = url.clone();
        async move { backend(&url).await }
    })
}

simba::server_suite!(hooks, []);

/// A raw driver session at the server's root, standing for another program or an operator.
async fn raw_client(url: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(url.trim_start_matches("zk://"))
        .await
        .unwrap()
}

/// A four-letter-word command's answer.
fn four_letters(port: u16, cmd: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(cmd.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Packets the server received from and sent to the connection of session `sid`, from `cons`.
fn packets(port: u16, sid: &SessionId) -> (u64, u64) {
    let cons = four_letters(port, "cons");
    let line = cons
        .lines()
        .find(|l| l.contains(&format!("sid={sid},")))
        .unwrap_or_else(|| panic!("session {sid} not in `cons`:\n{cons}"));
    let field = |key: &str| -> u64 {
        let start = line.find(&format!("{key}=")).unwrap() + key.len() + 1;
        line[start..].split([',', ')']).next().unwrap().parse().unwrap()
    };
    (field("recved"), field("sent"))
}

/// Waits until `c`'s current session can take and release a lease through `b` (its backend):
/// its driver has reconnected. Returns how long that took.
async fn session_usable(b: &ZooKeeperBackend, c: &Simba) -> Duration {
    let start = Instant::now();
    let name = unique("usable");
    loop {
        assert!(start.elapsed() < Duration::from_secs(10), "the session of {:?} never came back", c.session_id());
        if let Some(s) = c.session_id()
            && let Ok(Acquire::Won(token)) = b.acquire(&s, &name).await
        {
            let _ = b.release(&s, &name, token).await;
            return start.elapsed();
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// No server listening, and a server that accepts connections but never answers: both fail
/// within 5 s with the URL and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_fast_with_the_url() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    // Never accepted: the kernel completes the TCP handshake, ZooKeeper's never comes.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mute_port = mute.local_addr().unwrap().port();
    for port in [closed_port, mute_port] {
        let url = format!("zk://127.0.0.1:{port}/simba");
        let start = Instant::now();
        let err = ZooKeeperBackend::connect(&url).await.unwrap_err();
        let took = start.elapsed();
        let msg = simba_error_chain(&err);
        eprintln!("connect {url}: failed after {took:?}: {msg}");
        assert!(took <= Duration::from_millis(5500), "took {took:?}");
        assert!(msg.contains(&url), "{msg}");
    }
    drop(mute);
}

fn simba_error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// D4: the capped server grants 3 s for a 10 s lease; the client says so once per session
/// and renews often enough that its term lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capped_session_is_shortened_once_and_the_term_survives() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_CAPPED_URL") else { return };
    let config = SimbaConfig::builder()
        .lease_duration(Duration::from_secs(10))
        .renew_interval(Duration::from_secs(3))
        .build()
        .unwrap();
    let c = Simba::new(backend(&url).await, config).unwrap();
    let mut events = c.events();
    let e = c.election(unique("d4"));
    e.start(()).unwrap();
    let term = wait_leader(&e, Duration::from_secs(5)).await;
    sleep(Duration::from_secs(15)).await;
    assert!(term.is_valid(), "the term ended: {:?}", term.revoke_reason());
    assert_eq!(e.term().map(|t| t.token()), Some(term.token()));
    let mut shortened = Vec::new();
    let mut sessions = Vec::new();
    while let Ok(ev) = events.try_recv() {
        match ev {
            Event::SessionLeaseShortened { session, granted, renew_every } => {
                eprintln!("D4: session {session} granted {granted:?}, renewing every {renew_every:?}");
                assert_eq!(granted, Duration::from_secs(3));
                shortened.push(session);
            }
            Event::SessionOpened { session, .. } => sessions.push(session),
            Event::SessionEnded { reason, .. } | Event::Revoked { reason, .. } => panic!("ended: {reason:?}"),
            _ => {}
        }
    }
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(shortened, sessions, "exactly one SessionLeaseShortened per session");
    c.close().await;
}

/// The server ends the session while the client cannot reach it (as an expiry does): when
/// the client is back, the driver hears `SessionExpired` and the term ends with
/// `SessionExpired` (not `DeadlinePassed`: all of it happens well within the lease); a new
/// session (new id) opens and wins again with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_expiry_revokes_with_session_expired() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let _main = MAIN.lock().await;
    let server: std::net::SocketAddr = url.trim_start_matches("zk://").parse().unwrap();
    let proxy = FaultProxy::start(server).await.unwrap();
    let b = backend(&format!("zk://{}", proxy.addr())).await;
    let config = SimbaConfig::builder()
        .lease_duration(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .retry_jitter(Duration::from_millis(100))
        .build()
        .unwrap();
    let c = Simba::new(b.clone(), config).unwrap();
    let e = c.election(unique("expiry"));
    e.start(()).unwrap();
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    let old = c.session_id().unwrap();
    let info = b.zookeeper_session(&old).unwrap();
    // Cut the client off, so that it cannot take its session back, then attach to the
    // session directly and close it.
    proxy.set(Mode::Cut);
    let start = Instant::now();
    let other = zk::Client::connector().with_session(info).connect(&server.to_string()).await.unwrap();
    let mut state = other.state_watcher();
    drop(other);
    timeout(Duration::from_secs(2), async {
        while !state.peek_state().is_terminated() {
            state.changed().await;
        }
    })
    .await
    .unwrap();
    proxy.restore();
    let reason = timeout(Duration::from_secs(3), t1.revoked()).await.unwrap();
    eprintln!("server-side expiry: term ended with {reason:?} {:?} after the session was closed", start.elapsed());
    assert_eq!(reason, RevokeReason::SessionExpired);
    let t2 = wait_leader(&e, Duration::from_secs(5)).await;
    assert!(t2.token() > t1.token());
    assert_ne!(c.session_id().unwrap(), old);
    c.close().await;
}

/// Another program deletes our lease node and creates its own: the term ends with
/// `TakenOver`; the lease comes back, with a higher token, when that program's session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_takeover_revokes_with_taken_over() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let _main = MAIN.lock().await;
    let name = unique("takeover");
    let c = Simba::new(backend(&url).await, config()).unwrap();
    let e = c.election(name.clone());
    e.start(()).unwrap();
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    let raw = raw_client(&url).await;
    let path = format!("/simba/leases/{name}");
    let mut w = raw.new_multi_writer();
    w.add_delete(&path, None).unwrap();
    w.add_create(&path, b"operator", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())).unwrap();
    w.commit().await.unwrap();
    // A multi's create answers no usable stat on ZooKeeper 3.8 (ZOOKEEPER-4026): read it.
    let foreign = raw.check_stat(&path).await.unwrap().unwrap().czxid as u64;
    let start = Instant::now();
    let reason = timeout(Duration::from_secs(2), t1.revoked()).await.unwrap();
    eprintln!("manual takeover noticed after {:?}", start.elapsed());
    assert_eq!(reason, RevokeReason::TakenOver);
    sleep(Duration::from_millis(600)).await;
    assert!(e.term().is_none(), "the engine took a lease held by another session");
    drop(raw);
    let t2 = wait_leader(&e, Duration::from_secs(3)).await;
    assert!(t2.token() > foreign && foreign > t1.token(), "tokens {} -> {foreign} -> {}", t1.token(), t2.token());
    c.close().await;
}

/// A lease node of the same name created by another session is never treated as ours
/// (apache/curator#1211): not won, not released, not listed, not used to claim a slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_session_is_never_ours() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let _main = MAIN.lock().await;
    let name = unique("foreign");
    let raw = raw_client(&url).await;
    let path = format!("/simba/leases/{name}");
    let b = backend(&url).await;
    let s = b.open_session(Duration::from_secs(5)).await.unwrap().id;
    let (stat, _) = raw.create(&path, b"", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())).await.unwrap();
    let token = stat.czxid as u64;
    assert_eq!(b.acquire(&s, &name).await.unwrap(), Acquire::Held);
    assert!(!b.release(&s, &name, token).await.unwrap());
    assert!(raw.check_stat(&path).await.unwrap().is_some(), "another session's node was deleted");
    assert!(!b.claim_slot(&s, &name, token, 1).await.unwrap());
    assert!(b.owned(&s).await.unwrap().is_empty());
    let mut d = HeldDigest::default();
    d.add(token);
    assert!(matches!(b.keep_alive(&s, d).await.unwrap(), KeepAlive::Alive { digest_matches: false, .. }));
    drop(raw);
    // Once the other session is gone the lease is free, with a higher token.
    let start = Instant::now();
    let t = loop {
        match b.acquire(&s, &name).await.unwrap() {
            Acquire::Won(t) => break t,
            _ => assert!(start.elapsed() < Duration::from_secs(3)),
        }
        sleep(Duration::from_millis(20)).await;
    };
    assert!(t > token);
    b.close_session(&s).await.unwrap();
}

/// S1: a keep-alive is one request, with one lease or five hundred. Counted twice: by the
/// backend, and by the server (`cons` packets on the session's connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_costs_one_request_whatever_the_leases() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let _main = MAIN.lock().await;
    let port: u16 = servers::required_env("SIMBA_TEST_ZK_PORT").parse().unwrap();
    let b = backend(&url).await;
    // A long session: the driver pings only after 4.5 s of silence.
    let s = b.open_session(Duration::from_secs(30)).await.unwrap().id;
    let prefix = unique("s1");
    let mut held = HeldDigest::default();
    let mut figures = Vec::new();
    let mut count = 0;
    for target in [1, 500] {
        while count < target {
            let Acquire::Won(t) = b.acquire(&s, &format!("{prefix}-{count}")).await.unwrap() else { panic!() };
            held.add(t);
            count += 1;
        }
        let (mut server_in, mut server_out, mut ours, mut slowest) = (u64::MAX, u64::MAX, u64::MAX, Duration::ZERO);
        for _ in 0..10 {
            let (in0, out0) = packets(port, &s);
            let r0 = b.requests_sent();
            let start = Instant::now();
            let reply = b.keep_alive(&s, held).await.unwrap();
            slowest = slowest.max(start.elapsed());
            let r1 = b.requests_sent();
            let (in1, out1) = packets(port, &s);
            assert!(matches!(reply, KeepAlive::Alive { digest_matches: true, .. }), "{reply:?}");
            // The minimum over ten samples drops a driver ping that may fall in a window.
            server_in = server_in.min(in1 - in0);
            server_out = server_out.min(out1 - out0);
            ours = ours.min(r1 - r0);
        }
        eprintln!(
            "S1: keep_alive with {target} leases: {ours} request(s) sent by the backend; server received {server_in}, sent {server_out} packet(s); slowest call {slowest:?}"
        );
        figures.push((ours, server_in, server_out));
    }
    assert_eq!(figures[0], figures[1], "keep-alive cost depends on the number of leases");
    assert_eq!(figures[0], (1, 1, 1));

    // An acquisition dropped after its first poll (as the engine's call timeout drops one):
    // its create may reach the server unobserved, so the record is uncertain and the next
    // keep-alive reports a mismatch. The reconciliation that follows reads only what the record
    // does not hold: one listing, plus one read if the dropped create took effect; not one
    // read per held lease.
    let dropped = format!("{prefix}-dropped");
    {
        let mut acquisition = std::pin::pin!(b.acquire(&s, &dropped));
        // Polled exactly once: the create is sent, its reply never read.
        let finished = tokio::select! {
            biased;
            _ = &mut acquisition => true,
            () = std::future::ready(()) => false,
        };
        assert!(!finished, "an acquisition answered on its first poll");
    }
    sleep(Duration::from_millis(200)).await;
    let reply = b.keep_alive(&s, held).await.unwrap();
    assert!(matches!(reply, KeepAlive::Alive { digest_matches: false, .. }), "{reply:?}");
    let r0 = b.requests_sent();
    let owned = b.owned(&s).await.unwrap();
    let reads = b.requests_sent() - r0;
    let created = owned.iter().any(|(n, _)| *n == dropped);
    eprintln!(
        "S1: reconciliation with {count} recorded leases (dropped create took effect: {created}): {reads} request(s)"
    );
    assert_eq!(owned.len(), count + usize::from(created));
    assert_eq!(reads, 1 + u64::from(created), "a reconciliation re-read recorded leases");
    let digest = HeldDigest::of(&owned);
    let reply = b.keep_alive(&s, digest).await.unwrap();
    assert!(matches!(reply, KeepAlive::Alive { digest_matches: true, .. }), "{reply:?}");
    b.close_session(&s).await.unwrap();
}

/// K2: after `stop()` the other node's term starts at once (release broadcast by a watch),
/// well under one renewal interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_is_immediate() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let _main = MAIN.lock().await;
    let config = config();
    let name = unique("handover");
    let clients = [Simba::new(backend(&url).await, config).unwrap(), Simba::new(backend(&url).await, config).unwrap()];
    let mut elections: Vec<Election> = clients.iter().map(|c| c.election(name.clone())).collect();
    elections[0].start(()).unwrap();
    let mut last = wait_leader(&elections[0], Duration::from_secs(5)).await.token();
    elections[1].start(()).unwrap();
    let mut leader = 0;
    let mut took = Vec::new();
    for _ in 0..20 {
        // Let the candidate settle into its retry loop.
        sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        elections[leader].stop().await;
        let t = wait_leader(&elections[1 - leader], Duration::from_secs(3)).await;
        took.push(start.elapsed());
        assert!(t.token() > last);
        last = t.token();
        elections[leader] = clients[leader].election(name.clone());
        elections[leader].start(()).unwrap();
        leader = 1 - leader;
    }
    let m = suite::median(&took);
    eprintln!(
        "K2: graceful handover over {} handovers: median {m:?}, max {:?} (renew_interval {:?})",
        took.len(),
        took.iter().max().unwrap(),
        config.renew_interval()
    );
    assert!(m < config.renew_interval() / 4, "median handover {m:?}");
    for c in &clients {
        c.close().await;
    }
}

/// Disturbs the shared server, so in one test: (1) SIGSTOP the server longer than the lease:
/// the term ends with `DeadlinePassed` at its local deadline; after SIGCONT a new session and
/// term follow; (2) kill -9 and restart the server (data kept): tokens never go backwards,
/// and releases are still broadcast after the reconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pause_and_restart() {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ZK_URL") else { return };
    let server = Server::from_env("zk", "SIMBA_TEST_ZK_PIDFILE");
    let _main = MAIN.lock().await;
    let config = config();
    let name = unique("disrupt");
    let b_c1 = backend(&url).await;
    let c1 = Simba::new(b_c1.clone(), config).unwrap();
    let e1 = c1.election(name.clone());
    e1.start(()).unwrap();
    let t1 = wait_leader(&e1, Duration::from_secs(5)).await;
    let session1 = c1.session_id().unwrap();

    // (1) Pause longer than the lease.
    let pid = server.pid();
    let left = t1.remaining();
    let paused_at = Instant::now();
    let paused = Paused::stop(vec![pid]);
    let reason = timeout(Duration::from_secs(3), t1.revoked()).await.unwrap();
    let ended_after = paused_at.elapsed();
    eprintln!("pause: term had {left:?} left; ended after {ended_after:?} with {reason:?}");
    assert_eq!(reason, RevokeReason::DeadlinePassed);
    assert!(!t1.is_valid());
    assert!(ended_after + Duration::from_millis(20) >= left && ended_after <= left + Duration::from_millis(300));
    sleep((config.lease_duration() * 2).saturating_sub(paused_at.elapsed())).await;
    drop(paused);
    let resumed = Instant::now();
    let t2 = wait_leader(&e1, Duration::from_secs(10)).await;
    eprintln!("pause: new term {} after {:?} from SIGCONT", t2.token(), resumed.elapsed());
    assert!(t2.token() > t1.token());
    assert_ne!(c1.session_id().unwrap(), session1, "the expired session came back");

    // (2) kill -9 and restart, data kept. Client 2's backend connects before the kill, so
    // its release watch must survive the reconnection.
    let b_c2 = backend(&url).await;
    let c2 = Simba::new(b_c2.clone(), config).unwrap();
    let b = backend(&url).await;
    let s = b.open_session(Duration::from_secs(5)).await.unwrap().id;
    let Acquire::Won(before) = b.acquire(&s, &unique("restart")).await.unwrap() else { panic!() };
    server.kill();
    let killed = Instant::now();
    server.restart();
    eprintln!("restart: server back after {:?}", killed.elapsed());
    // The restart may be shorter than the lease: then the session (restored by the server
    // from its data dir) and its term survive. Either way no token goes backwards.
    let t3 = wait_leader(&e1, Duration::from_secs(15)).await;
    assert!(t3.token() >= t2.token());
    let b2 = backend(&url).await;
    let s2 = b2.open_session(Duration::from_secs(5)).await.unwrap().id;
    let Acquire::Won(after) = b2.acquire(&s2, &unique("restart")).await.unwrap() else { panic!() };
    eprintln!(
        "restart: token {before} before the kill, {after} after; engine term {} -> {} ({})",
        t2.token(),
        t3.token(),
        if t3.token() == t2.token() { "the session survived the restart" } else { "new session" }
    );
    assert!(after > before);

    // Releases are still broadcast to client 2 once its shared connection is back (the
    // driver reconnects with a backoff): it watches again after the reconnection.
    timeout(Duration::from_secs(10), b_c2.members("probe")).await.unwrap().unwrap();
    // The driver's reconnection and the watcher's re-registration are separate steps: probe
    // with releases of another name until one is heard, so that the handover below measures
    // the watch (K2) and not the candidate's retry timer. Without re-registration this fails.
    let mut heard = b_c2.subscribe_releases().unwrap();
    let probe = unique("rewatch");
    let rewatch = Instant::now();
    let rewatched = loop {
        assert!(rewatch.elapsed() < Duration::from_secs(10), "client 2 never watched releases again");
        // Client 2's own session, through client 2's backend: this also waits until that
        // session's connection is back (its driver reconnects on its own, with a backoff),
        // so that the candidate below is not refused while disconnected.
        let Some(c2_session) = c2.session_id() else {
            sleep(Duration::from_millis(100)).await;
            continue;
        };
        let token = match b_c2.acquire(&c2_session, &probe).await {
            Ok(Acquire::Won(token)) => token,
            other => {
                eprintln!("restart: probe acquisition: {other:?}; again");
                sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // The engine of client 2 may release it first, as an orphan (T6): either way the
        // node is deleted and its watch fires.
        let _ = b_c2.release(&c2_session, &probe, token).await;
        let got = timeout(Duration::from_millis(200), async {
            loop {
                match heard.recv().await {
                    Ok(n) if n == probe => break true,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break false,
                }
            }
        })
        .await;
        if got == Ok(true) {
            break rewatch.elapsed();
        }
    };
    eprintln!("restart: client 2 hears releases again {rewatched:?} after its reconnection");
    // Client 1 releases through its own session's connection, which its driver may still be
    // re-establishing (a stop then cannot delete the node until it is back).
    let back = session_usable(&b_c1, &c1).await;
    eprintln!("restart: client 1's session connection usable {back:?} later");
    // Client 2's engine may still be replacing a session it gave up during the outage: the
    // candidate contends once a session is live.
    let since = Instant::now();
    timeout(Duration::from_secs(10), c2.live()).await.unwrap().unwrap();
    eprintln!("restart: client 2 live after {:?} more (session {:?})", since.elapsed(), c2.session_id());
    let e2 = c2.election(name.clone());
    e2.start(()).unwrap();
    sleep(Duration::from_millis(300)).await;
    let leading = e1.term().map(|t| (t.token(), t.is_valid(), t.remaining()));
    let start = Instant::now();
    e1.stop().await;
    let t4 = wait_leader(&e2, Duration::from_secs(3)).await;
    eprintln!(
        "restart: handover after the restart took {:?} (client 1's term before stop: {leading:?}; client 2's term {})",
        start.elapsed(),
        t4.token()
    );
    let took = start.elapsed();
    assert!(took < config.renew_interval() / 4, "handover took {took:?}: the release watch did not wake client 2");
    assert!(t4.token() > t3.token() && t4.token() > after, "token {} after {} and {after}", t4.token(), t3.token());
    for (b, s) in [(&b, &s), (&b2, &s2)] {
        b.close_session(s).await.unwrap();
    }
    c1.close().await;
    c2.close().await;
}
