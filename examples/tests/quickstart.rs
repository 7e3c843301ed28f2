//! `cargo run --example quickstart` runs on a fresh machine: no server, no file, no variable
//! (README, rule J4). `simba::run()` refuses to start without a configured backend; the
//! quickstart names SQLite in `./simba.db` in code, and a configured backend still wins.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

/// The quickstart binary.
fn quickstart() -> PathBuf {
    common::example("quickstart")
}

/// The quickstart for `secs` seconds in `dir`, with every `SIMBA_*` variable removed but `env`.
fn run_quickstart(dir: &Path, secs: u32, env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(quickstart());
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("SIMBA_") {
            cmd.env_remove(var);
        }
    }
    cmd.current_dir(dir)
        .env("SIMBA_QUICKSTART_SECS", secs.to_string())
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd.output().expect("run the quickstart")
}

/// With nothing configured, the quickstart starts on `./simba.db` (saying that it uses the
/// application's default), runs its jobs, and stops cleanly when its time is up.
#[test]
fn quickstart_runs_with_no_server_and_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_quickstart(dir.path(), 4, &[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the quickstart failed: {log}");
    assert!(dir.path().join("simba.db").exists(), "no ./simba.db: {log}");
    assert!(log.contains("no backend configured: using the application's default"), "{log}");
    assert!(log.contains("heartbeat") && log.contains("partition worker started"), "no job ran: {log}");
}

/// `SIMBA_BACKEND__URL` names another store: the quickstart uses it, not `./simba.db`.
#[test]
fn quickstart_takes_the_configured_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("other.db");
    let out = run_quickstart(dir.path(), 2, &[("SIMBA_BACKEND__URL", format!("sqlite://{}", other.display()))]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the quickstart failed: {log}");
    assert!(other.exists() && !dir.path().join("simba.db").exists(), "{log}");
    assert!(!log.contains("no backend configured"), "{log}");
}
