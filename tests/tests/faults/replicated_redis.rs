//! Redis failover (ADR 0029, rule B8): a primary with one replica, the replica promoted after the
//! primary is killed, as Sentinel (or an operator) does; every server durable (AOF, fsync
//! always), real `redis-server` processes on loopback ports of their own.
//!
//! One run: a session wins the lease `ledger` (token t) while the replica follows; then the
//! replica's link to the primary is cut (a fault proxy between them resets every connection),
//! the holder releases and a second session takes the lease on the primary (token t + 1, told
//! to it in the asynchronous mode); the primary is killed, the replica promoted and the
//! clients' address repointed to it (a fault proxy standing for the service address Sentinel
//! moves), a fresh server made its replica, and a third session takes the lease there.
//!
//! - **Asynchronous** (`wait_replicas` 0, Redis's default): the promoted replica never got
//!   t + 1, so the third session is told t + 1 again: a token granted twice (counted; fencing
//!   with a store that does not regress is what protects, rule F1).
//! - **`wait_replicas=1`**: every call answers only once the replica acknowledged its writes.
//!   With the link cut, the release and the second session's calls fail with an error naming
//!   `wait_replicas` (nothing is told), and after the promotion the third session is told a
//!   token above every token told before: no regression.

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use simba::backend::redis::{RedisBackend, RedisOptions};
use simba::backend::{Acquire, Backend, BackendError, CheckOutcome, Health, SessionId};
use simba_tests::proxy::{FaultProxy, Mode, Modes};

use crate::SERIAL;

/// The sessions' lease: the third session waits for the first one's to expire on the replica.
const TTL: Duration = Duration::from_secs(2);

/// A `redis-server` on a free loopback port, in its own directory; killed when dropped.
struct RedisServer {
    port: u16,
    child: Child,
}

impl RedisServer {
    fn start(dir: &Path, name: &str) -> RedisServer {
        let port = free_port();
        let data = dir.join(name);
        std::fs::create_dir_all(&data).expect("server directory");
        let mut args: Vec<OsString> =
            ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
                .iter()
                .chain(&["yes", "--appendfsync", "always", "--protected-mode", "no", "--dir"])
                .map(OsString::from)
                .collect();
        args.push(data.into_os_string());
        RedisServer::spawn(name, port, args)
    }

