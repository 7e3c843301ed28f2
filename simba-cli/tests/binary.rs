//! The installed binary, run as a user runs it (stdout a pipe): shell completions, exit
//! codes, and no terminal control codes in piped output. Needs no server: SQLite files and a
//! closed port stand in for the backends (tests/tests/ops runs the tool against real servers).

use std::process::{Command, Output};

fn simba(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_simba"))
        .args(args)
        // Whatever the developer's shell has: the tool reads the configuration from here.
        .env_remove("SIMBA_CONFIG")
        .env("TERM", "xterm-256color")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the simba binary: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A SQLite store that exists (the tool never creates one), in a directory that goes away.
async fn store() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    drop(simba::backend::sqlite::SqliteBackend::connect(&url).await.unwrap_or_else(|e| panic!("{e}")));
    (dir, url)
}

#[test]
fn completions_name_every_subcommand_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let o = simba(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o.stderr));
        let script = text(&o.stdout);
        for sub in
            ["status", "watch", "check", "namespaces", "dashboard", "jobs", "history", "pause", "resume", "trigger"]
        {
            assert!(script.contains(sub), "{shell} completion does not name `{sub}`:\n{script}");
        }
        // The global options too (fish writes them without their dashes: `-l backend`).
        assert!(script.contains("backend") && script.contains("namespace") && script.contains("timeout"), "{shell}");
    }
    let bash = text(&simba(&["completions", "bash"]).stdout);
    assert!(bash.contains("complete -F _simba") && bash.contains("simba"), "{bash}");
    let o = simba(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "an unknown shell is a usage error");
    assert!(text(&o.stderr).contains("[possible values: bash, elvish, fish, powershell, zsh]"), "{}", text(&o.stderr));
}

#[test]
fn help_documents_exit_codes_completions_and_jobs() {
    let o = simba(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = text(&o.stdout);
    let about = ["its jobs: their run history, pausing and resuming them", "running one now"];
    for said in about.into_iter().chain(["Exit codes:", "  3  cannot reach", "simba completions bash|zsh|fish"]) {
        assert!(help.contains(said), "top-level help lacks {said:?}:\n{help}");
    }
    assert!(!o.stdout.contains(&0x1b), "help into a pipe carries control codes: {help:?}");
    for cmd in [
        "status",
        "namespaces",
        "watch",
        "check",
        "dashboard",
        "jobs",
        "history",
        "pause",
        "resume",
        "trigger",
        "completions",
    ] {
        let help = text(&simba(&[cmd, "--help"]).stdout);
        assert!(
            help.contains("Example") && help.contains(&format!("simba {cmd}")),
            "`simba {cmd} --help` has no example:\n{help}"
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    let o = simba(&["stauts"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = simba(&["watch", "-n", "5s"]);
    assert_eq!(o.status.code(), Some(2), "-n is a count: {}", text(&o.stderr));
    let o = simba(&["status", "--backend", "ftp://x"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("unsupported backend URL scheme `ftp`"), "{}", text(&o.stderr));
    // etcd is opt-in: a build without it says how to get it.
    let o = simba(&["status", "--timeout", "2s", "--backend", "etcd://127.0.0.1:2379"]);
    if cfg!(feature = "etcd") {
        assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
    } else {
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("--features etcd"), "{}", text(&o.stderr));
    }
}

#[tokio::test]
async fn unreachable_backend_exits_3_and_failed_check_exits_1() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
    let url = format!("postgres://simba:hunter2@127.0.0.1:{}/simba", closed.unwrap_or_else(|e| panic!("{e}")));
    for cmd in ["status", "check", "jobs"] {
        let o = simba(&[cmd, "--timeout", "2s", "--backend", &url]);
        assert_eq!(o.status.code(), Some(3), "{cmd}: {}{}", text(&o.stdout), text(&o.stderr));
    }
    let (dir, url) = store().await;
    let bad = dir.path().join("simba.toml");
    std::fs::write(&bad, "[session]\nlease_duraton = \"15s\"\n").unwrap_or_else(|e| panic!("{e}"));
    let bad = bad.display().to_string();
    let o = simba(&["check", "-c", &bad, "--backend", &url]);
    assert_eq!(o.status.code(), Some(1), "a failed check: {}", text(&o.stdout));
    assert!(text(&o.stdout).contains("FAIL  configuration"), "{}", text(&o.stdout));
    let o = simba(&["status", "-c", &bad]);
    assert_eq!(o.status.code(), Some(2), "an invalid configuration is a usage error: {}", text(&o.stderr));
    let o = simba(&["pause", "nightly", "--backend", &url]);
    assert_eq!(o.status.code(), Some(1), "an unknown job is refused: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains("unknown job `nightly`"), "{}", text(&o.stderr));
    let o = simba(&["check", "--backend", &url]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
}

/// Piped, `watch` prints its refreshes one after the other without clearing the screen, and
/// `--json` one object per line; no byte of either is an escape.
#[tokio::test]
async fn watch_into_a_pipe_writes_no_control_codes() {
    let (_dir, url) = store().await;
    let o = simba(&["watch", "-n", "2", "--interval", "100ms", "--backend", &url]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!o.stdout.contains(&0x1b), "escape codes in piped output: {:?}", text(&o.stdout));
    assert_eq!(text(&o.stdout).matches("SESSIONS (0)").count(), 2, "{}", text(&o.stdout));
    let o = simba(&["watch", "--json", "-n", "2", "-i", "100ms", "--backend", &url]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!o.stdout.contains(&0x1b));
    let lines: Vec<serde_json::Value> =
        text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|v| v["schema"] == 1), "{lines:?}");
}

/// On a terminal (as `main` detects it), `watch` clears the screen before each refresh: the
/// pipe test above would pass trivially if it never did.
#[tokio::test]
async fn watch_on_a_terminal_redraws() {
    let (_dir, url) = store().await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let styling = simba_cli::Styling::for_terminal(true, Some("xterm"), None);
    let args = ["simba", "watch", "-n", "2", "-i", "10ms", "--backend", &url];
    let code = simba_cli::run_styled(args, &mut out, &mut err, styling).await;
    assert_eq!(code, 0, "{}", text(&err));
    assert_eq!(text(&out).matches("\x1b[2J\x1b[H").count(), 2, "{}", text(&out));
}

/// Rule B7: `check` names a backend URL that sends its password in plain text beyond this
/// machine (without showing the password), and a listener beyond loopback; neither is a
/// failure by itself.
#[tokio::test]
async fn check_names_plain_text_transport() {
    // TEST-NET-1 (RFC 5737): never routed, so the connection fails after the transport line.
    let o = simba(&["check", "--timeout", "1s", "--backend", "postgres://simba:hunter2@192.0.2.1:5432/simba"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}{}", text(&o.stderr));
    assert!(out.contains("WARN  transport") && out.contains("sslmode=verify-full"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");

    let (dir, url) = store().await;
    let config = dir.path().join("simba.toml");
    std::fs::write(&config, "[dashboard]\nlisten = \"0.0.0.0:9465\"\n").unwrap_or_else(|e| panic!("{e}"));
    let o = simba(&["check", "-c", &config.display().to_string(), "--backend", &url]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "a warning is not a failure: {out}{}", text(&o.stderr));
    assert!(out.contains("PASS  transport"), "{out}");
    assert!(out.contains("WARN  listeners") && out.contains("TLS proxy"), "{out}");
}
