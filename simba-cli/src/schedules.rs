//! `simba schedules list|get|create|update|delete|pause|resume|trigger|audit`: schedules stored as
//! data, through [`simba::admin::Schedules`]. Every change names who made it (`--as`, else
//! the OS user) in the store's audit trail.
//!
//! Exit codes: 0 done (also for pausing a paused schedule, which says so); 1 refused: bad
//! input (nothing stored), an unknown or existing id, a store without schedules; 3 the store
//! did not answer, or failed.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use simba::admin::{Page, ScheduleError, Schedules, Toggle, TriggerOptions};
use simba::backend::Backend;
use simba::schedule_store::{AuditRecord, ListQuery, Misfire, Overlap, Schedule, ScheduleSpec, job_name};

use crate::jobs::DayCounts;
use crate::json;
use crate::output::{Failure, emit};

/// `simba schedules ...`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SchedulesArgs {
    /// Who makes the change, for the audit trail (default: the OS user, $USER or $LOGNAME).
    #[arg(long = "as", global = true, value_name = "WHO")]
    pub(crate) who: Option<String>,
    #[command(subcommand)]
    pub(crate) command: SchedulesCommand,
}

/// The schedules subcommands.
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum SchedulesCommand {
    /// Schedules ordered by id, a page at a time, filtered by handler or id prefix.
    #[command(
        after_help = "Example:\n  simba schedules list --prefix tenant-47 -n 50\n  simba schedules list --handler report --after tenant-4711.report"
    )]
    List {
        /// Only schedules of this handler.
        #[arg(long, value_name = "NAME")]
        handler: Option<String>,
        /// Only ids starting with this.
        #[arg(long, value_name = "PREFIX")]
        prefix: Option<String>,
        /// Only ids after this one (the `next` of the previous page).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// How many (at most 1000).
        #[arg(long, short = 'n', value_name = "N", default_value_t = 50)]
        limit: usize,
        /// A run counts as late when it started more than this after its slot (e.g. 30s).
        #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
        late_after: Duration,
    },
    /// One schedule, with its next fires.
    #[command(after_help = "Example:\n  simba schedules get tenant-4711.report --fires 3")]
    Get {
        /// The schedule id.
        id: String,
        /// How many next fires to show.
        #[arg(long, value_name = "N", default_value_t = 5)]
        fires: usize,
    },
    /// Create a schedule (refused with the reason, nothing stored, when anything is wrong).
    #[command(
        after_help = "Example:\n  simba schedules create tenant-4711.report --handler report \\\n    --cron '0 0 9 * * MON' --time-zone Europe/Berlin --payload '{\"tenant\": 4711}' --as alice"
    )]
    Create {
        /// The schedule id (the lease-name rule: A-Z a-z 0-9 . _ : -).
        id: String,
        #[command(flatten)]
        def: Definition,
    },
    /// Change a schedule's handler, timing, payload or policies (what is not given stays).
    #[command(after_help = "Example:\n  simba schedules update tenant-4711.report --cron '0 30 8 * * MON-FRI'")]
    Update {
        /// The schedule id.
        id: String,
        #[command(flatten)]
        def: Definition,
    },
    /// Delete a schedule.
    #[command(after_help = "Example:\n  simba schedules delete tenant-4711.report --note 'tenant left'")]
    Delete {
        /// The schedule id.
        id: String,
        /// Why, for the audit trail.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Pause a schedule: its slots pass without a run until it is resumed.
    #[command(after_help = "Example:\n  simba schedules pause tenant-4711.report --note 'db migration' --as alice")]
    Pause {
        /// The schedule id.
        id: String,
        /// Why (kept with the pause and in the audit trail).
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Resume a paused schedule.
    #[command(after_help = "Example:\n  simba schedules resume tenant-4711.report")]
    Resume {
        /// The schedule id.
        id: String,
        /// A note for the audit trail.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Run a schedule once now, on the node holding its partition (a `manual` run naming the
    /// request's key), optionally with another payload for this run only.
    #[command(
        after_help = "Example:\n  simba schedules trigger tenant-4711.report --payload '{\"tenant\": 4711, \"week\": 49}' --note 'rerun week 49' --as alice"
    )]
    Trigger {
        /// The schedule id.
        id: String,
        /// The request's key (default: generated). The same key again is the same request: it
        /// runs once, whether it is still pending or already ran, so repeating a command whose
        /// outcome is unknown is safe.
        #[arg(long, value_name = "KEY")]
        request_key: Option<String>,
        /// The payload this run gets instead of the schedule's, JSON text (at most 16 KiB).
        #[arg(long, value_name = "JSON")]
        payload: Option<String>,
        /// Why, for the audit trail.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Run the slots of a past range of a cron schedule again, at most RATE runs per second,
    /// on the node holding its partition: slots that ran are skipped, never run twice; missed
    /// ones run. Prints the plan first; a range over 10,000 slots or a day at the budget is
    /// refused, as is a fixed-rate schedule.
    #[command(
        after_help = "Examples:\n  simba schedules backfill tenant-4711.report --from 2027-01-01T00:00:00Z --to 2027-01-07T23:59:59Z --rate 0.5 --dry-run\n  simba schedules backfill tenant-4711.report --from 2027-01-01T00:00:00Z --to 2027-01-07T23:59:59Z --rate 0.5 --note 'db outage' --as alice"
    )]
    Backfill {
        /// The schedule id.
        id: String,
        #[command(flatten)]
        range: crate::parse::BackfillRange,
        /// Why, for the audit trail.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// The audit trail: who created, changed, paused, resumed, triggered, backfilled or
    /// deleted what, newest first.
    #[command(after_help = "Example:\n  simba schedules audit tenant-4711.report -n 10")]
    Audit {
        /// Only this schedule's records.
        id: Option<String>,
        /// How many records.
        #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
        limit: usize,
    },
}

