//! etcd backend behaviour beyond the conformance suite, on the private servers of
//! `scripts/backends.sh`, in real time: the server suite of the test kit
//! (`simba::tck::servers`: connection errors, graceful handovers, the server paused longer
//! than the lease, killed and restarted with its data), then what is etcd's own: tokens and
//! key layout, whole-second grants (D4), several endpoints, renewal cost on the wire and on
//! the server (S1), and the watch's mirror (a lease won by an abandoned attempt, keys deleted
//! or overwritten by hand: T6, checked here rather than with the suite's `take_over`, which
//! keeps the lease's token: etcd's token is the key's create revision, so a takeover by hand
//! deletes or replaces the key).
//!
//! Every test that uses the server takes [`SERIAL`]: some pause and restart the shared
//! server, and one reads server-wide counters.

#![allow(clippy::print_stderr)] // The figures (messages per renewal, handover times) are printed for the report.

use std::collections::BTreeMap;
use std::time::Duration;

use simba::RevokeReason;
use simba::backend::etcd::EtcdBackend;
use simba::backend::etcd::etcd_client::{self, GetOptions, PutOptions};
use simba::backend::{Acquire, Backend, HeldDigest, Join, KeepAlive};
use simba::tck::conformance::unique;
use simba::tck::servers::{self as suite, ServerHooks, client, open, wait_leader, won};
use simba_tests::proxy::{FaultProxy, Mode};
use simba_tests::servers::{self, MessageParser, Paused, Server, Wire};
use simba_tests::url_or_skip;
use tokio::time::{Instant, sleep, timeout};

use crate::SERIAL;

async fn connect(url: &str) -> EtcdBackend {
    servers::connected(url, EtcdBackend::connect(url).await)
}

/// The lease key `name` as the store has it (`None` when absent).
async fn raw_key(b: &EtcdBackend, name: &str) -> Option<etcd_client::KeyValue> {
    let mut kv = b.client().get(b.lease_key(name), None).await.expect("get").take_kvs();
    kv.pop()
}

/// The server suite's hooks: the server killed, restarted and paused by its PID.
async fn hooks() -> ServerHooks<EtcdBackend> {
    let Some(url) = simba_tests::server_url("SIMBA_TEST_ETCD_URL") else {
        panic!("SIMBA_TEST_ETCD_URL is not set: run `eval \"$(bash scripts/backends.sh start)\"` first");
    };
    let server = Server::from_env("etcd", "SIMBA_TEST_ETCD_PIDFILE");
    let (u1, u2, s1, s2) = (url.clone(), url.clone(), server.clone(), server.clone());
    ServerHooks::new("etcd", move || {
        let url = u1.clone();
        async move { connect(&url).await }
    })
    .kill_and_restart(
        move || {
            let server = s1.clone();
            async move { server.kill() }
        },
        move || {
            let server = s2.clone();
            async move { server.restart() }
        },
    )
    // A fresh session on a fresh connection: tokens go on from the revision before the kill
    // (the data survived), on any key.
    .after_restart(move |_, _, after| {
        let url = u2.clone();
        async move {
            let fresh = connect(&url).await;
            let s = open(&fresh).await;
            assert!(won(&fresh, &s, &unique("after-restart")).await > after.token());
            fresh.close_session(&s).await.expect("close");
        }
    })
    .hears_releases_within(Duration::from_secs(5))
    .pause(move || {
        let server = server.clone();
        async move { Paused::stop(vec![server.pid()]) }
    })
    .connect_url(async |url: String| EtcdBackend::connect(&url).await)
    .refused("etcd://alice:s3cret@127.0.0.1:1", "etcd://alice@127.0.0.1:1")
    // Bounded by the 5 s connect timeout.
    .silent(|port| (format!("etcd://127.0.0.1:{port}/simba"), format!("etcd://127.0.0.1:{port}/simba")))
    .misconfigured(&[
        ("etcd://", "every endpoint needs host:port"),
        ("etcd://:s3cret@127.0.0.1:2379", "credentials"),
        ("etcd://127.0.0.1", "host:port"),
        ("etcd://127.0.0.1:2379?tls=true", "ca_file"),
        ("etcd://127.0.0.1:2379?tls=true&ca_file=/nonexistent/ca.pem", "cannot read the CA file /nonexistent/ca.pem"),
        ("etcd://127.0.0.1:2379/a/../b", "`..`"),
        ("http://127.0.0.1:2379", "etcd://"),
    ])
}

