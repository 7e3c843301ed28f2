//! How the key-value backends (ZooKeeper, etcd) store the jobs store's control rows and run
//! records as bytes (ADR 0012). What a claim decides from what it read is the
//! core's claim rule, [`simba_core::claim::decide`].
//!
//! A control value is lines `key=value` (unknown keys are ignored, missing ones take their
//! default, so a value written by an older or newer build still reads), the run-now request
//! log as `request=ID SLOT KEY` lines; a record is the line `v1` then one line per field, then
//! for a manual run the request's key as `#KEY`, and the error text last (it may hold
//! newlines). Job names
//! are escaped into one path segment (`/` as `%2F`, `%` as `%25`), and a record's name sorts
//! by slot then kind: 16 hexadecimal digits of the slot with its sign bit flipped, then the
//! kind's rank.

use simba_core::claim::{ControlRow, RequestLog, valid_request_key};

use crate::backend::job_store::{JobState, Outcome, RunRecord, SlotKind, group_of, truncate_error};

/// A control row as stored.
pub(crate) fn encode_control(c: &ControlRow) -> String {
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    format!(
        "paused={}\nlast_slot={}\ntrigger_id={}\ntrigger_ms={}\ntaken_id={}\ngroup_taken_id={}\n",
        u8::from(c.paused),
        opt(c.last_slot),
        c.trigger_id,
        opt(c.trigger_ms),
        c.taken_id,
        c.group_taken_id
    )
}