/// What a create sets and an update may change.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Definition {
    /// The handler that runs the slots.
    #[arg(long, value_name = "NAME")]
    handler: Option<String>,
    /// A 6-field cron expression, seconds first (e.g. '0 0 9 * * MON').
    #[arg(long, value_name = "EXPR", conflicts_with = "every")]
    cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC).
    #[arg(long, value_name = "ZONE", requires = "cron")]
    time_zone: Option<String>,
    /// A fixed rate instead of a cron expression (e.g. 90s; 1 s to 366 days).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    every: Option<Duration>,
    /// The handler's input, JSON text (at most 16 KiB; default null).
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// What to do with slots missed while no node held the schedule: skip or run_once.
    #[arg(long, value_name = "POLICY", value_parser = parse_misfire)]
    misfire: Option<Misfire>,
    /// What a slot does while the schedule's previous run is in flight: skip (the default),
    /// buffer_one, allow_all or cancel_running.
    #[arg(long, value_name = "POLICY", value_parser = parse_overlap)]
    overlap: Option<Overlap>,
    /// With --misfire run_once: slots missed longer ago than this are recorded missed and never
    /// caught up (e.g. 1h).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    catch_up_window: Option<Duration>,
    /// Start each slot up to this long after its instant, the same instant on every node
    /// (e.g. 30s; shorter than a fixed rate).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    jitter: Option<Duration>,
    /// No slot before this instant (RFC 3339, e.g. 2027-01-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = crate::parse::instant_ms)]
    start: Option<i64>,
    /// No slot after this instant (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = crate::parse::instant_ms)]
    end: Option<i64>,
}

/// A misfire policy by its `simba.toml` name (the rules crate's one parser).
fn parse_misfire(s: &str) -> Result<Misfire, String> {
    simba_rules::misfire::parse(s).ok_or_else(|| format!("expected {}", simba_rules::misfire::VALID))
}

/// An overlap policy by its `simba.toml` name (the rules crate's one parser).
fn parse_overlap(s: &str) -> Result<Overlap, String> {
    Overlap::from_name(s).ok_or_else(|| format!("expected {}", simba_rules::overlap::VALID))
}