simba::server_suite!(hooks, [kill_and_restart, pause, refused, silent, misconfigured]);

/// T3: a token is the lease key's create revision: strictly increasing from term to term,
/// across releases, closes, new sessions and another node, and the same when a session
/// re-acquires what it holds. The key is attached to the session's etcd lease and names the
/// session; closing the session deletes it. Runs under its own key prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_create_revisions_and_strictly_increase() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let prefix = unique("simba-test");
    let b = connect(&format!("{url}/{prefix}")).await;
    assert_eq!(b.prefix(), prefix);
    let name = unique("t3");
    assert_eq!(b.lease_key(&name), format!("{prefix}/lease/{name}"));
    let s = open(&b).await;
    let mut last = 0;
    for _ in 0..5 {
        let t = won(&b, &s, &name).await;
        assert!(t > last, "token {t} after {last}");
        assert_eq!(won(&b, &s, &name).await, t, "re-acquiring one's own lease keeps the token");
        let kv = raw_key(&b, &name).await.expect("the lease key exists");
        assert_eq!(kv.create_revision(), t as i64);
        assert_eq!(Some(kv.lease()), EtcdBackend::etcd_lease(&s));
        assert_eq!(kv.value(), s.as_str().as_bytes());
        assert!(b.release(&s, &name, t).await.expect("release"));
        assert!(raw_key(&b, &name).await.is_none(), "a released lease key survived");
        last = t;
    }
    let t = won(&b, &s, &name).await;
    b.join_group(&s, "g").await.expect("join");
    b.close_session(&s).await.expect("close");
    let left = b.client().get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await.expect("get");
    let keys: Vec<String> = left.kvs().iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect();
    assert!(keys.is_empty(), "keys survived the close: {keys:?}");
    // Another node (its own connection) continues the sequence.
    let other = connect(&format!("{url}/{prefix}")).await;
    let s2 = open(&other).await;
    let t2 = won(&other, &s2, &name).await;
    eprintln!("T3 on etcd: tokens went up to {t}, then {t2} on another node");
    assert!(t2 > t);
    other.close_session(&s2).await.expect("close");
    // Another prefix is another namespace.
    let third = connect(&format!("{url}/{prefix}-other")).await;
    let s3 = open(&third).await;
    assert!(matches!(third.acquire(&s3, &name).await.expect("acquire"), Acquire::Won(_)));
    third.close_session(&s3).await.expect("close");
}

/// D4: etcd grants whole seconds: a 2.7 s request is granted 2 s, which every renewal
/// reports, and less than a second is granted the server's minimum (1 s on the test server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_are_whole_seconds() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let g = b.open_session(Duration::from_millis(2700)).await.expect("open");
    assert_eq!(g.remaining, Duration::from_secs(2));
    for _ in 0..2 {
        match b.keep_alive(&g.id, HeldDigest::default()).await.expect("keep_alive") {
            KeepAlive::Alive { remaining, digest_matches } => {
                assert_eq!(remaining, Duration::from_secs(2));
                assert!(digest_matches);
            }
            KeepAlive::Expired => panic!("expired"),
        }
    }
    let short = b.open_session(Duration::from_millis(300)).await.expect("open");
    assert_eq!(short.remaining, Duration::from_secs(1));
    // Another backend instance renews a session it did not open, with the same grant.
    let other = connect(&url).await;
    assert!(matches!(
        other.keep_alive(&g.id, HeldDigest::default()).await.expect("keep_alive"),
        KeepAlive::Alive { remaining, .. } if remaining == Duration::from_secs(2)
    ));
    for id in [&g.id, &short.id] {
        b.close_session(id).await.expect("close");
        assert_eq!(other.keep_alive(id, HeldDigest::default()).await.expect("keep_alive"), KeepAlive::Expired);
    }
}

