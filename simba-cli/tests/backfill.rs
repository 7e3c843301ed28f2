//! `simba backfill` against a SQLite file, in-process (rule J16 through the tool): the plan
//! printed first, a dry run that stores nothing, the request made (its key carries the plan),
//! and the refusals with what to do (a reversed range, no budget, an unknown job, a range too
//! big by its slot count or by its time at the budget), nothing stored for any of them.

use serde_json::Value;
use simba::backend::Backend;
use simba::job::{JobSettings, NodeRegistry};

/// A SQLite store in a directory that goes away, with a live session that publishes `report`
/// on an hourly cron (what a node running it publishes).
async fn store() -> (tempfile::TempDir, String, simba::backend::sqlite::SqliteBackend) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let b = simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let session = b.open_session(std::time::Duration::from_secs(120)).await.unwrap_or_else(|e| panic!("{e}")).id;
    let report = JobSettings {
        name: "report".into(),
        lease: "report".into(),
        schedule: Some("0 0 * * * *".into()),
        misfire: "skip".into(),
        backoff: "1s".into(),
        ..JobSettings::default()
    };
    let registry = NodeRegistry::new("node-a", vec![report]).encode();
    let store = b.job_store().unwrap_or_else(|| panic!("a jobs store"));
    assert!(store.publish_registry(&session, &registry).await.unwrap_or_else(|e| panic!("{e}")));
    (dir, url, b)
}

/// Runs `simba --backend URL ARGS...`: (exit code, stdout, stderr).
async fn simba(url: &str, args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let all = ["simba", "--backend", url].into_iter().chain(args.iter().copied());
    let code = simba_cli::run(all, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

async fn pending(b: &simba::backend::sqlite::SqliteBackend) -> Option<i64> {
    let store = b.job_store().unwrap_or_else(|| panic!("a jobs store"));
    store.job("report").await.unwrap_or_else(|e| panic!("{e}")).and_then(|s| s.trigger_pending_ms)
}

#[tokio::test]
async fn j16_backfill_through_the_tool() {
    let (_dir, url, b) = store().await;
    let range = ["--from", "2027-01-01T00:00:00Z", "--to", "2027-01-01T05:30:00Z"];
    let with = |more: &[&'static str]| -> Vec<&str> {
        let mut args = vec!["backfill", "report"];
        args.extend(range);
        args.extend(more);
        args
    };

    let (code, out, err) = simba(&url, &with(&["--rate", "0.5", "--dry-run"])).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(
            "backfill of `report`: 6 slots from 2027-01-01T00:00:00.000Z to 2027-01-01T05:00:00.000Z, at most 0.5 runs/s"
        ),
        "the plan first: {out}"
    );
    assert!(out.contains("dry run: nothing was requested"), "{out}");
    assert_eq!(pending(&b).await, None, "a dry run stores nothing");

    let (code, out, err) =
        simba(&url, &[&["--json"][..], &with(&["--rate", "0.5", "--as", "alice", "--note", "outage"])].concat()).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        (v["slots"].as_u64(), v["dry_run"].as_bool(), v["known"].as_bool()),
        (Some(6), Some(false), Some(false))
    );
    assert_eq!(v["takes_seconds"].as_f64(), Some(10.0), "5 gaps of 2 s");
    let key = v["request_key"].as_str().unwrap_or_default();
    assert!(key.starts_with("backfill:1798761600000:1798781400000:500:"), "the key carries the plan: {key}");
    assert!(pending(&b).await.is_some(), "the request waits for the holder");

    let refused = [
        (
            vec!["backfill", "report", "--from", "2027-01-02T00:00:00Z", "--to", "2027-01-01T00:00:00Z", "--rate", "1"],
            "the range starts after it ends",
        ),
        (with(&["--rate", "0"]), "at least 0.001 runs per second, not 0"),
        (with(&["--rate", "-2"]), "give a positive --rate"),
        (
            vec!["backfill", "reprot", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-02T00:00:00Z", "--rate", "1"],
            "did you mean `report`?",
        ),
        (
            vec!["backfill", "report", "--from", "2026-01-01T00:00:00Z", "--to", "2027-06-01T00:00:00Z", "--rate", "1"],
            "the range holds 12385 slots and would take 3h 26m",
        ),
        (
            vec![
                "backfill",
                "report",
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-12-31T00:00:00Z",
                "--rate",
                "0.1",
            ],
            "the range holds 8737 slots and would take 24h 16m",
        ),
    ];
    let before = pending(&b).await;
    for (args, said) in refused {
        let (code, out, err) = simba(&url, &args).await;
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let (code, _, err) = simba(&url, &["trigger", "report", "--request-key", "backfill:1:2:1000:x"]).await;
    assert_eq!(code, 1, "a run now whose key reads as a backfill's plan: {err}");
    assert!(err.contains("is a backfill's"), "{err}");
    assert_eq!(pending(&b).await, before, "a refusal stores nothing");
}
