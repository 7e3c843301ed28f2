//! The TCP fault proxy of the test utilities: forward, latency, cut with reset, black-hole,
//! restore; and an engine on Redis behind it.

use std::time::{Duration, Instant};

use simba_tests::proxy::{FaultProxy, Mode};
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
