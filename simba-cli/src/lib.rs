//! The `simba` command-line tool (package `simba-sched-cli`): `status`, `watch`, `check`, `dashboard`, and
//! the jobs commands `jobs`, `history`, `pause`, `resume`, `trigger` against the backend named by `simba.toml` or `--backend URL` (ADR 0007, ADR 0010).
//!
//! Exit codes: 0 success; 1 `check` found a problem; 2 bad input (clap's usage errors, an
//! invalid configuration) or an unreachable backend (the message names the URL, never its
//! password, and the cause).

mod check;
mod dashboard;
mod jobs;
mod json;
mod namespaces;
mod render;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use simba::backend::namespace::{Namespace, Namespaced};
use simba::backend::{BackendError, BackendUrl, ConnectOptions, Connected};
use simba::{Error, RuntimeConfig};

/// Everything went as asked (and every check passed).
pub const EXIT_OK: u8 = 0;
/// `simba check` found a failed check.
pub const EXIT_CHECK_FAILED: u8 = 1;
/// Bad input or an unreachable backend.
pub const EXIT_ERROR: u8 = 2;

/// Inspect and check a simba cluster: sessions, leases, groups, backend settings.
#[derive(Debug, Parser)]
#[command(name = "simba", version, about, long_about = None)]
struct Cli {
    /// The backend URL (overrides the configuration's `[backend] url`), e.g. postgres://user@host/db.
    #[arg(long, global = true, value_name = "URL")]
    backend: Option<String>,
    /// The configuration file (default: $SIMBA_CONFIG, else ./simba.toml, else the embedded default).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print JSON instead of tables (one object; `watch` prints one per line).
    #[arg(long, global = true)]
    json: bool,
    /// Work within this namespace (overrides the configuration's `[backend] namespace`): every
    /// command sees and changes only its sessions, leases, groups and jobs.
    #[arg(long, short = 'N', global = true, value_name = "NAME", value_parser = parse_namespace)]
    namespace: Option<Namespace>,
    /// Give up on an unreachable backend after this long; `pause`, `resume` and `trigger`
    /// keep trying a busy or unreachable store (a SQLite file another process is writing)
    /// this long, then say whether the change took effect.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sessions, leases and groups as the backend sees them.
    Status,
    /// The namespaces present in the store, with their sessions, leases, groups and jobs
    /// (whatever `--namespace` says).
    Namespaces,
    /// `status`, refreshed live until Ctrl-C.
    Watch {
        /// Time between refreshes.
        #[arg(long, short = 'n', value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
        interval: Duration,
        /// Stop after this many refreshes (default: run until Ctrl-C).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Validate the configuration, connect, and check the backend's safety settings.
    Check,
    /// Serve the web dashboard of the backend until Ctrl-C (no node needed).
    Dashboard {
        /// Where to listen: an IP address and a port, e.g. 127.0.0.1:9465 (default: the
        /// configuration's [dashboard] listen). A bare port is refused.
        #[arg(long, value_name = "ADDR", value_parser = simba::dashboard::parse_listen)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Every job the backend's history knows: paused?, last outcome and slot, node, token,
    /// failures in the last 24 h, pending run requests.
    Jobs,
    /// The newest records of one job (`JOB`, or `JOB/i` for a partition), newest first.
    History {
        /// The job name.
        job: String,
        /// How many records.
        #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
        limit: usize,
    },
    /// Pause a job cluster-wide (a group pauses every partition): it runs nowhere until resumed.
    Pause {
        /// The job name (`JOB` or `JOB/i`).
        job: String,
    },
    /// Resume a paused job.
    Resume {
        /// The job name (`JOB` or `JOB/i`).
        job: String,
    },
    /// Run a job once now, on the node holding its term (or the next holder), as a `manual` slot.
    Trigger {
        /// The job name (`JOB` or `JOB/i`; a group runs every partition once).
        job: String,
    },
}

impl Command {
    /// The jobs command this is, if it is one.
    fn jobs(&self) -> Option<jobs::JobsCommand> {
        Some(match self {
            Command::Jobs => jobs::JobsCommand::List,
            Command::History { job, limit } => jobs::JobsCommand::History { job: job.clone(), limit: *limit },
            Command::Pause { job } => jobs::JobsCommand::Pause { job: job.clone() },
            Command::Resume { job } => jobs::JobsCommand::Resume { job: job.clone() },
            Command::Trigger { job } => jobs::JobsCommand::Trigger { job: job.clone() },
            _ => return None,
        })
    }
}

fn parse_namespace(s: &str) -> Result<Namespace, String> {
    match simba::backend::namespace::problem(s) {
        Some(message) => Err(message),
        None => Namespace::new(s).map_err(|e| e.to_string()),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be greater than zero".to_owned()),
        Err(e) => Err(format!("{e} (write e.g. 5s or 500ms)")),
    }
}

/// Runs the tool with the process's arguments and standard streams; for `fn main`.
pub fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "simba: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(EXIT_ERROR);
        }
    };
    let code = runtime.block_on(run(std::env::args_os(), &mut std::io::stdout(), &mut std::io::stderr()));
    std::process::ExitCode::from(code)
}

