//! The command line: every command and option, with the examples `--help` shows.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use clap_complete::Shell;
use simba::backend::namespace::Namespace;

/// What `simba --help` says under the options: exit codes, completions, where the
/// configuration comes from.
const AFTER_HELP: &str = "\
Exit codes:
  0  done (and, for `check`, every check passed)
  1  a check failed, or the operation was refused or failed (an unknown job, a backend
     without a jobs store, output that could not be written)
  2  usage error: bad arguments (clap's message and usage), an invalid configuration file,
     a backend URL no backend of this build takes
  3  cannot reach, connect to or read the backend within --timeout

Shell completions: `simba completions bash|zsh|fish` prints a script (see `simba completions --help`).
The configuration is the runtime's simba.toml: --config FILE, else $SIMBA_CONFIG, else ./simba.toml,
with SIMBA_<TABLE>__<KEY> overrides; --backend URL alone is enough to look at a store.";

/// Inspect, check and control a simba cluster: the sessions, leases and groups a backend holds,
/// its safety settings, and its jobs: their run history, pausing and resuming them
/// cluster-wide, and running one now.
// The doc comment is the help's first line (clap's `about` would take the package's
// description instead).
#[derive(Debug, Parser)]
#[command(name = "simba", version, long_about = None, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// The backend URL (overrides the configuration's `[backend] url`), e.g. postgres://user@host/db.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) backend: Option<String>,
    /// The configuration file (default: $SIMBA_CONFIG, else ./simba.toml, else the embedded default).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print JSON instead of tables (one object with a `schema` version; `watch` prints one per line).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Work within this namespace (overrides the configuration's `[backend] namespace`): every
    /// command sees and changes only its sessions, leases, groups and jobs.
    #[arg(long, short = 'N', global = true, value_name = "NAME", value_parser = parse_namespace)]
    pub(crate) namespace: Option<Namespace>,
    /// Give up on an unreachable backend after this long; `pause`, `resume` and `trigger`
    /// keep trying a busy or unreachable store (a SQLite file another process is writing)
    /// this long, then say whether the change took effect.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The commands. Short flags mean one thing everywhere: `-n` is "how many" (`history
/// --limit`, `watch --count`), `-c` the configuration file, `-N` the namespace.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Sessions, leases and groups as the backend sees them.
    #[command(
        after_help = "Example:\n  simba status --backend postgres://simba@db.internal/simba\n  simba status --json | jq '.leases[] | {name, token}'"
    )]
    Status,
    /// The namespaces present in the store, with their sessions, leases, groups and jobs
    /// (whatever `--namespace` says).
    #[command(after_help = "Example:\n  simba namespaces --backend redis://cache.internal:6379")]
    Namespaces,
    /// `status`, refreshed live until Ctrl-C (the screen is redrawn only on a terminal).
    #[command(after_help = "Example:\n  simba watch --interval 1s\n  simba watch --json -n 10 > status.jsonl")]
    Watch {
        /// Time between refreshes.
        #[arg(long, short = 'i', value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
        interval: Duration,
        /// Stop after this many refreshes (default: run until Ctrl-C).
        #[arg(long, short = 'n', value_name = "N")]
        count: Option<u64>,
    },
    /// Validate the configuration, connect, and check the backend's safety settings (exit 1
    /// when a check fails, 3 when the backend cannot be reached).
    #[command(after_help = "Example:\n  simba check --config /etc/billing/simba.toml")]
    Check,
    /// Serve the web dashboard of the backend until Ctrl-C (no node needed).
    #[command(after_help = "Example:\n  simba dashboard --backend sqlite://simba.db --listen 127.0.0.1:9465")]
    Dashboard {
        /// Where to listen: an IP address and a port, e.g. 127.0.0.1:9465 (default: the
        /// configuration's [dashboard] listen). A bare port is refused.
        #[arg(long, value_name = "ADDR", value_parser = simba::dashboard::parse_listen)]
        listen: Option<std::net::SocketAddr>,
    },
    /// Every job the backend's history knows: paused?, last outcome and slot, node, token,
    /// failures, missed slots and late starts in the last 24 h, pending run requests.
    #[command(
        after_help = "Example:\n  simba jobs --backend postgres://simba@db.internal/simba\n  simba jobs --late-after 1m"
    )]
    Jobs {
        /// A run counts as late when it started more than this after its slot (e.g. 30s).
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
        late_after: std::time::Duration,
    },
    /// The newest records of one job (`JOB`, or `JOB/i` for a partition), newest first.
    #[command(after_help = "Example:\n  simba history nightly-report -n 5\n  simba history billing/3 --json")]
    History {
        /// The job name.
        job: String,
        /// How many records.
        #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
        limit: usize,
    },
    /// Pause a job cluster-wide (a group pauses every partition): it runs nowhere until resumed.
    #[command(after_help = "Example:\n  simba pause nightly-report")]
    Pause {
        /// The job name (`JOB` or `JOB/i`).
        job: String,
    },
    /// Resume a paused job.
    #[command(after_help = "Example:\n  simba resume nightly-report")]
    Resume {
        /// The job name (`JOB` or `JOB/i`).
        job: String,
    },
    /// Run a job once now, on the node holding its term (or the next holder), as a `manual` slot.
    /// Prints the request's key; the run's record names it (`simba history`).
    #[command(
        after_help = "Examples:\n  simba trigger nightly-report\n  simba trigger nightly-report --request-key deploy-4711"
    )]
    Trigger {
        /// The job name (`JOB` or `JOB/i`; a group runs every partition once).
        job: String,
        /// The request's key (1 to 64 ASCII letters, digits or -_.:); generated when absent.
        /// The same key again is the same request: it runs once, whether it is still pending
        /// or already ran, so repeating a command whose outcome is unknown is safe.
        #[arg(long, value_name = "KEY")]
        request_key: Option<String>,
    },
    /// Run the slots of a past range of a job again, at most RATE runs per second, on the node
    /// holding its term: slots that ran are skipped, never run twice; missed ones run. Prints
    /// the plan first; a range over 10,000 slots or a day at the budget is refused.
    #[command(
        after_help = "Examples:\n  simba backfill nightly-report --from 2027-01-01T00:00:00Z --to 2027-01-07T23:59:59Z --rate 0.5 --dry-run\n  simba backfill nightly-report --from 2027-01-01T00:00:00Z --to 2027-01-07T23:59:59Z --rate 0.5 --as alice --note 'db outage'"
    )]
    Backfill {
        /// The job name (`JOB` or `JOB/i`).
        job: String,
        #[command(flatten)]
        range: crate::parse::BackfillRange,
        /// Who asks, for the log (default: the OS user, $USER or $LOGNAME).
        #[arg(long = "as", value_name = "WHO")]
        who: Option<String>,
        /// Why, for the log.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Schedules stored as data: list, get, create, update, delete, pause, resume, and the
    /// audit trail of who changed what.
    #[command(
        after_help = "Example:\n  simba schedules list\n  simba schedules pause tenant-4711.report --note 'db migration' --as alice"
    )]
    Schedules(Box<crate::schedules::SchedulesArgs>),
    /// Print a shell completion script for `simba` (needs no backend).
    #[command(after_help = "\
