//! The jobs part of the dashboard: one row per job (schedule, time zone,
//! next fire, paused, holder, last outcome, the last slots), `GET /api/jobs`, and the
//! [`Control`] that carries out pause, resume and run now through [`crate::admin::Jobs`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::auth::{Action, ActionError, Control};
use super::source::{BoxFuture, JobsRead, Reading, Registered};
use super::text::{human, natural};
use crate::admin::{AdminError, Jobs};
use crate::backend::SessionId;
use crate::job::{Schedule, parse_cron, parse_time_zone};
use crate::job_store::{RunRecord, RunRecordJson, group_of, rfc3339_ms};

/// The jobs page's data.
#[derive(Debug, Clone)]
pub(crate) enum JobsView {
    /// The backend has no jobs store.
    NoStore,
    /// The jobs store failed on the last read (the rows are the registry's only).
    Failed(String, Vec<JobRow>),
    /// Every job the store or the registry knows, ordered by name.
    Rows(Vec<JobRow>),
}

impl JobsView {
    /// The rows shown (none without a store).
    pub(crate) fn rows(&self) -> &[JobRow] {
        match self {
            JobsView::NoStore => &[],
            JobsView::Failed(_, rows) | JobsView::Rows(rows) => rows,
        }
    }
}

/// One job on the jobs page.
#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    pub(crate) name: String,
    /// `* * * * * *`, `every 5s`, or `None` when not known here.
    pub(crate) schedule: Option<String>,
    /// For cron schedules: the IANA zone (UTC when the job names none).
    pub(crate) time_zone: Option<String>,
    /// The next cron slot after the reading (cron schedules only).
    pub(crate) next_fire: Option<SystemTime>,
    /// This name is paused.
    pub(crate) paused: bool,
    /// Its group is paused (partition `g/i` of paused `g`).
    pub(crate) group_paused: bool,
    /// The session holding its lease, and the token.
    pub(crate) holder: Option<(SessionId, u64)>,
    /// The newest record.
    pub(crate) last: Option<RunRecord>,
    pub(crate) last_slot_ms: Option<i64>,
    pub(crate) trigger_pending_ms: Option<i64>,
    /// Newest first, at most [`super::source::HISTORY`].
    pub(crate) records: Vec<RunRecord>,
    /// Whether actions can name it (`g/i` cannot: pause the group).
    pub(crate) actionable: bool,
    /// Whether the store knows it (else only the registry does: it has not run yet).
    pub(crate) in_store: bool,
}

impl JobRow {
    /// Paused by its own name or its group's.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused || self.group_paused
    }
}

/// The registry entry describing `job` (itself, or the partitioned job of `g/i`), and for a
/// partition its index.
fn registry_of<'a>(job: &str, registry: &'a [Registered]) -> Option<(&'a Registered, Option<u32>)> {
    if let Some(r) = registry.iter().find(|r| r.name == job) {
        return Some((r, None));
    }
    let (g, i) = job.rsplit_once('/')?;
    let i = i.parse::<u32>().ok()?;
    registry.iter().find(|r| r.name == g && r.partitions.is_some()).map(|r| (r, Some(i)))
}

/// What the page says about a schedule: text, time zone, next fire after `now`.
pub(crate) fn describe(spec: &Schedule, now: SystemTime) -> (String, Option<String>, Option<SystemTime>) {
    match spec {
        Schedule::Cron { expr, time_zone } => {
            let zone = time_zone.as_deref().unwrap_or("UTC").to_owned();
            let next = match (parse_cron(expr), parse_time_zone(&zone)) {
                (Ok(cron), Ok(tz)) => {
                    // From the whole second: a slot is a whole second, and croner keeps the
                    // fraction of the instant it starts from.
                    let second = DateTime::<Utc>::from(now).timestamp();
                    let after = DateTime::<Utc>::from_timestamp(second, 0).unwrap_or_default().with_timezone(&tz);
                    cron.find_next_occurrence(&after, false).ok().map(|t| SystemTime::from(t.with_timezone(&Utc)))
                }
                _ => None,
            };
            (expr.to_string(), Some(zone), next)
        }
        Schedule::FixedRate(d) => (format!("every {}", human(Some(*d))), None, None),
    }
}

/// The jobs page's rows from one reading.
pub(crate) fn view(reading: &Reading, now: SystemTime) -> JobsView {
    let (read, failed) = match &reading.jobs {
        JobsRead::NoStore => return JobsView::NoStore,
        JobsRead::Failed(e) => (&[][..], Some(e.clone())),
        JobsRead::Read(jobs) => (&jobs[..], None),
    };
    let held: BTreeMap<&str, (&SessionId, u64)> =
        reading.cluster.leases.iter().map(|l| (l.name.as_str(), (&l.session, l.token))).collect();
    let paused_names: BTreeSet<&str> = read.iter().filter(|j| j.state.paused).map(|j| j.state.job.as_str()).collect();
    let mut rows: Vec<JobRow> = Vec::new();
    let mut row = |name: &str, state: Option<&super::source::JobRead>| {
        let reg = registry_of(name, &reading.registry);
        let lease = match reg {
            Some((r, Some(i))) => Some(format!("{}.{i}", r.lease)),
            Some((r, None)) if r.partitions.is_none() => Some(r.lease.clone()),
            Some(_) => None,
            None => match name.rsplit_once('/') {
                Some((g, i)) => Some(format!("{g}.{i}")),
                None => Some(name.to_owned()),
            },
        };
        let (schedule, time_zone, next_fire) = match reg.and_then(|(r, _)| r.schedule.as_ref()) {
            Some(spec) => {
                let (s, z, n) = describe(spec, now);
                (Some(s), z, n)
            }
            None if reg.is_some() => (Some("worker (no schedule)".to_owned()), None, None),
            None => (None, None, None),
        };
        let holder = lease.as_deref().and_then(|l| held.get(l)).map(|(s, t)| ((*s).clone(), *t));
        let st = state.map(|s| &s.state);
        rows.push(JobRow {
            name: name.to_owned(),
            schedule,
            time_zone,
            next_fire,
            paused: st.is_some_and(|s| s.paused),
            group_paused: group_of(name).is_some_and(|g| paused_names.contains(g)),
            holder,
            last: st.and_then(|s| s.last.clone()),
            last_slot_ms: st.and_then(|s| s.last_slot_ms),
            trigger_pending_ms: st.and_then(|s| s.trigger_pending_ms),
            records: state.map(|s| s.records.clone()).unwrap_or_default(),
            actionable: crate::name_problem(name).is_none(),
            in_store: state.is_some(),
        });
    };
    for j in read {
        row(&j.state.job, Some(j));
    }
    let known: BTreeSet<String> = read.iter().map(|j| j.state.job.clone()).collect();
    for r in &reading.registry {
        if !known.contains(&r.name) {
            row(&r.name, None);
        }
    }
    rows.sort_by(|a, b| natural(&a.name).cmp(&natural(&b.name)));
    match failed {
        Some(e) => JobsView::Failed(e, rows),
        None => JobsView::Rows(rows),
    }
}

