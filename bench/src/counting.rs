//! A counting TCP proxy: forwards a loopback port to a server and counts the bytes in each
//! direction and the request/response exchanges (round trips).
//!
//! An exchange is counted each time the client sends after the server last spoke (or for the
//! first time) on a connection: a request, whatever the number of TCP segments it takes, and
//! its reply count as one round trip. Pipelined requests sent before any reply count as one,
//! which is what they cost in latency.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Traffic counters, totals since the proxy started.
#[derive(Default, Debug)]
pub(crate) struct Counters {
    /// Bytes client -> server.
    pub(crate) up: AtomicU64,
    /// Bytes server -> client.
    pub(crate) down: AtomicU64,
    /// Request/response exchanges.
    pub(crate) exchanges: AtomicU64,
}

/// A reading of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    /// Bytes client -> server.
    pub(crate) up: u64,
    /// Bytes server -> client.
    pub(crate) down: u64,
    /// Request/response exchanges.
    pub(crate) exchanges: u64,
}

impl Traffic {
    /// `self - earlier`.
    pub(crate) fn since(self, earlier: Traffic) -> Traffic {
        Traffic {
            up: self.up - earlier.up,
            down: self.down - earlier.down,
            exchanges: self.exchanges - earlier.exchanges,
        }
    }
}

/// A running counting proxy; dropping it stops accepting (open connections keep running until
/// their peers close).
pub(crate) struct CountingProxy {
    addr: SocketAddr,
    counters: Arc<Counters>,
    conns: Arc<Mutex<Vec<Arc<Counters>>>>,
    task: JoinHandle<()>,
}

impl CountingProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> std::io::Result<CountingProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::default());
        let c = Arc::clone(&counters);
        let conns: Arc<Mutex<Vec<Arc<Counters>>>> = Arc::default();
        let cs = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let c = Arc::clone(&c);
                let mine = Arc::new(Counters::default());
                cs.lock().unwrap_or_else(PoisonError::into_inner).push(Arc::clone(&mine));
                tokio::spawn(async move {
                    let _ = serve(client, upstream, c, mine).await;
                });
            }
        });
        Ok(CountingProxy { addr, counters, conns, task })
    }

    /// The address clients connect to.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters now.
    pub(crate) fn read(&self) -> Traffic {
        read(&self.counters)
    }

    /// The counters of each connection so far, in the order they were accepted.
    pub(crate) fn per_connection(&self) -> Vec<Traffic> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|c| read(c)).collect()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn read(c: &Counters) -> Traffic {
    Traffic {
        up: c.up.load(Ordering::SeqCst),
        down: c.down.load(Ordering::SeqCst),
        exchanges: c.exchanges.load(Ordering::SeqCst),
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, c: Arc<Counters>, mine: Arc<Counters>) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // true while the server spoke last: the next client bytes start a new exchange.
    let server_spoke = Arc::new(AtomicBool::new(true));
    let (c1, s1, m1) = (Arc::clone(&c), Arc::clone(&server_spoke), Arc::clone(&mine));
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                let _ = sw.shutdown().await;
                return Ok::<_, std::io::Error>(());
            }
            if s1.swap(false, Ordering::SeqCst) {
                c1.exchanges.fetch_add(1, Ordering::SeqCst);
                m1.exchanges.fetch_add(1, Ordering::SeqCst);
            }
            c1.up.fetch_add(n as u64, Ordering::SeqCst);
            m1.up.fetch_add(n as u64, Ordering::SeqCst);
            sw.write_all(&buf[..n]).await?;
        }
    });
    let down = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                let _ = cw.shutdown().await;
                return Ok::<_, std::io::Error>(());
            }
            c.down.fetch_add(n as u64, Ordering::SeqCst);
            mine.down.fetch_add(n as u64, Ordering::SeqCst);
            server_spoke.store(true, Ordering::SeqCst);
            cw.write_all(&buf[..n]).await?;
        }
    });
    let _ = up.await;
    let _ = down.await;
    Ok(())
}
