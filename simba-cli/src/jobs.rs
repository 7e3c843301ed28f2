//! `simba jobs`, `simba history JOB`, `simba pause JOB`, `simba resume JOB` and
//! `simba trigger JOB`, on the backend's jobs store through
//! [`simba::admin::Jobs`].
//!
//! Exit codes: 0 done (also for pausing a paused job, which says so); 1 refused: an unknown
//! job (the message names the nearest known one) or a backend without a jobs store; 3 the
//! store did not answer, or failed (the message says whether a change took effect).

use std::io::Write;

use chrono::{DateTime, Utc};
use simba::admin::{AdminError, Jobs, Toggle};
use simba::backend::{Backend, LeaseInfo, SessionId};
use simba::job::{JobKind, JobSettings, RegistryReport};
use simba::job_store::{JobState, Outcome, RunRecord};

use crate::json;
use crate::output::{Failure, emit};

/// One of the jobs commands, as parsed.
#[derive(Debug, Clone)]
pub(crate) enum JobsCommand {
    List { late_after: std::time::Duration },
    History { job: String, limit: usize },
    Pause { job: String },
    Resume { job: String },
    Trigger { job: String, request_key: Option<String> },
    Backfill { job: String, ask: simba::admin::BackfillAsk },
}

/// Runs `cmd` on `backend`.
pub(crate) async fn run(
    cmd: &JobsCommand,
    backend: &impl Backend,
    url: &simba::backend::BackendUrl,
    json: bool,
    wait: std::time::Duration,
    out: &mut (dyn Write + Send),
) -> Result<u8, Failure> {
    let Some(store) = backend.job_store() else {
        return Err(Failure::refused(format!(
            "the backend at {} keeps no job history or job control in this build: its jobs store is not available",
            url
        )));
    };
    // Pause, resume and run-now wait out a busy store (a SQLite file another process is
    // writing) up to the tool's timeout, and say whether a failed change took effect.
    let jobs = Jobs::new(store).with_wait(wait);
    let text = match cmd {
        JobsCommand::List { late_after } => {
            // Schedules stored as data are `simba schedules list`'s: thousands of them would
            // bury the jobs, each with a history read.
            let (list, schedules): (Vec<JobState>, Vec<JobState>) = jobs
                .list()
                .await
                .map_err(message)?
                .into_iter()
                .partition(|j| !simba::schedule_store::is_schedule_job(&j.job));
            let registry = jobs.registry().await.map_err(message)?;
            // Holders are shown where the store can be listed; a failure leaves them out.
            let held = backend.inspect().await.map(|s| s.leases).unwrap_or_default();
            let rows = list_rows(&jobs, &list, &registry, (&held, *late_after)).await?;
            if json {
                list_json(&rows, &registry, schedules.len())?
            } else {
                list_table(&rows, &registry, schedules.len())
            }
        }
        JobsCommand::History { job, limit } => {
            let h = jobs.history(job, *limit).await.map_err(message)?;
            if json {
                json::pretty(&json::History::new(job, &h))?
            } else if h.is_empty() {
                format!("no records for `{job}` yet\n")
            } else {
                history_table(&h)
            }
        }
        JobsCommand::Pause { job } => toggled(job, &jobs.pause(job).await.map_err(message)?, json)?,
        JobsCommand::Resume { job } => toggled(job, &jobs.resume(job).await.map_err(message)?, json)?,
        JobsCommand::Trigger { job, request_key } => {
            requested(job, &jobs.trigger_keyed(job, request_key.as_deref()).await.map_err(message)?, json)?
        }
        JobsCommand::Backfill { job, ask } => backfilled(&jobs.backfill(job, ask).await.map_err(message)?, json)?,
    };
    emit(out, &text)
}

