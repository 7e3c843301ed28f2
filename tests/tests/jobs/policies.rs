//! The slot policies (J11-J14) on the runtime, on paused Tokio time against the in-memory
//! store, the scheduler's wall clock following Tokio's: overlap (`skip`, `buffer_one`,
//! `allow_all`, `cancel_running`), the catch-up window, start jitter and start/end bounds.
//! The timing tests assert exact start instants, so a changed formula fails them; the J5 tests
//! check that a slot runs at most once across nodes whatever overlaps.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use simba::backend::memory::MemoryBackend;
use simba::job::{JobContext, Misfire, Overlap, Policies, Schedule, ScheduledJob, WallClock};
use simba::job_store::{Outcome, RunRecord, SlotKind};
use simba::{Runtime, RuntimeConfig, Term};

use crate::paused_node::{TOML, base, history, node};
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

/// Each run's start: (job, slot, Tokio instant of the start, node session), in start order.
type Starts = Mutex<Vec<(String, DateTime<Utc>, tokio::time::Instant, String)>>;
static STARTS: Starts = Mutex::new(Vec::new());

/// The scheduler's wall clock (`base()` now, following Tokio's clock), and the Tokio instant
/// it reads `base()` at.
fn clock() -> (WallClock, tokio::time::Instant) {
    (WallClock::follow_tokio_from(base()), tokio::time::Instant::now())
}

fn note_start(term: &Term) {
    let ctx = JobContext::current().expect("a run has its context");
    let entry = (term.name().to_owned(), ctx.slot(), tokio::time::Instant::now(), term.session_id().to_string());
    STARTS.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
}

/// A wall clock 5 s behind [`clock`]'s: a node on it would run the slots of the last 5 s
/// again after a failover if the claim let it (J5).
fn behind() -> WallClock {
    WallClock::follow_tokio_from(base() - chrono::Duration::seconds(5))
}

/// Job `job`'s runs: (slot, wall-clock start on the clock that read `base()` at `t0`, session).
fn starts_of(job: &str, t0: tokio::time::Instant) -> Vec<(DateTime<Utc>, DateTime<Utc>, String)> {
    let all = STARTS.lock().unwrap_or_else(PoisonError::into_inner);
    let wall = |at: tokio::time::Instant| base() + chrono::Duration::from_std(at - t0).unwrap_or_default();
    all.iter().filter(|s| s.0 == job).map(|s| (s.1, wall(s.2), s.3.clone())).collect()
}

/// A body that takes 2.2 s and ignores cancellation.
fn slow(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        note_start(&term);
        sleep(MS(2_200)).await;
    })
}

/// A body that takes 10 s unless cancelled; `stubborn` ignores its cancellation.
fn long(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        note_start(&term);
        let ctx = JobContext::current().expect("context");
        if term.name().contains("stubborn") {
            sleep(S(10)).await;
        } else {
            tokio::select! {
                _ = ctx.cancelled() => {}
                _ = sleep(S(10)) => {}
            }
        }
    })
}

fn quick(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move { note_start(&term) })
}

fn every_second(name: &'static str, run: fn(Term) -> simba::job::JobFuture, overlap: Overlap) -> ScheduledJob {
    ScheduledJob::from_closure(name, Schedule::cron("* * * * * *"), run)
        .with_policies(Policies::new().with_overlap(overlap))
}

/// Milliseconds from `first` of each slot, and of each start.
fn offsets(starts: &[(DateTime<Utc>, DateTime<Utc>, String)]) -> Vec<(i64, i64)> {
    let first = starts[0].0;
    starts.iter().map(|s| ((s.0 - first).num_milliseconds(), (s.1 - first).num_milliseconds())).collect()
}

/// Slot offsets (from the first record) and outcomes of a history, scheduled slots only.
fn records(h: &[RunRecord]) -> Vec<(i64, Outcome)> {
    let first = h[0].slot_ms;
    h.iter().filter(|r| r.kind == SlotKind::Scheduled).map(|r| (r.slot_ms - first, r.outcome)).collect()
}

