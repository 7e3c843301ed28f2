//! Jobs on the runtime (J4-J7) on paused time against a shared in-memory store: several
//! runtimes in one process stand for several nodes.

#![allow(clippy::print_stderr)] // The figures are printed for the report.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{Misfire, PartitionedJob, Schedule, ScheduledJob};
use simba::runtime::RunningRuntime;
use simba::tck::{FaultyBackend, Op};
use simba::{Runtime, RuntimeConfig, Term};
use tokio::time::{Instant, sleep};

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

fn config(text: &str) -> RuntimeConfig {
    RuntimeConfig::from_toml_str(text, "test.toml", Vec::new()).expect("config")
}

async fn node(
    store: &MemoryBackend,
    seed: u64,
    scheduled: &[ScheduledJob],
    partitioned: &[PartitionedJob],
    toml: &str,
) -> RunningRuntime {
    let mut b = Runtime::builder().config(config(toml)).without_registry().backend(store.clone()).seed(seed);
    for j in scheduled {
        b = b.job(j.clone());
    }
    for j in partitioned {
        b = b.partitioned(j.clone());
    }
    let r = b.start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

/// (session, token, start, end) of each run.
static RUNS: Mutex<Vec<(String, u64, Instant, Instant)>> = Mutex::new(Vec::new());

fn rate_job(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let start = Instant::now();
        assert!(term.is_valid(), "J5: a run starts only while the term is valid");
        sleep(MS(600)).await; // longer than the 250 ms period
        RUNS.lock().unwrap_or_else(PoisonError::into_inner).push((
            term.session_id().to_string(),
            term.token(),
            start,
            Instant::now(),
        ));
    })
}

const RATE: ScheduledJob = ScheduledJob::new("rate", Schedule::FixedRate(Duration::from_millis(250)), &rate_job);

/// J5: a fixed-rate job runs only on the node holding its term, with that term, one run at a
/// time (a long run skips the ticks it overlaps, the rate stays on its grid), and moves to
/// another node after a crash with a higher token and no overlapping runs.
#[tokio::test(start_paused = true)]
async fn j5_fixed_rate_one_node_one_run_at_a_time() {
    let store = MemoryBackend::new();
    let a = node(&store, 1, &[RATE], &[], "").await;
    let t0 = Instant::now();
    sleep(MS(100)).await;
    let b = node(&store, 2, &[RATE], &[], "").await;
    sleep(S(10)).await;
    let a_id = a.simba().session_id().expect("a").to_string();
    {
        let runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert!(runs.len() >= 10, "{} runs", runs.len());
        assert!(runs.iter().all(|r| r.0 == a_id), "a run on the node without the term");
        for w in runs.windows(2) {
            assert!(w[0].3 <= w[1].2, "two runs in flight");
        }
        // Ticks stay on the 250 ms grid from the term's start.
        let first = runs[0].2;
        for r in &runs {
            assert_eq!((r.2 - first).as_millis() % 250, 0, "run at {:?}", r.2 - t0);
        }
    }
    a.simba().crash_for_tests();
    let crashed = Instant::now();
    sleep(S(25)).await;
    let runs = RUNS.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let b_id = b.simba().session_id().expect("b").to_string();
    let b_runs: Vec<_> = runs.iter().filter(|r| r.0 == b_id).collect();
    assert!(!b_runs.is_empty(), "no failover");
    let a_last_end = runs.iter().filter(|r| r.0 == a_id).map(|r| r.3).max().expect("a ran");
    let b_first = b_runs[0].2;
    assert!(b_first > a_last_end, "runs of two nodes overlapped");
    assert!(b_first - crashed <= b.simba().config().failover_bound(), "failover took {:?}", b_first - crashed);
    assert!(b_runs[0].1 > runs[0].1, "the new term has a higher token");
    b.shutdown().await;
}

/// Partition terms seen by workers: (partition, term).
static TERMS: Mutex<Vec<(u32, Term, Option<Instant>)>> = Mutex::new(Vec::new());

fn worker(term: Term, partition: u32) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let idx = {
            let mut t = TERMS.lock().unwrap_or_else(PoisonError::into_inner);
            t.push((partition, term.clone(), None));
            t.len() - 1
        };
        struct End(usize);
        impl Drop for End {
            fn drop(&mut self) {
                if let Some(e) = TERMS.lock().unwrap_or_else(PoisonError::into_inner).get_mut(self.0) {
                    e.2.get_or_insert(Instant::now());
                }
            }
        }
        let _end = End(idx);
        term.cancelled().await;
    })
}

