//! Three replicas of the `service` example as `deploy/` runs them (the same variables:
//! `SIMBA_BACKEND__URL`, `SIMBA_NODE`, `SERVICE_LISTEN`), on the test PostgreSQL server
//! (`SIMBA_TEST_POSTGRES_URL`; a failure without it under `CI=true`, else one SQLite file):
//! each answers its probes under `/simba`, one runs the job, and SIGTERM to that one (what
//! Kubernetes and `docker stop` send) hands the job to another at once, well before its lease
//! could expire, and the process exits cleanly.
#![cfg(all(unix, feature = "dashboard", feature = "postgres"))]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

/// One replica: its process and its log file; killed if the test ends early.
struct Replica {
    node: String,
    child: Child,
    log: PathBuf,
}

impl Replica {
    fn start(dir: &Path, url: &str, namespace: &str, node: &str) -> Replica {
        let log = dir.join(format!("{node}.log"));
        // In a directory without a simba.toml: the variables are the whole configuration.
        let child = Command::new(common::example("service"))
            .current_dir(dir)
            .env("SIMBA_BACKEND__URL", url)
            .env("SIMBA_BACKEND__NAMESPACE", namespace)
            .env("SIMBA_SESSION__LEASE_DURATION", "6s")
            .env("SIMBA_SESSION__RENEW_INTERVAL", "2s")
            .env("SIMBA_NODE", node)
            .env("SERVICE_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env_remove("SIMBA_EXAMPLE_POSTGRES_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the log file"))
            .spawn()
            .expect("start a replica");
        Replica { node: node.to_owned(), child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address it serves on, from its log.
    fn addr(&mut self) -> String {
        let log = wait_for(
            || {
                let log = self.log();
                let exited = self.child.try_wait().expect("wait");
                assert!(exited.is_none(), "{} exited ({exited:?}): {log}", self.node);
                log.contains("addr=").then_some(log)
            },
            "address in a replica's log",
        );
        let at = log.find("addr=").expect("addr") + "addr=".len();
        log[at..].split_whitespace().next().expect("an address").to_owned()
    }

    /// Whether it holds the job's lease with this token (by its log).
    fn elected(&self, token: u64) -> bool {
        self.log().contains(&format!("elected lease=settle_orders token={token} "))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>, what: &str) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no {what} within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET path` on `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut conn) = TcpStream::connect(addr) else { return (0, String::new()) };
    let _ = write!(conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = conn.read_to_string(&mut text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_owned())
}

fn store(dir: &Path) -> String {
    match std::env::var("SIMBA_TEST_POSTGRES_URL") {
        Ok(url) => url,
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("SIMBA_TEST_POSTGRES_URL is not set: start the servers (`scripts/backends.sh start`)")
        }
        Err(_) => format!("sqlite://{}", dir.join("simba.db").display()),
    }
}

#[test]
fn sigterm_hands_the_job_of_one_replica_to_another_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = store(dir.path());
    let namespace = format!("example-replicas-{}", std::process::id());
    let mut replicas: Vec<Replica> = ["service-a", "service-b", "service-c"]
        .iter()
        .map(|n| Replica::start(dir.path(), &url, &namespace, n))
        .collect();
    for r in &mut replicas {
        let addr = r.addr();
        assert_eq!(get(&addr, "/simba/livez"), (200, "alive\n".to_owned()), "{}", r.node);
        wait_for(|| (get(&addr, "/simba/readyz") == (200, "live\n".to_owned())).then_some(()), "ready replica");
    }
    let holder = wait_for(|| replicas.iter().position(|r| r.elected(1)), "holder of settle_orders");

    let sent = Instant::now();
    let pid = replicas[holder].child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let next = wait_for(|| replicas.iter().position(|r| r.elected(2)), "next holder");
    let took = sent.elapsed();
    assert_ne!(next, holder);
    // A handover, not an expiry: the 6 s lease would take until 6 s + 1 s + jitter.
    assert!(took < Duration::from_secs(3), "the job moved after {took:?}");
    let status = wait_for(|| replicas[holder].child.try_wait().expect("wait"), "exit after SIGTERM");
    assert!(status.success(), "{}: {status}\n{}", replicas[holder].node, replicas[holder].log());
    assert!(replicas[holder].log().contains("shutting down: handing the jobs over"));

    for r in replicas.iter_mut() {
        if r.child.try_wait().ok().flatten().is_some() {
            continue;
        }
        let _ = Command::new("kill").args(["-TERM", &r.child.id().to_string()]).status();
        let status = wait_for(|| r.child.try_wait().expect("wait"), "exit after SIGTERM");
        assert!(status.success(), "{}: {status}", r.node);
    }
}