/// J11, `buffer_one`, by its formula: runs of 2.2 s on a one-second cron. Slot 0 runs at
/// once; slot 1 waits and starts when slot 0 ends (2.2 s); slot 2 is skipped (one waits at
/// most); slot 3 waits for slot 1's end (4.4 s); slot 4 is skipped; slot 5 starts at 6.6 s.
#[tokio::test(start_paused = true)]
async fn j11_buffer_one_starts_one_waiting_slot_when_the_run_ends() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let job = every_second("p_buffer", slow, Overlap::BufferOne);
    let a = node(&store, 1, clock, &job, "").await;
    sleep(MS(8_000)).await;
    a.shutdown().await;
    sleep(MS(100)).await;
    let starts = starts_of("p_buffer", t0);
    assert_eq!(
        offsets(&starts)[..4],
        [(0, 0), (1_000, 2_200), (3_000, 4_400), (5_000, 6_600)],
        "(slot, start) from the first slot: {starts:?}"
    );
    let h = history(&store, "p_buffer").await;
    assert_eq!(
        records(&h)[..6],
        [
            (0, Outcome::Ran),
            (1_000, Outcome::Ran),
            (2_000, Outcome::SkippedRunning),
            (3_000, Outcome::Ran),
            (4_000, Outcome::SkippedRunning),
            (5_000, Outcome::Ran)
        ],
        "{h:?}"
    );
}

/// J11, `skip` (the default) by the same formula: slots 1 and 2 pass during slot 0's run and
/// are skipped as one record (R9); slot 3 starts on its instant.
#[tokio::test(start_paused = true)]
async fn j11_skip_is_the_behaviour_before_policies() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let job = every_second("p_skip", slow, Overlap::Skip);
    let a = node(&store, 1, clock, &job, "").await;
    sleep(MS(7_000)).await;
    a.shutdown().await;
    sleep(MS(100)).await;
    let starts = starts_of("p_skip", t0);
    assert_eq!(offsets(&starts)[..2], [(0, 0), (3_000, 3_000)], "{starts:?}");
    let h = history(&store, "p_skip").await;
    assert_eq!(records(&h)[..3], [(0, Outcome::Ran), (1_000, Outcome::SkippedRunning), (3_000, Outcome::Ran)]);
    assert!(h[1].error.as_deref().is_some_and(|e| e.starts_with("2 slots skipped")), "{h:?}");
}

/// Every scheduled slot in `h` at most once, and `starts` at most once per slot (J5).
fn assert_each_slot_once(job: &str, h: &[RunRecord], starts: &[(DateTime<Utc>, DateTime<Utc>, String)]) {
    let mut per_slot: BTreeMap<i64, usize> = BTreeMap::new();
    for r in h.iter().filter(|r| r.kind == SlotKind::Scheduled) {
        *per_slot.entry(r.slot_ms).or_default() += 1;
    }
    assert!(per_slot.values().all(|n| *n == 1), "{job}: a slot recorded twice: {h:?}");
    let mut ran: BTreeMap<i64, usize> = BTreeMap::new();
    for s in starts {
        *ran.entry(s.0.timestamp_millis()).or_default() += 1;
    }
    assert!(ran.values().all(|n| *n == 1), "{job}: J5, a slot ran twice: {ran:?}");
}

/// J11 and J5, `allow_all`: runs of 2.2 s on a one-second cron overlap (three in flight), every
/// slot starts on its instant and runs once; after the holder crashes the other node, whose
/// wall clock is 5 s behind, takes over and still runs no slot twice (each claimed once
/// through the ledger).
#[tokio::test(start_paused = true)]
async fn j11_j5_allow_all_overlaps_and_runs_each_slot_once_across_a_failover() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let job = every_second("p_all", slow, Overlap::AllowAll);
    let a = node(&store, 1, clock, &job, "").await;
    sleep(MS(500)).await;
    let b = node(&store, 2, behind(), &job, "").await;
    sleep(MS(5_500)).await;
    let before = starts_of("p_all", t0);
    assert!(before.len() >= 5, "{before:?}");
    for (slot, start, _) in &before {
        assert_eq!(start, slot, "allow_all starts every slot on its instant");
    }
    let holder = before[0].2.clone();
    assert!(before.iter().all(|s| s.2 == holder), "one node runs the job");
    let (first, other) = if a.simba().session_id().map(|s| s.to_string()) == Some(holder) { (a, b) } else { (b, a) };
    first.simba().crash_for_tests();
    sleep(S(10)).await;
    other.shutdown().await;
    sleep(MS(100)).await;
    let starts = starts_of("p_all", t0);
    assert!(starts.iter().any(|s| s.2 != before[0].2), "the other node took over: {starts:?}");
    let h = history(&store, "p_all").await;
    assert_each_slot_once("p_all", &h, &starts);
}