const BILLING: PartitionedJob = PartitionedJob::new("billing", 16, &worker);

fn shares(store: &MemoryBackend, nodes: &[&RunningRuntime]) -> Vec<usize> {
    shares_in(store, "billing", nodes)
}

/// Partitions of the 16 of `group` that each node holds, most first.
fn shares_in(store: &MemoryBackend, group: &str, nodes: &[&RunningRuntime]) -> Vec<usize> {
    let mut by_session: HashMap<String, usize> = HashMap::new();
    for i in 0..16 {
        if let Some((Some(s), _)) = store.holder(&format!("{group}.{i}")) {
            *by_session.entry(s.to_string()).or_default() += 1;
        }
    }
    let mut v: Vec<usize> = nodes
        .iter()
        .map(|n| n.simba().session_id().map_or(0, |id| by_session.get(id.as_str()).copied().unwrap_or(0)))
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

/// No two valid terms of one partition overlap in time (term disjointness).
fn assert_disjoint() {
    let terms = TERMS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut by_partition: BTreeMap<u32, Vec<(Instant, Instant, u64)>> = BTreeMap::new();
    for (p, t, end) in terms.iter() {
        let valid_until = end.map_or(t.deadline(), |e| e.min(t.deadline()));
        by_partition.entry(*p).or_default().push((t.started_at(), valid_until, t.token()));
    }
    for (p, mut v) in by_partition {
        v.sort();
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "partition {p}: terms {} and {} overlap", w[0].2, w[1].2);
            assert!(w[1].2 > w[0].2, "partition {p}: token went from {} to {}", w[0].2, w[1].2);
        }
    }
}

/// J6: 16 partitions spread 6/5/5 over three nodes, 8/8 after one crashes, and back to
/// 6/5/5 when a node returns; never two holders of one partition.
#[tokio::test(start_paused = true)]
async fn j6_partitions_balance_and_rebalance() {
    let store = MemoryBackend::new();
    let a = node(&store, 1, &[], &[BILLING], "").await;
    let b = node(&store, 2, &[], &[BILLING], "").await;
    let c = node(&store, 3, &[], &[BILLING], "").await;
    let start = Instant::now();
    loop {
        if shares(&store, &[&a, &b, &c]) == vec![6, 5, 5] {
            break;
        }
        assert!(start.elapsed() < S(30), "not balanced after 30 s: {:?}", shares(&store, &[&a, &b, &c]));
        sleep(MS(100)).await;
    }
    let balanced_after = start.elapsed();
    sleep(S(20)).await;
    assert_eq!(shares(&store, &[&a, &b, &c]), vec![6, 5, 5], "stable");
    c.simba().crash_for_tests();
    let crashed = Instant::now();
    loop {
        if shares(&store, &[&a, &b]) == vec![8, 8] {
            break;
        }
        assert!(crashed.elapsed() < S(45), "not rebalanced after a crash: {:?}", shares(&store, &[&a, &b]));
        sleep(MS(100)).await;
    }
    let rebalanced_after = crashed.elapsed();
    let d = node(&store, 4, &[], &[BILLING], "").await;
    let joined = Instant::now();
    loop {
        if shares(&store, &[&a, &b, &d]) == vec![6, 5, 5] {
            break;
        }
        assert!(joined.elapsed() < S(30), "not balanced after a join: {:?}", shares(&store, &[&a, &b, &d]));
        sleep(MS(100)).await;
    }
    eprintln!(
        "J6 figures: balanced {balanced_after:?} after start, {rebalanced_after:?} after a crash (lease 15 s), {:?} after a join",
        joined.elapsed()
    );
    assert_disjoint();
    for n in [a, b, d] {
        n.shutdown().await;
    }
    assert_disjoint();
    for i in 0..16 {
        assert_eq!(
            store.holder(&format!("billing.{i}")).map(|h| h.0),
            Some(None),
            "partition {i} still held after shutdown"
        );
    }
}

