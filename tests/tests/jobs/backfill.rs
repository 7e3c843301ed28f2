//! Backfill (rules J15, J16) on the runtime, on paused Tokio time against the in-memory store,
//! the scheduler's wall clock following Tokio's: the holder takes a backfill request and claims
//! the range's slots oldest first at the budget; a slot that ran is never run again, neither
//! by a second backfill nor by another holder.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use simba::Term;
use simba::backend::memory::MemoryBackend;
use simba::job::{JobContext, Schedule, ScheduledJob, WallClock};
use simba::job_store::{JobStore, Outcome, RunRecord, SlotKind, Trigger};
use simba::runtime::RunningRuntime;

use crate::paused_node::{base, history, node};
use simba_core::backfill::BackfillPlan;
use tokio::time::sleep;

const S: fn(u64) -> Duration = Duration::from_secs;

/// Each run: (job, slot, kind, Tokio instant of its start, node session).
type Starts = Mutex<Vec<(String, i64, SlotKind, tokio::time::Instant, String)>>;
static STARTS: Starts = Mutex::new(Vec::new());

fn quick(term: Term) -> simba::job::JobFuture {
    simba::job::job_future(async move {
        let ctx = JobContext::current().expect("a run has its context");
        let entry = (
            term.name().to_owned(),
            ctx.slot().timestamp_millis(),
            ctx.kind(),
            tokio::time::Instant::now(),
            term.session_id().to_string(),
        );
        STARTS.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
    })
}

fn starts_of(job: &str) -> Vec<(i64, SlotKind, tokio::time::Instant, String)> {
    let all = STARTS.lock().unwrap_or_else(PoisonError::into_inner);
    all.iter().filter(|s| s.0 == job).map(|s| (s.1, s.2, s.3, s.4.clone())).collect()
}

/// A job on a ten-second cron.
fn every_ten_seconds(name: &'static str) -> ScheduledJob {
    ScheduledJob::from_closure(name, Schedule::cron("*/10 * * * * *"), quick)
}

/// A backfill request of `job` over `[from, to]` (seconds after `base()`) at `rate` runs/s.
async fn request(store: &MemoryBackend, job: &str, (from, to): (i64, i64), rate: f64, slots: u64, nonce: &str) {
    let ms = |s: i64| (base() + chrono::Duration::seconds(s)).timestamp_millis();
    let plan = BackfillPlan::new(ms(from), ms(to), rate, slots).expect("a valid plan");
    let at = base().timestamp_millis();
    let key = plan.key(nonce);
    let made = store.jobs().trigger(job, Trigger::new(&key, at)).await.map_err(|e| e.to_string()).expect("request");
    assert!(matches!(made, simba::job_store::Triggered::Requested(_)), "{made:?}");
}

/// The slots (seconds after `base()`) of `h`'s records of `kind` with `outcome`.
fn slots(h: &[RunRecord], kind: SlotKind, outcome: Outcome) -> Vec<i64> {
    let b = base().timestamp_millis();
    h.iter().filter(|r| r.kind == kind && r.outcome == outcome).map(|r| (r.slot_ms - b) / 1000).collect()
}

/// The job ran from 0 s to 30 s, its node was down until 70 s (slots 40 to 60 missed), and a
/// second node runs it from then on: the slots that ran and the missed ones, in seconds.
async fn ran_then_missed(store: &MemoryBackend, job: &ScheduledJob, clock: WallClock) -> RunningRuntime {
    let a = node(store, 1, clock, job, "").await;
    sleep(S(35)).await;
    a.shutdown().await;
    sleep(S(30)).await;
    let b = node(store, 2, clock, job, "").await;
    sleep(S(10)).await;
    b
}

/// J16: the holder takes a backfill request and claims the range's slots oldest first, one
/// run each at the budget (2 s apart at 0.5/s), only those that did not run (the missed ones);
/// the slots that ran are skipped ("already ran"), the ones after the ledger are the
/// scheduler's; the ledger never moves and the scheduler's next slots run as before. The
/// backfill's own `manual` record ends `ran`.
#[tokio::test(start_paused = true)]
async fn j16_a_backfill_runs_the_missed_slots_oldest_first_at_the_budget() {
    let store = MemoryBackend::new();
    let job = every_ten_seconds("bf_budget");
    let b = ran_then_missed(&store, &job, WallClock::follow_tokio_from(base())).await;
    let h = history(&store, "bf_budget").await;
    let ran = slots(&h, SlotKind::Scheduled, Outcome::Ran);
    let missed = slots(&h, SlotKind::Scheduled, Outcome::Missed);
    assert_eq!(missed, [40, 50, 60], "{h:?}");
    assert!(ran.contains(&30) && ran.contains(&70), "{ran:?}");

    let requested = tokio::time::Instant::now();
    request(&store, "bf_budget", (0, 200), 0.5, 21, "one").await;
    sleep(S(20)).await;
    b.shutdown().await;

    let backfilled: Vec<_> = starts_of("bf_budget").into_iter().filter(|s| s.1 == SlotKind::Backfill).collect();
    let b0 = base().timestamp_millis();
    assert_eq!(backfilled.iter().map(|s| (s.0 - b0) / 1000).collect::<Vec<_>>(), [40, 50, 60], "oldest first");
    let gaps: Vec<Duration> = backfilled.windows(2).map(|w| w[1].2 - w[0].2).collect();
    assert_eq!(gaps, [S(2), S(2)], "at the budget");
    assert!(backfilled[0].2 - requested < S(1), "the first at once");
    let h = history(&store, "bf_budget").await;
    assert_eq!(slots(&h, SlotKind::Backfill, Outcome::Ran), [40, 50, 60], "{h:?}");
    assert_eq!(slots(&h, SlotKind::Manual, Outcome::Ran).len(), 1, "the backfill's own record: {h:?}");
    let scheduled_after = slots(&h, SlotKind::Scheduled, Outcome::Ran);
    assert!(scheduled_after.contains(&80) && scheduled_after.contains(&90), "the scheduler kept going: {h:?}");
}

