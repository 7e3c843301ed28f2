//! What the browser tests share: Debian's headless Chromium driven over WebDriver
//! (chromedriver + fantoccini), node processes, free ports and screenshots.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// The flags that work on these machines (no sandbox as root, no background traffic to a
/// network that is closed, a fresh profile).
const CHROMIUM_FLAGS: [&str; 10] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
];

/// A port nobody listens on now.
pub(crate) fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn tool(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {var}): install the browser with `bash scripts/browser.sh install`",
        path.display()
    );
    path
}

/// Headless Chromium under chromedriver, in its own process group (so that nothing it
/// starts outlives the test).
pub(crate) struct Browser {
    pub(crate) client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        Browser::start_with(&[]).await
    }

    /// With `extra` Chromium flags (such as `--host-resolver-rules=MAP simba.test 127.0.0.1`,
    /// to reach a local server by a host name).
    pub(crate) async fn start_with(extra: &[String]) -> Browser {
        let chromium = tool("SIMBA_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = tool("SIMBA_CHROMEDRIVER", "/usr/bin/chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let port = free_port();
        let log = std::fs::File::create(profile.path().join("chromedriver.log")).expect("log");
        let driver = {
            use std::os::unix::process::CommandExt;
            Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(log)
                .process_group(0)
                .spawn()
                .expect("spawn chromedriver")
        };
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().join("chromium").display()));
        args.push("--window-size=1280,800".to_owned());
        args.extend(extra.iter().cloned());
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".to_owned(), json!({"binary": chromium, "args": args}));
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await {
                Ok(c) => break c,
                Err(e) if started.elapsed() < Duration::from_secs(20) => {
                    tracing::debug!(error = %e, "chromedriver not ready");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("cannot start Chromium through chromedriver: {e}"),
            }
        };
        Browser { client, driver, _profile: profile }
    }

    /// Evaluates `script` (a function body that returns a value) in the page.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.expect("execute script")
    }

    /// Waits until `script` returns `true`, failing after `within` with `what` and the page's
    /// text.
    pub(crate) async fn wait_for(&self, what: &str, within: Duration, script: &str) -> Duration {
        let start = Instant::now();
        loop {
            if self.eval(script).await == Value::Bool(true) {
                return start.elapsed();
            }
            if start.elapsed() > within {
                let text = self.eval("return document.body.innerText").await;
                panic!("{what}: not within {within:?}; the page shows:\n{}", text.as_str().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A PNG of the page, 1280 pixels wide and as tall as its content (at most 1600), written
    /// to `dir`.
    pub(crate) async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let height =
            self.eval("return Math.ceil(document.getElementById('main').getBoundingClientRect().bottom)").await;
        let height = height.as_u64().unwrap_or(800);
        let want = u32::try_from(height.clamp(400, 1600)).unwrap_or(800);
        // The window's size includes its frame: grow it until the viewport is as asked.
        let mut outer = want;
        for _ in 0..3 {
            self.client.set_window_size(1280, outer).await.expect("resize");
            let inner = self.eval("return window.innerHeight").await.as_u64().unwrap_or(u64::from(want));
            let inner = u32::try_from(inner).unwrap_or(want);
            if inner == want {
                break;
            }
            outer = (outer + want).saturating_sub(inner);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        self.client.set_window_size(1280, 800).await.expect("resize back");
        path
    }

    pub(crate) async fn close(mut self) {
        let client = self.client.clone();
        let _ = client.close().await;
        kill_group(&self.driver);
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&self.driver);
        let _ = self.driver.wait();
    }
}

/// Kills the process group that chromedriver leads (Chromium and its helpers).
fn kill_group(child: &Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Where screenshots go: `$SIMBA_SCREENSHOTS` (the docs: `scripts/screenshots.sh`), else
/// `target/dashboard-screenshots`.
pub(crate) fn screenshot_dir() -> PathBuf {
    match std::env::var_os("SIMBA_SCREENSHOTS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard-screenshots"),
    }
}

/// A `simba-test-node` process (a 1 s cron job `tick` and a 16-partition group `parts`),
/// killed when dropped.
pub(crate) struct Node {
    pub(crate) child: Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn spawn_node(dir: &Path, name: &str, env: &[(&str, String)]) -> Node {
    let stderr = std::fs::File::create(dir.join(format!("{name}.stderr"))).expect("node stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simba-test-node"));
    cmd.current_dir(dir)
        .env("SIMBA_CONFIG", dir.join("simba.toml"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Node { child: cmd.spawn().expect("spawn simba-test-node") }
}

/// Waits until something accepts connections on `port`.
pub(crate) async fn wait_listening(port: u16, within: Duration) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(start.elapsed() < within, "nothing listens on port {port} after {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