/// What `simba pause JOB` / `simba resume JOB` prints.
fn toggled(job: &str, t: &Toggle, json: bool) -> Result<String, Failure> {
    let mut said = match (t.paused, t.changed) {
        (true, true) => format!("paused `{job}`: it runs nowhere until `simba resume {job}`"),
        (true, false) => format!("`{job}` was already paused; nothing changed"),
        (false, true) => format!("resumed `{job}`"),
        (false, false) => format!("`{job}` was not paused; nothing changed"),
    };
    if let Some(e) = &t.confirmed_after {
        said.push_str(&format!(" (the store's answer was lost ({e}); reading the job back confirmed it)"));
    }
    if json {
        json::line(&json::Toggled { schema: json::SCHEMA, job, paused: t.paused, changed: t.changed, message: &said })
    } else {
        Ok(said + "\n")
    }
}

/// An unknown job is refused; anything else is the store failing to answer.
/// What `simba trigger` and `simba schedules trigger` print for request `r` of `job`.
pub(crate) fn requested(job: &str, r: &simba::admin::Requested, json: bool) -> Result<String, Failure> {
    let said = r.message(job);
    if !json {
        return Ok(said + "\n");
    }
    json::line(&json::Triggered {
        schema: json::SCHEMA,
        job,
        request: Some(r.id),
        request_key: &r.key,
        known: r.known,
        at: json::time(Some(r.slot_ms)),
        retried_after: r.retried_after.as_deref(),
        message: &said,
    })
}

/// What `simba backfill` prints: the plan, then the request made (none for a dry run).
pub(crate) fn backfilled(b: &simba::admin::Backfill, json: bool) -> Result<String, Failure> {
    let plan = b.plan_text();
    let said = match &b.requested {
        None => format!("{plan}\ndry run: nothing was requested\n"),
        Some(r) if r.known => format!("{plan}\nthis backfill was requested before (key `{}`); nothing new\n", r.key),
        Some(r) => format!(
            "{plan}\nrequested (key `{}`): the node holding `{}` runs it; each slot is logged as run or skipped, and \
             `simba history {}` shows the runs (kind backfill)\n",
            r.key, b.job, b.job
        ),
    };
    if !json {
        return Ok(said);
    }
    let v = serde_json::json!({
        "schema": json::SCHEMA,
        "job": b.job,
        "from": json::time(Some(b.plan.from_ms)),
        "to": json::time(Some(b.plan.to_ms)),
        "rate": b.plan.rate(),
        "slots": b.slots,
        "first_slot": json::time(Some(b.first_ms)),
        "last_slot": json::time(Some(b.last_ms)),
        "takes_seconds": b.takes.as_secs_f64(),
        "dry_run": b.requested.is_none(),
        "request_key": b.requested.as_ref().map(|r| r.key.as_str()),
        "known": b.requested.as_ref().is_some_and(|r| r.known),
        "message": said.trim_end(),
    });
    Ok(format!("{v}\n"))
}

pub(crate) fn message(e: AdminError) -> Failure {
    match e {
        e @ (AdminError::UnknownJob { .. }
        | AdminError::Backfill { .. }
        | AdminError::InvalidRequestKey { .. }
        | AdminError::TooManyRequests { .. }) => Failure::refused(e.to_string()),
        e => Failure::unreachable(e.to_string()),
    }
}

fn time(ms: Option<i64>) -> String {
    json::time(ms).unwrap_or_else(|| "-".to_owned())
}

/// Left-aligned columns, two spaces apart.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut s = line(header.iter().map(|h| (*h).to_owned()).collect());
    for r in rows {
        s.push_str(&line(r.clone()));
    }
    s
}

/// One row of `simba jobs`: what the store knows of a job, and what the live nodes published.
struct ListRow {
    job: String,
    state: Option<JobState>,
    settings: Option<JobSettings>,
    /// A partition `g/i` of a published partitioned job `g`.
    partition: Option<u32>,
    /// `(node, session, token)` of each lease holder (one for a scheduled job or a partition,
    /// those held for a partitioned job).
    holders: Vec<(String, String, u64)>,
    next_fire: Option<i64>,
    /// In the last 24 h: runs failed, timed out or cancelled; slots missed; runs started late.
    failures: usize,
    missed: usize,
    late: usize,
    /// The live nodes disagree about it.
    differs: bool,
}

