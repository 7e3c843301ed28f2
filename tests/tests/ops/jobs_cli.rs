//! The jobs commands of the `simba` tool (issue 12 item 4): arguments and exit codes. A
//! `memory://` store lives and dies with one command, so these check the argument handling,
//! the bad-input rules and the output of an empty store; the output over a filled store is
//! tested beside the command (`simba_cli` unit tests) and on SQLite once it has a jobs store.

async fn simba(args: &[&str]) -> (u8, String, String) {
    let mut argv = vec!["--backend", "memory://"];
    argv.extend_from_slice(args);
    simba_at(&argv).await
}

async fn simba_at(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["simba"];
    argv.extend_from_slice(args);
    let code = simba_cli::run(argv, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn noop(_term: simba::Term) -> simba::job::JobFuture {
    simba::job::job_future(async {})
}

const NIGHTLY: simba::job::ScheduledJob =
    simba::job::ScheduledJob::new("nightly", simba::job::Schedule::cron_in("0 0 2 * * *", "Europe/Berlin"), &noop)
        .with_misfire(simba::job::Misfire::Skip);

/// A runtime named `node` running [`NIGHTLY`] on the SQLite file `url`, with `toml` added.
async fn runtime(url: &str, node: &str, toml: &str) -> simba::runtime::RunningRuntime {
    let text = format!("[backend]\nurl = \"{url}\"\n{toml}");
    let config = simba::RuntimeConfig::from_toml_str(&text, "simba.toml", Vec::new()).expect("config");
    let r = simba::Runtime::builder().config(config).without_registry().job(NIGHTLY).node_name(node).start().await;
    let r = r.expect("start");
    r.simba().live().await.expect("live");
    r
}

/// Waits (at most 10 s) until `simba check` says `want` about the registry; returns its output.
async fn check_until(url: &str, want: &str) -> (u8, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (code, out, err) = simba_at(&["--backend", url, "check"]).await;
        if out.lines().any(|l| l.contains("job registry") && l.contains(want)) || std::time::Instant::now() > deadline {
            return (code, format!("{out}{err}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Issue 12 item 5, from outside: two node processes' worth of runtimes on one SQLite file.
/// With the same jobs `simba check` passes the registry; a node whose `simba.toml` changes the
/// schedule makes it fail (exit 1) naming the job, the setting and the nodes on each side, and
/// `simba jobs` marks the job and shows its schedule, time zone and holder; once that node has
/// left, the check passes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item5_check_and_jobs_flag_a_node_with_another_schedule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    let a = runtime(&url, "node-a", "").await;
    let b = runtime(&url, "node-b", "").await;
    let (code, out) = check_until(&url, "2 live nodes").await;
    let line = out.lines().find(|l| l.contains("job registry")).unwrap_or_default().to_owned();
    assert!(line.starts_with("PASS") && line.contains("2 live nodes run the same 1 job (digest "), "{out}");
    assert_eq!(code, 0, "{out}");
    let c = runtime(&url, "node-c", "[jobs.nightly]\ncron = \"0 30 2 * * *\"\n").await;
    let (code, out) = check_until(&url, "differ").await;
    let line = out.lines().find(|l| l.contains("job registry")).unwrap_or_default().to_owned();
    assert!(line.starts_with("FAIL"), "{out}");
    assert!(
        line.contains(
            "the 3 live nodes differ: job `nightly` schedule: `0 0 2 * * *` on node-a, node-b; `0 30 2 * * *` on node-c"
        ),
        "{out}"
    );
    // Overriding `cron` alone resets the time zone to UTC, and the check shows that too.
    assert!(line.contains("job `nightly` time zone: `Europe/Berlin` on node-a, node-b; `UTC` on node-c"), "{out}");
    assert_eq!(code, 1, "a failed check exits 1: {out}");
    let (code, out, err) = simba_at(&["--backend", &url, "jobs"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nightly *  scheduled  0 0 2 * * * Europe/Berlin"), "the most nodes' schedule: {out}");
    assert!(out.contains("T00:00:00.000Z") || out.contains("T01:00:00.000Z"), "next fire at 02:00 in Berlin: {out}");
    assert!(out.contains("the 3 live nodes do not agree (* marks the jobs):"), "{out}");
    let holder = ["node-a (", "node-b (", "node-c ("].iter().filter(|h| out.contains(**h)).count();
    assert_eq!(holder, 1, "one holder, shown by its node name and token: {out}");
    c.shutdown().await;
    let (code, out) = check_until(&url, "2 live nodes run the same").await;
    assert_eq!(code, 0, "{out}");
    a.shutdown().await;
    b.shutdown().await;
    let (code, out) = check_until(&url, "no live node").await;
    assert!(out.lines().any(|l| l.starts_with("SKIP") && l.contains("job registry")), "{out}");
    assert_eq!(code, 0, "{out}");
}

/// Issue 12 bad input: an unknown job in `pause`, `resume`, `trigger`, `history` is refused
/// (exit 1, `simba_cli::EXIT_FAILED`) and says so (with the nearest name when there is one);
/// `jobs` on an empty store says it is empty, exit 0, in a table or JSON (schema 1).
#[tokio::test]
async fn item4_unknown_job_exits_1_and_empty_store_lists_nothing() {
    for cmd in ["pause", "resume", "trigger", "history"] {
        let (code, out, err) = simba(&[cmd, "nightly"]).await;
        assert_eq!(code, simba_cli::EXIT_FAILED, "{cmd}: {out}{err}");
        assert!(err.contains("unknown job `nightly`") && err.contains("simba jobs"), "{cmd}: {err}");
    }
    let (code, out, _) = simba(&["jobs"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("no jobs yet"), "{out}");
    let (code, out, _) = simba(&["jobs", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["jobs"], serde_json::json!([]));
    assert_eq!(v["schema"], 1, "{out}");
}

/// Issue 12 item 4: the commands' arguments are checked by clap (exit 2, usage).
#[tokio::test]
async fn item4_jobs_commands_check_their_arguments() {
    let (code, _, err) = simba(&["history"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("<JOB>"), "{err}");
    let (code, _, err) = simba(&["history", "x", "--limit", "many"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("invalid value 'many'"), "{err}");
    let (code, out, _) = simba(&["--help"]).await;
    assert_eq!(code, 0);
    for c in ["jobs", "history", "pause", "resume", "trigger"] {
        assert!(out.contains(c), "{c} missing from the help: {out}");
    }
}
