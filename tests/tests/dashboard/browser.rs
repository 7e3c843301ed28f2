//! The dashboard in a real browser (issue 14): headless Chromium opens the pages that three
//! node processes on one SQLite file serve, and sees them change without a reload.

#![allow(clippy::print_stderr)] // Timings and screenshot paths are printed for the report.

use std::time::{Duration, Instant};

use crate::harness::{Browser, free_port, screenshot_dir, spawn_node, wait_listening};

const CONFIG: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"1s\"\nretry_jitter = \"500ms\"\n";

pub(crate) fn write_config(dir: &std::path::Path) {
    let url = format!("sqlite://{}", dir.join("simba.db").display());
    std::fs::write(dir.join("simba.toml"), format!("[backend]\nurl = \"{url}\"\n\n{CONFIG}")).expect("write config");
}

/// The JavaScript condition "the group `parts` shows `members` members, balanced, over 16
/// partitions".
fn parts_balanced(members: usize) -> String {
    format!(
        "const g = document.querySelector('section.group[data-group=\"parts\"]'); \
         return !!g && g.dataset.members === '{members}' && g.dataset.balanced === 'true' \
         && g.dataset.partitions === '16';"
    )
}

/// Overview lists the 3 sessions (one labelled as the serving node); the groups page shows
/// `parts` balanced over 3 members; after a `kill -9` of another node the same page, never
/// reloaded, shows it rebalanced over 2 with the moved partitions highlighted (rule J6 seen
/// from outside). Screenshots of the overview, groups and leases pages are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_overview_and_rebalance_without_reload() {
    let _serial = crate::SERIAL.lock().await;
    let t0 = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path());
    let port = free_port();
    // Node a serves the dashboard (the runtime's way), set through an environment override.
    let a = spawn_node(dir.path(), "a", &[("SIMBA_DASHBOARD__LISTEN", format!("127.0.0.1:{port}"))]);
    let b = spawn_node(dir.path(), "b", &[]);
    let mut c = spawn_node(dir.path(), "c", &[]);
    wait_listening(port, Duration::from_secs(20)).await;
    let browser = Browser::start().await;
    let base = format!("http://127.0.0.1:{port}");

    browser.client.goto(&format!("{base}/")).await.expect("open overview");
    let took = browser
        .wait_for(
            "3 sessions, 3 in the group and 16 partitions held",
            Duration::from_secs(30),
            "return document.querySelectorAll('#sessions tr[data-session]').length === 3 \
             && document.querySelector('#count-leases')?.textContent === '17' \
             && document.querySelector('.live')?.textContent === 'live';",
        )
        .await;
    eprintln!("overview: 3 sessions after {took:?}");
    let own = browser.eval("return document.querySelectorAll('#sessions .badge.self_').length").await;
    assert_eq!(own, 1, "exactly one session is labelled as the serving node");
    let shots = screenshot_dir();
    eprintln!("screenshot {}", browser.screenshot(&shots, "dashboard-overview").await.display());

    browser.client.goto(&format!("{base}/groups")).await.expect("open groups");
    let took = browser.wait_for("parts balanced over 3", Duration::from_secs(30), &parts_balanced(3)).await;
    eprintln!("groups: balanced over 3 after {took:?}");
    let counts = browser
        .eval("return [...document.querySelectorAll('section.group[data-group=\"parts\"] tr[data-member] td.num')].map(t => +t.textContent).sort()")
        .await;
    assert_eq!(counts, serde_json::json!([5, 5, 6]), "16 partitions over 3 members");
    browser.eval("window.__simbaNoReload = 42; return true").await;

    // kill -9 node c: its session expires after the lease (3 s), its partitions move.
    c.child.kill().expect("kill -9");
    let _ = c.child.wait();
    let took = browser.wait_for("parts balanced over 2", Duration::from_secs(30), &parts_balanced(2)).await;
    eprintln!("groups: rebalanced over 2 members {took:?} after the kill (lease 3 s)");
    let moved =
        browser.eval("return document.querySelectorAll('section.group[data-group=\"parts\"] td.p.moved').length").await;
    assert!(moved.as_u64().is_some_and(|n| n >= 5), "the moved partitions are highlighted: {moved}");
    let marker = browser.eval("return window.__simbaNoReload === 42").await;
    assert_eq!(marker, true, "the page changed without a reload");
    let counts = browser
        .eval("return [...document.querySelectorAll('section.group[data-group=\"parts\"] tr[data-member] td.num')].map(t => +t.textContent).sort()")
        .await;
    assert_eq!(counts, serde_json::json!([8, 8]));
    eprintln!("screenshot {}", browser.screenshot(&shots, "dashboard-groups").await.display());

    browser.client.goto(&format!("{base}/leases")).await.expect("open leases");
    browser
        .wait_for(
            "the lease table",
            Duration::from_secs(10),
            "return !!document.querySelector('tr[data-lease=\"tick\"]')",
        )
        .await;
    eprintln!("screenshot {}", browser.screenshot(&shots, "dashboard-leases").await.display());
    browser.close().await;
    drop((a, b));
    eprintln!("browser test took {:?}", t0.elapsed());
}