/// J16 and J15 across a holder change: the holder stops midway through a backfill; the other
/// node takes the job, and the same backfill asked again runs only what was left: every
/// missed slot ran once, none twice, and no slot that ran before was run again.
#[tokio::test(start_paused = true)]
async fn j16_a_backfill_asked_again_after_a_holder_change_runs_no_slot_twice() {
    let store = MemoryBackend::new();
    let job = every_ten_seconds("bf_handover");
    let clock = WallClock::follow_tokio_from(base());
    let b = ran_then_missed(&store, &job, clock).await;
    let c = node(&store, 3, clock, &job, "").await;
    request(&store, "bf_handover", (0, 200), 0.2, 21, "first").await;
    // At 0.2/s the first missed slot runs at once and the second 5 s later: stop the holder
    // between the two.
    sleep(Duration::from_millis(2_500)).await;
    b.shutdown().await;
    sleep(S(5)).await;
    request(&store, "bf_handover", (0, 200), 0.2, 21, "again").await;
    sleep(S(30)).await;
    c.shutdown().await;

    let h = history(&store, "bf_handover").await;
    assert_eq!(slots(&h, SlotKind::Backfill, Outcome::Ran), [40, 50, 60], "each missed slot once: {h:?}");
    let backfilled: Vec<i64> =
        starts_of("bf_handover").iter().filter(|s| s.1 == SlotKind::Backfill).map(|s| s.0).collect();
    let mut once = backfilled.clone();
    once.dedup();
    assert_eq!(once, backfilled, "no slot ran twice: {backfilled:?}");
    let sessions: std::collections::BTreeSet<&str> =
        h.iter().filter(|r| r.kind == SlotKind::Backfill).map(|r| r.session.as_str()).collect();
    assert_eq!(sessions.len(), 2, "both holders ran part of it: {h:?}");
    let first = h.iter().find(|r| r.request_key.as_deref().is_some_and(|k| k.ends_with(":first")));
    assert!(
        first.is_some_and(|r| r.outcome == Outcome::Cancelled
            && r.error.as_deref().is_some_and(|e| e.contains("ask for the backfill again"))),
        "the first holder's backfill record says it was left unfinished: {first:?}"
    );
}

/// J16: a backfill that finds the job paused stops there: its record ends `cancelled`
/// saying to resume the job and ask again (a request made while paused waits, R3); asked again
/// after the resume, only what was left runs, the slot consumed by the pause included.
#[tokio::test(start_paused = true)]
async fn j16_a_backfill_stops_at_a_pause() {
    let store = MemoryBackend::new();
    let job = every_ten_seconds("bf_paused");
    let b = ran_then_missed(&store, &job, WallClock::follow_tokio_from(base())).await;
    request(&store, "bf_paused", (0, 200), 0.2, 21, "first").await;
    sleep(S(1)).await;
    store.jobs().set_paused("bf_paused", true).await.map_err(|e| e.to_string()).expect("pause");
    sleep(S(10)).await;
    let h = history(&store, "bf_paused").await;
    assert_eq!(slots(&h, SlotKind::Backfill, Outcome::Ran), [40], "the slot before the pause: {h:?}");
    let own = h.iter().find(|r| r.kind == SlotKind::Manual);
    assert!(
        own.is_some_and(|r| r.outcome == Outcome::Cancelled
            && r.error.as_deref().is_some_and(|e| e.contains("paused") && e.contains("ask for the backfill again"))),
        "{own:?}"
    );
    store.jobs().set_paused("bf_paused", false).await.map_err(|e| e.to_string()).expect("resume");
    request(&store, "bf_paused", (0, 200), 0.2, 21, "again").await;
    sleep(S(15)).await;
    b.shutdown().await;
    let h = history(&store, "bf_paused").await;
    // 80 came while the job was paused: consumed without a record, so the backfill runs it.
    assert_eq!(slots(&h, SlotKind::Backfill, Outcome::Ran), [40, 50, 60, 80], "{h:?}");
}

/// J16 and J14: an instant outside the job's bounds is no slot, so no backfill runs it, even
/// when it lies at or before the ledger without a record: the job ran without bounds, and the
/// node that took it after the gap has a start bound at 45 s (40 s is no slot any more).
#[tokio::test(start_paused = true)]
async fn j16_j14_a_backfill_runs_no_instant_outside_the_bounds() {
    let store = MemoryBackend::new();
    let clock = WallClock::follow_tokio_from(base());
    let unbounded = every_ten_seconds("bf_bounds");
    let start = base() + chrono::Duration::seconds(45);
    let bounded = unbounded.clone().with_policies(simba::job::Policies::new().with_start(start));
    let a = node(&store, 1, clock, &unbounded, "").await;
    sleep(S(35)).await;
    a.shutdown().await;
    sleep(S(30)).await;
    let b = node(&store, 2, clock, &bounded, "").await;
    sleep(S(10)).await;
    let h = history(&store, "bf_bounds").await;
    assert_eq!(slots(&h, SlotKind::Scheduled, Outcome::Missed), [50, 60], "40 is no slot: {h:?}");
    request(&store, "bf_bounds", (0, 200), 1.0, 21, "bounds").await;
    sleep(S(10)).await;
    b.shutdown().await;
    let h = history(&store, "bf_bounds").await;
    assert_eq!(slots(&h, SlotKind::Backfill, Outcome::Ran), [50, 60], "{h:?}");
}
