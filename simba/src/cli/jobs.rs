//! `simba jobs`, `simba history JOB`, `simba pause JOB`, `simba resume JOB` and
//! `simba trigger JOB` (issue 12 item 4), on the backend's jobs store through
//! [`crate::admin::Jobs`].
//!
//! Exit codes: 0 done (also for pausing a paused job, which says so); 2 an unknown job (the
//! message names the nearest known one), a backend without a jobs store, or a store failure.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::admin::{AdminError, Jobs};
// One JSON shape for `simba history --json` and the dashboard's `/api/jobs`.
use crate::backend::SharedBackend;
use crate::dashboard::jobs::{record_json, time_json};
use crate::job_store::{JobState, Outcome, RunRecord};

/// One of the jobs commands, as parsed.
#[derive(Debug, Clone)]
pub(crate) enum JobsCommand {
    List,
    History { job: String, limit: usize },
    Pause { job: String },
    Resume { job: String },
    Trigger { job: String },
}

/// Runs `cmd` on `backend`; `Err` is the message for stderr (exit 2).
pub(crate) async fn run(
    cmd: &JobsCommand,
    backend: &SharedBackend,
    url: &str,
    json: bool,
    out: &mut (dyn Write + Send),
) -> Result<u8, String> {
    let Some(store) = backend.job_store() else {
        return Err(format!(
            "the backend at {} keeps no job history or job control in this build: its jobs store is not available",
            crate::runtime::redact(url)
        ));
    };
    let jobs = Jobs::new(store);
    let text = match cmd {
        JobsCommand::List => {
            let list = jobs.list().await.map_err(message)?;
            let mut failures = Vec::with_capacity(list.len());
            let since = Utc::now().timestamp_millis() - 24 * 3600 * 1000;
            for j in &list {
                let h = jobs.store().history(&j.job, jobs.store().retention()).await.map_err(|e| message(e.into()))?;
                failures.push(
                    h.iter()
                        .filter(|r| r.slot_ms >= since)
                        .filter(|r| matches!(r.outcome, Outcome::Failed | Outcome::TimedOut | Outcome::Cancelled))
                        .count(),
                );
            }
            if json { list_json(&list, &failures) } else { list_table(&list, &failures) }
        }
        JobsCommand::History { job, limit } => {
            let h = jobs.history(job, *limit).await.map_err(message)?;
            if json {
                serde_json::to_string_pretty(
                    &json!({ "job": job, "records": h.iter().map(record_json).collect::<Vec<_>>() }),
                )
                .unwrap_or_default()
                    + "\n"
            } else if h.is_empty() {
                format!("no records for `{job}` yet\n")
            } else {
                history_table(&h)
            }
        }
        JobsCommand::Pause { job } | JobsCommand::Resume { job } => {
            let pause = matches!(cmd, JobsCommand::Pause { .. });
            let t = if pause { jobs.pause(job).await } else { jobs.resume(job).await }.map_err(message)?;
            let said = match (pause, t.changed) {
                (true, true) => format!("paused `{job}`: it runs nowhere until `simba resume {job}`"),
                (true, false) => format!("`{job}` was already paused; nothing changed"),
                (false, true) => format!("resumed `{job}`"),
                (false, false) => format!("`{job}` was not paused; nothing changed"),
            };
            if json {
                json!({ "job": job, "paused": t.paused, "changed": t.changed, "message": said }).to_string() + "\n"
            } else {
                said + "\n"
            }
        }
        JobsCommand::Trigger { job } => {
            let id = jobs.trigger(job).await.map_err(message)?;
            let said = format!(
                "run of `{job}` requested (request {id}): the node holding its term runs it within one renewal interval, or the next holder does"
            );
            if json { json!({ "job": job, "request": id, "message": said }).to_string() + "\n" } else { said + "\n" }
        }
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(super::EXIT_OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(super::EXIT_OK),
        Err(e) => Err(format!("cannot write the output: {e}")),
    }
}

fn message(e: AdminError) -> String {
    e.to_string()
}

fn time(ms: Option<i64>) -> String {
    ms.and_then(DateTime::from_timestamp_millis)
        .map_or_else(|| "-".to_owned(), |t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn list_json(list: &[JobState], failures: &[usize]) -> String {
    let jobs: Vec<Value> = list
        .iter()
        .zip(failures)
        .map(|(j, f)| {
            json!({
                "job": j.job,
                "paused": j.paused,
                "last_slot": time_json(j.last_slot_ms),
                "last": j.last.as_ref().map(record_json),
                "trigger_pending": time_json(j.trigger_pending_ms),
                "failures_24h": f,
            })
        })
        .collect();
    serde_json::to_string_pretty(&json!({ "jobs": jobs })).unwrap_or_default() + "\n"
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
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

fn list_table(list: &[JobState], failures: &[usize]) -> String {
    if list.is_empty() {
        return "no jobs recorded yet: a job appears once a node ran it, or once it was paused or triggered\n"
            .to_owned();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .zip(failures)
        .map(|(j, f)| {
            let last = j.last.as_ref();
            vec![
                j.job.clone(),
                if j.paused { "yes".to_owned() } else { "no".to_owned() },
                last.map_or("-".to_owned(), |r| r.outcome.to_string()),
                time(last.map(|r| r.slot_ms)),
                last.map_or("-".to_owned(), |r| if r.node.is_empty() { "-".to_owned() } else { r.node.clone() }),
                last.map_or("-".to_owned(), |r| r.token.to_string()),
                f.to_string(),
                time(j.trigger_pending_ms),
            ]
        })
        .collect();
    table(&["JOB", "PAUSED", "LAST", "SLOT", "NODE", "TOKEN", "FAILURES 24H", "RUN REQUESTED"], &rows)
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
                r.error.clone().unwrap_or_default().replace('\n', " "),
            ]
        })
        .collect();
    table(&["SLOT", "KIND", "OUTCOME", "ATTEMPT", "NODE", "TOKEN", "TOOK", "ERROR"], &rows)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::{Acquire, Backend};
    use crate::job_store::{Claim, ClaimRequest, JobStore, SlotKind};

    async fn filled() -> SharedBackend {
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
        Arc::new(b)
    }

    async fn cmd(b: &SharedBackend, c: JobsCommand, json: bool) -> (Result<u8, String>, String) {
        let mut out = Vec::new();
        let r = run(&c, b, "memory://", json, &mut out).await;
        (r, String::from_utf8_lossy(&out).into_owned())
    }

    /// Issue 12 item 4: `simba jobs`, `history`, `pause` (twice), `resume`, `trigger`, as
    /// tables and JSON, on a store with records.
    #[tokio::test]
    async fn item4_jobs_history_pause_trigger_output() {
        let b = filled().await;
        let (r, out) = cmd(&b, JobsCommand::List, false).await;
        assert_eq!(r, Ok(0));
        assert!(out.starts_with("JOB     PAUSED  LAST  SLOT"), "{out}");
        assert!(
            out.contains("report  no      ran   2026-05-28T20:28:40.000Z  node-a  1      0             -"),
            "{out}"
        );
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
        let (_, out) = cmd(&b, JobsCommand::List, true).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["jobs"][0]["paused"], true);
        assert_eq!(v["jobs"][0]["last"]["outcome"], "ran");
        let (r, out) = cmd(&b, JobsCommand::Resume { job: "report".into() }, false).await;
        assert_eq!((r, out.trim()), (Ok(0), "resumed `report`"));
        let (r, out) = cmd(&b, JobsCommand::Trigger { job: "report".into() }, false).await;
        assert!(r == Ok(0) && out.contains("request 1"), "{out}");
        let (r, _) = cmd(&b, JobsCommand::Trigger { job: "reprot".into() }, false).await;
        assert_eq!(r, Err("unknown job `reprot`: did you mean `report`?".to_owned()));
    }
}