/// J11 and J5, `cancel_running`, by its formula: a run that stops at its cancellation signal
/// is replaced on the next slot's instant; one that ignores it is dropped after the one-second
/// grace, and the next slot starts 1 s late. The replaced runs are recorded `cancelled` with
/// the reason; after a failover to a node whose wall clock is 5 s behind no slot runs twice.
#[tokio::test(start_paused = true)]
async fn j11_j5_cancel_running_replaces_the_run_in_flight() {
    for (name, late) in [("p_cancel", 0), ("p_cancel_stubborn", 1_000)] {
        let (clock, t0) = clock();
        let store = MemoryBackend::new();
        let job = ScheduledJob::from_closure(name, Schedule::cron("*/3 * * * * *"), long)
            .with_policies(Policies::new().with_overlap(Overlap::CancelRunning));
        let a = node(&store, 1, clock, &job, "").await;
        sleep(MS(500)).await;
        let b = node(&store, 2, behind(), &job, "").await;
        sleep(MS(9_500)).await;
        let starts = starts_of(name, t0);
        assert_eq!(offsets(&starts)[..3], [(0, 0), (3_000, 3_000 + late), (6_000, 6_000 + late)], "{name}: {starts:?}");
        let h = history(&store, name).await;
        let (done, _) = h.split_at(2);
        for r in done {
            assert_eq!(r.outcome, Outcome::Cancelled, "{name}: {h:?}");
            assert!(r.error.as_deref().is_some_and(|e| e.starts_with("replaced: a newer slot came due")), "{r:?}");
        }
        let holder = starts[0].2.clone();
        let (first, other) =
            if a.simba().session_id().map(|s| s.to_string()) == Some(holder) { (a, b) } else { (b, a) };
        first.simba().crash_for_tests();
        sleep(S(12)).await;
        other.shutdown().await;
        sleep(MS(100)).await;
        let starts = starts_of(name, t0);
        assert!(starts.iter().any(|s| s.2 != starts[0].2), "{name}: the other node took over: {starts:?}");
        assert_each_slot_once(name, &history(&store, name).await, &starts);
    }
}

