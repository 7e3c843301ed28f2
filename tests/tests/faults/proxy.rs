//! The TCP fault proxy of the test utilities: forward, latency, cut with reset, black-hole,
//! restore; and the degraded-network modes of issue 16 item 2 (latency with jitter, stalls, a
//! bandwidth limit, one-way partitions), each measured against an echo server with generous
//! margins (behaviour, not timing benchmarks).

use std::time::{Duration, Instant};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use simba_tests::proxy::{FaultProxy, Mode, Modes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo_server() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn roundtrip(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.write_all(b"ping").await.ok()?;
    let mut buf = [0u8; 4];
    match tokio::time::timeout(within, s.read_exact(&mut buf)).await {
        Ok(Ok(_)) if &buf == b"ping" => Some(start.elapsed()),
        _ => None,
    }
}

#[tokio::test]
async fn proxy_modes() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert!(roundtrip(&mut s, Duration::from_secs(1)).await.is_some(), "forward");

    proxy.set(Mode::Latency(Duration::from_millis(100)));
    let rtt = roundtrip(&mut s, Duration::from_secs(2)).await.expect("latency");
    assert!(rtt >= Duration::from_millis(200), "two hops of 100 ms, got {rtt:?}");

    proxy.set(Mode::BlackHole);
    assert!(roundtrip(&mut s, Duration::from_millis(300)).await.is_none(), "black hole answered");
    // The route comes back: what was sent arrives, in order, as TCP would deliver it.
    proxy.restore();
    let mut late = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut late)).await.expect("delivered").expect("read");
    assert_eq!(&late, b"ping");
    assert!(roundtrip(&mut s, Duration::from_secs(1)).await.is_some(), "forward after the black hole");

    proxy.restore();
    let mut s2 = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert!(roundtrip(&mut s2, Duration::from_secs(1)).await.is_some(), "restore");

    proxy.set(Mode::Cut);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut buf = [0u8; 4];
    let r = s2.read(&mut buf).await;
    assert!(matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset), "a cut must reset, got {r:?}");
    let mut s3 = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert!(roundtrip(&mut s3, Duration::from_millis(300)).await.is_none(), "cut connection answered");
    proxy.restore();
    let mut s4 = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert!(roundtrip(&mut s4, Duration::from_secs(1)).await.is_some(), "restore after cut");
}

/// An echo server that counts the bytes it received and, if `greeting` is set, sends it first
/// on every connection.
async fn counting_echo(greeting: Option<&'static [u8]>) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let got = Arc::new(AtomicUsize::new(0));
    let g = Arc::clone(&got);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let g = Arc::clone(&g);
            tokio::spawn(async move {
                if let Some(hello) = greeting
                    && s.write_all(hello).await.is_err()
                {
                    return;
                }
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    g.fetch_add(n, Ordering::SeqCst);
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, got)
}

/// Writes `count` numbered 8-byte messages, one every `every`, each its own segment (nodelay),
/// while reading the echo; returns the arrival instant of each message's last byte, after
/// checking that the echoed stream is exactly what was sent, in order.
async fn numbered(s: TcpStream, count: u64, every: Duration, within: Duration) -> Vec<Instant> {
    s.set_nodelay(true).expect("nodelay");
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        for i in 0..count {
            w.write_all(&i.to_be_bytes()).await.expect("write");
            tokio::time::sleep(every).await;
        }
        w
    });
    let mut arrivals = Vec::new();
    let mut buf = [0u8; 8];
    for i in 0..count {
        tokio::time::timeout(within, r.read_exact(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("message {i} did not come back within {within:?}"))
            .expect("read");
        assert_eq!(u64::from_be_bytes(buf), i, "the echo came back out of order");
        arrivals.push(Instant::now());
    }
    drop(writer.await.expect("writer"));
    arrivals
}

/// Latency with jitter: every round trip takes two delays of 25-75 ms (50 +- 25), they vary,
/// and a stream of small segments comes back in order (a chunk that drew a shorter delay
/// waits for the one ahead of it).
#[tokio::test]
async fn proxy_jitter() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    proxy.set(Mode::Jitter { base: Duration::from_millis(50), jitter: Duration::from_millis(25) });
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    let mut rtts = Vec::new();
    for _ in 0..20 {
        rtts.push(roundtrip(&mut s, Duration::from_secs(2)).await.expect("jitter round trip"));
    }
    let (lo, hi) = (rtts.iter().min().copied().unwrap_or_default(), rtts.iter().max().copied().unwrap_or_default());
    assert!(lo >= Duration::from_millis(48), "two delays of at least 25 ms, got {lo:?}");
    assert!(hi <= Duration::from_millis(400), "two delays of at most 75 ms (+ scheduling), got {hi:?}");
    assert!(hi - lo >= Duration::from_millis(10), "no jitter: round trips from {lo:?} to {hi:?}");
    // 100 segments 2 ms apart, each delayed 25-75 ms: without the order rule they would overtake.
    let s = TcpStream::connect(proxy.addr()).await.expect("connect");
    let arrivals = numbered(s, 100, Duration::from_millis(2), Duration::from_secs(5)).await;
    assert_eq!(arrivals.len(), 100);
}

