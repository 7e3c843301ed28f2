//! Issue 12 item 8: `simba::testing`, used as a service's own tests would use it: jobs
//! written with the macros, run by the kit's nodes on paused time, faults injected through
//! the kit, assertions on the history.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use simba::job_store::{Outcome, RunRecord, SlotKind};
use simba::testing::{Loss, TestKit};
use simba::{Error, Term, simba_scheduled};

const MINUTE: i64 = 60_000;

static REPORTS: AtomicU32 = AtomicU32::new(0);

/// Every minute, a quick run.
#[simba_scheduled(cron = "0 * * * * *")]
async fn kit_report(_term: &Term) -> Result<(), std::io::Error> {
    REPORTS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Every minute, a run of 30 s that checks its term as it goes (as a careful job does).
#[simba_scheduled(cron = "0 * * * * *")]
async fn kit_slow(term: &Term) -> Result<(), simba::Error> {
    for _ in 0..30 {
        term.ensure_valid(Duration::from_millis(100))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

fn outcomes(h: &[RunRecord]) -> Vec<(i64, SlotKind, Outcome)> {
    let first = h.first().map_or(0, |r| r.slot_ms);
    h.iter().map(|r| ((r.slot_ms - first) / MINUTE, r.kind, r.outcome)).collect()
}

/// Item 8: the kit advances to each cron slot on paused time; a takeover and a graceful stop
/// of the holder move the job to the other node, and every slot ran exactly once.
#[tokio::test(start_paused = true)]
async fn item8_slots_run_once_across_a_takeover_and_a_stop() -> Result<(), Error> {
    let mut kit = TestKit::builder().nodes(2).only(["kit_report"]).start().await?;
    let first = kit.advance_to_next_slot("kit_report").await?;
    assert_eq!(first.timestamp_millis() % MINUTE, 0, "a whole minute: {first}");
    assert!(kit.holder("kit_report")?.is_some(), "a node holds the job");
    kit.lose_term("kit_report", Loss::TakenOver).await?;
    kit.advance_to_next_slot("kit_report").await?;
    let after_takeover = kit.holder("kit_report")?.expect("a node holds the job again");
    kit.stop_node(after_takeover).await?;
    kit.advance_to_next_slot("kit_report").await?;
    assert_eq!(kit.holder("kit_report")?, Some(1 - after_takeover), "the other node took over");
    let h = kit.history("kit_report").await?;
    assert_eq!(
        outcomes(&h),
        vec![
            (0, SlotKind::Scheduled, Outcome::Ran),
            (1, SlotKind::Scheduled, Outcome::Ran),
            (2, SlotKind::Scheduled, Outcome::Ran)
        ],
        "{h:?}"
    );
    assert_eq!(h[0].slot_ms, first.timestamp_millis());
    kit.shutdown().await;
    Ok(())
}

/// Item 8: each way of losing a term mid-run is recorded `cancelled` with its revoke reason,
/// and the next slot runs on whichever node holds the term then.
#[tokio::test(start_paused = true)]
async fn item8_a_term_lost_mid_run_is_cancelled_with_its_reason() -> Result<(), Error> {
    let kit = TestKit::builder().nodes(2).only(["kit_slow"]).start().await?;
    for (how, reason) in [
        (Loss::TakenOver, "taken over"),
        (Loss::SessionExpired, "session expired"),
        (Loss::DeadlinePassed, "deadline passed"),
    ] {
        // Into the next slot's run, then lose the term while it runs.
        let now = kit.now().timestamp_millis();
        let next = now - now.rem_euclid(MINUTE) + MINUTE;
        kit.advance(Duration::from_millis((next - now) as u64 + 5_000)).await;
        let running = kit.last("kit_slow").await?.expect("a record");
        assert_eq!((running.slot_ms, running.outcome), (next, Outcome::Running), "{how:?}: {running:?}");
        kit.lose_term("kit_slow", how).await?;
        kit.advance(Duration::from_secs(2)).await;
        let h = kit.history("kit_slow").await?;
        let rec = h.iter().find(|r| r.slot_ms == next).expect("the slot's record");
        assert_eq!(rec.outcome, Outcome::Cancelled, "{how:?}: {rec:?}");
        let why = rec.error.as_deref().unwrap_or_default();
        assert!(why.contains(reason), "{how:?}: the record says {why:?}, not {reason:?}");
    }
    kit.advance_to_next_slot("kit_slow").await?;
    assert_eq!(kit.last("kit_slow").await?.map(|r| r.outcome), Some(Outcome::Ran));
    kit.shutdown().await;
    Ok(())
}

/// Item 8: pause, run now and resume through the kit, as an operator would with `simba`: a
/// paused job writes no record for its slots, a run-now request waits for the resume and runs
/// once (`manual`), then the schedule goes on.
#[tokio::test(start_paused = true)]
async fn item8_pause_trigger_and_resume() -> Result<(), Error> {
    let kit = TestKit::builder().only(["kit_report"]).start().await?;
    kit.advance_to_next_slot("kit_report").await?;
    kit.pause("kit_report").await?;
    kit.advance(Duration::from_secs(2)).await;
    kit.advance_to_next_slot("kit_report").await?;
    kit.trigger("kit_report").await?;
    kit.advance(Duration::from_secs(5)).await;
    let h = kit.history("kit_report").await?;
    assert_eq!(h.len(), 1, "nothing ran while paused: {h:?}");
    kit.resume("kit_report").await?;
    kit.advance(Duration::from_secs(3)).await;
    kit.advance_to_next_slot("kit_report").await?;
    let kinds: Vec<(SlotKind, Outcome)> =
        kit.history("kit_report").await?.iter().map(|r| (r.kind, r.outcome)).collect();
    assert_eq!(
        kinds,
        vec![
            (SlotKind::Scheduled, Outcome::Ran),
            (SlotKind::Manual, Outcome::Ran),
            (SlotKind::Scheduled, Outcome::Ran)
        ],
        "the request ran once after the resume, then the next slot"
    );
    kit.shutdown().await;
    Ok(())
}

/// Item 8: a store outage longer than the lease ends the term; slots that passed meanwhile
/// are recorded `missed` by the term that starts after it, and the schedule goes on.
#[tokio::test(start_paused = true)]
async fn item8_an_outage_past_the_lease_shows_as_missed_slots() -> Result<(), Error> {
    let kit = TestKit::builder().only(["kit_report"]).start().await?;
    kit.advance_to_next_slot("kit_report").await?;
    kit.outage(Duration::from_secs(150)).await;
    kit.advance_to_next_slot("kit_report").await?;
    let o: Vec<Outcome> = kit.history("kit_report").await?.iter().map(|r| r.outcome).collect();
    assert_eq!(o.first(), Some(&Outcome::Ran), "{o:?}");
    assert_eq!(o.last(), Some(&Outcome::Ran), "{o:?}");
    assert!(o.iter().filter(|x| **x == Outcome::Missed).count() >= 2, "the slots of the outage are missed: {o:?}");
    kit.shutdown().await;
    Ok(())
}

/// Item 8, bad input: a job name the binary does not have names the nearest one; a job that
/// is not scheduled cannot be advanced to; nothing starts.
#[tokio::test(start_paused = true)]
async fn item8_unknown_names_are_clear_errors() -> Result<(), Error> {
    let e = TestKit::builder().only(["kit_reprot"]).start().await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("`kit_reprot`") && e.contains("did you mean `kit_report`"), "{e}");
    let kit = TestKit::builder().only(["kit_report"]).start().await?;
    let e = kit.advance_to_next_slot("kit_slow").await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("no scheduled job named `kit_slow`") && e.contains("jobs: kit_report"), "{e}");
    kit.shutdown().await;
    Ok(())
}

/// Item 8, bad input: the kit refuses to start on a clock that is not paused (its slots
/// would take real minutes) and says what to write.
#[tokio::test]
async fn item8_the_kit_needs_paused_time() {
    let e = TestKit::builder().only(["kit_report"]).start().await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("start_paused = true"), "{e}");
}
