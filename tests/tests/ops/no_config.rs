//! Rule J4, "no silent split": a node started with no configuration (no `SIMBA_CONFIG`, no
//! `./simba.toml`, no `SIMBA_BACKEND__URL`) refuses to start, before it connects to anything
//! or creates a file. Three replicas deployed without their config would otherwise each keep
//! their own store and each run every job, which no check can see.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use simba::{Error, Runtime, RuntimeConfig};

/// `simba-test-node` (`simba::run()`, a job every second and a 16-partition group) started in
/// the empty directory `dir`, with every `SIMBA_*` variable removed but its job log.
fn node_without_config(dir: &Path, log: &Path) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simba-test-node"));
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("SIMBA_") {
            cmd.env_remove(var);
        }
    }
    cmd.current_dir(dir)
        .env("SIMBA_NODE_LOG", log)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn simba-test-node")
}

/// Three processes of `simba::run()` with no configuration: each exits with the error (what
/// to create, the variables, the SQLite line for a trial) within seconds, runs no job, and
/// leaves its working directory empty (no `simba.db`).
#[test]
fn j4_processes_without_config_refuse_to_start_and_create_nothing() {
    let logs = tempfile::tempdir().expect("tempdir");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let nodes: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| node_without_config(d.path(), &logs.path().join(format!("{i}.log"))))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (i, mut node) in nodes.into_iter().enumerate() {
        // A node that started runs until it is stopped: stop it at the deadline, and fail.
        while node.try_wait().expect("poll the node").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let running = node.try_wait().expect("poll the node").is_none();
        if running {
            node.kill().expect("stop the node");
        }
        let out = node.wait_with_output().expect("wait for the node");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!running && !out.status.success(), "node {i} started without configuration: {stderr}");
        let parts = [
            "no backend configured",
            "SIMBA_CONFIG",
            "./simba.toml",
            "SIMBA_BACKEND__URL",
            "[backend]",
            r#"url = "sqlite://simba.db""#,
        ];
        for part in parts {
            assert!(stderr.contains(part), "node {i}: the error names {part}: {stderr}");
        }
        let left: Vec<_> = std::fs::read_dir(dirs[i].path()).expect("read dir").collect();
        assert!(left.is_empty(), "node {i} created {left:?} in its working directory");
        let log = std::fs::read_to_string(logs.path().join(format!("{i}.log"))).unwrap_or_default();
        assert!(log.is_empty(), "node {i} ran jobs: {log}");
    }
}

/// In process: `Runtime::builder()...start()` on a configuration that names no backend (a file
/// without `[backend] url`, or `RuntimeConfig::default()`) fails with the configuration error
/// naming the file and key, and nothing starts. A backend given in code, a URL in the file, or
/// the application's `default_backend_url` each name one.
#[tokio::test]
async fn j4_runtime_without_backend_refuses_and_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("simba.toml");
    std::fs::write(&file, "[session]\nlease_duration = \"15s\"\n").expect("write simba.toml");
    let Err(e) = Runtime::builder().config_file(&file).without_registry().start().await else {
        panic!("it started without a backend");
    };
    let Error::InvalidConfig(c) = &e else { panic!("{e}") };
    assert_eq!((c.file(), c.key()), (Some(file.to_str().expect("utf-8 path")), Some("backend.url")), "{e}");
    assert!(c.reason().starts_with("missing: ") && c.reason().contains("sqlite://simba.db"), "{e}");
    let e = Runtime::builder().config(RuntimeConfig::default()).without_registry().start().await.err();
    assert!(matches!(e, Some(Error::InvalidConfig(_))), "{e:?}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 1, "only simba.toml");

    // The application's default applies only when nothing names a backend.
    let chosen = dir.path().join("chosen.db");
    let default_url = format!("sqlite://{}", chosen.display());
    let none = RuntimeConfig::from_toml_str("", "test.toml", Vec::new()).expect("config");
    let rt = Runtime::builder().config(none).default_backend_url(&default_url).without_registry().start().await;
    rt.expect("the application's default backend").shutdown().await;
    assert!(chosen.exists(), "the default backend was used");
    let named = dir.path().join("named.db");
    let text = format!("[backend]\nurl = \"sqlite://{}\"\n", named.display());
    let config = RuntimeConfig::from_toml_str(&text, "test.toml", Vec::new()).expect("config");
    let unused = format!("sqlite://{}", dir.path().join("unused.db").display());
    let rt = Runtime::builder().config(config).default_backend_url(unused).without_registry().start().await;
    rt.expect("the file's backend").shutdown().await;
    assert!(named.exists() && !dir.path().join("unused.db").exists(), "the file's url wins over the default");
}
