//! Safe defaults (ADR 0008): a runtime on SQLite creates its file 0600 and opens no listening
//! socket. Its own test binary, with one test, because it reads the process's socket table:
//! in a binary shared with the metrics and dashboard tests it would see their listeners.

#![allow(clippy::unwrap_used)] // A test: a failure is the panic.

use simba::RuntimeConfig;
use simba::tck::conformance::unique;

/// Safe defaults: a runtime on SQLite creates its file 0600 and opens no listening socket.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn safe_defaults_private_file_and_nothing_listens() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("simba.db");
    let config = RuntimeConfig::from_toml_str(
        &format!("[backend]\nurl = \"sqlite://{}\"\n", db.display()),
        "simba.toml",
        Vec::new(),
    )
    .unwrap();
    let running = simba::Runtime::builder().config(config).without_registry().start().await.unwrap();
    let lock = running.simba().lock(unique("sec")).acquire().await.unwrap();
    assert_eq!(std::fs::metadata(&db).unwrap().permissions().mode() & 0o777, 0o600, "{}", db.display());

    // Our sockets (from /proc/self/fd) in the LISTEN state (0A) of /proc/self/net/tcp{,6}.
    let mut ours = std::collections::HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(target) = std::fs::read_link(fd.path())
            && let Some(inode) = target.to_string_lossy().strip_prefix("socket:[").and_then(|s| s.strip_suffix(']'))
        {
            ours.insert(inode.to_owned());
        }
    }
    let mut listening = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6", "/proc/self/net/udp", "/proc/self/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let listens = table.contains("udp") || f.get(3) == Some(&"0A");
            if listens && f.get(9).is_some_and(|inode| ours.contains(*inode)) {
                listening.push(format!("{table}: {line}"));
            }
        }
    }
    assert!(listening.is_empty(), "simba opened listening sockets:\n{}", listening.join("\n"));
    lock.release().await.unwrap();
    running.shutdown().await;
}
