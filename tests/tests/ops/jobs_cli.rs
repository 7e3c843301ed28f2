//! The jobs commands of the `simba` tool (issue 12 item 4): arguments and exit codes. A
//! `memory://` store lives and dies with one command, so these check the argument handling,
//! the bad-input rules and the output of an empty store; the output over a filled store is
//! tested beside the command (`simba::cli` unit tests) and on SQLite once it has a jobs store.

async fn simba(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["simba", "--backend", "memory://"];
    argv.extend_from_slice(args);
    let code = simba::cli::run(argv, &mut out, &mut err).await;
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// Issue 12 bad input: an unknown job in `pause`, `resume`, `trigger`, `history` exits 2 and
/// says so (with the nearest name when there is one); `jobs` on an empty store says it is
/// empty, exit 0, in a table or JSON.
#[tokio::test]
async fn item4_unknown_job_exits_2_and_empty_store_lists_nothing() {
    for cmd in ["pause", "resume", "trigger", "history"] {
        let (code, out, err) = simba(&[cmd, "nightly"]).await;
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(err.contains("unknown job `nightly`") && err.contains("simba jobs"), "{cmd}: {err}");
    }
    let (code, out, _) = simba(&["jobs"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("no jobs recorded yet"), "{out}");
    let (code, out, _) = simba(&["jobs", "--json"]).await;
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["jobs"], serde_json::json!([]));
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