impl Definition {
    /// A new schedule `id` from these options: the handler and a timing are required.
    fn create(&self, id: &str) -> Result<Schedule, Failure> {
        let Some(handler) = &self.handler else {
            return Err(Failure::usage("a new schedule needs --handler NAME"));
        };
        let Some(spec) = self.spec() else {
            return Err(Failure::usage("a new schedule needs --cron EXPR (with --time-zone ZONE) or --every DURATION"));
        };
        let s = Schedule::new(id, handler.clone(), spec);
        Ok(self.apply(s))
    }

    /// `current` with what these options change.
    fn update(&self, current: Schedule) -> Schedule {
        let mut s = self.apply(current);
        if let Some(handler) = &self.handler {
            s.handler.clone_from(handler);
        }
        if let Some(spec) = self.spec() {
            s.spec = spec;
        }
        s
    }

    fn apply(&self, mut s: Schedule) -> Schedule {
        if let Some(payload) = &self.payload {
            s.payload.clone_from(payload);
        }
        let p = &mut s.policies;
        if let Some(m) = self.misfire {
            *p = p.with_misfire(m);
        }
        if let Some(o) = self.overlap {
            *p = p.with_overlap(o);
        }
        if let Some(w) = self.catch_up_window {
            *p = p.with_catch_up_window(w);
        }
        if let Some(j) = self.jitter {
            *p = p.with_jitter(j);
        }
        if self.start.is_some() || self.end.is_some() {
            *p = p.with_bounds(self.start.or(p.start_ms), self.end.or(p.end_ms));
        }
        s
    }

    fn spec(&self) -> Option<ScheduleSpec> {
        match (&self.cron, self.every) {
            (Some(expr), _) => {
                Some(ScheduleSpec::cron(expr.clone(), self.time_zone.clone().unwrap_or_else(|| "UTC".into())))
            }
            (None, Some(every)) => Some(ScheduleSpec::fixed_rate(every)),
            (None, None) => None,
        }
    }
}

/// Who acts: `--as`, else the OS user, else `simba-cli`.
fn who(args: &SchedulesArgs) -> String {
    args.who
        .clone()
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .or_else(|| std::env::var("LOGNAME").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "simba-cli".to_owned())
}

/// Runs `args` on `backend`.
pub(crate) async fn run(
    args: &SchedulesArgs,
    backend: &impl Backend,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    let api = Schedules::for_backend(backend).map_err(failure)?;
    // The tool does not link the service's handlers: only their names' syntax is checked, and
    // the namespace's partition count is the one its first create wrote.
    let api = match api.store().partitions().await.map_err(|e| failure(e.into()))? {
        Some(p) => api.with_partitions(p).map_err(failure)?,
        None => api,
    };
    let who = who(args);
    let text = match &args.command {
        SchedulesCommand::List { handler, prefix, after, limit, late_after } => {
            let mut q = ListQuery::first(*limit);
            q.handler.clone_from(handler);
            q.prefix.clone_from(prefix);
            q.after.clone_from(after);
            let page = api.list(q).await.map_err(failure)?;
            let days = day_counts(backend, &page, *late_after).await?;
            let rows: Vec<Row<'_>> =
                page.schedules.iter().zip(days).map(|(schedule, day)| Row { schedule, day }).collect();
            if json {
                json::pretty(&ListJson { schema: json::SCHEMA, schedules: &rows, next: page.next.as_deref() })?
            } else {
                list_table(&rows, page.next.as_deref())
            }
        }
        SchedulesCommand::Get { id, fires } => {
            let s = api.get(id).await.map_err(failure)?;
            let next = api.next_fires(id, *fires).await.map_err(failure)?;
            shown(&s, &next, json)?
        }
        SchedulesCommand::Create { id, def } => {
            let s = api.create(def.create(id)?, &who).await.map_err(failure)?;
            changed("created", &s, json)?
        }
        SchedulesCommand::Update { id, def } => {
            let current = api.get(id).await.map_err(failure)?;
            let s = api.update(def.update(current), &who).await.map_err(failure)?;
            changed("updated", &s, json)?
        }
        SchedulesCommand::Delete { id, note } => {
            api.delete(id, &who, note.as_deref()).await.map_err(failure)?;
            let said = format!("deleted schedule `{id}`");
            if json { json::line(&Said { schema: json::SCHEMA, id, message: &said })? } else { said + "\n" }
        }
        SchedulesCommand::Pause { id, note } => {
            toggled(id, &api.pause(id, &who, note.as_deref()).await.map_err(failure)?, json)?
        }
        SchedulesCommand::Resume { id, note } => {
            toggled(id, &api.resume(id, &who, note.as_deref()).await.map_err(failure)?, json)?
        }
        SchedulesCommand::Trigger { id, request_key, payload, note } => {
            let mut options = TriggerOptions::new();
            (options.key, options.payload, options.note) =
                (request_key.as_deref(), payload.as_deref(), note.as_deref());
            let r = api.trigger(id, &who, options).await.map_err(failure)?;
            crate::jobs::requested(&job_name(id), &r, json)?
        }
        SchedulesCommand::Backfill { id, range, note } => {
            let ask = range.ask(who.clone(), note.as_ref());
            crate::jobs::backfilled(&api.backfill(id, &ask).await.map_err(failure)?, json)?
        }
        SchedulesCommand::Audit { id, limit } => {
            let records = api.audit(id.as_deref(), *limit).await.map_err(failure)?;
            if json { json::pretty(&AuditJson::new(&records))? } else { audit_table(&records) }
        }
    };
    emit(out, &text)
}