/// A control row and its request log as stored (an older build reads the row and ignores the
/// `request=` lines; when it rewrites the row they are gone, and its claim takes every pending
/// request as one run, as it always did).
pub(crate) fn encode_control_log(c: &ControlRow, log: &RequestLog) -> String {
    let mut out = encode_control(c);
    for line in log.encode().lines() {
        out.push_str("request=");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The request log stored with a control row in `data` (empty when there is none).
pub(crate) fn decode_log(data: &[u8]) -> RequestLog {
    let text = std::str::from_utf8(data).unwrap_or_default();
    let lines: String = text.lines().filter_map(|l| l.strip_prefix("request=")).map(|l| format!("{l}\n")).collect();
    RequestLog::decode(&lines)
}

/// The control row stored as `data`; `None` when it is not one.
pub(crate) fn decode_control(data: &[u8]) -> Option<ControlRow> {
    let text = std::str::from_utf8(data).ok()?;
    let mut c = ControlRow::default();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once('=')?;
        let num = || v.parse::<i64>().ok();
        match k {
            "paused" => c.paused = v == "1",
            "last_slot" => c.last_slot = num(),
            "trigger_id" => c.trigger_id = num().unwrap_or(0),
            "trigger_ms" => c.trigger_ms = num(),
            "taken_id" => c.taken_id = num().unwrap_or(0),
            "group_taken_id" => c.group_taken_id = num().unwrap_or(0),
            _ => {}
        }
    }
    Some(c)
}

/// What the store answers about `job` whose control row is `c` and newest record `last`.
pub(crate) fn control_state(c: &ControlRow, job: String, last: Option<RunRecord>) -> JobState {
    JobState { job, paused: c.paused, last_slot_ms: c.last_slot, last, trigger_pending_ms: c.pending() }
}

/// The group of `job`, when it has one other than itself.
pub(crate) fn group(job: &str) -> Option<&str> {
    group_of(job).filter(|g| *g != job)
}

pub(crate) fn kind_code(kind: SlotKind) -> u8 {
    match kind {
        SlotKind::Scheduled => 0,
        SlotKind::Manual => 1,
        SlotKind::CaughtUp => 2,
        SlotKind::Backfill => 3,
    }
}

fn kind_of(code: &str) -> Option<SlotKind> {
    match code {
        "0" => Some(SlotKind::Scheduled),
        "1" => Some(SlotKind::Manual),
        "2" => Some(SlotKind::CaughtUp),
        "3" => Some(SlotKind::Backfill),
        _ => None,
    }
}

/// A job name as one path segment.
pub(crate) fn escape_job(job: &str) -> String {
    job.replace('%', "%25").replace('/', "%2F")
}

/// The job name of an escaped segment.
pub(crate) fn unescape_job(segment: &str) -> String {
    segment.replace("%2F", "/").replace("%25", "%")
}

/// The name of a record under its job: orders by slot, then kind.
pub(crate) fn record_name(slot_ms: i64, kind: SlotKind) -> String {
    format!("{}{}", slot_prefix(slot_ms), kind_code(kind))
}

/// The part of [`record_name`] that names the slot: every record of `slot_ms` starts with it.
pub(crate) fn slot_prefix(slot_ms: i64) -> String {
    format!("{:016x}", (slot_ms as u64) ^ (1 << 63))
}

/// A record as stored.
pub(crate) fn encode_record(r: &RunRecord) -> String {
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    let line = |s: &str| s.replace(['\n', '\r'], " ");
    let mut out = format!(
        "v1\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        line(&r.job),
        kind_code(r.kind),
        r.slot_ms,
        r.outcome.as_str(),
        r.attempt,
        r.attempts,
        line(&r.session),
        line(&r.node),
        r.token,
        opt(r.started_ms),
        opt(r.ended_ms)
    );
    if let Some(k) = r.request_key.as_deref().filter(|k| valid_request_key(k)) {
        out.push('#');
        out.push_str(k);
        out.push('\n');
    }
    if let Some(e) = &r.error {
        out.push('!');
        out.push_str(&truncate_error(e));
    }
    out
}

/// The record stored as `data`, or what is wrong with it.
pub(crate) fn decode_record(data: &[u8]) -> Result<RunRecord, String> {
    let text = std::str::from_utf8(data).map_err(|_| "a run record is not UTF-8".to_owned())?;
    let mut parts = text.splitn(13, '\n');
    let mut next = |what: &str| parts.next().ok_or_else(|| format!("a run record has no {what}"));
    if next("version")? != "v1" {
        return Err("a run record of an unknown format (not v1)".to_owned());
    }
    let job = next("job")?.to_owned();
    let kind = next("kind")?;
    let kind = kind_of(kind).ok_or_else(|| format!("unknown slot kind {kind:?} in a record of `{job}`"))?;
    let int = |s: &str, what: &str| s.parse::<i64>().map_err(|_| format!("a run record's {what} is not a number"));
    let slot_ms = int(next("slot")?, "slot")?;
    let outcome = next("outcome")?.parse::<Outcome>()?;
    let small = |s: &str, what: &str| s.parse::<u32>().map_err(|_| format!("a run record's {what} is out of range"));
    let attempt = small(next("attempt")?, "attempt")?;
    let attempts = small(next("attempts")?, "attempts")?;
    let session = next("session")?.to_owned();
    let node = next("node")?.to_owned();
    let token = next("token")?.parse::<u64>().map_err(|_| "a run record's token is not a number".to_owned())?;
    let opt = |s: &str| s.parse::<i64>().ok();
    let started_ms = opt(next("start")?);
    let ended_ms = opt(next("end")?);
    let rest = parts.next().unwrap_or_default();
    let (request_key, rest) = match rest.strip_prefix('#').and_then(|r| r.split_once('\n')) {
        Some((key, rest)) => (Some(key.to_owned()), rest),
        None => (None, rest),
    };
    let error = rest.strip_prefix('!').map(str::to_owned);
    Ok(RunRecord {
        job,
        slot_ms,
        kind,
        outcome,
        attempt,
        attempts,
        session,
        node,
        token,
        started_ms,
        ended_ms,
        error,
        request_key,
        payload_override: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_newlines_in_the_error() {
        let mut r = RunRecord::not_run("billing/3", -5, Outcome::Failed);
        r.error = Some("line one\nline two".to_owned());
        r.started_ms = Some(7);
        assert_eq!(decode_record(encode_record(&r).as_bytes()).unwrap(), r);
        r.error = None;
        assert_eq!(decode_record(encode_record(&r).as_bytes()).unwrap(), r);
        r.request_key = Some("deploy-1".to_owned());
        assert_eq!(decode_record(encode_record(&r).as_bytes()).unwrap(), r, "a request key");
        r.error = Some("x\n!y".to_owned());
        assert_eq!(decode_record(encode_record(&r).as_bytes()).unwrap(), r, "a request key and an error");
    }

    #[test]
    fn record_names_order_by_slot_then_kind() {
        let mut names = [
            record_name(5, SlotKind::Manual),
            record_name(-1, SlotKind::CaughtUp),
            record_name(5, SlotKind::Scheduled),
        ];
        names.sort();
        assert_eq!(names[0], record_name(-1, SlotKind::CaughtUp));
        assert_eq!(names[1], record_name(5, SlotKind::Scheduled));
        assert_eq!(unescape_job(&escape_job("g/1%")), "g/1%");
    }

    #[test]
    fn control_reads_missing_and_unknown_keys() {
        let c = ControlRow {
            paused: true,
            last_slot: Some(3),
            trigger_id: 2,
            trigger_ms: Some(9),
            taken_id: 1,
            ..Default::default()
        };
        assert_eq!(decode_control(encode_control(&c).as_bytes()), Some(c));
        assert_eq!(decode_control(b"paused=1\nfuture=x\n").map(|c| c.paused), Some(true));
        let log = RequestLog(vec![simba_core::claim::Request::new(2, 9, "k-2")]);
        let data = encode_control_log(&c, &log);
        assert_eq!((decode_control(data.as_bytes()), decode_log(data.as_bytes())), (Some(c), log));
        assert_eq!(decode_log(encode_control(&c).as_bytes()), RequestLog::default(), "a row of an older build");
    }
}