Examples:
  simba completions bash > ~/.local/share/bash-completion/completions/simba
  simba completions zsh > ~/.zfunc/_simba      # with `fpath+=~/.zfunc` before `compinit` in ~/.zshrc
  simba completions fish > ~/.config/fish/completions/simba.fish")]
    Completions {
        /// The shell.
        shell: Shell,
    },
}

impl Command {
    /// The jobs command this is, if it is one.
    pub(crate) fn jobs(&self) -> Option<crate::jobs::JobsCommand> {
        use crate::jobs::JobsCommand;
        Some(match self {
            Command::Jobs { late_after } => JobsCommand::List { late_after: *late_after },
            Command::History { job, limit } => JobsCommand::History { job: job.clone(), limit: *limit },
            Command::Pause { job } => JobsCommand::Pause { job: job.clone() },
            Command::Resume { job } => JobsCommand::Resume { job: job.clone() },
            Command::Trigger { job, request_key } => {
                JobsCommand::Trigger { job: job.clone(), request_key: request_key.clone() }
            }
            Command::Backfill { job, range, who, note } => {
                let who = who
                    .clone()
                    .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
                    .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
                    .unwrap_or_else(|| "simba-cli".to_owned());
                JobsCommand::Backfill { job: job.clone(), ask: range.ask(who, note.as_ref()) }
            }
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
