//! Schedules stored as data, run (ADR 0020, rules A11-A13): handlers, the built-in group
//! `simba.schedules`, each slot claimed under its partition's token and recorded as a job's
//! slot, edits within one renewal interval, and the node without the handler. On the in-memory
//! store under paused Tokio time (the scheduler's wall clock follows Tokio's).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use simba::admin::Schedules;
use simba::backend::memory::MemoryBackend;
use simba::job::{Handler, JobContext, WallClock, job_future};
use simba::job_store::{JobStore, Outcome, RunRecord};
use simba::runtime::RunningRuntime;
use simba::schedule_store::{Schedule, ScheduleSpec};
use simba::{Runtime, RuntimeConfig, Term, simba_handler};
use tokio::time::sleep;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Renewals every 500 ms (the bound an edit takes effect within), 4 partitions.
const TOML: &str = "[session]\nlease_duration = \"3s\"\nrenew_interval = \"500ms\"\n\n[schedules]\npartitions = 4\n";

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_780_000_000, 0).expect("valid")
}

/// Which slots each schedule's handler ran, with the tenant of its payload.
type Runs = Arc<Mutex<BTreeMap<String, Vec<(i64, u64)>>>>;

/// The handler `report`: notes `(slot, tenant)` under the schedule's payload's `id`.
fn report(runs: &Runs) -> Handler {
    let runs = Arc::clone(runs);
    Handler::from_closure("report", move |_term: Term, payload: Arc<str>| {
        let runs = Arc::clone(&runs);
        job_future(async move {
            let v: serde_json::Value = serde_json::from_str(&payload)?;
            let ctx = JobContext::current().ok_or("no context")?;
            let id = v["id"].as_str().unwrap_or_default().to_owned();
            let tenant = v["tenant"].as_u64().unwrap_or_default();
            runs.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id)
                .or_default()
                .push((ctx.slot().timestamp_millis(), tenant));
            Ok::<(), simba::BoxError>(())
        })
    })
}

async fn node(store: &MemoryBackend, seed: u64, handlers: Vec<Handler>) -> RunningRuntime {
    node_on(store, seed, handlers, WallClock::follow_tokio_from(base())).await
}

async fn node_on(store: &MemoryBackend, seed: u64, handlers: Vec<Handler>, clock: WallClock) -> RunningRuntime {
    node_with(store.clone(), seed, handlers, clock).await
}

/// A live runtime on `backend` (the test's timing, no registry) with `handlers`.
async fn node_with<B: simba::backend::Backend>(
    backend: B,
    seed: u64,
    handlers: Vec<Handler>,
    clock: WallClock,
) -> RunningRuntime {
    let config = RuntimeConfig::from_toml_str(TOML, "test.toml", Vec::new()).expect("config");
    let mut b = Runtime::builder().config(config).without_registry().backend(backend).seed(seed).wall_clock(clock);
    for h in handlers {
        b = b.handler(h);
    }
    let r = b.start().await.expect("start");
    r.simba().live().await.expect("live");
    r
}

