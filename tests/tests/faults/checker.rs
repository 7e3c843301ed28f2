//! The outside history checker in the fault suite (rule V4, ADR 0022): every node records
//! its lease operations (`SIMBA_HISTORY_LOG`, `simba_tests::lincheck::record`), and after a run
//! the history is checked against the lease model; its verdict heads the fault report
//! (`SIMBA_RELIABILITY_OUT`). The positive controls run the same recorder and checker on two
//! in-process clients of each backend, once as they are (the history must linearize) and once
//! with one client's backend granting a held lease once more (`lincheck::mutant::DoubleGrant`):
//! the checker must catch it.

#![allow(clippy::print_stderr)] // The verdicts are printed for the report.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::backend::{Backend, BackendUrl, ConnectOptions, Connected};
use simba::{Simba, SimbaConfig};
use simba_tests::lincheck::mutant::DoubleGrant;
use simba_tests::lincheck::search::Checked;
use simba_tests::lincheck::{Budget, Recorder, RecordingBackend, Tolerance, Verdict, check_history, parse_history};
use simba_tests::{eventually, server_url};

use crate::SERIAL;
use crate::faults::{JITTER, LEASE, RENEW};

const HEAD: &str = "## History checker\n\nEvery lease operation the nodes made (open, keep-alive, acquire, release, close, listing, claim), with its invocation and completion on the host's monotonic clock and the store's answer, checked against a sequential model of the lease contract by a linearizability search (rule V4, ADR 0022).\n\n| run | verdict |\n| --- | --- |\n";

/// Puts `row` in the table at the head of the report file, if there is one.
fn report_head(run: &str, verdict: &str) {
    static LOCK: Mutex<()> = Mutex::new(());
    let Ok(path) = std::env::var("SIMBA_RELIABILITY_OUT") else { return };
    let _g = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let (mut rows, rest) = match text.strip_prefix(HEAD) {
        Some(after) => match after.split_once("\n\n") {
            Some((rows, rest)) => (format!("{rows}\n"), rest.to_owned()),
            None => (after.to_owned(), String::new()),
        },
        None => (String::new(), text),
    };
    rows.push_str(&format!("| {run} | {} |\n", verdict.replace('|', "/")));
    let _ = std::fs::write(&path, format!("{HEAD}{rows}\n{rest}"));
}

/// Checks the history the nodes of a fault run recorded in `log`; fails the run on a
/// violation (printing where the search stopped). An unknown verdict is reported, not failed.
pub(crate) fn check_run(backend: &str, log: &Path) -> Checked {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    if let Some(dir) = std::env::var_os("SIMBA_CHECKER_KEEP").or_else(|| std::env::var_os("SIMBA_FAULT_NODE_LOGS")) {
        // Kept (beside the nodes' logs), to check again (`check_a_kept_history`).
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(Path::new(&dir).join(format!("history-{backend}.log")), &text);
    }
    let history = parse_history(text.lines());
    assert!(!history.is_empty(), "[{backend}] the nodes recorded no lease operation in {}", log.display());
    let checked = check_history(&history, Tolerance::default(), Budget::default());
    let summary = checked.summary();
    eprintln!("[{backend}] history checker: {summary}");
    report_head(&format!("faults: {backend}"), &summary);
    if let Verdict::Violation { name, detail } = &checked.verdict {
        panic!("[{backend}] the history of lease `{name}` is not linearizable with the lease model:\n{detail}");
    }
    checked
}

/// Checks a history kept by a fault run (`SIMBA_CHECKER_KEEP=DIR` or `SIMBA_FAULT_NODE_LOGS=DIR`
/// keeps `DIR/history-BACKEND.log`): `SIMBA_CHECK_HISTORY=FILE cargo test -p simba-tests
/// --all-features --test faults checker::check_a_kept_history -- --ignored --nocapture`.
#[test]
#[ignore = "checks the file SIMBA_CHECK_HISTORY names"]
fn check_a_kept_history() {
    let path = std::env::var("SIMBA_CHECK_HISTORY").expect("SIMBA_CHECK_HISTORY=FILE names the history to check");
    let text = std::fs::read_to_string(&path).expect("read the history");
    let checked = check_history(&parse_history(text.lines()), Tolerance::default(), Budget::default());
    eprintln!("{path}: {}", checked.summary());
    if let Verdict::Violation { detail, .. } = &checked.verdict {
        panic!("{detail}");
    }
}