/// What a job's history holds for the last 24 hours, as `simba jobs` and `simba schedules
/// list` count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DayCounts {
    /// Runs failed, timed out or cancelled.
    #[serde(rename = "failures_24h")]
    pub(crate) failures: usize,
    /// Slots recorded `missed`.
    #[serde(rename = "missed_24h")]
    pub(crate) missed: usize,
    /// Runs whose first attempt started more than the threshold after their slot.
    #[serde(rename = "late_24h")]
    pub(crate) late: usize,
}

impl DayCounts {
    /// Reads `job`'s history (as many records as `store` keeps) and counts the last 24 hours'
    /// records, a run counting as late past `late_after`.
    pub(crate) async fn of(
        store: &simba::job_store::SharedJobStore,
        job: &str,
        late_after: std::time::Duration,
    ) -> simba::backend::BackendResult<Self> {
        let late_ms = i64::try_from(late_after.as_millis()).unwrap_or(i64::MAX);
        let since = Utc::now().timestamp_millis() - 24 * 3600 * 1000;
        let h = store.history(job, store.retention()).await?;
        let day: Vec<&RunRecord> = h.iter().filter(|r| r.slot_ms >= since).collect();
        let count = |f: &dyn Fn(&RunRecord) -> bool| day.iter().filter(|r| f(r)).count();
        Ok(DayCounts {
            failures: count(&|r| matches!(r.outcome, Outcome::Failed | Outcome::TimedOut | Outcome::Cancelled)),
            missed: count(&|r| r.outcome == Outcome::Missed),
            late: count(&|r| r.attempt <= 1 && r.started_ms.is_some_and(|s| s - r.slot_ms > late_ms)),
        })
    }
}