/// Refusals (bad input, unknown or existing ids, no schedule store) exit 1; the store
/// failing exits 3.
fn failure(e: ScheduleError) -> Failure {
    match e {
        e @ (ScheduleError::Store(_) | ScheduleError::Unrecorded { .. }) => Failure::unreachable(e.to_string()),
        ScheduleError::Trigger(e) => crate::jobs::message(e),
        e => Failure::refused(e.to_string()),
    }
}

fn time(ms: i64) -> String {
    json::time(Some(ms)).unwrap_or_else(|| "-".to_owned())
}

/// One schedule of a list, with what its history holds for the last 24 hours.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    schedule: &'a Schedule,
    #[serde(flatten)]
    day: DayCounts,
}

/// How many schedules' histories a list reads at once.
const HISTORY_READS: usize = 16;

/// The last 24 hours of each schedule of `page` (its history under `schedule/<id>`), at most
/// [`HISTORY_READS`] read at a time; zeros on a backend without a jobs store.
async fn day_counts(backend: &impl Backend, page: &Page, late_after: Duration) -> Result<Vec<DayCounts>, Failure> {
    let Some(store) = backend.job_store() else { return Ok(vec![DayCounts::default(); page.schedules.len()]) };
    let mut counts = Vec::with_capacity(page.schedules.len());
    for chunk in page.schedules.chunks(HISTORY_READS) {
        let reads = chunk.iter().map(|s| {
            let (store, job) = (store.clone(), job_name(&s.id));
            tokio::spawn(async move { DayCounts::of(&store, &job, late_after).await })
        });
        for read in reads.collect::<Vec<_>>() {
            let day = read.await.map_err(|e| Failure::unreachable(format!("reading a schedule's history: {e}")))?;
            counts.push(day.map_err(|e| Failure::unreachable(e.to_string()))?);
        }
    }
    Ok(counts)
}

fn list_table(rows: &[Row<'_>], next: Option<&str>) -> String {
    if rows.is_empty() {
        return "no schedules\n".to_owned();
    }
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|Row { schedule: s, day }| {
            vec![
                s.id.clone(),
                s.handler.clone(),
                s.spec.to_string(),
                if s.paused { "yes".to_owned() } else { "no".to_owned() },
                s.partition.to_string(),
                s.revision.to_string(),
                day.failures.to_string(),
                day.missed.to_string(),
                day.late.to_string(),
            ]
        })
        .collect();
    let heads = ["ID", "HANDLER", "WHEN", "PAUSED", "PARTITION", "REVISION", "FAILURES 24H", "MISSED 24H", "LATE 24H"];
    let mut text = crate::jobs::table(&heads, &rows);
    if let Some(next) = next {
        text.push_str(&format!("more: simba schedules list --after {next}\n"));
    }
    text
}