/// Stalls: a steady stream (a message every 20 ms) sees gaps of about a stall (300-400 ms
/// here, one every ~300 ms), then what was held arrives, in order; without stalls the same
/// stream has no gap near that.
#[tokio::test]
async fn proxy_stall() {
    let proxy = FaultProxy::start(echo_server().await).await.expect("proxy");
    let gaps = |a: &[Instant]| a.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
    let s = TcpStream::connect(proxy.addr()).await.expect("connect");
    let calm = gaps(&numbered(s, 50, Duration::from_millis(20), Duration::from_secs(2)).await);
    assert!(calm < Duration::from_millis(150), "forwarding alone had a gap of {calm:?}");
    proxy.set(Mode::Stall {
        every: Duration::from_millis(300),
        min: Duration::from_millis(300),
        max: Duration::from_millis(400),
    });
    let s = TcpStream::connect(proxy.addr()).await.expect("connect");
    let arrivals = numbered(s, 100, Duration::from_millis(20), Duration::from_secs(5)).await;
    let stalled = gaps(&arrivals);
    assert!(stalled >= Duration::from_millis(250), "no stall of about 300 ms seen: largest gap {stalled:?}");
    assert!(stalled <= Duration::from_millis(1500), "a gap of {stalled:?}: two 400 ms stalls at most");
    // A gap that long between messages 20 ms apart means many were held and released at once.
    let bunched = arrivals.windows(2).filter(|w| w[1] - w[0] < Duration::from_millis(2)).count();
    assert!(bunched >= 5, "held messages were not released together ({bunched} arrived back to back)");
}

/// A bandwidth limit: 40,000 bytes through 20,000 bytes per second in each direction take about
/// 2 s (the two directions overlap), and well under a second without the limit; a limit on the
/// replies alone slows the round trip as much.
#[tokio::test]
async fn proxy_bandwidth() {
    let (up, _) = counting_echo(None).await;
    let proxy = FaultProxy::start(up).await.expect("proxy");
    async fn transfer(proxy: &FaultProxy, n: usize) -> Duration {
        let s = TcpStream::connect(proxy.addr()).await.expect("connect");
        let (mut r, mut w) = s.into_split();
        let start = Instant::now();
        let data = vec![7u8; n];
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.expect("write");
            w
        });
        let mut back = vec![0u8; n];
        tokio::time::timeout(Duration::from_secs(20), r.read_exact(&mut back)).await.expect("in time").expect("read");
        assert!(back.iter().all(|b| *b == 7), "bytes changed on the way");
        drop(writer.await.expect("writer"));
        start.elapsed()
    }
    let free = transfer(&proxy, 40_000).await;
    assert!(free < Duration::from_millis(800), "40 KB without a limit took {free:?}");
    proxy.set(Mode::Bandwidth(20_000));
    let limited = transfer(&proxy, 40_000).await;
    assert!(limited >= Duration::from_millis(1700), "40 KB at 20 KB/s took only {limited:?}");
    assert!(limited <= Duration::from_secs(6), "40 KB at 20 KB/s took {limited:?}");
    proxy.set_each(Modes { up: Mode::Forward, down: Mode::Bandwidth(20_000) });
    let replies = transfer(&proxy, 40_000).await;
    assert!(replies >= Duration::from_millis(1700), "40 KB of replies at 20 KB/s took only {replies:?}");
    assert!(replies <= Duration::from_secs(6), "40 KB of replies at 20 KB/s took {replies:?}");
}

/// One-way partitions. Replies held: the server receives the request at once, the client hears
/// nothing until the direction heals, then the held reply arrives. Requests held: the server's
/// greeting reaches the client, the client's request does not reach the server until it heals.
#[tokio::test]
async fn proxy_one_way() {
    let (up, got) = counting_echo(Some(b"hello")).await;
    let proxy = FaultProxy::start(up).await.expect("proxy");
    let mut hello = [0u8; 5];

    proxy.set_each(Modes { up: Mode::Forward, down: Mode::BlackHole });
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut hello)).await.is_err(),
        "the greeting came through a direction that holds replies"
    );
    assert!(roundtrip(&mut s, Duration::from_millis(400)).await.is_none(), "a reply came through");
    let deadline = Instant::now() + Duration::from_secs(1);
    while got.load(Ordering::SeqCst) < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(got.load(Ordering::SeqCst), 4, "the request did not reach the server");
    proxy.restore();
    let mut late = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut late)).await.expect("delivered").expect("read");
    assert_eq!(&late, b"helloping", "the held replies, in order");

    proxy.set_each(Modes { up: Mode::BlackHole, down: Mode::Forward });
    let mut s = TcpStream::connect(proxy.addr()).await.expect("connect");
    tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut hello)).await.expect("greeting").expect("read");
    assert_eq!(&hello, b"hello");
    let before = got.load(Ordering::SeqCst);
    assert!(roundtrip(&mut s, Duration::from_millis(400)).await.is_none(), "a held request was answered");
    assert_eq!(got.load(Ordering::SeqCst), before, "a request reached the server through a held direction");
    proxy.restore();
    let mut late = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut late)).await.expect("delivered").expect("read");
    assert_eq!(&late, b"ping");
    assert_eq!(got.load(Ordering::SeqCst), before + 4, "the held request arrived once");
    assert!(roundtrip(&mut s, Duration::from_secs(1)).await.is_some(), "forward after healing");
}