/// Several endpoints: requests go to those that answer. A list with a dead endpoint works;
/// an endpoint that stops answering is dropped from the channel within a couple of seconds
/// (the backend checks each one every second), and taken back once it answers again: with two
/// endpoints behind fault proxies, cutting one then the other keeps every call working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_that_do_not_answer_are_skipped() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let live = url.trim_start_matches("etcd://");
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let b = connect(&format!("etcd://127.0.0.1:{dead},{live}")).await;
    assert!(b.describe().contains(&format!("127.0.0.1:{dead},{live}")), "{}", b.describe());
    let works = async |b: &EtcdBackend, what: &str| {
        let s = open(b).await;
        for _ in 0..10 {
            let name = unique("endpoints");
            let t = won(b, &s, &name).await;
            assert!(b.release(&s, &name, t).await.expect("release"), "{what}");
            let r = b.keep_alive(&s, HeldDigest::default()).await;
            assert!(matches!(r, Ok(KeepAlive::Alive { .. })), "{what}: {r:?}");
        }
        b.close_session(&s).await.expect("close");
    };
    works(&b, "one dead endpoint of two").await;

    let upstream: std::net::SocketAddr = live.parse().expect("host:port");
    let (one, two) =
        (FaultProxy::start(upstream).await.expect("proxy"), FaultProxy::start(upstream).await.expect("proxy"));
    let b = connect(&format!("etcd://{},{}", one.addr(), two.addr())).await;
    works(&b, "both endpoints").await;
    one.set(Mode::Cut);
    sleep(Duration::from_millis(2500)).await;
    works(&b, "the first endpoint cut").await;
    one.restore();
    sleep(Duration::from_millis(2500)).await;
    two.set(Mode::Cut);
    sleep(Duration::from_millis(2500)).await;
    works(&b, "the first endpoint back, the second cut").await;
}

// ---- S1 on the wire and on the server -------------------------------------------------------

/// Splits the client's byte stream into HTTP/2 frames (after the 24-byte connection
/// preface) and names them by type: a renewal on an open stream is one DATA frame.
#[derive(Default)]
struct FrameParser {
    buf: Vec<u8>,
    preface_seen: bool,
}

impl MessageParser for FrameParser {
    type Kind = &'static str;

    fn feed(&mut self, bytes: &[u8]) -> Vec<&'static str> {
        self.buf.extend_from_slice(bytes);
        if !self.preface_seen {
            if self.buf.len() < 24 {
                return Vec::new();
            }
            self.buf.drain(..24);
            self.preface_seen = true;
        }
        let mut frames = Vec::new();
        while self.buf.len() >= 9 {
            let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
            if self.buf.len() < 9 + len {
                break;
            }
            frames.push(match self.buf[3] {
                0 => "DATA",
                1 => "HEADERS",
                3 => "RST_STREAM",
                4 => "SETTINGS",
                6 => "PING",
                7 => "GOAWAY",
                8 => "WINDOW_UPDATE",
                _ => "OTHER",
            });
            self.buf.drain(..9 + len);
        }
        frames
    }
}

/// gRPC messages the server has received, by method (etcd's `/metrics` on the client port).
async fn grpc_messages(port: u16) -> BTreeMap<String, u64> {
    grpc_counter(port, "grpc_server_msg_received_total").await
}

/// A gRPC counter of the server, by method of etcd's services.
async fn grpc_counter(port: u16, metric: &str) -> BTreeMap<String, u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to /metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.expect("request /metrics");
    let mut text = String::new();
    s.read_to_string(&mut text).await.expect("read /metrics");
    let mut m = BTreeMap::new();
    // etcd's own services only (`grpc.health.v1.Health` has a `Watch` method too).
    let ours = |l: &&str| l.starts_with(metric) && l[metric.len()..].starts_with('{') && l.contains("etcdserverpb.");
    for line in text.lines().filter(ours) {
        let method = line.split("grpc_method=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
        let n: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
        m.insert(method.to_owned(), n as u64);
    }
    m
}