/// J6 after a graceful leave: the leaver leaves the group before it hands its partitions
/// over, so the rounds its releases wake on the other nodes already count one member less and
/// take the partitions at once, not at their next candidate delay (half a renewal interval or
/// more, 2.5 s here). The leaver's store answers its group calls after 100 ms (a round trip),
/// so the order shows: releases made before the leave completed would wake rounds that still
/// list the leaver and take nothing.
#[tokio::test(start_paused = true)]
async fn j6_a_graceful_leave_is_taken_over_at_once() {
    fn idle(term: Term, _partition: u32) -> simba::job::JobFuture {
        simba::job::job_future(async move { term.cancelled().await })
    }
    const PAYROLL: PartitionedJob = PartitionedJob::new("payroll", 16, &idle);
    const LEAVE_TRIP: Duration = Duration::from_millis(100);
    let store = MemoryBackend::new();
    let a = node(&store, 1, &[], &[PAYROLL], "").await;
    let b = node(&store, 2, &[], &[PAYROLL], "").await;
    let (slow, h) = FaultyBackend::new(store.clone());
    let c = Runtime::builder()
        .config(config(""))
        .without_registry()
        .backend(slow)
        .seed(3)
        .partitioned(PAYROLL)
        .start()
        .await
        .expect("start");
    let start = Instant::now();
    while shares_in(&store, "payroll", &[&a, &b, &c]) != vec![6, 5, 5] {
        assert!(start.elapsed() < S(30), "not balanced after 30 s: {:?}", shares_in(&store, "payroll", &[&a, &b, &c]));
        sleep(MS(10)).await;
    }
    sleep(S(20)).await;
    h.set(Op::Group, simba::tck::Fault::DelayRequest(LEAVE_TRIP));
    let left = Instant::now();
    let stopping = tokio::spawn(c.shutdown());
    while shares_in(&store, "payroll", &[&a, &b]) != vec![8, 8] {
        assert!(left.elapsed() < S(30), "not rebalanced after a leave: {:?}", shares_in(&store, "payroll", &[&a, &b]));
        sleep(MS(5)).await;
    }
    let took = left.elapsed();
    stopping.await.expect("shutdown");
    eprintln!(
        "J6: the leaver's partitions taken over {took:?} after its shutdown began (its leave takes {LEAVE_TRIP:?})"
    );
    assert!(took <= LEAVE_TRIP + MS(50), "took {took:?}: the other nodes waited for their own timers");
    for n in [a, b] {
        n.shutdown().await;
    }
}

/// J6: a member that needs several partitions tries as many at once as it needs, so a round
/// that finds them free takes them in one round trip. Node `a`'s store answers each
/// acquisition after 100 ms; when `c` leaves, `a` needs 2 or 3 of its partitions: its first
/// round sends that many acquisitions at one instant. One after another, no two of them would
/// be sent at the same instant (each waited for the reply before).
#[tokio::test(start_paused = true)]
async fn j6_a_round_tries_the_partitions_it_needs_at_once() {
    fn idle(term: Term, _partition: u32) -> simba::job::JobFuture {
        simba::job::job_future(async move { term.cancelled().await })
    }
    const LEDGER: PartitionedJob = PartitionedJob::new("ledger", 16, &idle);
    const TRIP: Duration = Duration::from_millis(100);
    let store = MemoryBackend::new();
    let (slow, h) = FaultyBackend::new(store.clone());
    let a = Runtime::builder()
        .config(config(""))
        .without_registry()
        .backend(slow)
        .seed(1)
        .partitioned(LEDGER)
        .start()
        .await
        .expect("start");
    let b = node(&store, 2, &[], &[LEDGER], "").await;
    let c = node(&store, 3, &[], &[LEDGER], "").await;
    let start = Instant::now();
    while shares_in(&store, "ledger", &[&a, &b, &c]) != vec![6, 5, 5] {
        assert!(start.elapsed() < S(30), "not balanced after 30 s: {:?}", shares_in(&store, "ledger", &[&a, &b, &c]));
        sleep(MS(10)).await;
    }
    sleep(S(20)).await;
    let before = shares_in(&store, "ledger", &[&a]);
    h.set(Op::Acquire, simba::tck::Fault::DelayReply(TRIP));
    h.reset_counts();
    let left = Instant::now();
    let stopping = tokio::spawn(c.shutdown());
    while shares_in(&store, "ledger", &[&a, &b]) != vec![8, 8] {
        assert!(left.elapsed() < S(30), "not rebalanced after a leave: {:?}", shares_in(&store, "ledger", &[&a, &b]));
        sleep(MS(5)).await;
    }
    let took = left.elapsed();
    stopping.await.expect("shutdown");
    let sent = h.call_times(Op::Acquire);
    eprintln!(
        "J6: `a` (held {before:?}) took its share of the leaver's partitions {took:?} after the leave, in {} tries",
        sent.len()
    );
    assert!(before[0] <= 6, "a needed several partitions: held {before:?}");
    let together = sent.windows(2).any(|w| w[0] == w[1]);
    assert!(
        together,
        "no two acquisitions were sent at once: {:?}",
        sent.iter().map(|t| *t - left).collect::<Vec<_>>()
    );
    for n in [a, b] {
        n.shutdown().await;
    }
}

