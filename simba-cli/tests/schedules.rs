//! `simba schedules ...` against a SQLite file, in-process (rules A3, A6, A7 through the tool):
//! create with `--as`, get with next fires, list, update, pause with a note, resume, the audit
//! trail, delete, and the refusals (bad input, unknown ids) with their exit codes.

use serde_json::Value;

/// A SQLite store that exists (the tool never creates one), in a directory that goes away.
async fn store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    drop(simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}")));
    (dir, url)
}

/// Runs `simba --backend URL ARGS...`: (exit code, stdout, stderr).
async fn simba(url: &str, args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let all = ["simba", "--backend", url].into_iter().chain(args.iter().copied());
    let code = simba_cli::run(all, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn a7_schedules_commands_on_sqlite() {
    let (_dir, url) = store().await;
    let create = [
        "schedules",
        "create",
        "tenant-4711.report",
        "--handler",
        "report",
        "--cron",
        "0 0 9 * * MON",
        "--time-zone",
        "Europe/Berlin",
        "--payload",
        r#"{"tenant": 4711}"#,
        "--as",
        "alice",
    ];
    let (code, out, err) = simba(&url, &create).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "created schedule `tenant-4711.report` (cron \"0 0 9 * * MON\" in Europe/Berlin, handler `report`, revision 1)\n"
    );
    let (code, _, err) = simba(&url, &create).await;
    assert_eq!(code, 1);
    assert!(err.contains("schedule `tenant-4711.report` exists; nothing was stored"), "{err}");

    let (code, out, _) = simba(&url, &["--json", "schedules", "get", "tenant-4711.report", "--fires", "2"]).await;
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(v["schedule"]["created_by"], "alice");
    assert_eq!(
        v["schedule"]["spec"],
        serde_json::json!({"kind": "cron", "expr": "0 0 9 * * MON", "time_zone": "Europe/Berlin"})
    );
    assert_eq!(v["schedule"]["payload"], r#"{"tenant": 4711}"#);
    assert_eq!(v["schedule"]["partition"], 49, "fnv1a64 mod 64 (A2)");
    let fires: Vec<&str> = v["next_fires"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(fires.len(), 2);
    assert!(fires.iter().all(|f| f.ends_with(":00:00.000Z")), "{fires:?}");

    let (code, out, _) =
        simba(&url, &["schedules", "create", "other", "--handler", "sweep", "--every", "90s", "--as", "bob"]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = simba(&url, &["schedules", "list"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("ID"), "{out}");
    assert!(out.contains("other") && out.contains("every 90000 ms") && out.contains("tenant-4711.report"), "{out}");
    let (_, out, _) = simba(&url, &["--json", "schedules", "list", "-n", "1"]).await;
    let v = json(&out);
    assert_eq!((v["schedules"][0]["id"].as_str(), v["next"].as_str()), (Some("other"), Some("other")));

    let (code, out, err) =
        simba(&url, &["schedules", "update", "tenant-4711.report", "--cron", "0 30 8 * * MON-FRI", "--as", "carol"])
            .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cron \"0 30 8 * * MON-FRI\" in UTC") && out.contains("revision 2"), "{out}");
    let (code, out, _) =
        simba(&url, &["schedules", "pause", "tenant-4711.report", "--note", "db migration", "--as", "dave"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("paused schedule `tenant-4711.report`"), "{out}");
    let (_, out, _) = simba(&url, &["schedules", "get", "tenant-4711.report"]).await;
    assert!(out.contains("paused      yes (db migration)") && out.contains("by dave"), "{out}");
    let (code, _, _) = simba(&url, &["schedules", "resume", "tenant-4711.report", "--as", "dave"]).await;
    assert_eq!(code, 0);

    // Refusals: bad input exits 1 with the reason; an unknown id names the nearest.
    let (code, _, err) =
        simba(&url, &["schedules", "create", "x", "--handler", "report", "--cron", "0 9 * * MON", "--as", "e"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("6 fields") && err.contains("nothing was stored"), "{err}");
    let (code, _, err) = simba(&url, &["schedules", "pause", "tenant-4711.reprot", "--as", "e"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("did you mean `tenant-4711.report`?"), "{err}");
    let (code, _, err) = simba(&url, &["schedules", "create", "y", "--handler", "report"]).await;
    assert_eq!(code, 2, "a usage error: {err}");

    let (code, out, _) = simba(&url, &["schedules", "delete", "other", "--note", "done", "--as", "bob"]).await;
    assert_eq!((code, out.as_str()), (0, "deleted schedule `other`\n"));
    let (code, out, _) = simba(&url, &["--json", "schedules", "audit"]).await;
    assert_eq!(code, 0);
    let v = json(&out);
    let trail: Vec<(String, String, String)> = v["records"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["who"].to_string(), r["action"].to_string(), r["target"].to_string()))
        .collect();
    let expected = [
        ("bob", "delete", "other"),
        ("dave", "resume", "tenant-4711.report"),
        ("dave", "pause", "tenant-4711.report"),
        ("carol", "update", "tenant-4711.report"),
        ("bob", "create", "other"),
        ("alice", "create", "tenant-4711.report"),
    ]
    .map(|(w, a, t)| (format!("\"{w}\""), format!("\"{a}\""), format!("\"{t}\"")));
    assert_eq!(trail, expected);
    assert_eq!(v["records"][0]["note"], "done");
    let (_, out, _) = simba(&url, &["schedules", "audit", "tenant-4711.report", "-n", "1"]).await;
    assert!(out.contains("dave") && out.contains("resume") && !out.contains("alice"), "{out}");
}

/// J11-J14 through the tool: `--overlap`, `--catch-up-window`, `--jitter`, `--start` and `--end` are stored
/// as the schedule's policies and shown by `get`; an update changes only what it names; policies
/// that contradict each other are refused with the reason, nothing stored.
#[tokio::test]
async fn j11_j14_schedule_policies_through_the_tool() {
    let (_dir, url) = store().await;
    let mut create = vec!["schedules", "create", "p", "--handler", "report", "--every", "1m", "--as", "alice"];
    create.extend(["--misfire", "run_once", "--catch-up-window", "1h", "--jitter", "30s"]);
    create.extend(["--start", "2027-01-01T00:00:00Z", "--overlap", "buffer_one"]);
    let (code, _, err) = simba(&url, &create).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = simba(&url, &["schedules", "get", "p"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "policies    misfire run_once, overlap buffer_one, catch-up window 1h, jitter 30s, from 2027-01-01T00:00:00.000Z\n"
        ),
        "{out}"
    );
    let (code, _, err) =
        simba(&url, &["schedules", "update", "p", "--end", "2027-02-01T00:00:00Z", "--as", "bob"]).await;
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = simba(&url, &["--json", "schedules", "get", "p"]).await;
    let p = &json(&out)["schedule"]["policies"];
    assert_eq!(
        (p["misfire"].as_str(), p["catch_up_window_ms"].as_u64(), p["jitter_ms"].as_u64()),
        (Some("run_once"), Some(3_600_000), Some(30_000)),
        "kept: {p}"
    );
    assert_eq!(p["overlap"], "buffer_one", "kept: {p}");
    assert_eq!((p["start_ms"].as_i64(), p["end_ms"].as_i64()), (Some(1_798_761_600_000), Some(1_801_440_000_000)));
    let bad = [
        (vec!["--jitter", "2m"], "shorter than the fixed rate"),
        (vec!["--end", "2026-01-01T00:00:00Z"], "end bound is before the start bound"),
        (vec!["--misfire", "skip"], "catch-up window"),
        (vec!["--start", "tomorrow"], "RFC 3339"),
        (vec!["--overlap", "replace"], "\"cancel_running\""),
    ];
    for (args, reason) in bad {
        let mut update = vec!["schedules", "update", "p", "--as", "carol"];
        update.extend(args);
        let (code, _, err) = simba(&url, &update).await;
        assert_ne!(code, 0, "{reason}");
        assert!(err.contains(reason), "{reason}: {err}");
    }
    let (_, out, _) = simba(&url, &["--json", "schedules", "get", "p"]).await;
    assert_eq!(json(&out)["schedule"]["revision"], 2, "nothing stored by the refused updates");
}

/// `simba schedules list` counts, per schedule, what its history (`schedule/<id>`) holds for the
/// last 24 hours: runs failed, slots missed, and runs whose first attempt started more than
/// `--late-after` after their slot (records older than a day are not counted).
#[tokio::test]
async fn schedules_list_counts_failures_missed_and_late_in_the_last_day() {
    use simba::backend::{Acquire, Backend};
    use simba::job_store::{Claim, ClaimRequest, Outcome, RunRecord, SlotKind};
    let (_dir, url) = store().await;
    let (code, _, err) =
        simba(&url, &["schedules", "create", "tenant-1", "--handler", "report", "--every", "60s"]).await;
    assert_eq!(code, 0, "{err}");
    simba(&url, &["schedules", "create", "tenant-2", "--handler", "report", "--every", "60s"]).await;
    let b = simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let s = b.open_session(std::time::Duration::from_secs(30)).await.unwrap_or_else(|e| panic!("{e}")).id;
    let Ok(Acquire::Won(token)) = b.acquire(&s, "simba.schedules.0").await else { panic!("acquire") };
    let jobs = b.job_store().unwrap_or_else(|| panic!("a jobs store"));
    let job = simba::schedule_store::job_name("tenant-1");
    let now = chrono::Utc::now().timestamp_millis() / 1000 * 1000;
    // (slot before now, started after it, outcome), oldest first: two days ago and late (not
    // counted), failed, 30 s late, on time.
    for (ago, late, outcome) in [
        (2 * 86_400_000, 60_000, Outcome::Ran),
        (600_000, 10, Outcome::Failed),
        (300_000, 30_000, Outcome::Ran),
        (120_000, 5, Outcome::Ran),
    ] {
        let slot_ms = now - ago;
        let req = ClaimRequest {
            session: &s,
            lease: "simba.schedules.0",
            token,
            job: &job,
            slot_ms,
            kind: SlotKind::Scheduled,
            node: "node-a",
            started_ms: slot_ms + late,
            attempts: 1,
        };
        let Ok(Claim::Claimed(mut r)) = jobs.claim_run(req).await else { panic!("claim {ago}") };
        r.outcome = outcome;
        r.ended_ms = Some(slot_ms + late + 5);
        assert!(jobs.finish_run(&r).await.unwrap_or_else(|e| panic!("{e}")));
    }
    let mut missed = RunRecord::not_run(job.clone(), now - 60_000, Outcome::Missed);
    missed.token = token;
    assert!(jobs.append(&missed).await.unwrap_or_else(|e| panic!("{e}")));

    let (code, out, _) = simba(&url, &["--json", "schedules", "list"]).await;
    assert_eq!(code, 0, "{out}");
    let v = json(&out);
    let one = &v["schedules"][0];
    assert_eq!(one["id"], "tenant-1", "{out}");
    let day = |s: &Value| (s["failures_24h"].as_u64(), s["missed_24h"].as_u64(), s["late_24h"].as_u64());
    assert_eq!(day(one), (Some(1), Some(1), Some(1)), "{out}");
    assert_eq!(day(&v["schedules"][1]), (Some(0), Some(0), Some(0)), "tenant-2 has no history: {out}");
    let (_, out, _) = simba(&url, &["--json", "schedules", "list", "--late-after", "1m"]).await;
    assert_eq!(json(&out)["schedules"][0]["late_24h"], 0, "30 s late is not past 1 minute: {out}");
    let (_, out, _) = simba(&url, &["schedules", "list"]).await;
    let head = out.lines().next().unwrap_or_default();
    assert!(head.ends_with("FAILURES 24H  MISSED 24H  LATE 24H"), "{out}");
    let row = out.lines().find(|l| l.starts_with("tenant-1")).unwrap_or_default();
    assert!(row.split_whitespace().rev().take(3).all(|n| n == "1"), "{out}");
}

/// A15 through the tool: `simba schedules trigger` makes a keyed request on
/// `schedule/<id>` (pending in `simba jobs`' store until a holder takes it), with a payload
/// for that run only; the same key again requests nothing new; the audit trail names who and
/// the key; a payload that is not JSON, or a missing id, is refused (exit 1) with nothing
/// written.
#[tokio::test]
async fn a15_schedules_trigger_through_the_tool() {
    let (_dir, url) = store().await;
    let create = ["schedules", "create", "t1", "--handler", "report", "--cron", "0 0 9 * * MON", "--as", "alice"];
    assert_eq!(simba(&url, &create).await.0, 0);
    let trigger = [
        "--json",
        "schedules",
        "trigger",
        "t1",
        "--request-key",
        "rerun-49",
        "--payload",
        r#"{"tenant": 4711, "week": 49}"#,
        "--note",
        "rerun week 49",
        "--as",
        "bob",
    ];
    let (code, out, err) = simba(&url, &trigger).await;
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(
        (v["job"].as_str(), v["request_key"].as_str(), v["known"].as_bool()),
        (Some("schedule/t1"), Some("rerun-49"), Some(false))
    );
    let (code, out, _) = simba(&url, &trigger[1..]).await;
    assert_eq!(code, 0);
    assert!(out.contains("already requested with key `rerun-49`"), "{out}");

    let b = simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let store = simba::backend::Backend::job_store(&b).unwrap_or_else(|| panic!("a jobs store"));
    let state = store.job("schedule/t1").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(state.and_then(|s| s.trigger_pending_ms).is_some(), "the request waits for the partition's holder");

    // `simba jobs` leaves schedules to `simba schedules list`, and says how many there are.
    let (code, out, _) = simba(&url, &["jobs"]).await;
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l.starts_with("schedule/")), "no schedule among the jobs: {out}");
    assert!(out.contains("1 schedule stored as data has a history too: `simba schedules list`"), "{out}");
    let (_, out, _) = simba(&url, &["--json", "jobs"]).await;
    let listed = json(&out);
    assert_eq!((listed["jobs"].as_array().map(Vec::len), listed["schedule_histories"].as_u64()), (Some(0), Some(1)));

    let (code, out, _) = simba(&url, &["--json", "schedules", "audit", "t1"]).await;
    assert_eq!(code, 0);
    let audit = json(&out);
    let first = &audit["records"][1];
    assert_eq!((first["who"].as_str(), first["action"].as_str()), (Some("bob"), Some("trigger")), "{audit}");
    assert_eq!(first["note"].as_str(), Some("request rerun-49, with its own payload: rerun week 49"));

    let (code, _, err) = simba(&url, &["schedules", "trigger", "t1", "--payload", "{week: 49}"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the payload is not JSON") && err.contains("nothing was stored"), "{err}");
    let (code, _, err) = simba(&url, &["schedules", "trigger", "t2"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no schedule `t2`: did you mean `t1`?"), "{err}");
    let (_, out, _) = simba(&url, &["--json", "schedules", "audit", "t1"]).await;
    assert_eq!(json(&out)["records"].as_array().map(Vec::len), Some(3), "nothing recorded for the refusals");
}

/// A16 through the tool: `simba schedules backfill` prints the plan first (the slots counted on
/// the schedule's own cron), a dry run stores nothing, the real one makes the keyed request on
/// `schedule/<id>` and records who and why in the audit trail; a reversed range, a budget under
/// 0.001/s, a range too long at its budget (naming both numbers), an unknown id (naming the
/// nearest) and a fixed-rate schedule are refused (exit 1) with nothing written.
#[tokio::test]
async fn a16_schedules_backfill_through_the_tool() {
    let (_dir, url) = store().await;
    let create = ["schedules", "create", "bf1", "--handler", "report", "--cron", "0 0 * * * *", "--as", "alice"];
    assert_eq!(simba(&url, &create).await.0, 0);
    let fixed = ["schedules", "create", "fr1", "--handler", "report", "--every", "1h", "--as", "alice"];
    let (code, _, err) = simba(&url, &fixed).await;
    assert_eq!(code, 0, "{err}");
    let range = ["--from", "2027-01-01T00:00:00Z", "--to", "2027-01-01T09:59:59Z"];
    let dry: Vec<&str> =
        ["schedules", "backfill", "bf1"].into_iter().chain(range).chain(["--rate", "0.5", "--dry-run"]).collect();
    let (code, out, err) = simba(&url, &dry).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("backfill of `schedule/bf1`: 10 slots from 2027-01-01T00:00:00"), "{out}");
    assert!(out.contains("dry run: nothing was requested"), "{out}");

    let real: Vec<&str> = ["--json", "schedules", "backfill", "bf1"]
        .into_iter()
        .chain(range)
        .chain(["--rate", "0.5", "--note", "db outage", "--as", "bob"])
        .collect();
    let (code, out, err) = simba(&url, &real).await;
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(
        (v["job"].as_str(), v["slots"].as_u64(), v["dry_run"].as_bool()),
        (Some("schedule/bf1"), Some(10), Some(false))
    );
    assert!(v["request_key"].as_str().is_some_and(|k| k.starts_with("backfill:")), "{v}");
    let b = simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let jobs = simba::backend::Backend::job_store(&b).unwrap_or_else(|| panic!("a jobs store"));
    let state = jobs.job("schedule/bf1").await.unwrap_or_else(|e| panic!("{e}"));
    assert!(state.and_then(|s| s.trigger_pending_ms).is_some(), "the request waits for the partition's holder");
    let (_, out, _) = simba(&url, &["--json", "schedules", "audit", "bf1"]).await;
    let audit = json(&out);
    let first = &audit["records"][0];
    assert_eq!((first["who"].as_str(), first["action"].as_str()), (Some("bob"), Some("backfill")), "{audit}");
    assert!(first["note"].as_str().is_some_and(|n| n.contains("10 slots") && n.ends_with(": db outage")), "{audit}");

    let refused = [
        (
            vec!["bf1", "--from", "2027-01-02T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--rate", "1"],
            "starts after it ends",
        ),
        (
            vec!["bf1", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-01T09:59:59Z", "--rate", "0"],
            "at least 0.001",
        ),
        (
            vec!["bf1", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-10T23:59:59Z", "--rate", "0.001"],
            "holds 240 slots and would take 66h 23m",
        ),
        (
            vec!["bf2", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-01T09:59:59Z", "--rate", "1"],
            "did you mean `bf1`?",
        ),
        (
            vec!["fr1", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-01T09:59:59Z", "--rate", "1"],
            "runs at a fixed rate",
        ),
    ];
    for (args, says) in refused {
        let all: Vec<&str> = ["schedules", "backfill"].into_iter().chain(args.iter().copied()).collect();
        let (code, _, err) = simba(&url, &all).await;
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (_, out, _) = simba(&url, &["--json", "schedules", "audit"]).await;
    assert_eq!(json(&out)["records"].as_array().map(Vec::len), Some(3), "nothing recorded for the refusals");
}