/// J12: misfire `run_once` with a catch-up window of 5 s. The job ran until 3.2 s; nobody
/// held it for 10 s; the new term finds the missed slots: those older than 5 s are `missed`
/// saying so, the newer ones `missed`, and the latest runs `caught_up`. With a window of
/// 100 ms, shorter than the time since the latest missed slot (the term reads its gap 200 ms
/// after it), nothing is caught up.
#[tokio::test(start_paused = true)]
async fn j12_catch_up_window_bounds_the_caught_up_slot() {
    for (job, window, caught) in [("p_window", MS(5_000), true), ("p_window_short", MS(100), false)] {
        let store = MemoryBackend::new();
        let j = ScheduledJob::from_closure(job, Schedule::cron("* * * * * *"), quick)
            .with_misfire(Misfire::RunOnce)
            .with_policies(Policies::new().with_catch_up_window(window));
        let (clock, _) = clock();
        let a = node(&store, 1, clock, &j, "").await;
        sleep(MS(3_200)).await;
        a.shutdown().await;
        sleep(S(10)).await;
        let b = node(&store, 2, clock, &j, "").await;
        sleep(MS(1_500)).await;
        b.shutdown().await;
        sleep(MS(100)).await;
        let h = history(&store, job).await;
        let expired: Vec<&RunRecord> =
            h.iter().filter(|r| r.error.as_deref().is_some_and(|e| e.starts_with("older than the catch-up"))).collect();
        let missed = h.iter().filter(|r| r.outcome == Outcome::Missed).count();
        let caught_up = h.iter().filter(|r| r.kind == SlotKind::CaughtUp && r.outcome == Outcome::CaughtUp).count();
        // The first term catches up its latest slot (it never ran: within any window).
        let first_term_caught = usize::from(h[0].kind == SlotKind::CaughtUp);
        if caught {
            // 10 or 11 slots passed unheld; the 5 s window keeps about 5 of them, the latest runs.
            assert!((5..=7).contains(&expired.len()), "{job}: {} expired: {h:?}", expired.len());
            assert_eq!(caught_up - first_term_caught, 1, "{job}: {h:?}");
            assert!((9..=11).contains(&missed), "{job}: {missed} missed: {h:?}");
        } else {
            assert_eq!(caught_up - first_term_caught, 0, "{job}: nothing within 100 ms: {h:?}");
            assert!((10..=12).contains(&expired.len()), "{job}: all expired: {h:?}");
            assert!(expired.iter().all(|r| r.outcome == Outcome::Missed));
        }
        let mut slots: Vec<i64> = h.iter().filter(|r| r.kind != SlotKind::Manual).map(|r| r.slot_ms).collect();
        let n = slots.len();
        slots.dedup();
        assert_eq!(slots.len(), n, "{job}: a slot recorded twice: {h:?}");
        for w in slots.windows(2) {
            assert_eq!(w[1] - w[0], 1000, "{job}: every slot accounted for: {h:?}");
        }
    }
}

/// J13, by its formula: each slot of a 10-second cron with a jitter of at most 4 s starts
/// exactly `simba_core::policy::jitter(job, slot, 4 s, 10 s)` after its instant, on the first
/// holder and on the node that takes over alike; a fixed rate's slots start that long after
/// their tick.
#[tokio::test(start_paused = true)]
async fn j13_a_jittered_slot_starts_at_its_hash_on_every_node() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let max = S(4);
    let job = ScheduledJob::from_closure("p_jitter", Schedule::cron("*/10 * * * * *"), quick)
        .with_policies(Policies::new().with_jitter(max));
    let a = node(&store, 1, clock, &job, "").await;
    let b = node(&store, 2, clock, &job, "").await;
    sleep(S(35)).await;
    let holder = starts_of("p_jitter", t0)[0].2.clone();
    let (first, other) = if a.simba().session_id().map(|s| s.to_string()) == Some(holder) { (a, b) } else { (b, a) };
    first.simba().crash_for_tests();
    sleep(S(40)).await;
    other.shutdown().await;
    let starts = starts_of("p_jitter", t0);
    assert!(starts.len() >= 6 && starts.iter().any(|s| s.2 != starts[0].2), "{starts:?}");
    let mut delays = Vec::new();
    for (slot, start, _) in &starts {
        let want = simba_core::policy::jitter("p_jitter", slot.timestamp_millis(), max, Some(S(10)));
        assert_eq!((*start - *slot).to_std().ok(), Some(want), "slot {slot}: {starts:?}");
        assert!(want <= max);
        delays.push(want);
    }
    assert!(delays.iter().any(|d| *d != delays[0]), "the delays differ by slot: {delays:?}");
}

/// J13 on a fixed rate, by its formula: each tick of a 10 s rate starts
/// `jitter(job, slot, 4 s, 10 s)` after its instant on the grid.
#[tokio::test(start_paused = true)]
async fn j13_a_fixed_rate_slot_starts_its_hash_after_its_tick() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let max = S(4);
    let job = ScheduledJob::from_closure("p_jitter_rate", Schedule::FixedRate(S(10)), quick)
        .with_policies(Policies::new().with_jitter(max));
    let a = node(&store, 1, clock, &job, "").await;
    sleep(S(45)).await;
    a.shutdown().await;
    let starts = starts_of("p_jitter_rate", t0);
    assert!(starts.len() >= 4, "{starts:?}");
    for w in starts.windows(2) {
        assert_eq!((w[1].0 - w[0].0).num_milliseconds(), 10_000, "slots stay on the grid: {starts:?}");
    }
    for (slot, start, _) in &starts {
        let want = simba_core::policy::jitter("p_jitter_rate", slot.timestamp_millis(), max, Some(S(10)));
        assert_eq!((*start - *slot).to_std().ok(), Some(want), "slot {slot}: {starts:?}");
    }
}