fn config() -> SimbaConfig {
    SimbaConfig::builder().lease_duration(LEASE).renew_interval(RENEW).retry_jitter(JITTER).build().expect("config")
}

/// Two clients on `a` and `b` (one store), recorded: `a` is elected on a fresh lease, then
/// `b` contends for a moment. Returns the recorded history's check.
async fn contend<A: Backend, B: Backend>(a: A, b: B, mutant: Option<&DoubleGrantFired>) -> Checked {
    let rec = Recorder::in_memory();
    let name = format!("checker-control-{:x}", rand::random::<u32>());
    let ca = Simba::new(RecordingBackend::new(a, rec.clone()), config()).expect("client a");
    let cb = Simba::new(RecordingBackend::new(b, rec.clone()), config()).expect("client b");
    let ea = ca.election(&name);
    ea.start(simba_tests::Recorder::default()).expect("start a");
    eventually(Duration::from_secs(10), "a elected", || ea.is_leader().then_some(())).await;
    let eb = cb.election(&name);
    eb.start(simba_tests::Recorder::default()).expect("start b");
    match mutant {
        Some(fired) => eventually(Duration::from_secs(5), "the double grant", || fired.get().then_some(())).await,
        None => tokio::time::sleep(RENEW * 2).await,
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    eb.stop().await;
    ea.stop().await;
    cb.close().await;
    ca.close().await;
    check_history(&rec.history(), Tolerance::default(), Budget::default())
}

/// Whether a [`DoubleGrant`] fired, readable after the wrapper moved into a client.
type DoubleGrantFired = simba_tests::lincheck::mutant::Fired;

/// The positive control on one backend: as it is, the history linearizes; with a held lease
/// granted once more, the checker reports a violation.
async fn control<F, Fut, B>(backend: &str, connect: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = B>,
    B: Backend,
{
    let _serial = SERIAL.lock().await;
    let plain = contend(connect().await, connect().await, None).await;
    eprintln!("[{backend}] positive control, unmutated: {}", plain.summary());
    let (mutant, fired) = DoubleGrant::new(connect().await);
    let caught = contend(connect().await, mutant, Some(&fired)).await;
    eprintln!("[{backend}] positive control, a held lease granted once more: {}", caught.summary());
    let verdict = match &caught.verdict {
        Verdict::Violation { name, .. } => format!("caught: violation on `{name}` ({} operations)", caught.ops),
        v => format!("NOT CAUGHT: {v:?}"),
    };
    report_head(
        &format!("positive control: {backend}"),
        &format!("unmutated: {}; a held lease granted once more: {verdict}", plain.summary()),
    );
    assert_eq!(plain.verdict, Verdict::Linearizable, "[{backend}] the unmutated control: {}", plain.summary());
    if let Verdict::Violation { detail, .. } = &caught.verdict {
        eprintln!("{detail}");
    } else {
        panic!("[{backend}] the double grant was not caught: {}", caught.summary());
    }
}

fn connect_url(var: &str) -> Option<impl Fn() -> std::pin::Pin<Box<dyn Future<Output = Connected> + Send>>> {
    let url = server_url(var)?;
    Some(move || {
        let url = url.clone();
        Box::pin(async move {
            simba::backend::connect(&BackendUrl::new(&url), ConnectOptions::default()).await.expect("connect")
        }) as std::pin::Pin<Box<dyn Future<Output = Connected> + Send>>
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_memory() {
    let store = MemoryBackend::new();
    control("memory", || {
        let s = store.clone();
        async move { s }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("simba.db").display());
    control("sqlite", || {
        let url = url.clone();
        async move { simba::backend::connect(&BackendUrl::new(&url), ConnectOptions::default()).await.expect("connect") }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_postgres() {
    let Some(connect) = connect_url("SIMBA_TEST_POSTGRES_URL") else { return };
    control("postgres", connect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_mysql() {
    let Some(connect) = connect_url("SIMBA_TEST_MYSQL_URL") else { return };
    control("mysql", connect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_redis() {
    let Some(connect) = connect_url("SIMBA_TEST_REDIS_URL") else { return };
    control("redis", connect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_zookeeper() {
    let Some(connect) = connect_url("SIMBA_TEST_ZK_URL") else { return };
    control("zookeeper", connect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v4_checker_catches_a_double_grant_etcd() {
    let Some(connect) = connect_url("SIMBA_TEST_ETCD_URL") else { return };
    control("etcd", connect).await;
}