/// S1: a renewal is one `LeaseKeepAlive` message on the session's open stream (one DATA
/// frame, no new stream, no other request), with the same bytes whether the session holds 1
/// lease or 1,000. The digest is compared with the watch's mirror, so nothing but the
/// keep-alive crosses the wire. Counted twice: on the wire by a proxy (HTTP/2 frames), and
/// by the server (gRPC messages by method, from its `/metrics`).
///
/// The server (gRPC-go) answers every DATA frame it receives with a PING of its own
/// (bandwidth estimation), which the client acknowledges: one PING frame up per renewal,
/// whatever the leases. The proxy counts that acknowledgement as a round trip when the PING
/// reaches the client before the reply, so its raw round-trip count lies between one and two
/// per renewal; the call itself waits for one reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_is_one_keep_alive_message_whatever_the_leases() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let upstream = url.trim_start_matches("etcd://").to_owned();
    let port: u16 = upstream.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).expect("a port in the URL");
    let _serial = SERIAL.lock().await;
    let wire = Wire::<FrameParser>::start(upstream).await;
    // A prefix of its own: no other test's lease changes reach this backend's watch.
    let b = connect(&format!("etcd://127.0.0.1:{}/{}", wire.port(), unique("simba-s1"))).await;
    const N: u64 = 50;
    let mut figures = Vec::new();
    for held in [1usize, 1000] {
        let before = grpc_messages(port).await;
        let traffic = servers::renewal_traffic(&b, &wire, &unique("s1"), held, N).await;
        let after = grpc_messages(port).await;
        let calls: BTreeMap<String, u64> = after
            .into_iter()
            .map(|(k, v)| {
                let d = v - before.get(&k).copied().unwrap_or(0);
                (k, d)
            })
            .filter(|(_, v)| *v > 0)
            .collect();
        eprintln!("S1 on etcd, {held} lease(s), per renewal over {N} renewals: {}", traffic.per(N));
        eprintln!(
            "  gRPC messages the server received (open, {held} acquisitions, 3 warm-up renewals, close): {calls:?}"
        );
        // Nothing but keep-alive messages for the renewals: no read, no transaction.
        let expected: BTreeMap<String, u64> =
            [("LeaseGrant", 1), ("Put", 1), ("Txn", held as u64), ("LeaseKeepAlive", N + 3), ("LeaseRevoke", 1)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        assert_eq!(calls, expected, "the server received other messages than expected");
        figures.push(traffic);
    }
    for t in &figures {
        assert_eq!(t.messages.get("DATA"), Some(&N), "one message per renewal: {t:?}");
        assert!(t.messages.keys().all(|k| matches!(*k, "DATA" | "PING" | "WINDOW_UPDATE")), "{t:?}");
        assert!(t.messages.get("PING").is_none_or(|p| *p <= N), "{t:?}");
        assert!(t.round_trips >= N && t.round_trips <= 2 * N, "{t:?}");
    }
    let (one, many) = (&figures[0], &figures[1]);
    // The same request; the reply differs at most in the digits of the store's revision
    // (varint bytes) and in the lease id's length.
    let per = |v: u64| v as f64 / N as f64;
    assert!((per(one.bytes_up) - per(many.bytes_up)).abs() <= 1.0, "bytes up {one:?} vs {many:?}");
    assert!((per(one.bytes_down) - per(many.bytes_down)).abs() <= 2.0, "bytes down {one:?} vs {many:?}");
}

/// The streams live as long as they work: 30 renewals over 12 s go over the one
/// `LeaseKeepAlive` stream the first renewal opened, and the watch (silent for more than 10 s
/// on a prefix of its own, so probed with a progress request) is still the one opened at
/// connect, and still hears a release. Counted by the server (streams started, by method).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_outlive_quiet_periods() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let port: u16 = url.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).expect("a port in the URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&format!("{url}/{}", unique("simba-streams"))).await;
    let mut rx = b.subscribe_releases().expect("etcd broadcasts releases");
    let s = open(&b).await;
    let before = grpc_counter(port, "grpc_server_started_total").await;
    let sent_before = grpc_messages(port).await;
    let start = Instant::now();
    let mut renewals = 0;
    while start.elapsed() < Duration::from_secs(12) {
        let r = b.keep_alive(&s, HeldDigest::default()).await.expect("keep_alive");
        assert!(matches!(r, KeepAlive::Alive { digest_matches: true, .. }), "{r:?}");
        renewals += 1;
        sleep(Duration::from_millis(400)).await;
    }
    let after = grpc_counter(port, "grpc_server_started_total").await;
    let sent_after = grpc_messages(port).await;
    let started = |m: &str| after.get(m).copied().unwrap_or(0) - before.get(m).copied().unwrap_or(0);
    let probes = sent_after.get("Watch").copied().unwrap_or(0) - sent_before.get("Watch").copied().unwrap_or(0);
    eprintln!(
        "{renewals} renewals over {:?}: keep-alive streams started {}, watch streams started {}, watch requests \
         (progress probes) {probes}",
        start.elapsed(),
        started("LeaseKeepAlive"),
        started("Watch")
    );
    assert!(probes >= 1, "the silent watch was never probed");
    assert_eq!(started("LeaseKeepAlive"), 1, "the keep-alive stream was opened again");
    assert_eq!(started("Watch"), 0, "the watch was made again");
    let name = unique("after-quiet");
    let t = won(&b, &s, &name).await;
    assert!(b.release(&s, &name, t).await.expect("release"));
    timeout(Duration::from_secs(2), suite::recv_name(&mut rx, &name)).await.expect("the watch still hears releases");
    b.close_session(&s).await.expect("close");
}

