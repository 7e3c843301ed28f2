//! A TCP fault proxy for tests (tokio): forwards a local port to a server and can add latency,
//! cut every connection with a reset, black-hole traffic (accept, then stop forwarding), and
//! restore normal forwarding. It only ever listens on and connects to loopback addresses the
//! test gives it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward at once.
    #[default]
    Forward,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Accept connections, but forward nothing in either direction: bytes wait in the socket
    /// buffers, and the peers see a silent connection (as behind a dead route, TCP keeps what
    /// was sent and delivers it in order if the route comes back).
    BlackHole,
    /// Reset every open connection and every new one.
    Cut,
}

/// A running proxy. Dropping it stops it and closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (a loopback address).
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        assert!(upstream.ip().is_loopback(), "the fault proxy only forwards to loopback addresses");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, rx) = watch::channel(Mode::Forward);
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let c = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                let rx = rx.clone();
                let h = tokio::spawn(async move {
                    let _ = serve(client, upstream, rx).await;
                });
                let mut conns = c.lock().unwrap_or_else(PoisonError::into_inner);
                conns.retain(|h| !h.is_finished());
                conns.push(h);
            }
        });
        Ok(FaultProxy { addr, mode, task, conns })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode for open and new connections.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Back to plain forwarding.
    pub fn restore(&self) {
        self.set(Mode::Forward);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        for h in self.conns.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            h.abort();
        }
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, mode: watch::Receiver<Mode>) -> std::io::Result<()> {
    if *mode.borrow() == Mode::Cut {
        reset(client);
        return Ok(());
    }
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    // Closing a socket with SO_LINGER 0 sends a reset: that is how `Cut` cuts.
    client.set_zero_linger()?;
    server.set_zero_linger()?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, mode.clone()));
    let down = tokio::spawn(pump(sr, cw, mode));
    let _ = up.await;
    let _ = down.await;
    Ok(())
}

fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Black hole: stop reading until the mode changes.
        while *mode.borrow() == Mode::BlackHole {
            if mode.changed().await.is_err() {
                to.forget();
                return Ok(());
            }
        }
        if *mode.borrow() == Mode::Cut {
            to.forget();
            return Ok(());
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => r?,
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == Mode::Cut {
                    // A dropped write half would shut the stream down (a FIN); forgotten, the
                    // stream closes with SO_LINGER 0 once both halves are gone: a reset.
                    to.forget();
                    return Ok(());
                }
                continue;
            }
        };
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        let m = *mode.borrow();
        match m {
            Mode::Forward => to.write_all(&buf[..n]).await?,
            Mode::Latency(d) => {
                tokio::time::sleep(d).await;
                to.write_all(&buf[..n]).await?;
            }
            // Went dark while this chunk was read: hold it until the route comes back.
            Mode::BlackHole => {
                while *mode.borrow() == Mode::BlackHole {
                    if mode.changed().await.is_err() {
                        break;
                    }
                }
                if *mode.borrow() == Mode::Cut {
                    to.forget();
                    return Ok(());
                }
                to.write_all(&buf[..n]).await?;
            }
            Mode::Cut => {
                to.forget();
                return Ok(());
            }
        }
    }
}
