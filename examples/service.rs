//! Simba inside a service: an axum app with its own routes, Simba's dashboard nested under
//! `/simba` on the same port, and a scheduled job that works on the application's state.
//!
//! ```text
//! cargo run --example service --features dashboard            # SQLite ./simba.db
//! SIMBA_EXAMPLE_POSTGRES_URL=postgres://user@host/db \
//!     cargo run --example service --features dashboard,postgres
//! ```
//!
//! Then `curl -X POST 127.0.0.1:8080/orders` a few times, watch `curl 127.0.0.1:8080/`
//! count them settled, and open <http://127.0.0.1:8080/simba> for the dashboard (its jobs page
//! shows `settle_orders`). `SERVICE_LISTEN` changes the address. In Kubernetes, point the
//! liveness probe at `/simba/livez` and the readiness probe at `/simba/readyz`: a store
//! outage then takes the pods out of rotation without restarting them all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State as AxumState;
use axum::routing::{get, post};
use simba::runtime::RunningRuntime;
use simba::{Runtime, RuntimeConfig, State, Term, simba_scheduled};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

/// The application's state: what its HTTP routes and its job share (in a real service, a
/// database pool).
#[derive(Debug, Default)]
struct Shop {
    pending: AtomicU64,
    settled: AtomicU64,
}

type SharedShop = Arc<Shop>;

/// Every second, on whichever node holds the lease `settle_orders`: settles the pending
/// orders of the state the service gave the runtime.
#[simba_scheduled(fixed_rate = "1s")]
async fn settle_orders(term: &Term, State(shop): State<SharedShop>) -> anyhow::Result<()> {
    // Settling must not start when the term is about to end.
    term.ensure_valid(Duration::from_millis(200))?;
    let n = shop.pending.swap(0, Ordering::SeqCst);
    if n > 0 {
        shop.settled.fetch_add(n, Ordering::SeqCst);
        info!(job = "settle_orders", token = term.token(), settled = n, "settled orders");
    }
    Ok(())
}

async fn home(AxumState(shop): AxumState<SharedShop>) -> String {
    let (pending, settled) = (shop.pending.load(Ordering::SeqCst), shop.settled.load(Ordering::SeqCst));
    format!("orders service: {pending} pending, {settled} settled (Simba's dashboard: /simba)\n")
}

async fn order(AxumState(shop): AxumState<SharedShop>) -> &'static str {
    shop.pending.fetch_add(1, Ordering::SeqCst);
    "ordered\n"
}

/// The service running: its server and the Simba runtime beside it.
struct Service {
    addr: SocketAddr,
    running: RunningRuntime,
    stop: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

impl Service {
    /// Starts the runtime (its jobs get `shop`), then serves the app on `listen`.
    async fn start(listen: SocketAddr, config: RuntimeConfig, shop: SharedShop) -> anyhow::Result<Service> {
        let running = Runtime::builder().config(config).state(Arc::clone(&shop)).start().await?;
        // The dashboard of this node, nested under /simba; SERVICE_ALLOWED_HOST names the host
        // an ingress passes (IP addresses and localhost are always accepted).
        let hosts: Vec<String> = std::env::var("SERVICE_ALLOWED_HOST").into_iter().collect();
        let simba_ui = running.dashboard().allowed_hosts(hosts).router()?;
        let app =
            Router::new().route("/", get(home)).route("/orders", post(order)).with_state(shop).nest("/simba", simba_ui);
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        info!(%addr, "serving the orders service, and Simba's dashboard under /simba");
        Ok(Service { addr, running, stop, server })
    }