/// The mirror sees what the backend's replies cannot tell: a lease key attached to the
/// session's lease by a write whose reply was lost (as an abandoned acquisition) makes the
/// next keep-alive's digest differ, `owned` lists it, and the digest of that listing matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_won_by_an_abandoned_attempt_is_seen() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = open(&b).await;
    let kept = unique("kept");
    let held = vec![(kept.clone(), won(&b, &s, &kept).await)];
    let lease = EtcdBackend::etcd_lease(&s).expect("an etcd session id");
    let lost = unique("lost");
    let put = PutOptions::new().with_lease(lease);
    b.client().put(b.lease_key(&lost), s.as_str(), Some(put)).await.expect("put");
    let mismatch = timeout(Duration::from_secs(2), async {
        loop {
            let r = b.keep_alive(&s, HeldDigest::of(&held)).await.expect("keep_alive");
            if matches!(r, KeepAlive::Alive { digest_matches: false, .. }) {
                return;
            }
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(mismatch.is_ok(), "the watch never showed the lease won behind the backend's back");
    let owned = b.owned(&s).await.expect("owned");
    assert!(owned.iter().any(|(n, _)| *n == lost) && owned.len() == 2, "{owned:?}");
    let r = b.keep_alive(&s, HeldDigest::of(&owned)).await.expect("keep_alive");
    assert!(matches!(r, KeepAlive::Alive { digest_matches: true, .. }), "{r:?}");
    b.close_session(&s).await.expect("close");
}

/// T6: an operator deletes the lease key by hand (`etcdctl del`): the term ends with
/// `TakenOver` at the next renewal (every 400 ms), and the election wins the lease back with
/// a higher token (a new create revision). Then the operator puts the key without a lease
/// (pinning it): the term ends with `TakenOver` again, the election cannot win it while the
/// key stays, and wins it once the operator deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_deleted_or_overwritten_by_hand_end_the_term_with_taken_over() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let c = client(b.clone());
    let name = unique("takeover");
    let e = c.election(name.clone());
    e.start(()).expect("start");
    let t1 = wait_leader(&e, Duration::from_secs(5)).await;
    let mut raw = b.client();
    let deleted = raw.delete(b.lease_key(&name), None).await.expect("delete");
    let deleted_at = deleted.header().map_or(0, |h| h.revision()) as u64;
    let taken = Instant::now();
    let reason = timeout(Duration::from_secs(2), t1.revoked()).await.expect("the term must end within 2 s");
    eprintln!("T6 on etcd: a key deleted by hand was noticed after {:?}", taken.elapsed());
    assert_eq!(reason, RevokeReason::TakenOver);
    assert!(taken.elapsed() < Duration::from_millis(900), "noticed after {:?}", taken.elapsed());
    let t2 = wait_leader(&e, Duration::from_secs(3)).await;
    assert!(t2.token() > deleted_at && deleted_at > t1.token(), "{} -> {deleted_at} -> {}", t1.token(), t2.token());

    let pinned = raw.put(b.lease_key(&name), "operator", None).await.expect("put");
    let pinned_at = pinned.header().map_or(0, |h| h.revision()) as u64;
    let taken = Instant::now();
    let reason = timeout(Duration::from_secs(2), t2.revoked()).await.expect("the term must end within 2 s");
    eprintln!("T6 on etcd: a key overwritten by hand was noticed after {:?}", taken.elapsed());
    assert_eq!(reason, RevokeReason::TakenOver);
    sleep(Duration::from_millis(800)).await;
    assert!(e.term().is_none(), "the election took a key pinned by hand");
    raw.delete(b.lease_key(&name), None).await.expect("delete");
    let t3 = wait_leader(&e, Duration::from_secs(3)).await;
    assert!(t3.token() > pinned_at);
    e.stop().await;
    c.close().await;
}

/// The watch task ends when the backend's last clone is dropped: its receivers see the
/// channel close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_ends_with_the_backend() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let clone = b.clone();
    let mut rx = b.subscribe_releases().expect("etcd broadcasts releases");
    let s = open(&b).await;
    let name = unique("k2");
    let t = won(&b, &s, &name).await;
    assert!(clone.release(&s, &name, t).await.expect("release"));
    timeout(Duration::from_secs(2), suite::recv_name(&mut rx, &name)).await.expect("heard the release");
    b.close_session(&s).await.expect("close");
    drop(b);
    drop(clone);
    let closed = timeout(Duration::from_secs(2), suite::closed(&mut rx)).await;
    assert!(closed.is_ok(), "the watch task outlived the backend");
}

