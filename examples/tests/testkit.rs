//! The test kit (`simba::testing`, feature `testing`) on a job of the service's own: its slots
//! run once each across a takeover and a node's stop, on paused time, and the job's own effect
//! (its outbox) agrees with the history the kit reads. Copy this file next to your jobs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::job_store::{Outcome, SlotKind};
use simba::testing::{Loss, TestKit};
use simba::{JobContext, State, Term, simba_scheduled};

/// The service's state: the invoices sent, by slot (in a real service, a mail client).
#[derive(Debug, Default)]
struct Outbox {
    sent: Mutex<Vec<(i64, u64)>>,
}

/// Every minute, on one node of the cluster: sends the invoices of its slot, once.
#[simba_scheduled(cron = "0 * * * * *")]
async fn send_invoices(term: &Term, ctx: &JobContext, State(outbox): State<Arc<Outbox>>) -> anyhow::Result<()> {
    term.ensure_valid(Duration::from_secs(1))?;
    let mut sent = outbox.sent.lock().unwrap_or_else(PoisonError::into_inner);
    sent.push((ctx.slot().timestamp_millis(), term.token()));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn each_slot_sends_once_across_a_takeover_and_a_stop() -> Result<(), simba::Error> {
    let outbox = Arc::new(Outbox::default());
    let mut kit = TestKit::builder().nodes(2).only(["send_invoices"]).state(Arc::clone(&outbox)).start().await?;

    kit.advance_to_next_slot("send_invoices").await?; // the next whole minute, and its run
    kit.lose_term("send_invoices", Loss::TakenOver).await?; // the other node takes the job over
    kit.advance_to_next_slot("send_invoices").await?;
    let holder = kit.holder("send_invoices")?.expect("a node holds the job");
    kit.stop_node(holder).await?; // a deploy: the job is handed over
    kit.advance_to_next_slot("send_invoices").await?;

    let history = kit.history("send_invoices").await?; // oldest first
    kit.shutdown().await;
    assert_eq!(history.len(), 3, "{history:?}");
    assert!(history.iter().all(|r| (r.kind, r.outcome) == (SlotKind::Scheduled, Outcome::Ran)), "{history:?}");

    // What the job did agrees with the history: one send per slot, each under the token its
    // record names, and the tokens grow across the takeover and the stop.
    let sent = outbox.sent.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let recorded: Vec<(i64, u64)> = history.iter().map(|r| (r.slot_ms, r.token)).collect();
    assert_eq!(sent, recorded);
    assert!(sent.windows(2).all(|w| w[0].0 + 60_000 == w[1].0 && w[0].1 < w[1].1), "{sent:?}");
    Ok(())
}