/// An instant as `simba jobs --json` prints it ([`rfc3339_ms`]), or null.
pub(crate) fn time_json(ms: Option<i64>) -> Value {
    rfc3339_ms(ms).map_or(Value::Null, Value::String)
}

fn system_ms(t: SystemTime) -> Option<i64> {
    t.duration_since(SystemTime::UNIX_EPOCH).ok().and_then(|d| i64::try_from(d.as_millis()).ok())
}

/// A record as `simba history --json` prints it ([`RunRecordJson`]).
pub(crate) fn record_json(r: &RunRecord) -> Value {
    // A record holds only strings and numbers: serializing it cannot fail.
    serde_json::to_value(RunRecordJson::from(r)).unwrap_or(Value::Null)
}

/// `GET /api/jobs`: per job the fields of `simba jobs --json` (`job`, `paused`, `last_slot`,
/// `last`, `trigger_pending`) plus what the dashboard adds (schedule, time zone, next fire,
/// holder) and `records`, its newest records as `simba history --json` prints them.
pub(crate) fn to_json(view: Option<&JobsView>) -> Value {
    let Some(view) = view else { return json!({"store": Value::Null, "error": Value::Null, "jobs": []}) };
    let jobs: Vec<Value> = view
        .rows()
        .iter()
        .map(|j| {
            json!({
                "job": j.name,
                "paused": j.paused,
                "group_paused": j.group_paused,
                "last_slot": time_json(j.last_slot_ms),
                "last": j.last.as_ref().map(record_json),
                "trigger_pending": time_json(j.trigger_pending_ms),
                "schedule": j.schedule,
                "time_zone": j.time_zone,
                "next_fire": time_json(j.next_fire.and_then(system_ms)),
                "holder": j.holder.as_ref().map(|(s, t)| json!({"session": s.as_str(), "token": t})),
                "records": j.records.iter().map(record_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let (store, error) = match view {
        JobsView::NoStore => (false, None),
        JobsView::Failed(e, _) => (true, Some(e.clone())),
        JobsView::Rows(_) => (true, None),
    };
    json!({"store": store, "error": error, "jobs": jobs})
}

/// Pause, resume and run now on a jobs store; messages as `simba pause/resume/trigger` says
/// them, store errors with the URL's secrets masked.
pub(crate) struct JobsControl {
    jobs: Jobs,
    scrub: Vec<String>,
}

impl JobsControl {
    /// Acts on `jobs`; `scrub` are the secrets to mask in error texts.
    pub(crate) fn new(jobs: Jobs, scrub: Vec<String>) -> Self {
        JobsControl { jobs, scrub }
    }
}

/// How an [`AdminError`] reaches the page: an unknown job is 404, a store failure 502.
pub(crate) fn action_error(e: AdminError, scrub: &[String]) -> ActionError {
    let text = super::source::scrub(&e.to_string(), scrub);
    match e {
        AdminError::UnknownJob { .. } => ActionError::UnknownJob(text),
        _ => ActionError::Failed(text),
    }
}

impl Control for JobsControl {
    fn act(&self, job: &str, action: Action) -> BoxFuture<'_, Result<String, ActionError>> {
        let job = job.to_owned();
        Box::pin(async move {
            let said = match action {
                Action::Pause => match self.jobs.pause(&job).await {
                    Ok(t) if t.changed => format!("paused `{job}`: it runs nowhere until it is resumed"),
                    Ok(_) => format!("`{job}` was already paused; nothing changed"),
                    Err(e) => return Err(action_error(e, &self.scrub)),
                },
                Action::Resume => match self.jobs.resume(&job).await {
                    Ok(t) if t.changed => format!("resumed `{job}`"),
                    Ok(_) => format!("`{job}` was not paused; nothing changed"),
                    Err(e) => return Err(action_error(e, &self.scrub)),
                },
                Action::Trigger => match self.jobs.trigger(&job).await {
                    Ok(r) => r.message(&job),
                    Err(e) => return Err(action_error(e, &self.scrub)),
                },
            };
            Ok(said)
        })
    }
}

/// How long a run took, when it started and ended.
pub(crate) fn took(r: &RunRecord) -> Option<Duration> {
    match (r.started_ms, r.ended_ms) {
        (Some(s), Some(e)) => u64::try_from(e - s).ok().map(Duration::from_millis),
        _ => None,
    }
}
