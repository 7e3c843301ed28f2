//! A TCP listener for axum whose connections are bounded (rules O8 and O12): each one must
//! finish within a deadline from its accept (the whole exchange for `/metrics`, the request
//! head for the dashboard, whose event streams live as long as a page is open), and at most a
//! cap of them are open; a connection beyond the cap closes the oldest one.
//!
//! Closing the oldest rather than refusing the newest keeps a normal request working when
//! idle or slow clients fill the cap: it is the newest connection, and it needs a few
//! milliseconds. The deadline covers the request head, so a client that sends one byte a
//! second cannot hold a connection: a per-read timeout would let it.

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

/// How a [`Bounded`] listener limits its connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From accept: to the last byte of the answer, or to its first byte when `head_only`.
    deadline: Duration,
    /// The deadline stops counting once the answer starts (an event stream may then run
    /// for as long as its page is open; the cap still bounds how many do).
    head_only: bool,
    /// At most this many connections are open; one more closes the oldest.
    cap: usize,
}

impl Limits {
    /// Every connection ends `deadline` after its accept, answered or not (`/metrics`).
    #[cfg(feature = "prometheus")]
    pub(crate) fn whole_exchange(deadline: Duration, cap: usize) -> Self {
        Limits { deadline, head_only: false, cap: cap.max(1) }
    }

    /// A connection must have its answer started `deadline` after its accept; from then on
    /// only the cap bounds it (the dashboard, whose pages hold an event stream open).
    #[cfg(feature = "dashboard")]
    pub(crate) fn request_head(deadline: Duration, cap: usize) -> Self {
        Limits { deadline, head_only: true, cap: cap.max(1) }
    }
}

/// The listener: accepts, then bounds each connection.
pub(crate) struct Bounded {
    listener: TcpListener,
    limits: Limits,
    open: Open,
    next: u64,
    /// Cancelled when the endpoint stops: closes every connection at once.
    stop: CancellationToken,
}

impl Bounded {
    pub(crate) fn new(listener: TcpListener, limits: Limits, stop: CancellationToken) -> Self {
        Bounded { listener, limits, open: Arc::default(), next: 0, stop }
    }

    fn admit(&mut self, tcp: TcpStream) -> Limited {
        let close = self.stop.child_token();
        let id = self.next;
        self.next += 1;
        {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.push_back((id, close.clone()));
            while open.len() > self.limits.cap {
                if let Some((_, oldest)) = open.pop_front() {
                    oldest.cancel();
                }
            }
        }
        Limited {
            tcp,
            deadline: Some(Box::pin(tokio::time::sleep(self.limits.deadline))),
            head_only: self.limits.head_only,
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
                    tracing::debug!(error = %e, "accept failed");
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
    /// `None` once the answer started on a `head_only` connection.
    deadline: Option<Pin<Box<Sleep>>>,
    head_only: bool,
    close: CancellationToken,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    _slot: Slot,
}

impl Limited {
    /// Why this connection must end now, if it must; otherwise registers `cx` to be woken
    /// when it must.
    fn ended(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if let Some(deadline) = self.deadline.as_mut()
            && (deadline.is_elapsed() || deadline.as_mut().poll(cx).is_ready())
        {
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
        let written = Pin::new(&mut me.tcp).poll_write(cx, buf);
        if me.head_only && matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            // The answer started: only the cap bounds this connection from now on.
            me.deadline = None;
        }
        written
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