fn every_second(id: &str, tenant: u64) -> Schedule {
    Schedule::new(id, "report", ScheduleSpec::fixed_rate(Duration::from_secs(1)))
        .with_payload(format!(r#"{{"id": "{id}", "tenant": {tenant}}}"#))
}

async fn history(store: &MemoryBackend, id: &str) -> Vec<RunRecord> {
    let job = format!("schedule/{id}");
    let mut h = store.jobs().history(&job, 1000).await.map_err(|e| e.to_string()).expect("history");
    h.reverse();
    h
}

fn runs_of(runs: &Runs, id: &str) -> Vec<(i64, u64)> {
    runs.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned().unwrap_or_default()
}

/// A11: created through a node's API, a schedule fires at its slots on the node holding its
/// partition, each slot claimed under the partition's lease and token and recorded `ran` under
/// `schedule/<id>`; with two nodes and a handover (the holder shuts down), every slot ran at
/// most once, on one node at a time, and the slots go on after the handover.
#[tokio::test(start_paused = true)]
async fn a11_schedules_fire_once_per_slot_across_two_nodes_and_a_handover() {
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let a = node(&store, 1, vec![report(&runs)]).await;
    let b = node(&store, 2, vec![report(&runs)]).await;
    let api = a.schedules().expect("schedules");
    let ids = ["t-1", "t-2", "t-3", "t-4", "t-5", "t-6"];
    for (i, id) in ids.iter().enumerate() {
        api.create(every_second(id, 4700 + i as u64), "test").await.expect("create");
    }
    sleep(MS(6_000)).await;
    a.shutdown().await;
    sleep(MS(5_000)).await;
    b.shutdown().await;
    sleep(MS(100)).await;
    for (i, id) in ids.iter().enumerate() {
        let h = history(&store, id).await;
        let ran: Vec<&RunRecord> = h.iter().filter(|r| r.outcome == Outcome::Ran).collect();
        assert!(ran.len() >= 8, "{id}: slots ran before and after the handover: {h:?}");
        for w in h.windows(2) {
            assert!(w[1].slot_ms > w[0].slot_ms, "{id}: each slot once, in order: {h:?}");
        }
        for r in &ran {
            assert_eq!(r.slot_ms % 1000, 0, "{id}: on the fixed-rate grid: {r:?}");
            assert!(r.token > 0 && !r.node.is_empty(), "{r:?}");
        }
        let nodes: std::collections::BTreeSet<&str> = ran.iter().map(|r| r.node.as_str()).collect();
        let got = runs_of(&runs, id);
        let slots: Vec<i64> = got.iter().map(|(s, _)| *s).collect();
        let mut unique = slots.clone();
        unique.dedup();
        assert_eq!(slots, unique, "{id}: the handler ran each slot once: {got:?} on {nodes:?}");
        assert!(got.iter().all(|(_, t)| *t == 4700 + i as u64), "{id}: its own payload: {got:?}");
        assert_eq!(got.len(), ran.len(), "{id}: one run per `ran` record");
    }
}

/// A11: an edit (here every 1 s to every 3 s) takes effect within one renewal interval (500
/// ms) of the write; a pause holds the schedule (no slot runs while paused) and a resume
/// restarts it; a delete stops it.
#[tokio::test(start_paused = true)]
async fn a11_edit_pause_and_delete_take_effect_within_one_renewal_interval() {
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let clock = WallClock::follow_tokio_from(base());
    let a = node_on(&store, 1, vec![report(&runs)], clock).await;
    let api = a.schedules().expect("schedules");
    api.create(every_second("e", 1), "test").await.expect("create");
    sleep(MS(3_200)).await;
    let edited_at = clock.now().timestamp_millis();
    let slower = Schedule::new("e", "report", ScheduleSpec::fixed_rate(Duration::from_secs(3)))
        .with_payload(r#"{"id": "e", "tenant": 2}"#);
    api.update(slower, "test").await.expect("update");
    sleep(MS(9_000)).await;
    let after: Vec<(i64, u64)> = runs_of(&runs, "e").into_iter().filter(|(s, _)| *s > edited_at + 500).collect();
    assert!(after.len() >= 2, "{after:?}");
    for (slot, tenant) in &after {
        assert_eq!((slot % 3000, *tenant), (0, 2), "the edited spec and payload: {after:?}");
    }
    api.pause("e", "test", Some("incident 7")).await.expect("pause");
    let paused_at = clock.now().timestamp_millis();
    sleep(MS(7_000)).await;
    let during: Vec<i64> = runs_of(&runs, "e").into_iter().map(|(s, _)| s).filter(|s| *s > paused_at + 500).collect();
    assert_eq!(during, Vec::<i64>::new(), "no slot runs while paused");
    api.resume("e", "test", None).await.expect("resume");
    let resumed_at = clock.now().timestamp_millis();
    sleep(MS(4_000)).await;
    assert!(runs_of(&runs, "e").iter().any(|(s, _)| *s > resumed_at), "runs again after the resume");
    api.delete("e", "test", None).await.expect("delete");
    let deleted_at = clock.now().timestamp_millis();
    sleep(MS(7_000)).await;
    let later: Vec<i64> = runs_of(&runs, "e").into_iter().map(|(s, _)| s).filter(|s| *s > deleted_at + 500).collect();
    assert_eq!(later, Vec::<i64>::new(), "a deleted schedule stops");
    a.shutdown().await;
}

/// A12: a schedule whose handler this node does not have (a rolling deploy) is not dropped:
/// each slot is claimed (and counted, R2) and recorded `missed` with the reason `no_handler`,
/// naming the handler and the node; the handlers it has still run.
#[tokio::test(start_paused = true)]
async fn a12_a_slot_without_its_handler_is_recorded_missed_no_handler() {
    let claims = crate::records::Claims::of("simba.schedules");
    let _local = metrics::set_default_local_recorder(&claims);
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let a = node(&store, 1, vec![report(&runs)]).await;
    // Created where the handler is known (the new code); this node runs the old code.
    let api = Schedules::for_backend(&store)
        .expect("api")
        .with_partitions(4)
        .expect("4")
        .with_handlers(["report", "invoice"]);
    api.create(Schedule::new("new-code", "invoice", ScheduleSpec::fixed_rate(Duration::from_secs(1))), "deploy")
        .await
        .expect("create");
    api.create(every_second("old-code", 9), "deploy").await.expect("create");
    sleep(MS(4_500)).await;
    a.shutdown().await;
    let h = history(&store, "new-code").await;
    assert!(h.len() >= 3, "{h:?}");
    for r in &h {
        assert_eq!(r.outcome, Outcome::Missed, "{r:?}");
        let error = r.error.as_deref().unwrap_or_default();
        assert!(error.starts_with("no_handler: handler `invoice`") && error.contains(&r.node), "{r:?}");
        assert!(r.token > 0, "claimed under the partition's token: {r:?}");
    }
    assert!(runs_of(&runs, "old-code").len() >= 3, "the handler the node has runs");
    // Both schedules' claims are counted (R2), the ones without a handler too.
    let claimed = h.len() + history(&store, "old-code").await.len();
    assert_eq!(claims.counts().get("claimed").copied(), Some(claimed as u64), "{:?}", claims.counts());
}

/// A handler written with `#[simba_handler]`: its payload type is deserialised from the
/// schedule's JSON; a payload that does not fit is recorded `failed` with the decode error
/// (naming the handler and the type), and the schedule stays.
#[derive(serde::Deserialize)]
struct Invoice {
    tenant: u64,
}

static INVOICED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

#[simba_handler(name = "invoice.v2")]
async fn invoice(term: &Term, invoice: Invoice, ctx: &JobContext) -> Result<(), simba::Error> {
    term.ensure_valid(Duration::from_millis(10))?;
    let _ = ctx.slot();
    INVOICED.lock().unwrap_or_else(PoisonError::into_inner).push(invoice.tenant);
    Ok(())
}

/// A13: the macro registers the handler under its `name`; a payload of its type runs it, one
/// that does not deserialise is recorded `failed` with the decode error and is not retried.
#[tokio::test(start_paused = true)]
async fn a13_a_macro_handler_decodes_its_payload_or_fails_the_run() {
    let store = MemoryBackend::new();
    let linked: Vec<Handler> = simba::job::HANDLERS.iter().filter(|h| h.name == "invoice.v2").cloned().collect();
    assert_eq!(linked.len(), 1, "registered by the macro under its name");
    let a = node(&store, 1, linked).await;
    let api = a.schedules().expect("schedules");
    let spec = ScheduleSpec::fixed_rate(Duration::from_secs(1));
    api.create(Schedule::new("good", "invoice.v2", spec.clone()).with_payload(r#"{"tenant": 4711}"#), "t")
        .await
        .expect("good");
    api.create(Schedule::new("bad", "invoice.v2", spec).with_payload(r#"{"tenant": "x"}"#), "t").await.expect("bad");
    let refused = api.create(every_second("unknown", 1), "t").await.expect_err("report is not on this node");
    assert!(refused.to_string().contains("report"), "{refused}");
    sleep(MS(3_500)).await;
    a.shutdown().await;
    assert!(INVOICED.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|t| **t == 4711).count() >= 2);
    let bad = history(&store, "bad").await;
    assert!(bad.len() >= 2, "{bad:?}");
    for r in &bad {
        let error = r.error.as_deref().unwrap_or_default();
        assert_eq!((r.outcome, r.attempt), (Outcome::Failed, 1), "{r:?}");
        assert!(error.contains("invoice.v2") && error.contains("Invoice"), "{r:?}");
    }
}

/// A11: the change counters are read once per renewal interval by the node, however many
/// partitions it holds (here all 4: one read per 500 ms, not four), and a partition whose
/// counter did not move is not read again.
#[tokio::test(start_paused = true)]
async fn a11_one_read_of_the_change_counters_per_node_per_renewal_interval() {
    use simba::tck::{FaultyBackend, Op};
    let store = MemoryBackend::new();
    let (faulty, calls) = FaultyBackend::new(store.clone());
    let runs = Runs::default();
    let a = node_with(faulty.with_job_store(), 1, vec![report(&runs)], WallClock::follow_tokio_from(base())).await;
    let api = a.schedules().expect("schedules");
    let ids = ["r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7", "r-8"];
    for (i, id) in ids.iter().enumerate() {
        api.create(every_second(id, i as u64), "test").await.expect("create");
    }
    sleep(MS(3_000)).await;
    let held = a.simba().snapshot().terms.iter().filter(|t| t.name.starts_with("simba.schedules.")).count();
    assert_eq!(held, 4, "the one node holds every partition");
    calls.reset_counts();
    sleep(MS(10_000)).await;
    let (reads, lists) = (calls.calls(Op::ScheduleChanges), calls.calls(Op::ScheduleRead));
    assert!((19..=21).contains(&reads), "10 s at one read per 500 ms for the node's 4 partitions: {reads}");
    assert_eq!(lists, 0, "no counter moved: no partition is read again");
    assert!(ids.iter().all(|id| runs_of(&runs, id).len() >= 9), "the schedules ran meanwhile");
    a.shutdown().await;
}

/// A14: the slots that came while no node held a schedule's partition are accounted for at
/// the next term's start: recorded `missed` with the reason, or under misfire `run_once` the
/// newest of them run as `caught_up`; with the runs before and after, every slot from the
/// first to the last is in the history exactly once.
#[tokio::test(start_paused = true)]
async fn a14_slots_missed_while_no_node_held_the_partition_are_recorded_at_the_next_term() {
    use simba::schedule_store::{Misfire, Policies};
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let clock = WallClock::follow_tokio_from(base());
    let a = node_on(&store, 1, vec![report(&runs)], clock).await;
    let api = a.schedules().expect("schedules");
    api.create(every_second("gap-skip", 1), "test").await.expect("create");
    let once = every_second("gap-once", 2).with_policies(Policies::default().with_misfire(Misfire::RunOnce));
    api.create(once, "test").await.expect("create");
    sleep(MS(3_200)).await;
    a.shutdown().await;
    // Five seconds without any node: five slots of each schedule pass unheld.
    sleep(MS(5_000)).await;
    let b = node_on(&store, 2, vec![report(&runs)], clock).await;
    sleep(MS(3_000)).await;
    b.shutdown().await;
    for id in ["gap-skip", "gap-once"] {
        let mut h = history(&store, id).await;
        h.sort_by_key(|r| r.slot_ms);
        for w in h.windows(2) {
            assert_eq!(w[1].slot_ms - w[0].slot_ms, 1000, "{id}: every slot once, none left out: {h:?}");
        }
        let gap: Vec<&RunRecord> = h.iter().filter(|r| r.outcome != Outcome::Ran).collect();
        assert!(gap.len() >= 4, "{id}: the unheld seconds are accounted for: {h:?}");
        let (missed, caught_up): (Vec<&&RunRecord>, Vec<&&RunRecord>) =
            gap.iter().partition(|r| r.outcome == Outcome::Missed);
        for r in &missed {
            assert_eq!(r.error.as_deref(), Some("no node held the schedule's partition when the slot came"), "{r:?}");
        }
        if id == "gap-once" {
            assert_eq!(caught_up.len(), 1, "run_once: the newest slot of the gap ran: {h:?}");
            let newest_missed = missed.iter().map(|r| r.slot_ms).max().unwrap_or_default();
            assert_eq!(caught_up[0].outcome, Outcome::CaughtUp, "{h:?}");
            assert!(caught_up[0].slot_ms > newest_missed, "{h:?}");
        } else {
            assert!(caught_up.is_empty(), "skip: no catch-up run: {h:?}");
        }
    }
}

/// A11 with a store that broadcasts changes (memory here): a write reaches the holder at once,
/// not at its next read of the counters. Renewals every 5 s; a pause stops the slots within
/// 100 ms, and a resume restarts them as fast.
#[tokio::test(start_paused = true)]
async fn a11_a_broadcast_change_reaches_the_holder_at_once() {
    const SLOW: &str = "[session]\nlease_duration = \"15s\"\nrenew_interval = \"5s\"\n\n[schedules]\npartitions = 4\n";
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let clock = WallClock::follow_tokio_from(base());
    let config = RuntimeConfig::from_toml_str(SLOW, "test.toml", Vec::new()).expect("config");
    let a = Runtime::builder()
        .config(config)
        .without_registry()
        .backend(store.clone())
        .seed(1)
        .wall_clock(clock)
        .handler(report(&runs))
        .start()
        .await
        .expect("start");
    a.simba().live().await.expect("live");
    let api = a.schedules().expect("schedules");
    api.create(every_second("b", 1), "test").await.expect("create");
    sleep(MS(12_300)).await;
    let created_runs = runs_of(&runs, "b").len();
    assert!(created_runs >= 3, "runs within the first renewal intervals: {created_runs}");
    api.pause("b", "test", None).await.expect("pause");
    let paused_at = clock.now().timestamp_millis();
    sleep(MS(6_000)).await;
    let during: Vec<i64> = runs_of(&runs, "b").into_iter().map(|(s, _)| s).filter(|s| *s > paused_at + 100).collect();
    assert_eq!(during, Vec::<i64>::new(), "the pause reached the holder at once, not 5 s later");
    api.resume("b", "test", None).await.expect("resume");
    let resumed_at = clock.now().timestamp_millis();
    sleep(MS(1_500)).await;
    let after: Vec<i64> = runs_of(&runs, "b").into_iter().map(|(s, _)| s).filter(|s| *s > resumed_at).collect();
    assert!(!after.is_empty(), "the resume reached the holder at once");
    a.shutdown().await;
}

/// A11 with a store that broadcasts changes, under a burst of writes: 100 schedules created
/// 20 ms apart (2 s). The node does not read the counters, nor its partitions, once per write:
/// after the first change at once, each read waits twice as long after the one before, up to
/// one renewal interval (500 ms here): at most 10 reads of the counters in the burst (there are
/// 100 writes), so at most 10 reads of each partition; and every schedule still runs from its
/// first slot after one interval.
#[tokio::test(start_paused = true)]
async fn a11_a_burst_of_broadcast_writes_is_read_at_a_bounded_rate() {
    use simba::tck::{FaultyBackend, Op};
    let store = MemoryBackend::new();
    let (faulty, calls) = FaultyBackend::new(store.clone());
    let runs = Runs::default();
    let clock = WallClock::follow_tokio_from(base());
    let a = node_with(faulty.with_job_store(), 1, vec![report(&runs)], clock).await;
    let api = a.schedules().expect("schedules");
    api.create(every_second("first", 0), "test").await.expect("create");
    sleep(MS(3_000)).await;
    calls.reset_counts();
    let mut created = Vec::new();
    for i in 0..100u64 {
        let id = format!("burst-{i}");
        api.create(every_second(&id, i), "test").await.expect("create");
        created.push((id, clock.now().timestamp_millis()));
        sleep(MS(20)).await;
    }
    let (reads, lists) = (calls.calls(Op::ScheduleChanges), calls.calls(Op::ScheduleRead));
    assert!(reads <= 10, "2 s of writes: reads after 31, 62, 125, 250, then every 500 ms: {reads}");
    // Each create reads its schedule back once through the API (100); the node reads each of
    // its 4 partitions at most once per read of the counters.
    assert!(lists <= 100 + 4 * 10, "at most 10 reads of each partition: {lists}");
    sleep(MS(3_000)).await;
    for (id, at) in &created {
        let slots: Vec<i64> = runs_of(&runs, id).into_iter().map(|(s, _)| s).collect();
        let first = slots.iter().min().copied().unwrap_or(i64::MAX);
        assert!(first <= at + 500 + 1_000, "{id} (created at {at}) ran from within one interval: {slots:?}");
    }
    a.shutdown().await;
}

/// Each start of the handler `slow`: (schedule id, slot, wall-clock start).
type Starts = Arc<Mutex<Vec<(String, i64, i64)>>>;

/// The handler `slow`: notes its start, then takes 2.2 s, or less when its run is cancelled.
fn slow(starts: &Starts, clock: WallClock) -> Handler {
    let starts = Arc::clone(starts);
    Handler::from_closure("slow", move |_term: Term, payload: Arc<str>| {
        let starts = Arc::clone(&starts);
        job_future(async move {
            let v: serde_json::Value = serde_json::from_str(&payload)?;
            let ctx = JobContext::current().ok_or("no context")?;
            let id = v["id"].as_str().unwrap_or_default().to_owned();
            let entry = (id, ctx.slot().timestamp_millis(), clock.now().timestamp_millis());
            starts.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
            tokio::select! {
                () = ctx.cancelled() => {}
                () = sleep(MS(2_200)) => {}
            }
            Ok::<(), simba::BoxError>(())
        })
    })
}

/// J11 for schedules stored as data, by the code-defined jobs' formulas: runs of 2.2 s every
/// second, one schedule per overlap policy. `skip`: slots 1 and 2 pass during slot 0's run
/// (one `skipped_running` record), slot 3 starts on its instant; `buffer_one`: slot 1 waits and
/// starts when slot 0 ends (2.2 s), slot 2 is skipped; `allow_all`: every slot starts on its
/// instant; `cancel_running`: every slot starts on its instant and the run it replaces is
/// recorded `cancelled`. Every slot is claimed once.
#[tokio::test(start_paused = true)]
async fn j11_a_schedules_overlap_policy_governs_its_slots_beside_a_slow_run() {
    use simba::schedule_store::{Overlap, Policies};
    let store = MemoryBackend::new();
    let starts = Starts::default();
    let clock = WallClock::follow_tokio_from(base());
    let a = node_on(&store, 1, vec![slow(&starts, clock)], clock).await;
    let api = a.schedules().expect("schedules");
    let modes = [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll, Overlap::CancelRunning];
    for o in modes {
        let id = format!("o-{}", o.as_str().replace('_', "-"));
        let s = Schedule::new(&id, "slow", ScheduleSpec::fixed_rate(Duration::from_secs(1)))
            .with_payload(format!(r#"{{"id": "{id}"}}"#))
            .with_policies(Policies::default().with_overlap(o));
        api.create(s, "test").await.expect("create");
    }
    sleep(MS(9_000)).await;
    a.shutdown().await;
    sleep(MS(100)).await;
    let all = starts.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let offsets = |id: &str| -> Vec<(i64, i64)> {
        let mine: Vec<(i64, i64)> = all.iter().filter(|s| s.0 == id).map(|s| (s.1, s.2)).collect();
        let first = mine.first().map_or(0, |s| s.0);
        mine.iter().map(|(slot, start)| (slot - first, start - first)).collect()
    };
    let each = |n: i64| (0..n).map(|k| (k * 1000, k * 1000)).collect::<Vec<_>>();
    assert_eq!(offsets("o-skip")[..3], [(0, 0), (3_000, 3_000), (6_000, 6_000)]);
    assert_eq!(offsets("o-buffer-one")[..4], [(0, 0), (1_000, 2_200), (3_000, 4_400), (5_000, 6_600)]);
    assert_eq!(offsets("o-allow-all")[..7], each(7));
    assert_eq!(offsets("o-cancel-running")[..7], each(7));
    let outcomes = |h: &[RunRecord]| -> Vec<(i64, Outcome)> {
        let first = h.first().map_or(0, |r| r.slot_ms);
        h.iter().map(|r| (r.slot_ms - first, r.outcome)).collect()
    };
    let h = history(&store, "o-skip").await;
    assert_eq!(
        outcomes(&h)[..3],
        [(0, Outcome::Ran), (1_000, Outcome::SkippedRunning), (3_000, Outcome::Ran)],
        "{h:?}"
    );
    let h = history(&store, "o-buffer-one").await;
    assert_eq!(
        outcomes(&h)[..5],
        [
            (0, Outcome::Ran),
            (1_000, Outcome::Ran),
            (2_000, Outcome::SkippedRunning),
            (3_000, Outcome::Ran),
            (4_000, Outcome::SkippedRunning)
        ],
        "{h:?}"
    );
    let h = history(&store, "o-allow-all").await;
    assert!(h[..6].iter().all(|r| r.outcome == Outcome::Ran), "{h:?}");
    let h = history(&store, "o-cancel-running").await;
    assert!(h[..6].iter().all(|r| r.outcome == Outcome::Cancelled), "{h:?}");
    assert!(h[0].error.as_deref().is_some_and(|e| e.starts_with("replaced: a newer slot came due")), "{h:?}");
    for o in modes {
        let h = history(&store, &format!("o-{}", o.as_str().replace('_', "-"))).await;
        for w in h.windows(2) {
            assert!(w[1].slot_ms > w[0].slot_ms, "{o:?}: each slot once, in order: {h:?}");
        }
    }
}

/// A15: a run-now request of a schedule runs it once as a `manual` slot on the partition's
/// holder, naming its key; a request with a payload gives that payload to this run only
/// (the next request's run gets the schedule's); a repeat of a key requests nothing new; a
/// paused schedule's request waits for the resume; each answered call is in the audit trail;
/// a bad payload or a missing id is refused with nothing written.
#[tokio::test(start_paused = true)]
async fn a15_a_triggered_schedule_runs_once_per_request_with_the_requests_payload() {
    use simba::admin::{ScheduleError, TriggerOptions};
    use simba::job_store::SlotKind;
    use simba::schedule_store::AuditAction;
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let a = node(&store, 1, vec![report(&runs)]).await;
    let b = node(&store, 2, vec![report(&runs)]).await;
    let api = a.schedules().expect("schedules");
    let weekly = Schedule::new("w", "report", ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin"))
        .with_payload(r#"{"id": "w", "tenant": 1}"#);
    api.create(weekly, "test").await.expect("create");
    let given = TriggerOptions::new().key("k1").payload(r#"{"id": "w", "tenant": 99}"#).note("rerun for 99");
    let first = api.trigger("w", "ops", given).await.expect("trigger k1");
    assert!(!first.known);
    api.trigger("w", "ops", TriggerOptions::new().key("k2")).await.expect("trigger k2");
    assert!(api.trigger("w", "ops", given).await.expect("repeat k1").known, "a repeat is the same request");
    sleep(MS(3_000)).await;
    let got = runs_of(&runs, "w");
    assert_eq!(got.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [99, 1], "k1's payload, then the schedule's: {got:?}");
    let h = history(&store, "w").await;
    let manual: Vec<(SlotKind, Outcome, Option<&str>)> =
        h.iter().map(|r| (r.kind, r.outcome, r.request_key.as_deref())).collect();
    assert_eq!(
        manual,
        [(SlotKind::Manual, Outcome::Ran, Some("k1")), (SlotKind::Manual, Outcome::Ran, Some("k2"))],
        "one manual run per request, none for the repeat"
    );
    assert_eq!(h.iter().map(|r| r.slot_ms).collect::<Vec<_>>(), got.iter().map(|(s, _)| *s).collect::<Vec<_>>());

    api.pause("w", "ops", Some("freeze")).await.expect("pause");
    api.trigger("w", "ops", TriggerOptions::new().key("k3")).await.expect("trigger while paused");
    sleep(MS(3_000)).await;
    assert_eq!(runs_of(&runs, "w").len(), 2, "a paused schedule's request waits");
    api.resume("w", "ops", None).await.expect("resume");
    sleep(MS(2_000)).await;
    assert_eq!(runs_of(&runs, "w").last().map(|(_, t)| *t), Some(1), "k3 ran after the resume");
    assert_eq!(history(&store, "w").await.last().and_then(|r| r.request_key.clone()).as_deref(), Some("k3"));

    let audit = api.audit(Some("w"), 100).await.expect("audit");
    let triggers: Vec<(&str, Option<&str>)> = audit
        .iter()
        .rev()
        .filter(|r| r.action == AuditAction::Trigger)
        .map(|r| (r.who.as_str(), r.note.as_deref()))
        .collect();
    assert_eq!(
        triggers,
        [
            ("ops", Some("request k1, with its own payload: rerun for 99")),
            ("ops", Some("request k2")),
            ("ops", Some("request k1 (a repeat: nothing new requested), with its own payload: rerun for 99")),
            ("ops", Some("request k3")),
        ]
    );
    let before = api.audit(None, 100).await.expect("audit").len();
    let bad = api.trigger("w", "ops", TriggerOptions::new().payload("{not json")).await;
    assert!(matches!(bad, Err(ScheduleError::Invalid { .. })), "{bad:?}");
    let missing = api.trigger("x", "ops", TriggerOptions::new()).await;
    assert!(matches!(missing, Err(ScheduleError::NotFound { .. })), "{missing:?}");
    assert_eq!(api.audit(None, 100).await.expect("audit").len(), before, "nothing written for a refusal");
    sleep(MS(1_000)).await;
    assert_eq!(runs_of(&runs, "w").len(), 3, "nothing ran for a refusal");
    a.shutdown().await;
    b.shutdown().await;
}

/// The values of `simba_schedules_next_fire_timestamp_seconds`, by partition.
#[derive(Default)]
struct NextFires(Mutex<BTreeMap<String, Arc<std::sync::atomic::AtomicU64>>>);

impl NextFires {
    fn of(&self, partition: u32) -> Option<f64> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(&partition.to_string()).map(|v| f64::from_bits(v.load(std::sync::atomic::Ordering::SeqCst)))
    }
}

impl metrics::Recorder for NextFires {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        if key.name() != simba::metrics::names::SCHEDULES_NEXT_FIRE {
            return metrics::Gauge::noop();
        }
        let partition = key.labels().find(|l| l.key() == "partition").map(|l| l.value().to_owned());
        let partition = partition.unwrap_or_else(|| panic!("no partition label: {key:?}"));
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        metrics::Gauge::from_arc(Arc::clone(all.entry(partition).or_default()))
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The next-fire gauge of a partition of `simba.schedules` (labelled by partition, bounded by
/// the partition count, never by schedule): on its holder, the earliest next slot of its
/// schedules, following the slots as they pass; 0 once the node's term of it ended.
#[tokio::test(start_paused = true)]
async fn a11_the_partitions_next_fire_gauge_follows_its_earliest_schedule() {
    let gauges = NextFires::default();
    let _local = metrics::set_default_local_recorder(&gauges);
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let clock = WallClock::follow_tokio_from(base());
    let a = node_on(&store, 1, vec![report(&runs)], clock).await;
    let api = a.schedules().expect("schedules");
    let every_10s = Schedule::new("g", "report", ScheduleSpec::cron("*/10 * * * * *", "UTC"))
        .with_payload(r#"{"id": "g", "tenant": 1}"#);
    let partition = api.create(every_10s, "test").await.expect("create").partition;
    sleep(MS(1_000)).await;
    let next = |ms: i64| ((ms / 10_000) + 1) * 10_000;
    let now = clock.now().timestamp_millis();
    assert_eq!(gauges.of(partition), Some(next(now) as f64 / 1000.0), "the next slot after {now}");
    sleep(MS(10_000)).await;
    let now = clock.now().timestamp_millis();
    assert_eq!(gauges.of(partition), Some(next(now) as f64 / 1000.0), "moved on with the slot that passed");
    a.shutdown().await;
    assert_eq!(gauges.of(partition), Some(0.0), "0 once the term ended here");
}

/// A schedule on a one-second cron that ran, then had no node for five seconds (its gap
/// recorded `missed`, A14), then runs on a second node: the node, its API, and the missed slots.
async fn ran_then_missed(store: &MemoryBackend, runs: &Runs, id: &str) -> (RunningRuntime, Vec<i64>) {
    let clock = WallClock::follow_tokio_from(base());
    let a = node_on(store, 1, vec![report(runs)], clock).await;
    let every = Schedule::new(id, "report", ScheduleSpec::cron("* * * * * *", "UTC"))
        .with_payload(format!(r#"{{"id": "{id}", "tenant": 1}}"#));
    a.schedules().expect("schedules").create(every, "test").await.expect("create");
    sleep(MS(3_200)).await;
    a.shutdown().await;
    sleep(MS(5_000)).await;
    let b = node_on(store, 2, vec![report(runs)], clock).await;
    sleep(MS(2_000)).await;
    let h = history(store, id).await;
    let missed: Vec<i64> = h.iter().filter(|r| r.outcome == Outcome::Missed).map(|r| r.slot_ms).collect();
    assert!(missed.len() >= 4, "the unheld seconds are recorded missed: {h:?}");
    (b, missed)
}

/// A16 (with J15, J16): a backfill of a schedule stored as data over its whole past runs
/// exactly its missed slots, oldest first, 2 s apart at 0.5 runs/s, none twice (the slots that
/// ran are refused), while the schedule's own slots keep running every second; the backfill's
/// own record ends `ran`, and the audit trail names it.
#[tokio::test(start_paused = true)]
async fn a16_a_schedules_backfill_runs_its_missed_slots_oldest_first_at_the_budget() {
    use simba::admin::BackfillAsk;
    use simba::job_store::SlotKind;
    use simba::schedule_store::AuditAction;
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let (b, missed) = ran_then_missed(&store, &runs, "bf").await;
    let api = b.schedules().expect("schedules");
    let now = base() + chrono::Duration::milliseconds(10_200);
    let ask = BackfillAsk::new(base(), now, 0.5).by("ops").with_note("the outage");
    let done = api.backfill("bf", &ask).await.expect("backfill");
    assert!(done.slots >= 10, "every slot of the range counted: {}", done.slots);
    let asked_at = tokio::time::Instant::now();
    sleep(MS(20_000)).await;
    let h = history(&store, "bf").await;
    b.shutdown().await;
    let backfilled: Vec<&RunRecord> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill && r.outcome == Outcome::Ran).collect();
    let slots: Vec<i64> = backfilled.iter().map(|r| r.slot_ms).collect();
    assert_eq!(slots, missed, "exactly the missed slots, oldest first: {h:?}");
    let starts: Vec<i64> = backfilled.iter().filter_map(|r| r.started_ms).collect();
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g == 2_000), "at the budget: {gaps:?}");
    assert!(tokio::time::Instant::now() - asked_at >= MS(20_000));
    let ran = runs_of(&runs, "bf");
    let mut once: Vec<i64> = ran.iter().map(|(s, _)| *s).collect();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), ran.len(), "no slot ran twice: {ran:?}");
    let scheduled = h.iter().filter(|r| r.kind == SlotKind::Scheduled && r.outcome == Outcome::Ran).count();
    assert!(scheduled >= 3 + 20, "the schedule's own slots kept running: {scheduled} ({h:?})");
    let own = h.iter().find(|r| r.kind == SlotKind::Manual);
    assert!(own.is_some_and(|r| r.outcome == Outcome::Ran), "the backfill's own record ends ran: {own:?}");
    let audit = api.audit(Some("bf"), 100).await.expect("audit");
    let entry = audit.iter().find(|a| a.action == AuditAction::Backfill);
    assert!(
        entry.is_some_and(|a| a.who == "ops" && a.note.as_deref().is_some_and(|n| n.contains("the outage"))),
        "{audit:?}"
    );
}

/// A16: a pause stops a schedule's backfill at its next slot: the slot before the pause ran,
/// the backfill's own record ends `cancelled` naming the slots left and saying to ask again,
/// and nothing more of it runs.
#[tokio::test(start_paused = true)]
async fn a16_a_pause_stops_a_schedules_backfill() {
    use simba::admin::BackfillAsk;
    use simba::job_store::SlotKind;
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let (b, missed) = ran_then_missed(&store, &runs, "bfp").await;
    let api = b.schedules().expect("schedules");
    let now = base() + chrono::Duration::milliseconds(10_200);
    api.backfill("bfp", &BackfillAsk::new(base(), now, 0.2).by("ops")).await.expect("backfill");
    sleep(MS(1_000)).await;
    api.pause("bfp", "ops", None).await.expect("pause");
    sleep(MS(15_000)).await;
    let h = history(&store, "bfp").await;
    b.shutdown().await;
    let backfilled: Vec<i64> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill && r.outcome == Outcome::Ran).map(|r| r.slot_ms).collect();
    assert_eq!(backfilled, missed[..1], "the slot before the pause only: {h:?}");
    let own = h.iter().find(|r| r.kind == SlotKind::Manual);
    assert!(
        own.is_some_and(|r| r.outcome == Outcome::Cancelled
            && r.error.as_deref().is_some_and(|e| e.contains("paused")
                && e.contains("slots of the backfill left")
                && e.contains("ask for the backfill again"))),
        "{own:?}"
    );
}

/// A16 from the API: a backfill counts its slots on the schedule's own cron and time zone
/// within its start and end bounds (J14), and refuses, before storing anything, a reversed
/// range, a budget under 0.001/s, a range over a day at its budget (naming both numbers), a
/// range with no slot inside the bounds, an unknown id (naming the nearest), a fixed-rate
/// schedule (saying why) and an unnamed asker: no request pending, no audit record.
#[tokio::test(start_paused = true)]
async fn a16_a_schedules_backfill_refuses_bad_input_and_stores_nothing() {
    use simba::admin::{BackfillAsk, ScheduleError};
    use simba::schedule_store::{AuditAction, Policies};
    let store = MemoryBackend::new();
    let a = node(&store, 1, vec![report(&Runs::default())]).await;
    let api = a.schedules().expect("schedules");
    let at = |s: i64| base() + chrono::Duration::seconds(s);
    // Every minute in Berlin (at 20 s after `base()`, then every 60 s), bounded to [600 s,
    // 1200 s] after `base()`.
    let bounds = Policies::default().with_bounds(Some(at(600).timestamp_millis()), Some(at(1_200).timestamp_millis()));
    let minutely = |id: &str| Schedule::new(id, "report", ScheduleSpec::cron("0 * * * * *", "Europe/Berlin"));
    api.create(minutely("minutely-4711").with_policies(bounds), "test").await.expect("create");
    api.create(minutely("unbounded"), "test").await.expect("create");
    api.create(every_second("fixed", 1), "test").await.expect("create");
    let plan = api.backfill("minutely-4711", &BackfillAsk::new(at(0), at(3_600), 1.0).dry_run()).await.expect("plan");
    assert_eq!(plan.slots, 10, "the minutes within the bounds only");
    assert_eq!((plan.first_ms, plan.last_ms), (at(620).timestamp_millis(), at(1_160).timestamp_millis()));

    let refusals: [(&str, BackfillAsk, &str); 7] = [
        ("minutely-4711", BackfillAsk::new(at(60), at(0), 1.0), "starts after it ends"),
        ("minutely-4711", BackfillAsk::new(at(0), at(3_600), 0.0), "at least 0.001 runs per second"),
        ("minutely-4711", BackfillAsk::new(at(0), at(3_600), 0.0001), "at least 0.001 runs per second"),
        ("minutely-4711", BackfillAsk::new(at(1_300), at(3_600), 1.0), "holds no slot"),
        ("unbounded", BackfillAsk::new(at(0), at(100_000), 0.01), "holds 1667 slots and would take 46h 16m"),
        ("minutely-4712", BackfillAsk::new(at(0), at(3_600), 1.0), "did you mean `minutely-4711`?"),
        ("fixed", BackfillAsk::new(at(0), at(3_600), 1.0), "runs at a fixed rate"),
    ];
    for (id, ask, says) in refusals {
        let e = api.backfill(id, &ask).await.expect_err("refused");
        assert!(e.to_string().contains(says), "{id} {ask:?}: {e}");
        if id != "minutely-4712" {
            assert!(matches!(e, ScheduleError::Invalid { .. }) && e.to_string().contains("nothing was stored"), "{e}");
        }
    }
    let e = api.backfill("minutely-4711", &BackfillAsk::new(at(0), at(3_600), 1.0).by(" ")).await.expect_err("unnamed");
    assert!(e.to_string().contains("who acts must be named"), "{e}");
    let state = store.jobs().job("schedule/minutely-4711").await.map_err(|e| e.to_string()).expect("state");
    assert!(state.and_then(|s| s.trigger_pending_ms).is_none(), "no request made");
    let audit = api.audit(None, 100).await.expect("audit");
    assert!(audit.iter().all(|r| r.action == AuditAction::Create), "nothing recorded: {audit:?}");
    a.shutdown().await;
}

/// A16: a schedule's backfill stops with its holder's term: the record ends `cancelled` naming
/// the slots left and saying to ask again; of two backfills asked in order, the older one
/// walked first.
#[tokio::test(start_paused = true)]
async fn a16_a_schedules_backfill_ends_with_the_term() {
    use simba::admin::BackfillAsk;
    use simba::job_store::SlotKind;
    let store = MemoryBackend::new();
    let runs = Runs::default();
    let (b, missed) = ran_then_missed(&store, &runs, "bft").await;
    let api = b.schedules().expect("schedules");
    let ms = |ms: i64| base() + chrono::Duration::milliseconds(ms);
    let first = BackfillAsk::new(base(), ms(5_000), 0.2);
    let second = BackfillAsk::new(ms(5_500), ms(10_200), 0.2);
    api.backfill("bft", &first).await.expect("backfill");
    api.backfill("bft", &second).await.expect("backfill");
    sleep(MS(1_000)).await;
    b.shutdown().await;
    let h = history(&store, "bft").await;
    let backfilled: Vec<i64> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill && r.outcome == Outcome::Ran).map(|r| r.slot_ms).collect();
    assert!(missed[0] < ms(5_000).timestamp_millis() && missed.iter().any(|m| *m > ms(5_500).timestamp_millis()));
    assert_eq!(backfilled, missed[..1], "the first backfill's first missed slot, not the second's: {h:?}");
    let own: Vec<&RunRecord> = h.iter().filter(|r| r.kind == SlotKind::Manual).collect();
    assert_eq!(own.len(), 2, "{h:?}");
    for r in own {
        assert!(
            r.outcome == Outcome::Cancelled
                && r.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("the term ended, with") && e.contains("ask for the backfill again")),
            "{r:?}"
        );
    }
}