/// Runs the tool with `args` (the first is the program name), writing to `out` and `err`;
/// returns the exit code. Used by [`main`] and by tests.
pub async fn run<I, T>(args: I, out: &mut (dyn Write + Send), err: &mut (dyn Write + Send)) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // Plain text: clap's own wording, suggestions and usage, without colours.
            let text = e.render().to_string();
            return if e.use_stderr() {
                let _ = write!(err, "{text}");
                EXIT_ERROR
            } else {
                let _ = write!(out, "{text}");
                EXIT_OK
            };
        }
    };
    match execute(&cli, out, err).await {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(err, "simba: {message}");
            EXIT_ERROR
        }
    }
}

async fn execute(cli: &Cli, out: &mut (dyn Write + Send), err: &mut (dyn Write + Send)) -> Result<u8, String> {
    let config = load_config(cli);
    if let Command::Check = cli.command {
        return Ok(check::run(cli, config, out, err).await);
    }
    let config = config.map_err(|e| e.to_string())?;
    let url = BackendUrl::new(config.backend_url.as_str());
    let dashboard = match &cli.command {
        Command::Dashboard { listen } => Some(dashboard::settings(&config, *listen)?),
        _ => None,
    };
    let raw = connect(&url, cli.timeout).await?;
    if let Command::Namespaces = cli.command {
        return namespaces::run(&raw, &url, cli.json, out).await;
    }
    // Every other command sees one namespace: the named one, or the default one without
    // the named namespaces' records.
    let backend = match config.namespace.clone() {
        Some(ns) => Namespaced::new(raw, ns),
        None => Namespaced::default_view(raw),
    };
    let namespace = config.namespace.as_ref().map(Namespace::as_str);
    if let Some(settings) = dashboard {
        return dashboard::serve(backend, &config.backend_url, &url, &settings, out).await;
    }
    if let Some(cmd) = cli.command.jobs() {
        return jobs::run(&cmd, &backend, &url, cli.json, cli.timeout, out).await;
    }
    match &cli.command {
        Command::Status => {
            let view = render::View::read(&backend, &url, namespace, cli.timeout).await?;
            match render::write(&view, cli.json, out).and_then(|()| out.flush()) {
                Ok(()) => {}
                // The reader went away (`simba status | head`): nothing left to say.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                Err(e) => return Err(format!("cannot write the output: {e}")),
            }
        }
        Command::Watch { interval, count } => {
            let mut n = 0u64;
            loop {
                let view = render::View::read(&backend, &url, namespace, cli.timeout).await;
                let written = match &view {
                    Ok(v) if cli.json => render::write(v, true, out),
                    Ok(v) => write!(out, "\x1b[2J\x1b[H").and_then(|()| render::write(v, false, out)),
                    Err(e) => writeln!(err, "simba: {e} (retrying)"),
                };
                match written.and_then(|()| out.flush()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                    Err(e) => return Err(format!("cannot write the output: {e}")),
                }
                n += 1;
                if count.is_some_and(|c| n >= c) {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(*interval) => {}
                    _ = tokio::signal::ctrl_c() => break,
                }
            }
        }
        _ => {}
    }
    Ok(EXIT_OK)
}

/// The configuration as the runtime reads it, with `--config` and `--backend` applied.
fn load_config(cli: &Cli) -> Result<RuntimeConfig, Error> {
    let mut config = match &cli.config {
        Some(path) => RuntimeConfig::load_file(path)?,
        None => RuntimeConfig::load()?,
    };
    if let Some(url) = &cli.backend {
        config.backend_url = url.clone();
    }
    if let Some(ns) = &cli.namespace {
        config.namespace = Some(ns.clone());
    }
    Ok(config)
}

/// Connects to `url` within `timeout`, to read. A SQLite URL must name an existing file
/// (reading a cluster's state never creates a database); an evicting Redis is read anyway
/// (`check` reports its policy).
async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Connected, String> {
    if let Some(path) = url.sqlite_file()
        && !path.exists()
    {
        return Err(format!(
            "cannot reach the backend at {url}: no database file {} (run a node with this URL first, or pass --backend)",
            path.display()
        ));
    }
    match tokio::time::timeout(timeout, simba::backend::connect(url, ConnectOptions::for_reading())).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e @ BackendError::Unavailable { .. })) => {
            Err(format!("cannot reach the backend at {url}: {}", chain(&e)))
        }
        Ok(Err(e)) => Err(format!("cannot use the backend at {url}: {}", chain(&e))),
        Err(_) => Err(format!("cannot reach the backend at {url}: no answer within {timeout:?}")),
    }
}

/// An error with its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    simba::backend::error_chain(e)
}
