//! The `simba` command-line tool (package `simba-sched-cli`): `status`, `watch`, `check`,
//! `namespaces`, `dashboard`, the jobs commands `jobs`, `history`, `pause`, `resume`,
//! `trigger`, and `completions`, against the backend named by `simba.toml` or `--backend URL`
//! (ADR 0007, ADR 0010).
//!
//! The binary calls [`main`]; tests drive the same code in-process with [`run`] (and
//! [`run_styled`] for terminal output). Exit codes: [`EXIT_OK`], [`EXIT_FAILED`] (a check
//! failed, or the operation was refused), [`EXIT_USAGE`] (clap's usage errors, an invalid
//! configuration), [`EXIT_UNREACHABLE`] (the backend did not answer within `--timeout`; the
//! message names the URL, never its password, and the cause).

mod args;
mod check;
mod dashboard;
mod jobs;
mod json;
mod namespaces;
mod output;
mod parse;
mod render;
mod schedules;

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use simba::backend::namespace::{Namespace, Namespaced};
use simba::backend::{BackendError, BackendUrl, ConnectOptions, Connected};
use simba::{Error, RuntimeConfig};

use args::{Cli, Command};
pub use output::{EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, Styling};
use output::{Failure, finish};

/// Runs the tool with the process's arguments and standard streams; for `fn main`. Terminal
/// control codes and colours only reach a terminal ([`Styling::detect`]).
pub fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "simba: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(EXIT_FAILED);
        }
    };
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = runtime.block_on(run_styled(std::env::args_os(), &mut out, &mut err, Styling::detect()));
    std::process::ExitCode::from(code)
}

/// Runs the tool with `args` (the first is the program name), writing plain text to `out`
/// and `err`; returns the exit code.
pub async fn run<I, T>(args: I, out: &mut (dyn Write + Send), err: &mut (dyn Write + Send)) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_styled(args, out, err, Styling::default()).await
}

/// [`run`], with `out` able to show what `styling` allows (a terminal's screen clearing and
/// colours).
pub async fn run_styled<I, T>(
    args: I,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
    styling: Styling,
) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // clap's own wording, suggestions and usage; its colours only where allowed.
            let text = if styling.color { e.render().ansi().to_string() } else { e.render().to_string() };
            return if e.use_stderr() {
                let _ = write!(err, "{text}");
                EXIT_USAGE
            } else {
                let _ = write!(out, "{text}");
                EXIT_OK
            };
        }
    };
    match execute(&cli, out, err, styling).await {
        Ok(code) => code,
        Err(failure) => {
            let _ = writeln!(err, "simba: {}", failure.message);
            failure.code
        }
    }
}

async fn execute(
    cli: &Cli,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
    styling: Styling,
) -> Result<u8, Failure> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "simba", out);
        return finish(out.flush());
    }
    let config = load_config(cli);
    if let Command::Check = cli.command {
        return Ok(check::run(cli, config, out, err).await);
    }
    let config = config.map_err(|e| Failure::usage(e.to_string()))?;
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
    if let Command::Schedules(args) = &cli.command {
        return schedules::run(args, &backend, cli.json, out).await;
    }
    let read = render::Read { backend: &backend, url: &url, namespace, timeout: cli.timeout };
    match &cli.command {
        Command::Status => {
            let view = read.view().await?;
            finish(render::write(&view, cli.json, out).and_then(|()| out.flush()))
        }
        Command::Watch { interval, count } => {
            render::watch(&read, *interval, *count, cli.json, styling, out, err).await
        }
        _ => Ok(EXIT_OK),
    }
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
/// (`check` reports its policy). A URL no backend takes, or a store that refuses the
/// connection's settings, is a usage error: trying again will not help.
async fn connect(url: &BackendUrl, timeout: Duration) -> Result<Connected, Failure> {
    if let Some(path) = url.sqlite_file()
        && !path.exists()
    {
        return Err(Failure::unreachable(format!(
            "cannot reach the backend at {url}: no database file {} (run a node with this URL first, or pass --backend)",
            path.display()
        )));
    }
    match tokio::time::timeout(timeout, simba::backend::connect(url, ConnectOptions::for_reading())).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e @ BackendError::Misconfigured(_))) => {
            // etcd is the tool's one opt-in backend: say how to get it, not the library's feature list.
            let hint = if url.scheme() == "etcd" && !cfg!(feature = "etcd") {
                " (this simba was built without etcd: `cargo install simba-sched-cli --features etcd`, which needs protoc)"
            } else {
                ""
            };
            Err(Failure::usage(format!("cannot use the backend at {url}: {}{hint}", chain(&e))))
        }
        Ok(Err(e)) => Err(Failure::unreachable(format!("cannot reach the backend at {url}: {}", chain(&e)))),
        Err(_) => Err(Failure::unreachable(format!("cannot reach the backend at {url}: no answer within {timeout:?}"))),
    }
}

/// An error with its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    simba::backend::error_chain(e)
}