/// J7: `enabled = false` keeps a job from running on the node; a schedule override replaces
/// the code's schedule.
#[tokio::test(start_paused = true)]
async fn j7_overrides() {
    static N: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
    fn job(_t: Term) -> simba::job::JobFuture {
        simba::job::job_future(async { N.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now()) })
    }
    let j = ScheduledJob::new("ov", Schedule::FixedRate(S(60)), &job);
    let store = MemoryBackend::new();
    let off = node(&store, 1, std::slice::from_ref(&j), &[], "[jobs.ov]\nenabled = false\n").await;
    sleep(S(130)).await;
    assert!(N.lock().unwrap_or_else(PoisonError::into_inner).is_empty(), "a disabled job ran");
    assert!(off.simba().snapshot().elections.is_empty());
    off.shutdown().await;
    let on = node(&store, 2, &[j], &[], "[jobs.ov]\nfixed_rate = \"1s\"\n").await;
    sleep(S(10) + MS(500)).await;
    let n = N.lock().unwrap_or_else(PoisonError::into_inner).len();
    assert!((9..=10).contains(&n), "the 1 s override ran {n} times in 10.5 s");
    on.shutdown().await;
}

/// J4/J7, bad input: a job named in the configuration that no code registers, or two jobs with
/// one name, are errors, and nothing starts (no backend call).
#[tokio::test(start_paused = true)]
async fn j7_unknown_job_is_an_error_and_nothing_starts() {
    let (b, h) = FaultyBackend::new(MemoryBackend::new());
    let err = Runtime::builder()
        .config(config("[jobs.reprot]\nenabled = true\n"))
        .without_registry()
        .job(RATE)
        .backend(b)
        .start()
        .await
        .expect_err("unknown job");
    let msg = err.to_string();
    assert!(
        msg.contains("test.toml") && msg.contains("[jobs.reprot]") && msg.contains("registered jobs: rate"),
        "{msg}"
    );
    assert_eq!(h.calls(Op::OpenSession), 0, "something started on a bad config");
    let err = Runtime::builder()
        .config(config(""))
        .without_registry()
        .job(RATE)
        .job(RATE)
        .backend(MemoryBackend::new())
        .start()
        .await
        .expect_err("duplicate");
    assert!(err.to_string().contains("two jobs are named `rate`"), "{err}");
}

/// J1 misfire policies: `run_once` runs the most recent missed cron slot at once when a term
/// starts (once across the cluster: the slot is recorded with the token), `skip` waits for the
/// next slot.
#[tokio::test(start_paused = true)]
async fn j1_misfire_run_once_and_skip() {
    static RUNS: Mutex<Vec<String>> = Mutex::new(Vec::new());
    fn yearly(t: Term) -> simba::job::JobFuture {
        simba::job::job_future(async move {
            RUNS.lock().unwrap_or_else(PoisonError::into_inner).push(format!("{}:{}", t.name(), t.token()));
        })
    }
    let cron = Schedule::cron("0 0 0 1 1 *");
    let once = ScheduledJob::new("yearly_once", cron.clone(), &yearly).with_misfire(Misfire::RunOnce);
    let skip = ScheduledJob::new("yearly_skip", cron, &yearly);
    let store = MemoryBackend::new();
    let a = node(&store, 1, &[once.clone(), skip.clone()], &[], "").await;
    sleep(S(2)).await;
    assert_eq!(RUNS.lock().unwrap_or_else(PoisonError::into_inner).clone(), vec!["yearly_once:1".to_owned()]);
    a.shutdown().await;
    // A new term on another node: this year's slot is recorded, so it does not run again.
    let b = node(&store, 2, &[once, skip], &[], "").await;
    sleep(S(2)).await;
    assert_eq!(RUNS.lock().unwrap_or_else(PoisonError::into_inner).len(), 1, "a missed slot ran twice");
    b.shutdown().await;
}