/// A session whose lease is gone answers `Expired` everywhere (S3), joins included, and
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_session_is_expired_everywhere() {
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let b = connect(&url).await;
    let s = open(&b).await;
    let lease = EtcdBackend::etcd_lease(&s).expect("an etcd session id");
    // Revoked behind the backend's back, as an operator (or an expiry) would.
    b.client().lease_revoke(lease).await.expect("revoke");
    assert_eq!(b.keep_alive(&s, HeldDigest::default()).await.expect("keep_alive"), KeepAlive::Expired);
    assert_eq!(b.acquire(&s, &unique("s3")).await.expect("acquire"), Acquire::Expired);
    assert_eq!(b.join_group(&s, "g").await.expect("join_group"), Join::Expired);
    assert!(b.members("g").await.expect("members").iter().all(|m| m != &s), "a dead session joined a group");
    assert!(!b.release(&s, &unique("s3"), 1).await.expect("release"));
    b.close_session(&s).await.expect("closing a revoked session succeeds");
}

/// Issue 38: the control watch broadcasts control changes (a run-now request, a pause), not
/// the claims that rewrite a job's control row (the ledger's last slot, a request taken). A
/// claim heard as a change woke every job's scheduler of every holder for a run-now claim
/// after every claim of a 100 ms job, and in the operator scenario a real request then waited
/// more than 5 s for its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_watch_broadcasts_control_changes_and_not_claims() {
    use simba::job_store::{Claim, ClaimRequest, SlotKind};
    let url = url_or_skip!("SIMBA_TEST_ETCD_URL");
    let _serial = SERIAL.lock().await;
    let prefix = unique("simba-test");
    let b = connect(&format!("{url}/{prefix}")).await;
    let store = b.job_store().expect("etcd has a jobs store");
    let mut rx = store.subscribe_control().expect("etcd broadcasts control changes");
    let s = open(&b).await;
    let job = unique("job");
    let token = won(&b, &s, &job).await;
    // The watch is in place once a change made now is heard.
    store.set_paused(&job, false).await.expect("create the control row");
    let first = timeout(Duration::from_secs(5), rx.recv()).await;
    assert!(matches!(&first, Ok(Ok(n)) if *n == job), "the control row's creation was not heard: {first:?}");
    let now = chrono::Utc::now().timestamp_millis();
    for (i, slot_ms) in [now, now + 100, now + 200].into_iter().enumerate() {
        let req = ClaimRequest {
            session: &s,
            lease: &job,
            token,
            job: &job,
            slot_ms,
            kind: SlotKind::Scheduled,
            node: "n",
            started_ms: slot_ms,
            attempts: 1,
        };
        let claimed = store.claim_run(req).await.expect("claim");
        assert!(matches!(claimed, Claim::Claimed(_)), "claim {i}: {claimed:?}");
    }
    let heard = timeout(Duration::from_millis(700), rx.recv()).await;
    assert!(heard.is_err(), "a claim was broadcast as a control change: {heard:?}");
    store.trigger(&job, "backend-test-1", now + 300).await.expect("trigger");
    let heard = timeout(Duration::from_secs(5), rx.recv()).await;
    assert!(matches!(&heard, Ok(Ok(n)) if *n == job), "the run-now request was not heard: {heard:?}");
    store.set_paused(&job, true).await.expect("pause");
    let heard = timeout(Duration::from_secs(5), rx.recv()).await;
    assert!(matches!(&heard, Ok(Ok(n)) if *n == job), "the pause was not heard: {heard:?}");
    b.close_session(&s).await.expect("close");
}