fn shard(term: Term, _partition: u32) -> simba::job::JobFuture {
    quick(term)
}

/// J13 for a partitioned job: each partition's slots start by the hash of the partition's
/// job name `{name}/{i}`, so partitions on one cron spread their starts.
#[tokio::test(start_paused = true)]
async fn j13_partitions_jitter_by_their_own_job_name() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let max = S(4);
    let group = simba::job::PartitionedJob::from_closure("p_shards", 2, shard)
        .with_schedule(Schedule::cron("*/10 * * * * *"))
        .with_policies(Policies::new().with_jitter(max));
    let config = RuntimeConfig::from_toml_str(TOML, "test.toml", Vec::new()).expect("config");
    let b = Runtime::builder().config(config).without_registry().backend(store.clone()).seed(1).wall_clock(clock);
    let r = b.partitioned(group).start().await.expect("start");
    sleep(S(35)).await;
    r.shutdown().await;
    for i in 0..2 {
        let starts = starts_of(&format!("p_shards.{i}"), t0);
        assert!(starts.len() >= 2, "partition {i}: {starts:?}");
        for (slot, start, _) in &starts {
            let want = simba_core::policy::jitter(&format!("p_shards/{i}"), slot.timestamp_millis(), max, Some(S(10)));
            assert_eq!((*start - *slot).to_std().ok(), Some(want), "partition {i}, slot {slot}");
        }
    }
}

/// J14: a one-second cron bounded to [5 s, 8 s] after the base: slots 5, 6, 7 and 8 run,
/// none before, none after, and nothing is recorded outside the bounds; a job whose start
/// is after its term's start records no missed slot before it.
#[tokio::test(start_paused = true)]
async fn j14_no_slot_before_the_start_or_after_the_end() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let (start, end) = (base() + chrono::Duration::seconds(5), base() + chrono::Duration::seconds(8));
    let job = ScheduledJob::from_closure("p_bounds", Schedule::cron("* * * * * *"), quick)
        .with_misfire(Misfire::RunOnce)
        .with_policies(Policies::new().with_start(start).with_end(end));
    let a = node(&store, 1, clock, &job, "").await;
    sleep(S(12)).await;
    a.shutdown().await;
    sleep(MS(100)).await;
    let slots: Vec<i64> =
        starts_of("p_bounds", t0).iter().map(|s| (s.0 - base()).num_milliseconds()).collect::<Vec<_>>();
    assert_eq!(slots, [5_000, 6_000, 7_000, 8_000]);
    let h = history(&store, "p_bounds").await;
    let recorded: Vec<(i64, Outcome)> =
        h.iter().map(|r| (r.slot_ms - base().timestamp_millis(), r.outcome)).collect::<Vec<_>>();
    assert_eq!(
        recorded,
        [(5_000, Outcome::Ran), (6_000, Outcome::Ran), (7_000, Outcome::Ran), (8_000, Outcome::Ran)],
        "{h:?}"
    );
}

/// J11-J14 keys of `simba.toml` override the code's policies: the file's `overlap =
/// "buffer_one"` turns a skipping job into a buffering one.
#[tokio::test(start_paused = true)]
async fn j11_the_file_overrides_the_policies() {
    let (clock, t0) = clock();
    let store = MemoryBackend::new();
    let job = every_second("p_file", slow, Overlap::Skip);
    let a = node(&store, 1, clock, &job, "[jobs.p_file]\noverlap = \"buffer_one\"\n").await;
    sleep(MS(7_000)).await;
    a.shutdown().await;
    let starts = starts_of("p_file", t0);
    assert_eq!(offsets(&starts)[..3], [(0, 0), (1_000, 2_200), (3_000, 4_400)], "{starts:?}");
}
