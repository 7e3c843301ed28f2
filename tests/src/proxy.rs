//! A TCP fault proxy for tests (tokio): forwards a local port to a server and can add latency
//! (fixed, or with jitter), stall the stream now and then, limit its bandwidth, cut every
//! connection with a reset, black-hole traffic (accept, then stop forwarding), and restore
//! normal forwarding. Each mode applies to both directions ([`FaultProxy::set`]) or to one
//! ([`FaultProxy::set_each`]): a one-way partition is [`Mode::BlackHole`] in one direction and
//! [`Mode::Forward`] in the other. It only ever listens on and connects to loopback addresses
//! the test gives it.
//!
//! Each direction of a connection is a reader and a writer joined by a short queue: the
//! reader stamps every chunk it reads with the instant it may leave (its mode's delay, never
//! before the chunk ahead of it, so the order within a direction is the order TCP keeps), and
//! the writer sends it then. The queue is bounded (64 chunks), so a slow direction pushes back
//! on its sender as a slow TCP path would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does to the traffic of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Forward at once.
    #[default]
    Forward,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Forward every chunk after `base` plus a delay drawn uniformly from `-jitter..=jitter`
    /// (at least zero), per chunk. A chunk never overtakes the one ahead of it: a chunk that
    /// drew a shorter delay waits for it, as TCP delivers in order.
    Jitter {
        /// The mean delay.
        base: Duration,
        /// The largest deviation from `base`, either way.
        jitter: Duration,
    },
    /// Now and then, hold every byte back for a while, then release what was held in order:
    /// what a lost segment and its retransmission look like to the application on a TCP
    /// connection (head-of-line blocking). Stalls start at random, the time from the end of one
    /// to the start of the next drawn uniformly from `every / 2..=every * 3 / 2`, each lasting a
    /// time drawn uniformly from `min..=max`; each direction of each connection has its own.
    Stall {
        /// The mean time between two stalls.
        every: Duration,
        /// The shortest stall.
        min: Duration,
        /// The longest stall.
        max: Duration,
    },
    /// At most this many bytes per second (at least 1).
    Bandwidth(u64),
    /// Accept connections, but forward nothing: bytes wait in the socket buffers, and the
    /// peers see a silent connection (as behind a dead route, TCP keeps what was sent and
    /// delivers it in order if the route comes back).
    BlackHole,
    /// Reset every open connection and every new one (set in either direction, it cuts both).
    Cut,
}

/// The modes of the two directions of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Modes {
    /// Client to server: the node's requests.
    pub up: Mode,
    /// Server to client: the replies.
    pub down: Mode,
}

impl Modes {
    /// The same mode both ways.
    pub fn both(mode: Mode) -> Modes {
        Modes { up: mode, down: mode }
    }

    fn cut(&self) -> bool {
        self.up == Mode::Cut || self.down == Mode::Cut
    }
}