    /// Hands every job over and closes the session (which also ends the dashboard's event
    /// streams, so that the server's graceful stop does not wait for open pages), then stops
    /// the server.
    async fn stop(self) -> anyhow::Result<()> {
        self.running.shutdown().await;
        let _ = self.stop.send(());
        self.server.await??;
        Ok(())
    }
}

/// `simba.toml` and `SIMBA_*` as usual; `SIMBA_EXAMPLE_POSTGRES_URL` puts the backend on
/// PostgreSQL (build with `--features postgres`).
fn config() -> anyhow::Result<RuntimeConfig> {
    Ok(match std::env::var("SIMBA_EXAMPLE_POSTGRES_URL") {
        Ok(url) => RuntimeConfig::from_toml_str("", "the service example", vec![("SIMBA_BACKEND__URL".into(), url)])?,
        Err(_) => RuntimeConfig::load()?,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    simba_examples::init_logging();
    let listen: SocketAddr = std::env::var("SERVICE_LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into()).parse()?;
    let service = Service::start(listen, config()?, SharedShop::default()).await?;
    info!("the dashboard: http://{}/simba (probes: /simba/livez, /simba/readyz)", service.addr);
    stop_signal().await?;
    info!("shutting down: handing the jobs over");
    service.stop().await
}

/// Ctrl-C, or SIGTERM (what `docker stop` and Kubernetes send before they kill the process).
async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await
}

#[cfg(test)]
mod tests {
    //! Runs the example against the test PostgreSQL server (`SIMBA_TEST_POSTGRES_URL`, from
    //! `scripts/backends.sh`; a failure without it under `CI=true`, else SQLite in a
    //! temporary file).

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let raw = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        conn.write_all(raw.as_bytes()).await.expect("send");
        let mut text = String::new();
        conn.read_to_string(&mut text).await.expect("read");
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), body.to_owned())
    }

    /// The configuration, and the SQLite file to remove after the test when there is one.
    fn test_config() -> (RuntimeConfig, Option<std::path::PathBuf>) {
        let sqlite = std::env::temp_dir().join(format!("simba-service-{}.db", std::process::id()));
        let url = match std::env::var("SIMBA_TEST_POSTGRES_URL") {
            Ok(url) if cfg!(feature = "postgres") => url,
            Ok(_) => panic!("SIMBA_TEST_POSTGRES_URL is set: build with --features postgres (or --all-features)"),
            Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("SIMBA_TEST_POSTGRES_URL is not set: start the servers (`scripts/backends.sh start`)")
            }
            Err(_) => format!("sqlite://{}", sqlite.display()),
        };
        let file = url.starts_with("sqlite:").then_some(sqlite);
        let overrides = vec![
            ("SIMBA_BACKEND__URL".to_owned(), url),
            // Its own namespace: the other tests on the same database see nothing of it.
            ("SIMBA_BACKEND__NAMESPACE".to_owned(), format!("example-service-{}", std::process::id())),
            ("SIMBA_SESSION__LEASE_DURATION".to_owned(), "3s".to_owned()),
            ("SIMBA_SESSION__RENEW_INTERVAL".to_owned(), "1s".to_owned()),
        ];
        (RuntimeConfig::from_toml_str("", "the service example's test", overrides).expect("config"), file)
    }

    /// The service answers its own routes; its job settles the orders of the state the
    /// service gave the runtime; Simba's dashboard, probes and JSON API answer under /simba.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_service_runs_its_job_on_its_state_and_serves_simba_under_simba() {
        let shop = SharedShop::default();
        let (config, sqlite) = test_config();
        let service =
            Service::start(([127, 0, 0, 1], 0).into(), config, Arc::clone(&shop)).await.expect("the service starts");
        let addr = service.addr;
        for _ in 0..3 {
            assert_eq!(http(addr, "POST", "/orders").await, (200, "ordered\n".to_owned()));
        }
        let start = tokio::time::Instant::now();
        while shop.settled.load(Ordering::SeqCst) < 3 {
            assert!(start.elapsed() < Duration::from_secs(20), "the job did not settle the orders: {:?}", shop);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (code, home) = http(addr, "GET", "/").await;
        assert_eq!((code, home.as_str()), (200, "orders service: 0 pending, 3 settled (Simba's dashboard: /simba)\n"));
        let (code, page) = http(addr, "GET", "/simba/jobs").await;
        assert_eq!(code, 200, "{page}");
        assert!(page.contains("<base href=\"/simba/\">") && page.contains("settle_orders"), "{page}");
        assert_eq!(http(addr, "GET", "/simba/readyz").await, (200, "live\n".to_owned()));
        assert_eq!(http(addr, "GET", "/simba/livez").await, (200, "alive\n".to_owned()));
        let (code, json) = http(addr, "GET", "/simba/api/jobs").await;
        assert!(code == 200 && json.contains("\"settle_orders\"") && json.contains("\"outcome\":\"ran\""), "{json}");
        service.stop().await.expect("a clean stop");
        for file in sqlite.iter().flat_map(|f| ["", "-wal", "-shm"].map(|x| format!("{}{x}", f.display()))) {
            let _ = std::fs::remove_file(file);
        }
    }
}
