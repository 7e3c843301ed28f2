//! A TCP listener for axum whose connections are bounded (rule O8): each one lives at most
//! a deadline from its accept, and at most a cap of them are open; a connection beyond the
//! cap closes the oldest one.
//!
//! Closing the oldest rather than refusing the newest keeps a normal scrape working when
//! idle or slow clients fill the cap: the scrape is the newest connection, and it needs a few
//! milliseconds. The deadline covers the whole exchange, the request head included, so a
//! client that sends one byte a second cannot hold a connection: a per-read timeout would let
//! it.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The connections open now, oldest first: an id and the token that closes it.
type Open = Arc<Mutex<VecDeque<(u64, CancellationToken)>>>;

/// The listener: accepts, then bounds each connection.
pub(crate) struct Bounded {
    listener: TcpListener,
    deadline: Duration,
    cap: usize,
    open: Open,
    next: u64,
    /// Cancelled when the endpoint stops: closes every connection at once.
    stop: CancellationToken,
}

impl Bounded {
    pub(crate) fn new(listener: TcpListener, deadline: Duration, cap: usize, stop: CancellationToken) -> Self {
        Bounded { listener, deadline, cap: cap.max(1), open: Arc::default(), next: 0, stop }
    }

    fn admit(&mut self, tcp: TcpStream) -> Limited {
        let close = self.stop.child_token();
        let id = self.next;
        self.next += 1;
        {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.push_back((id, close.clone()));
            while open.len() > self.cap {
                if let Some((_, oldest)) = open.pop_front() {
                    oldest.cancel();
                }
            }
        }
        Limited {
            tcp,
            deadline: Box::pin(tokio::time::sleep(self.deadline)),
            closed: Box::pin(close.clone().cancelled_owned()),
            close,
            _slot: Slot { id, open: Arc::clone(&self.open) },
        }
    }
}

impl axum::serve::Listener for Bounded {
    type Io = Limited;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Limited, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((tcp, addr)) => return (self.admit(tcp), addr),
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted.
                    tracing::debug!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Leaves the list of open connections when the connection is dropped.
struct Slot {
    id: u64,
    open: Open,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).retain(|(id, _)| *id != self.id);
    }
}

/// A connection that fails every read and write once its deadline passed or it was closed
/// (the cap, or the endpoint stopping); hyper then drops it.
pub(crate) struct Limited {
    tcp: TcpStream,
    deadline: Pin<Box<Sleep>>,
    close: CancellationToken,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    _slot: Slot,
}

impl Limited {
    /// Why this connection must end now, if it must; otherwise registers `cx` to be woken
    /// when it must.
    fn ended(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.deadline.is_elapsed() || self.deadline.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(io::ErrorKind::TimedOut, "the connection outlived its deadline"));
        }
        if self.close.is_cancelled() || self.closed.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed: newer connections filled the cap, or the endpoint stops",
            ));
        }
        None
    }
}

impl AsyncRead for Limited {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(e) = me.ended(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut me.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Limited {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if let Some(e) = me.ended(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut me.tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Some(e) = me.ended(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut me.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