    /// A Sentinel watching `primary` as service `simba` (quorum 2, down after 500 ms).
    fn sentinel(dir: &Path, name: &str, primary: SocketAddr) -> RedisServer {
        let port = free_port();
        let data = dir.join(name);
        std::fs::create_dir_all(&data).expect("sentinel directory");
        let conf = data.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\nsentinel monitor simba 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds simba 500\nsentinel failover-timeout simba 3000\n",
            data.display(),
            primary.port()
        );
        std::fs::write(&conf, text).expect("sentinel.conf");
        RedisServer::spawn(name, port, vec![conf.into_os_string(), "--sentinel".into()])
    }

    /// `redis-server ARGS` (`SIMBA_REDIS_SERVER` names another binary), once it answers on `port`.
    fn spawn(name: &str, port: u16, args: Vec<OsString>) -> RedisServer {
        let bin = std::env::var("SIMBA_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let child =
            Command::new(&bin).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap_or_else(|e| {
                panic!("{bin} did not start ({e}): `bash scripts/backends.sh install` installs it")
            });
        let server = RedisServer { port, child };
        let start = Instant::now();
        while server.cli(&["PING"]) != "PONG" {
            assert!(start.elapsed() < Duration::from_secs(10), "{name} on port {port} did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// One `redis-cli` command; its output, trimmed.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &self.port.to_string()]).args(args).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default()
    }

    /// Makes this server a replica of `of` and waits until its link is up.
    fn follow(&self, of: SocketAddr) {
        assert_eq!(self.cli(&["REPLICAOF", "127.0.0.1", &of.port().to_string()]), "OK");
        let start = Instant::now();
        while !self.cli(&["INFO", "replication"]).contains("master_link_status:up") {
            assert!(start.elapsed() < Duration::from_secs(15), "replica on port {} never linked", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free loopback port")
}

/// What one failover run told the sessions.
#[derive(Debug)]
struct Run {
    /// Tokens told before the failover, in order.
    told: Vec<u64>,
    /// The token told after it.
    after: u64,
    /// The errors of the calls made while the replica's link was cut.
    refused: Vec<String>,
}

impl Run {
    /// Tokens told before the failover and told again (or undercut) after it.
    fn regressions(&self) -> usize {
        self.told.iter().filter(|&&t| t >= self.after).count()
    }
}

async fn connect(addr: SocketAddr, wait: u32) -> RedisBackend {
    let url = format!("redis://{addr}/0?wait_replicas={wait}&wait_timeout_ms=300");
    let options = RedisOptions::default().connect_timeout(Duration::from_secs(2));
    RedisBackend::connect_with(&url, options).await.unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// A session of `b`, asked again while the store answers `Unavailable` (for at most 10 s), as
/// the engine does: right after a replica linked, its first acknowledgement of `WAIT` can take
/// longer than the 300 ms `wait_timeout_ms` on a loaded machine.
async fn session(b: &RedisBackend) -> SessionId {
    let start = Instant::now();
    loop {
        match b.open_session(TTL).await {
            Ok(grant) => return grant.id,
            Err(e @ BackendError::Unavailable { .. }) if start.elapsed() < Duration::from_secs(10) => {
                eprintln!("open a session: {e}; asking again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("open a session: {e:?}"),
        }
    }
}

async fn failover(wait: u32) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let primary = RedisServer::start(dir.path(), "primary");
    let replica = RedisServer::start(dir.path(), "replica");
    let link = FaultProxy::start(primary.addr()).await.expect("link proxy");
    replica.follow(link.addr());
    let service = FaultProxy::start(primary.addr()).await.expect("service proxy");

    let (mut told, mut refused) = (Vec::new(), Vec::new());
    let a = connect(service.addr(), wait).await;
    // `simba check`'s line (B8): a replica without wait_replicas fails, with it passes.
    let checks = a.health_checks(Duration::from_secs(2)).await;
    let line = checks.iter().find(|c| c.name == "redis replication").expect("a replication check");
    let expected = if wait == 0 { CheckOutcome::Fail } else { CheckOutcome::Pass };
    assert_eq!(line.outcome, expected, "{line:?}");
    assert!(line.detail.contains("1 replica") && line.detail.contains("wait_replicas"), "{line:?}");
    let sa = session(&a).await;
    match a.acquire(&sa, "ledger").await {
        Ok(Acquire::Won(t)) => told.push(t),
        other => panic!("the first session, replica linked: {other:?}"),
    }
    // The replica has the first grant before its link is cut (in the asynchronous mode, once
    // Redis's own replication delivered it).
    let start = Instant::now();
    while replica.cli(&["HGET", "simba:lease:ledger", "token"]) != told[0].to_string() {
        assert!(start.elapsed() < Duration::from_secs(10), "the replica never received the first grant");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    link.set_each(Modes::both(Mode::Cut));
    tokio::time::sleep(Duration::from_millis(100)).await;
    if let Err(e) = a.release(&sa, "ledger", told[0]).await {
        refused.push(e.to_string());
    }
    let b = connect(service.addr(), wait).await;
    match b.open_session(TTL).await {
        Ok(grant) => match b.acquire(&grant.id, "ledger").await {
            Ok(Acquire::Won(t)) => told.push(t),
            Ok(other) => panic!("the second session after the release: {other:?}"),
            Err(e) => refused.push(e.to_string()),
        },
        Err(e) => refused.push(e.to_string()),
    }

    // The failover: the primary dies, the replica is promoted, the service address moves to
    // it, and a fresh server follows it (a promoted primary with `wait_replicas` needs one).
    drop(primary);
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    service.repoint(replica.addr());
    service.set_each(Modes::both(Mode::Cut));
    tokio::time::sleep(Duration::from_millis(50)).await;
    service.set_each(Modes::both(Mode::Forward));
    let spare = RedisServer::start(dir.path(), "spare");
    spare.follow(replica.addr());

    let c = connect(service.addr(), wait).await;
    let sc = session(&c).await;
    let start = Instant::now();
    let after = loop {
        match c.acquire(&sc, "ledger").await {
            Ok(Acquire::Won(t)) => break t,
            Ok(Acquire::Held) => {}
            other => panic!("the third session, after the failover: {other:?}"),
        }
        assert!(start.elapsed() < TTL * 5, "the lease never came free on the promoted replica");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(spare);
    Run { told, after, refused }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b8_a_promoted_replica_grants_no_told_token_again_with_wait_replicas() {
    let _serial = SERIAL.lock().await;
    let asynchronous = failover(0).await;
    let durable = failover(1).await;
    eprintln!("Redis failover, asynchronous: {asynchronous:?}, {} regression(s)", asynchronous.regressions());
    eprintln!("Redis failover, wait_replicas=1: {durable:?}, {} regression(s)", durable.regressions());

    // Asynchronous: the grant only the primary held is told again after the promotion.
    assert!(asynchronous.refused.is_empty(), "nothing waits for the replica: {:?}", asynchronous.refused);
    assert_eq!(asynchronous.told.len(), 2, "both sessions were told a token");
    assert_eq!(asynchronous.regressions(), 1, "the second session's token is granted again");

    // wait_replicas=1: nothing was told while the replica could not acknowledge it.
    assert_eq!(durable.told.len(), 1, "only the grant the replica acknowledged was told");
    assert!(durable.refused.len() >= 2, "the release and the second session failed: {:?}", durable.refused);
    for e in &durable.refused {
        assert!(e.contains("wait_replicas") && e.contains("0 of 1 replicas"), "the error says why: {e}");
    }
    assert_eq!(durable.regressions(), 0, "no told token is granted again");
}

/// The Sentinel test's sessions: longer than any failover seen (21 s under load).
const SENTINEL_SESSION: Duration = Duration::from_secs(90);

/// Waits until every Sentinel knows the two replicas and the two other Sentinels (they find
/// each other through the primary within a few seconds).
fn sentinels_ready(sentinels: &[RedisServer]) {
    let start = Instant::now();
    for s in sentinels {
        loop {
            let master = s.cli(&["SENTINEL", "master", "simba"]);
            let field = |name: &str| {
                let lines: Vec<&str> = master.lines().collect();
                lines.iter().position(|l| *l == name).and_then(|i| lines.get(i + 1)).map(|v| v.to_string())
            };
            if field("num-slaves").as_deref() == Some("2") && field("num-other-sentinels").as_deref() == Some("2") {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the Sentinels never saw each other: {master}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Rule B9: a `redis+sentinel://` backend follows a failover that the Sentinels make. A primary
/// with two replicas and three Sentinels; a session wins `ledger` (with `wait_replicas=1`, so the
/// grant is on a replica), the primary is killed; the Sentinels promote a replica and the same
/// backend, asked the same thing again, finds its session and its grant there (token 1), and the
/// next session is granted token 2: the tokens go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_sentinel_url_follows_the_failover_to_the_promoted_replica() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let primary = RedisServer::start(dir.path(), "primary");
    let replicas = [RedisServer::start(dir.path(), "replica-1"), RedisServer::start(dir.path(), "replica-2")];
    for r in &replicas {
        r.follow(primary.addr());
    }
    let sentinels: Vec<RedisServer> =
        (1..=3).map(|i| RedisServer::sentinel(dir.path(), &format!("sentinel-{i}"), primary.addr())).collect();
    sentinels_ready(&sentinels);
    let hosts: Vec<String> = sentinels.iter().map(|s| s.addr().to_string()).collect();
    let url = format!("redis+sentinel://{}/simba?wait_replicas=1&wait_timeout_ms=500", hosts.join(","));
    let backend = RedisBackend::connect_with(&url, RedisOptions::default().connect_timeout(Duration::from_secs(2)))
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    // The session outlives the failover with room to spare: under the test command's load the
    // Sentinels took 21 s to promote (5 s alone), past a 20 s session.
    let a = backend.open_session(SENTINEL_SESSION).await.expect("open a session").id;
    assert_eq!(backend.acquire(&a, "ledger").await.expect("acquire"), Acquire::Won(1));

    let killed = Instant::now();
    drop(primary);
    let mut errors = 0;
    let again = loop {
        match backend.acquire(&a, "ledger").await {
            Ok(answer) => break answer,
            Err(_) => errors += 1,
        }
        assert!(killed.elapsed() < SENTINEL_SESSION, "the backend never reached a promoted replica");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let moved = killed.elapsed();
    eprintln!("Redis Sentinel failover: calls answered again {moved:?} after the kill ({errors} failed meanwhile)");
    assert_eq!(again, Acquire::Won(1), "the session and its grant are on the promoted replica");
    let promoted = replicas.iter().filter(|r| r.cli(&["ROLE"]).starts_with("master")).count();
    assert_eq!(promoted, 1, "one replica was promoted");
    assert!(backend.release(&a, "ledger", 1).await.expect("release"), "released on the new primary");
    let b = backend.open_session(SENTINEL_SESSION).await.expect("open a session").id;
    assert_eq!(backend.acquire(&b, "ledger").await.expect("acquire"), Acquire::Won(2), "the tokens go on");
}