fn shown(s: &Schedule, next: &[i64], json: bool) -> Result<String, Failure> {
    if json {
        return json::pretty(&ScheduleJson {
            schema: json::SCHEMA,
            schedule: s,
            next_fires: next.iter().map(|t| time(*t)).collect(),
        });
    }
    let mut text = format!(
        "id          {}\nhandler     {}\nwhen        {}\npayload     {}\npolicies    {}\npaused      {}\npartition   {}\nrevision    {}\ncreated     {} by {}\nupdated     {} by {}\n",
        s.id,
        s.handler,
        s.spec,
        s.payload,
        s.policies.summary(),
        match (&s.paused, &s.pause_note) {
            (true, Some(note)) => format!("yes ({note})"),
            (true, None) => "yes".to_owned(),
            (false, _) => "no".to_owned(),
        },
        s.partition,
        s.revision,
        time(s.created_ms),
        s.created_by,
        time(s.updated_ms),
        s.updated_by,
    );
    let fires: Vec<String> = next.iter().map(|t| time(*t)).collect();
    text.push_str(&format!("next fires  {}\n", if fires.is_empty() { "none".to_owned() } else { fires.join(", ") }));
    Ok(text)
}

fn changed(what: &str, s: &Schedule, json: bool) -> Result<String, Failure> {
    let said = format!("{what} schedule `{}` ({}, handler `{}`, revision {})", s.id, s.spec, s.handler, s.revision);
    if json {
        json::line(&ScheduleJson { schema: json::SCHEMA, schedule: s, next_fires: Vec::new() })
    } else {
        Ok(said + "\n")
    }
}

fn toggled(id: &str, t: &Toggle, json: bool) -> Result<String, Failure> {
    let said = match (t.paused, t.changed) {
        (true, true) => {
            format!("paused schedule `{id}`: its slots pass without a run until `simba schedules resume {id}`")
        }
        (true, false) => format!("schedule `{id}` was already paused; its note is updated"),
        (false, true) => format!("resumed schedule `{id}`"),
        (false, false) => format!("schedule `{id}` was not paused; nothing changed"),
    };
    if json {
        json::line(&json::Toggled {
            schema: json::SCHEMA,
            job: id,
            paused: t.paused,
            changed: t.changed,
            message: &said,
        })
    } else {
        Ok(said + "\n")
    }
}

fn audit_table(records: &[AuditRecord]) -> String {
    if records.is_empty() {
        return "no audit records\n".to_owned();
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                time(r.at_ms),
                r.who.clone(),
                r.action.to_string(),
                r.target.clone(),
                r.note.clone().unwrap_or_default(),
            ]
        })
        .collect();
    crate::jobs::table(&["WHEN", "WHO", "ACTION", "SCHEDULE", "NOTE"], &rows)
}

/// `simba schedules list --json`.
#[derive(Serialize)]
struct ListJson<'a> {
    schema: u32,
    /// Each schedule's fields, with `failures_24h`, `missed_24h` and `late_24h`.
    schedules: &'a [Row<'a>],
    /// The last id of this page when another page follows.
    next: Option<&'a str>,
}

/// `simba schedules get|create|update --json`: the stored schedule and its next fires.
#[derive(Serialize)]
struct ScheduleJson<'a> {
    schema: u32,
    schedule: &'a Schedule,
    next_fires: Vec<String>,
}

/// `simba schedules delete --json`.
#[derive(Serialize)]
struct Said<'a> {
    schema: u32,
    id: &'a str,
    message: &'a str,
}

/// `simba schedules audit --json`, newest first, instants also in RFC 3339.
#[derive(Serialize)]
struct AuditJson<'a> {
    schema: u32,
    records: Vec<AuditLine<'a>>,
}

#[derive(Serialize)]
struct AuditLine<'a> {
    #[serde(flatten)]
    record: &'a AuditRecord,
    at: String,
}

impl<'a> AuditJson<'a> {
    fn new(records: &'a [AuditRecord]) -> Self {
        AuditJson {
            schema: json::SCHEMA,
            records: records.iter().map(|r| AuditLine { record: r, at: time(r.at_ms) }).collect(),
        }
    }
}