/// The rows: every job the store knows, then every published job it does not know yet.
async fn list_rows(
    jobs: &Jobs,
    list: &[JobState],
    registry: &RegistryReport,
    (held, late_after): (&[LeaseInfo], std::time::Duration),
) -> Result<Vec<ListRow>, Failure> {
    let now = std::time::SystemTime::now();
    let differing = registry.differing_jobs();
    let node_of = |session: &SessionId| {
        registry
            .nodes
            .iter()
            .find(|n| n.session == session.as_str())
            .map_or_else(|| session.as_str().chars().take(8).collect::<String>(), |n| registry.label(n))
    };
    let holder = |lease: &str| {
        held.iter().filter(|l| l.name == lease).map(|l| (node_of(&l.session), l.session.to_string(), l.token)).collect()
    };
    let mut names: Vec<(String, Option<JobState>)> = list.iter().map(|j| (j.job.clone(), Some(j.clone()))).collect();
    for n in &registry.nodes {
        for j in &n.jobs {
            if !names.iter().any(|(name, _)| *name == j.name) {
                names.push((j.name.clone(), None));
            }
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut rows = Vec::with_capacity(names.len());
    for (job, state) in names {
        let own = registry.settings(&job).cloned();
        let part = if own.is_none() {
            job.rsplit_once('/').and_then(|(g, i)| Some((registry.settings(g)?.clone(), i.parse::<u32>().ok()?)))
        } else {
            None
        };
        let (settings, partition) = match (own, part) {
            (Some(s), _) => (Some(s), None),
            (None, Some((s, i))) => (Some(s), Some(i)),
            (None, None) => (None, None),
        };
        let holders = match (&settings, partition) {
            (Some(s), Some(i)) => holder(&format!("{}.{i}", s.lease)),
            (Some(s), None) if s.kind == JobKind::Partitioned => {
                (0..s.partitions.unwrap_or(0)).flat_map(|i| holder(&format!("{}.{i}", s.lease))).collect::<Vec<_>>()
            }
            (Some(s), None) => holder(&s.lease),
            (None, _) => holder(&job),
        };
        let next_fire = settings
            .as_ref()
            .and_then(JobSettings::parsed_schedule)
            .and_then(|spec| spec.next_fire(now))
            .and_then(|t| DateTime::<Utc>::from(t).timestamp_millis().into());
        let DayCounts { failures, missed, late } = if state.is_some() {
            DayCounts::of(jobs.store(), &job, late_after).await.map_err(|e| message(e.into()))?
        } else {
            DayCounts::default()
        };
        let base = job.split('/').next().unwrap_or(&job);
        let differs = differing.contains(&job) || differing.contains(base);
        rows.push(ListRow { job, state, settings, partition, holders, next_fire, failures, missed, late, differs });
    }
    Ok(rows)
}

impl ListRow {
    fn kind(&self) -> &'static str {
        match (&self.settings, self.partition) {
            (_, Some(_)) => "partition",
            (Some(s), None) => s.kind.as_str(),
            (None, None) => "-",
        }
    }

    fn schedule(&self) -> String {
        match &self.settings {
            Some(s) => match (&s.schedule, &s.time_zone) {
                (Some(e), _) if e.starts_with("every ") => e.clone(),
                (Some(e), tz) => format!("{e} {}", tz.as_deref().unwrap_or("UTC")),
                (None, _) => "once per term".to_owned(),
            },
            None => "-".to_owned(),
        }
    }

    fn holder(&self) -> String {
        match (&self.settings, self.holders.as_slice()) {
            (Some(s), held) if s.kind == JobKind::Partitioned && self.partition.is_none() => {
                format!("{} of {} held", held.len(), s.partitions.unwrap_or(0))
            }
            (_, [(node, _, token)]) => format!("{node} ({token})"),
            (_, []) => "-".to_owned(),
            (_, many) => format!("{} holders", many.len()),
        }
    }
}

fn list_json(rows: &[ListRow], registry: &RegistryReport, schedules: usize) -> Result<String, Failure> {
    let jobs = rows
        .iter()
        .map(|r| {
            let st = r.state.as_ref();
            let s = r.settings.as_ref();
            let cron = s.filter(|s| s.schedule.as_deref().is_some_and(|e| !e.starts_with("every ")));
            json::Job {
                job: &r.job,
                kind: r.kind(),
                schedule: s.and_then(|s| s.schedule.as_deref()),
                time_zone: cron.map(|s| s.time_zone.as_deref().unwrap_or("UTC")),
                partitions: s.and_then(|s| s.partitions),
                paused: st.is_some_and(|j| j.paused),
                holders: r
                    .holders
                    .iter()
                    .map(|(node, session, token)| json::Holder { node, session, token: *token })
                    .collect(),
                next_fire: json::time(r.next_fire),
                last_slot: json::time(st.and_then(|j| j.last_slot_ms)),
                last: st.and_then(|j| j.last.as_ref()).map(json::Record::from),
                trigger_pending: json::time(st.and_then(|j| j.trigger_pending_ms)),
                failures_24h: r.failures,
                missed_24h: r.missed,
                late_24h: r.late,
                registry_differs: r.differs,
            }
        })
        .collect();
    let registry = json::Registry::from(registry);
    json::pretty(&json::Jobs { schema: json::SCHEMA, jobs, registry, schedule_histories: schedules })
}

fn list_table(rows: &[ListRow], registry: &RegistryReport, schedules: usize) -> String {
    let schedules = match schedules {
        0 => String::new(),
        n => format!(
            "\n{n} schedule{} stored as data {} a history too: `simba schedules list` counts them, `simba history \
             schedule/<id>` shows one\n",
            if n == 1 { "" } else { "s" },
            if n == 1 { "has" } else { "have" }
        ),
    };
    if rows.is_empty() && !schedules.is_empty() {
        return format!("no jobs defined in code yet\n{schedules}");
    }
    if rows.is_empty() {
        return "no jobs yet: a job appears once a node running it has started, or once it was paused or triggered\n"
            .to_owned();
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let st = r.state.as_ref();
            let last = st.and_then(|j| j.last.as_ref());
            vec![
                if r.differs { format!("{} *", r.job) } else { r.job.clone() },
                r.kind().to_owned(),
                r.schedule(),
                if st.is_some_and(|j| j.paused) { "yes".to_owned() } else { "no".to_owned() },
                r.holder(),
                time(r.next_fire),
                last.map_or("-".to_owned(), |l| l.outcome.to_string()),
                time(last.map(|l| l.slot_ms)),
                r.failures.to_string(),
                r.missed.to_string(),
                r.late.to_string(),
                time(st.and_then(|j| j.trigger_pending_ms)),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "JOB",
            "KIND",
            "SCHEDULE",
            "PAUSED",
            "HOLDER (TOKEN)",
            "NEXT",
            "LAST",
            "SLOT",
            "FAILURES 24H",
            "MISSED 24H",
            "LATE 24H",
            "RUN REQUESTED",
        ],
        &cells,
    );
    out.push_str(&registry_note(registry));
    out.push_str(&schedules);
    out
}

/// What `simba jobs` says under its table about the nodes' registries.
fn registry_note(r: &RegistryReport) -> String {
    let mut out = String::new();
    if r.nodes.is_empty() {
        out.push_str("\nno live node published its jobs: schedules and holders show `-` (is a runtime running?)\n");
    } else if !r.differences.is_empty() {
        out.push_str(&format!("\nthe {} live nodes do not agree (* marks the jobs):\n", r.nodes.len()));
        for d in &r.differences {
            out.push_str(&format!("  {d}\n"));
        }
    }
    for u in &r.unreadable {
        out.push_str(&format!("  {u}\n"));
    }
    out
}

fn history_table(h: &[RunRecord]) -> String {
    let rows: Vec<Vec<String>> = h
        .iter()
        .map(|r| {
            let took = match (r.started_ms, r.ended_ms) {
                (Some(s), Some(e)) => format!("{}ms", e - s),
                _ => "-".to_owned(),
            };
            vec![
                time(Some(r.slot_ms)),
                r.kind.to_string(),
                r.outcome.to_string(),
                if r.attempts > 1 { format!("{}/{}", r.attempt, r.attempts) } else { r.attempt.to_string() },
                if r.node.is_empty() { "-".to_owned() } else { r.node.clone() },
                r.token.to_string(),
                took,
                r.request_key.clone().unwrap_or_else(|| "-".to_owned()),
                r.error.clone().unwrap_or_default().replace('\n', " "),
            ]
        })
        .collect();
    table(&["SLOT", "KIND", "OUTCOME", "ATTEMPT", "NODE", "TOKEN", "TOOK", "REQUEST", "ERROR"], &rows)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use simba::backend::memory::MemoryBackend;
    use simba::backend::{Acquire, Backend};
    use simba::job_store::{Claim, ClaimRequest, JobStore, SlotKind};

    async fn filled() -> MemoryBackend {
        let b = MemoryBackend::new();
        let s = b.open_session(std::time::Duration::from_secs(30)).await.expect("session").id;
        let Ok(Acquire::Won(token)) = b.acquire(&s, "report").await else { panic!("acquire") };
        let store = b.jobs();
        let t0 = 1_780_000_000_000;
        for k in 0..3 {
            let req = ClaimRequest {
                session: &s,
                lease: "report",
                token,
                job: "report",
                slot_ms: t0 + k * 60_000,
                kind: SlotKind::Scheduled,
                node: "node-a",
                started_ms: t0 + k * 60_000 + 2,
                attempts: 1,
            };
            let Ok(Claim::Claimed(mut r)) = store.claim_run(req).await else { panic!("claim") };
            r.outcome = if k == 1 { Outcome::Failed } else { Outcome::Ran };
            r.error = (k == 1).then(|| "connection refused".to_owned());
            r.ended_ms = Some(r.slot_ms + 40);
            assert!(store.finish_run(&r).await.expect("finish"));
        }
        b
    }

    /// With the nodes' registries published, `simba jobs` shows each
    /// job's kind, schedule and time zone, holder node and token and next fire, marks the jobs
    /// the live nodes disagree about and names the difference; `--json` carries the same.
    #[tokio::test]
    async fn item5_jobs_shows_schedules_holders_and_registry_differences() {
        use simba::job::{JobSettings, Misfire, NodeRegistry, RunPolicy, Schedule};
        let b = filled().await;
        let store = b.job_store().expect("store");
        let snap = b.inspect().await.expect("inspect");
        let holder = snap.leases.iter().find(|l| l.name == "report").expect("held").session.clone();
        let cron =
            |expr: &str| Schedule::Cron { expr: expr.to_owned().into(), time_zone: Some("Europe/Berlin".into()) };
        let settings =
            |expr: &str| JobSettings::scheduled("report", "report", &cron(expr), Misfire::Skip, &RunPolicy::default());
        let sweep = JobSettings::partitioned("sweep", "sweep", 4, None, Misfire::Skip, &RunPolicy::default());
        let a = NodeRegistry::new("node-a", vec![settings("0 * * * * *"), sweep.clone()]);
        assert!(store.publish_registry(&holder, &a.encode()).await.expect("publish"));
        let (_, out) = cmd(&b, JobsCommand::List { late_after: std::time::Duration::from_secs(5) }, false).await;
        assert!(out.contains("report  scheduled    0 * * * * * Europe/Berlin  no      node-a (1)"), "{out}");
        assert!(out.contains("sweep   partitioned  once per term              no      0 of 4 held"), "{out}");
        assert!(!out.contains("do not agree") && !out.contains("no live node"), "{out}");
        let other = b.open_session(std::time::Duration::from_secs(30)).await.expect("session").id;
        let c = NodeRegistry::new("node-b", vec![settings("30 * * * * *")]);
        assert!(store.publish_registry(&other, &c.encode()).await.expect("publish"));
        let (r, out) = cmd(&b, JobsCommand::List { late_after: std::time::Duration::from_secs(5) }, false).await;
        assert_eq!(r, Ok(0));
        assert!(out.contains("report *  scheduled"), "{out}");
        assert!(out.contains("the 2 live nodes do not agree (* marks the jobs):"), "{out}");
        assert!(out.contains("  job `report` schedule: `0 * * * * *` on node-a; `30 * * * * *` on node-b"), "{out}");
        assert!(out.contains("  job `sweep` runs on node-a but not on node-b"), "{out}");
        let (_, out) = cmd(&b, JobsCommand::List { late_after: std::time::Duration::from_secs(5) }, true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        let report = &v["jobs"][0];
        assert_eq!((report["job"].as_str(), report["kind"].as_str()), (Some("report"), Some("scheduled")));
        assert_eq!(
            (report["time_zone"].as_str(), report["registry_differs"].as_bool()),
            (Some("Europe/Berlin"), Some(true))
        );
        assert_eq!(report["holders"][0]["node"], "node-a");
        assert_eq!(report["holders"][0]["token"], 1);
        assert!(report["next_fire"].is_string(), "a cron job has a next fire: {report}");
        assert_eq!(v["registry"]["agree"], false);
        assert_eq!(v["registry"]["differences"].as_array().map(Vec::len), Some(2));
        // A published job that never ran is known to the tool: it can be paused by name.
        let (r, out) = cmd(&b, JobsCommand::Pause { job: "sweep".into() }, false).await;
        assert!(r == Ok(0) && out.starts_with("paused `sweep`"), "{r:?} {out}");
    }

    async fn cmd(b: &MemoryBackend, c: JobsCommand, json: bool) -> (Result<u8, Failure>, String) {
        let mut out = Vec::new();
        let r = run(&c, b, &"memory://".into(), json, std::time::Duration::ZERO, &mut out).await;
        (r, String::from_utf8_lossy(&out).into_owned())
    }

    /// `simba jobs` counts, over the last 24 h, the slots missed and the runs whose first
    /// attempt started more than `--late-after` after their slot (older records not).
    #[tokio::test]
    async fn jobs_count_missed_and_late_in_the_last_day() {
        let b = MemoryBackend::new();
        let s = b.open_session(std::time::Duration::from_secs(30)).await.expect("session").id;
        let Ok(Acquire::Won(token)) = b.acquire(&s, "feed").await else { panic!("acquire") };
        let store = b.jobs();
        let now = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
        // (slot before now, started after the slot), oldest first (slots are claimed in order):
        // 2 days ago and late, 30 s late, 10 s late, on time.
        for (ago, late) in [(2 * 86_400_000, 60_000), (180_000, 30_000), (120_000, 10_000), (60_000, 2)] {
            let slot_ms = now - ago;
            let req = ClaimRequest {
                session: &s,
                lease: "feed",
                token,
                job: "feed",
                slot_ms,
                kind: SlotKind::Scheduled,
                node: "node-a",
                started_ms: slot_ms + late,
                attempts: 1,
            };
            let Ok(Claim::Claimed(mut r)) = store.claim_run(req).await else { panic!("claim") };
            r.outcome = Outcome::Ran;
            r.ended_ms = Some(slot_ms + late + 5);
            assert!(store.finish_run(&r).await.expect("finish"));
        }
        for ago in [30_000, 90_000, 3 * 86_400_000] {
            let mut m = RunRecord::not_run("feed", now - ago, Outcome::Missed);
            m.token = token;
            assert!(store.append(&m).await.expect("append"));
        }
        let list = |secs| JobsCommand::List { late_after: std::time::Duration::from_secs(secs) };
        let (_, out) = cmd(&b, list(5), true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        let j = &v["jobs"][0];
        assert_eq!((j["missed_24h"].as_u64(), j["late_24h"].as_u64()), (Some(2), Some(2)), "{out}");
        let (_, out) = cmd(&b, list(20), true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["jobs"][0]["late_24h"], 1, "only the run 30 s late is past 20 s: {out}");
        let (_, out) = cmd(&b, list(5), false).await;
        assert!(out.lines().next().is_some_and(|h| h.contains("FAILURES 24H  MISSED 24H  LATE 24H")), "{out}");
    }

    /// `simba jobs`, `history`, `pause` (twice), `resume`, `trigger`, as
    /// tables and JSON, on a store with records.
    #[tokio::test]
    async fn item4_jobs_history_pause_trigger_output() {
        let b = filled().await;
        let (r, out) = cmd(&b, JobsCommand::List { late_after: std::time::Duration::from_secs(5) }, false).await;
        assert_eq!(r, Ok(0));
        assert!(out.starts_with("JOB     KIND  SCHEDULE  PAUSED  HOLDER (TOKEN)  NEXT  LAST  SLOT"), "{out}");
        assert!(
            out.contains(" (1)    -     ran   2026-05-28T20:28:40.000Z  0             0           0         -"),
            "{out}"
        );
        assert!(out.contains("no live node published its jobs"), "{out}");
        let (_, out) = cmd(&b, JobsCommand::History { job: "report".into(), limit: 2 }, false).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[1].contains("scheduled  ran")
                && lines[2].contains("failed")
                && lines[2].ends_with("connection refused"),
            "{out}"
        );
        let (_, out) = cmd(&b, JobsCommand::History { job: "report".into(), limit: 10 }, true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["records"].as_array().map(Vec::len), Some(3));
        assert_eq!(v["records"][1]["outcome"], "failed");
        let (r, out) = cmd(&b, JobsCommand::Pause { job: "report".into() }, false).await;
        assert_eq!((r, out.starts_with("paused `report`")), (Ok(0), true), "{out}");
        let (r, out) = cmd(&b, JobsCommand::Pause { job: "report".into() }, true).await;
        assert_eq!(r, Ok(0));
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!((v["paused"].as_bool(), v["changed"].as_bool()), (Some(true), Some(false)));
        let (_, out) = cmd(&b, JobsCommand::List { late_after: std::time::Duration::from_secs(5) }, true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["jobs"][0]["paused"], true);
        assert_eq!(v["jobs"][0]["last"]["outcome"], "ran");
        let (r, out) = cmd(&b, JobsCommand::Resume { job: "report".into() }, false).await;
        assert_eq!((r, out.trim()), (Ok(0), "resumed `report`"));
        let (r, out) = cmd(&b, JobsCommand::Trigger { job: "report".into(), request_key: None }, false).await;
        assert!(r == Ok(0) && out.contains("request 1") && out.contains("key `r-"), "{out}");
        let (r, _) = cmd(&b, JobsCommand::Trigger { job: "reprot".into(), request_key: None }, false).await;
        assert_eq!(r, Err(Failure::refused("unknown job `reprot`: did you mean `report`?")));
    }

    /// R3: `simba trigger --request-key` prints the key; the same key again is the same
    /// request (nothing new), in the table and in JSON; the manual run's record names the key
    /// in `simba history` and `--json`.
    #[tokio::test]
    async fn r3_trigger_request_key_is_printed_idempotent_and_in_history() {
        use simba::job_store::{Claim, ClaimRequest, SlotKind};
        let b = filled().await;
        let keyed = || JobsCommand::Trigger { job: "report".into(), request_key: Some("deploy-4711".into()) };
        let (r, out) = cmd(&b, keyed(), false).await;
        assert!(r == Ok(0) && out.contains("key `deploy-4711`") && out.contains("request 1"), "{out}");
        let (r, out) = cmd(&b, keyed(), true).await;
        assert_eq!(r, Ok(0));
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(
            (v["request_key"].as_str(), v["known"].as_bool(), v["request"].as_u64()),
            (Some("deploy-4711"), Some(true), Some(1))
        );
        let bad = JobsCommand::Trigger { job: "report".into(), request_key: Some("no spaces".into()) };
        let (r, _) = cmd(&b, bad, false).await;
        assert!(r.as_ref().is_err_and(|f| f.message.contains("invalid request key")), "refused: {r:?}");
        let session = b.open_session(std::time::Duration::from_secs(30)).await.expect("session").id;
        let simba::backend::Acquire::Won(token) = b.acquire(&session, "r3-lease").await.expect("acquire") else {
            panic!("a free lease")
        };
        let store = b.job_store().expect("jobs store");
        let req = ClaimRequest {
            session: &session,
            lease: "r3-lease",
            token,
            job: "report",
            slot_ms: 0,
            kind: SlotKind::Manual,
            node: "n1",
            started_ms: 1,
            attempts: 1,
        };
        assert!(matches!(store.claim_run(req).await.expect("claim"), Claim::Claimed(_)));
        assert_eq!(store.claim_run(req).await.expect("claim"), Claim::AlreadyClaimed, "one request, one run");
        let (_, out) = cmd(&b, JobsCommand::History { job: "report".into(), limit: 1 }, false).await;
        assert!(out.lines().next().is_some_and(|h| h.contains("REQUEST")) && out.contains("deploy-4711"), "{out}");
        let (_, out) = cmd(&b, JobsCommand::History { job: "report".into(), limit: 1 }, true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["records"][0]["request_key"], "deploy-4711");
    }
}
