//! Namespaces in the `simba` tool (issue 12 item 6): `--namespace NAME` (or `[backend]
//! namespace` in the file `-c` names) confines every command to one namespace, `simba
//! namespaces` lists what a store holds, and a bad name is refused before any backend call.
//! On a real SQLite file shared by clients of three namespaces.

use std::time::Duration;

use serde_json::Value;
use simba::backend::namespace::{Namespace, Namespaced};
use simba::backend::sqlite::SqliteBackend;
use simba::backend::{Backend, SessionId};
use simba::job_store::{Outcome, RunRecord};
use simba::{Simba, SimbaConfig};

async fn simba(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["simba"];
    argv.extend_from_slice(args);
    let code = simba_cli::run(argv, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn ns(name: &str) -> Namespace {
    Namespace::new(name).unwrap_or_else(|e| panic!("{e}"))
}

async fn client(url: &str, namespace: Option<&str>) -> (Simba, SessionId) {
    let backend = SqliteBackend::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"));
    let mut b = Simba::builder().backend(backend).config(SimbaConfig::default());
    if let Some(n) = namespace {
        b = b.namespace(ns(n));
    }
    let simba = b.build().unwrap_or_else(|e| panic!("client: {e}"));
    let id = tokio::time::timeout(Duration::from_secs(10), simba.live())
        .await
        .unwrap_or_else(|_| panic!("no session within 10 s"))
        .unwrap_or_else(|e| panic!("session: {e}"));
    (simba, id)
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn sessions(v: &Value) -> Vec<String> {
    v["sessions"].as_array().into_iter().flatten().filter_map(|s| s["id"].as_str().map(str::to_owned)).collect()
}

fn leases(v: &Value) -> Vec<(String, String)> {
    v["leases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| (l["name"].as_str().unwrap_or("").to_owned(), l["session"].as_str().unwrap_or("").to_owned()))
        .collect()
}

/// Issue 12 item 6: `status`, `jobs`, `pause` and `history` see one namespace at a time;
/// the default namespace sees what it wrote (an older build's data) and nothing of the
/// others; `simba namespaces` lists all three, as a table and as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue12_6_cli_works_within_one_namespace_and_lists_them() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let (billing, billing_id) = client(&url, Some("billing-svc")).await;
    let (search, search_id) = client(&url, Some("search-svc")).await;
    let (legacy, legacy_id) = client(&url, None).await;
    let g1 = billing.lock("report").acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let g2 = search.lock("report").acquire().await.unwrap_or_else(|e| panic!("{e}"));
    let g3 = legacy.lock("legacy-report").acquire().await.unwrap_or_else(|e| panic!("{e}"));
    // History: one record in billing-svc, one written without a namespace (an older build).
    let raw = SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}"));
    let billing_store = Namespaced::new(raw.clone(), ns("billing-svc")).job_store().expect("a jobs store");
    let rec = RunRecord::not_run("report", 1_790_000_000_000, Outcome::Missed);
    assert!(billing_store.append(&rec).await.unwrap_or_else(|e| panic!("{e}")));
    let old = RunRecord::not_run("legacy-report", 1_790_000_000_000, Outcome::Missed);
    assert!(raw.job_store().expect("a jobs store").append(&old).await.unwrap_or_else(|e| panic!("{e}")));

    let (code, out, err) = simba(&["--backend", &url, "--namespace", "billing-svc", "status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["namespace"], "billing-svc", "{out}");
    assert_eq!(sessions(&v), vec![billing_id.to_string()], "{out}");
    assert_eq!(leases(&v), vec![("report".to_owned(), billing_id.to_string())], "{out}");

    let (code, out, err) = simba(&["--backend", &url, "status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["namespace"], Value::Null, "{out}");
    assert_eq!(sessions(&v), vec![legacy_id.to_string()], "the default namespace: {out}");
    let (code, out, _) = simba(&["--backend", &url, "-N", "billing-svc", "status"]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with(&format!("backend: {url}  namespace: billing-svc  (times on")), "{out}");
    assert_eq!(leases(&v), vec![("legacy-report".to_owned(), legacy_id.to_string())], "{out}");

    // `-c FILE` with `[backend] namespace`.
    let file = dir.path().join("simba.toml");
    std::fs::write(&file, format!("[backend]\nurl = \"{url}\"\nnamespace = \"search-svc\"\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    let (code, out, err) = simba(&["-c", &file, "status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(leases(&json(&out)), vec![("report".to_owned(), search_id.to_string())], "{out}");

    // Jobs: each namespace its own.
    let (code, out, err) = simba(&["--backend", &url, "-N", "billing-svc", "pause", "report"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = simba(&["--backend", &url, "-N", "billing-svc", "jobs", "--json"]).await;
    assert_eq!(code, 0);
    let jobs = json(&out);
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!((jobs["jobs"][0]["job"].as_str(), jobs["jobs"][0]["paused"].as_bool()), (Some("report"), Some(true)));
    let (code, _, err) = simba(&["-c", &file, "pause", "report"]).await;
    assert_eq!(code, simba_cli::EXIT_FAILED, "search-svc has no job `report`: {err}");
    assert!(err.contains("unknown job `report`"), "{err}");
    let (code, out, _) = simba(&["--backend", &url, "jobs", "--json"]).await;
    assert_eq!(code, 0);
    let jobs = json(&out);
    let names: Vec<&str> = jobs["jobs"].as_array().into_iter().flatten().filter_map(|j| j["job"].as_str()).collect();
    assert_eq!(names, vec!["legacy-report"], "the default namespace reads the old record only: {out}");
    let (code, out, _) = simba(&["--backend", &url, "history", "legacy-report", "--json"]).await;
    assert_eq!(code, 0, "{out}");

    // `check` says which namespace it works in and what that holds.
    let (code, out, err) = simba(&["--backend", &url, "-N", "billing-svc", "check"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let line = out.lines().find(|l| l.contains("namespace")).unwrap_or_else(|| panic!("no namespace line: {out}"));
    assert!(line.contains("`billing-svc`: 1 sessions, 1 leases, 1 jobs; 2 other namespace(s)"), "{line}");

    // The listing, whatever --namespace says.
    let (code, out, err) = simba(&["--backend", &url, "-N", "search-svc", "namespaces"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first().map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["NAMESPACE", "SESSIONS", "LEASES", "GROUPS", "JOBS"])
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
    };
    assert_eq!(row("(default)"), Some(vec!["1", "1", "0", "1"]), "{out}");
    assert_eq!(row("billing-svc"), Some(vec!["1", "1", "0", "1"]), "{out}");
    assert_eq!(row("search-svc"), Some(vec!["1", "1", "0", "0"]), "{out}");
    let (code, out, _) = simba(&["--backend", &url, "namespaces", "--json"]).await;
    assert_eq!(code, 0);
    let v = json(&out);
    let listed: Vec<Value> = v["namespaces"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 3, "{out}");
    assert_eq!(listed[0]["namespace"], Value::Null, "the default namespace comes first: {out}");
    assert_eq!(listed[1]["namespace"], "billing-svc");
    assert_eq!((listed[1]["sessions"].as_u64(), listed[1]["jobs"].as_u64()), (Some(1), Some(1)));

    for g in [g1, g2, g3] {
        g.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
    for c in [billing, search, legacy] {
        c.close().await;
    }
}

/// Issue 12 item 6 bad input: a namespace that breaks the lease-name rules is refused
/// before any backend call, from the command line and from the file, with what to write.
#[tokio::test]
async fn issue12_6_cli_refuses_a_bad_namespace_before_connecting() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A database file that does not exist: had the tool connected, it would say so instead.
    let url = format!("sqlite://{}", dir.path().join("absent.db").display());
    let (code, _, err) = simba(&["--backend", &url, "--namespace", "billing/svc", "status"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("invalid namespace \"billing/svc\"") && err.contains("lease-name rules"), "{err}");
    let file = dir.path().join("simba.toml");
    std::fs::write(&file, format!("[backend]\nurl = \"{url}\"\nnamespace = \"..\"\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    for cmd in ["status", "namespaces", "jobs"] {
        let (code, _, err) = simba(&["-c", &file, cmd]).await;
        assert_eq!(code, 2, "{cmd}");
        assert!(err.contains("line 3, [backend] namespace: invalid namespace \"..\""), "{cmd}: {err}");
        assert!(!err.contains("absent.db"), "{cmd} reached the backend: {err}");
    }
}
