//! Node processes of the multi-process tests that run one node binary per name in one
//! directory (the history test, the schedules test): each node's stderr goes to
//! `<dir>/<name>.stderr`, and a test that fails prints the tail of every node's.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A node process, killed when dropped.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` as node `name` in `dir`, with `SIMBA_CONFIG` (`dir/simba.toml`), `SIMBA_NODE`,
/// `SIMBA_NODE_LOG` (`dir/<name>.log`) and `envs` set, its stderr appended to
/// `dir/<name>.stderr`.
pub(crate) fn spawn<K: AsRef<OsStr>, V: AsRef<OsStr>>(
    bin: &str,
    dir: &Path,
    name: &'static str,
    envs: impl IntoIterator<Item = (K, V)>,
) -> Node {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.stderr")))
        .expect("node stderr file");
    let child = Command::new(bin)
        .current_dir(dir)
        .env("SIMBA_CONFIG", dir.join("simba.toml"))
        .env("SIMBA_NODE", name)
        .env("SIMBA_NODE_LOG", dir.join(format!("{name}.log")))
        .envs(envs)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    Node { name, child }
}

/// `kill -SIG` of one node process.
pub(crate) fn signal(node: &Node, sig: &str) {
    let done = Command::new("kill").arg(format!("-{sig}")).arg(node.child.id().to_string()).status();
    assert!(done.is_ok_and(|s| s.success()), "kill -{sig} {} ({}) failed", node.child.id(), node.name);
}

/// Waits (at most `within`) for a signalled node to exit.
pub(crate) async fn exited(node: &mut Node, within: Duration) {
    let start = Instant::now();
    while node.child.try_wait().ok().flatten().is_none() {
        assert!(start.elapsed() < within, "node {} did not exit within {within:?}", node.name);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last `last` lines each of `names` wrote to its stderr in `dir`, for a failure message.
pub(crate) fn stderr_tail(dir: &Path, label: &str, names: &[&str], last: usize) -> String {
    let mut out = String::new();
    for name in names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {label} node {name} stderr ({} lines, last {last})\n", lines.len()));
        for l in &lines[lines.len().saturating_sub(last)..] {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}