/// A running proxy. Dropping it stops it and closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    mode: watch::Sender<Modes>,
    task: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    bytes: Arc<[AtomicU64; 2]>,
    upstream: Arc<Mutex<SocketAddr>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (a loopback address).
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        FaultProxy::start_with(upstream, Modes::default()).await
    }

    /// [`start`](FaultProxy::start) with these modes from the first connection on.
    pub async fn start_with(upstream: SocketAddr, modes: Modes) -> std::io::Result<FaultProxy> {
        assert!(upstream.ip().is_loopback(), "the fault proxy only forwards to loopback addresses");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, rx) = watch::channel(modes);
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let bytes: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let c = Arc::clone(&conns);
        let b = Arc::clone(&bytes);
        let target = Arc::new(Mutex::new(upstream));
        let t = Arc::clone(&target);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                let upstream = *t.lock().unwrap_or_else(PoisonError::into_inner);
                let rx = rx.clone();
                let b = Arc::clone(&b);
                let h = tokio::spawn(async move {
                    let _ = serve(client, upstream, rx, b).await;
                });
                let mut conns = c.lock().unwrap_or_else(PoisonError::into_inner);
                conns.retain(|h| !h.is_finished());
                conns.push(h);
            }
        });
        Ok(FaultProxy { addr, mode, task, conns, bytes, upstream: target })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the mode of both directions for open and new connections.
    pub fn set(&self, mode: Mode) {
        self.set_each(Modes::both(mode));
    }

    /// Switches each direction's mode for open and new connections. A chunk already queued
    /// keeps the time it was given to leave.
    pub fn set_each(&self, modes: Modes) {
        self.mode.send_replace(modes);
    }

    /// The modes now.
    pub fn modes(&self) -> Modes {
        *self.mode.borrow()
    }

    /// Forwards new connections to `upstream` from now on (what a virtual IP moved to a
    /// promoted standby does); open connections stay with the old one.
    pub fn repoint(&self, upstream: SocketAddr) {
        assert!(upstream.ip().is_loopback(), "the fault proxy only forwards to loopback addresses");
        *self.upstream.lock().unwrap_or_else(PoisonError::into_inner) = upstream;
    }

    /// Back to plain forwarding.
    pub fn restore(&self) {
        self.set(Mode::Forward);
    }

    /// The bytes forwarded so far, (client to server, server to client), over all connections.
    pub fn bytes(&self) -> (u64, u64) {
        (self.bytes[0].load(Ordering::Relaxed), self.bytes[1].load(Ordering::Relaxed))
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

#[derive(Clone, Copy)]
enum Dir {
    Up,
    Down,
}

impl Dir {
    fn of(self, m: &Modes) -> Mode {
        match self {
            Dir::Up => m.up,
            Dir::Down => m.down,
        }
    }
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Modes>,
    bytes: Arc<[AtomicU64; 2]>,
) -> std::io::Result<()> {
    if mode.borrow().cut() {
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
    let (up_tx, up_rx) = mpsc::channel(64);
    let (down_tx, down_rx) = mpsc::channel(64);
    let tasks = [
        tokio::spawn(read_side(cr, up_tx, mode.clone(), Dir::Up)),
        tokio::spawn(write_side(sw, up_rx, mode.clone(), Dir::Up, Arc::clone(&bytes))),
        tokio::spawn(read_side(sr, down_tx, mode.clone(), Dir::Down)),
        tokio::spawn(write_side(cw, down_rx, mode, Dir::Down, bytes)),
    ];
    // Aborting this task (the proxy dropped) must stop the pumps too.
    struct AbortAll([JoinHandle<std::io::Result<()>>; 4]);
    impl Drop for AbortAll {
        fn drop(&mut self) {
            for t in &self.0 {
                t.abort();
            }
        }
    }
    let mut all = AbortAll(tasks);
    for t in &mut all.0 {
        let _ = t.await;
    }
    Ok(())
}

fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// What a reader hands its writer.
enum Chunk {
    /// Bytes and the instant they may leave.
    Data(Instant, Vec<u8>),
    /// The peer closed its side: shut ours down once everything ahead has left.
    Eof,
}

/// The stall schedule of one direction: the next stall's start and length.
struct Stalls {
    next: Option<(Instant, Duration)>,
}

impl Stalls {
    /// When a chunk that could leave at `at` leaves under stalls of this shape.
    fn delay(&mut self, at: Instant, every: Duration, min: Duration, max: Duration) -> Instant {
        let mut rng = rand::rng();
        let gap = |rng: &mut rand::rngs::ThreadRng| {
            let e = every.as_nanos() as u64;
            Duration::from_nanos(rng.random_range(e / 2..=e.saturating_mul(3) / 2))
        };
        let len = |rng: &mut rand::rngs::ThreadRng| {
            let (lo, hi) = (min.as_nanos() as u64, max.as_nanos().max(min.as_nanos()) as u64);
            Duration::from_nanos(rng.random_range(lo..=hi))
        };
        let (mut start, mut hold) = self.next.unwrap_or_else(|| (at + gap(&mut rng), len(&mut rng)));
        // Stalls that passed while nothing was sent cost nothing.
        while start + hold <= at {
            start = start + hold + gap(&mut rng);
            hold = len(&mut rng);
        }
        self.next = Some((start, hold));
        if at >= start { start + hold } else { at }
    }
}

/// Reads one direction and stamps each chunk with the instant it may leave.
async fn read_side(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: mpsc::Sender<Chunk>,
    mut mode: watch::Receiver<Modes>,
    dir: Dir,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    // The instant the last chunk leaves: no chunk leaves before it.
    let mut last = Instant::now();
    let mut stalls = Stalls { next: None };
    loop {
        // Black hole: stop reading until the mode changes (the bytes wait in the socket).
        while dir.of(&mode.borrow()) == Mode::BlackHole {
            if mode.changed().await.is_err() {
                return Ok(());
            }
        }
        if mode.borrow().cut() {
            return Ok(());
        }
        let m = dir.of(&mode.borrow());
        // Under a bandwidth limit, read no more than a twentieth of a second's worth at a time,
        // so that the bytes leave smoothly.
        let cap = match m {
            Mode::Bandwidth(rate) => (rate / 20).clamp(1, buf.len() as u64) as usize,
            _ => buf.len(),
        };
        let n = tokio::select! {
            r = from.read(&mut buf[..cap]) => r?,
            changed = mode.changed() => {
                if changed.is_err() || mode.borrow().cut() {
                    return Ok(());
                }
                continue;
            }
        };
        if n == 0 {
            let _ = to.send(Chunk::Eof).await;
            return Ok(());
        }
        let now = Instant::now();
        let at = match dir.of(&mode.borrow()) {
            Mode::Forward | Mode::BlackHole | Mode::Cut => now,
            Mode::Latency(d) => now + d,
            Mode::Jitter { base, jitter } => {
                let j = jitter.as_nanos() as i128;
                let d = base.as_nanos() as i128 + rand::rng().random_range(-j..=j);
                now + Duration::from_nanos(d.max(0) as u64)
            }
            Mode::Stall { every, min, max } => stalls.delay(now.max(last), every, min, max),
            // The chunk has passed when its last byte has: n bytes at `rate` after the last one.
            Mode::Bandwidth(rate) => now.max(last) + Duration::from_secs_f64(n as f64 / rate.max(1) as f64),
        };
        last = last.max(at);
        if to.send(Chunk::Data(last, buf[..n].to_vec())).await.is_err() {
            return Ok(());
        }
    }
}

/// Sends one direction's chunks when they may leave; holds them while the direction is
/// black-holed, and resets on a cut.
async fn write_side(
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut from: mpsc::Receiver<Chunk>,
    mut mode: watch::Receiver<Modes>,
    dir: Dir,
    bytes: Arc<[AtomicU64; 2]>,
) -> std::io::Result<()> {
    loop {
        let chunk = tokio::select! {
            c = from.recv() => c,
            changed = mode.changed() => {
                if changed.is_err() || mode.borrow().cut() {
                    // A dropped write half would shut the stream down (a FIN); forgotten, the
                    // stream closes with SO_LINGER 0 once both halves are gone: a reset.
                    to.forget();
                    return Ok(());
                }
                continue;
            }
        };
        let (at, data) = match chunk {
            Some(Chunk::Data(at, data)) => (at, data),
            Some(Chunk::Eof) => {
                let _ = to.shutdown().await;
                return Ok(());
            }
            // The reader stopped on a cut.
            None => {
                to.forget();
                return Ok(());
            }
        };
        // Wait for the chunk's time, then while the direction is dark (a chunk that went dark
        // in flight waits for the route to come back), resetting on a cut.
        loop {
            let dark = dir.of(&mode.borrow()) == Mode::BlackHole;
            if mode.borrow().cut() {
                to.forget();
                return Ok(());
            }
            if !dark && Instant::now() >= at {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(at), if !dark => {}
                changed = mode.changed() => {
                    if changed.is_err() {
                        to.forget();
                        return Ok(());
                    }
                }
            }
        }
        to.write_all(&data).await?;
        let i = match dir {
            Dir::Up => 0,
            Dir::Down => 1,
        };
        bytes[i].fetch_add(data.len() as u64, Ordering::Relaxed);
    }
}

/// The loopback `host:port` of a server URL (`scheme://[user@]host:port[/...]`), for a proxy's
/// upstream.
pub fn host_port(url: &str) -> SocketAddr {
    let hostport = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split('@').next_back())
        .and_then(|r| r.split(['/', '?']).next())
        .expect("host:port");
    hostport.parse::<SocketAddr>().expect("a loopback host:port")
}
