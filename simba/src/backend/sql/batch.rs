//! Calls sent to the server together: schedule-slot claims and run end records (rule A5; ADR
//! 0020, "claims and ends in batches").
//!
//! A partition's holder claims every schedule due at one instant at once: at a one-second cron,
//! thousands of claims a second, each a call and a commit of its own, and as many end records.
//! Where the dialect has batch routines ([`JobDialect::SCHEDULE_BATCH_CALL`],
//! [`JobDialect::FINISH_BATCH_CALL`]), the store queues these calls instead, and a few workers
//! each take what is queued (up to [`MAX_BATCH`]) and send it as one call: one round trip and
//! one commit per batch. Nothing waits for a batch to fill: a lone call goes at once, and calls
//! queue only while every worker's call is in flight, which is when calls sent one by one would
//! queue for the pool's connections anyway.
//!
//! Each item of a batch is what the single call does, with its own checks (a claim's fence
//! share-locks its lease row to the commit), so a batch does what the calls one by one would;
//! a batch that fails answers every item in it with the error. An item whose caller stopped
//! waiting before its batch was sent is not sent.
//!
//! [`JobDialect::SCHEDULE_BATCH_CALL`]: super::jobs::JobDialect::SCHEDULE_BATCH_CALL
//! [`JobDialect::FINISH_BATCH_CALL`]: super::jobs::JobDialect::FINISH_BATCH_CALL

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::backend::job_store::{ClaimRequest, RunRecord, truncate_error};
use crate::backend::{BackendError, BackendResult};

/// The most items one call carries.
pub(super) const MAX_BATCH: usize = 256;

/// How many batches of one kind may be in flight at once, each on a connection of the pool
/// (PostgreSQL's has 10: claims and ends leave four for the sessions' own calls).
pub(super) const WORKERS: usize = 3;

/// A batch routine's answer: per item it answers for, its index and its answer.
pub(super) type Rows<A> = Vec<(usize, A)>;

/// A batch routine's call with its JSON argument (an array of items, each with its index `i`).
pub(super) type Call<A> =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = BackendResult<Rows<A>>> + Send>> + Send + Sync>;

/// An item as the batch routine reads it: its fields and its index in the batch.
#[derive(Serialize)]
struct Indexed<'a, I> {
    i: usize,
    #[serde(flatten)]
    item: &'a I,
}

struct Queued<I, A> {
    item: I,
    answer: oneshot::Sender<BackendResult<Option<A>>>,
}

/// The queue of one kind of call of one store, and its workers, which end when the last handle
/// is dropped.
pub(super) struct Batches<I, A> {
    queue: mpsc::UnboundedSender<Queued<I, A>>,
}

impl<I: Serialize + Send + Sync + 'static, A: Send + 'static> Batches<I, A> {
    /// Starts [`WORKERS`] workers sending batches through `call` (on the current Tokio runtime);
    /// `description` names the store in errors.
    pub(super) fn start(call: Call<A>, description: Arc<str>) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..WORKERS {
            tokio::spawn(work(Arc::clone(&call), Arc::clone(&rx), Arc::clone(&description)));
        }
        Batches { queue }
    }

    /// Sends `item` in the next batch; answers the routine's answer for it, `None` if it
    /// answered nothing for it.
    pub(super) async fn call(&self, item: I) -> BackendResult<Option<A>> {
        let stopped = || BackendError::Protocol("the store's batch workers stopped".to_owned());
        let (answer, rx) = oneshot::channel();
        self.queue.send(Queued { item, answer }).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

/// Takes what is queued (at least one item, at most [`MAX_BATCH`]), sends it, answers each
/// item; until the queue's last sender is dropped.
async fn work<I: Serialize, A>(
    call: Call<A>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Queued<I, A>>>>,
    description: Arc<str>,
) {
    let mut taken = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            let mut rx = rx.lock().await;
            if rx.recv_many(&mut taken, MAX_BATCH).await == 0 {
                return;
            }
        }
        let batch: Vec<Queued<I, A>> = taken.drain(..).filter(|q| !q.answer.is_closed()).collect();
        if batch.is_empty() {
            continue;
        }
        let items: Vec<Indexed<'_, I>> = batch.iter().enumerate().map(|(i, q)| Indexed { i, item: &q.item }).collect();
        let sent = match serde_json::to_string(&items) {
            Ok(json) => call(json).await,
            Err(e) => Err(BackendError::Protocol(format!("{description}: cannot encode a batch: {e}"))),
        };
        answer(batch, sent);
    }
}

/// Hands each item of `batch` its answer in `sent` (`None` where there is none), or the
/// batch's error.
fn answer<I, A>(batch: Vec<Queued<I, A>>, sent: BackendResult<Rows<A>>) {
    match sent {
        Ok(rows) => {
            let mut answers: Vec<Option<A>> = std::iter::repeat_with(|| None).take(batch.len()).collect();
            for (i, a) in rows {
                if let Some(slot) = answers.get_mut(i) {
                    *slot = Some(a);
                }
            }
            for (q, a) in batch.into_iter().zip(answers) {
                let _ = q.answer.send(Ok(a));
            }
        }
        Err(e) => {
            for q in batch {
                let _ = q.answer.send(Err(copy(&e)));
            }
        }
    }
}

/// `e` again, for each item of a failed batch (a driver's error is kept as its message).
fn copy(e: &BackendError) -> BackendError {
    match e {
        BackendError::Unavailable { message, source } => BackendError::Unavailable {
            message: message.clone(),
            source: source.as_ref().map(|s| Box::<dyn std::error::Error + Send + Sync>::from(s.to_string())),
        },
        BackendError::Protocol(m) => BackendError::Protocol(m.clone()),
        BackendError::Misconfigured(m) => BackendError::Misconfigured(m.clone()),
    }
}

/// A schedule slot's claim as the batch claim routine reads it.
#[derive(Debug, Serialize)]
pub(super) struct ClaimItem {
    lease: String,
    session: String,
    token: i64,
    job: String,
    grp: String,
    kind: i64,
    slot: i64,
    node: String,
    started: i64,
    attempts: i64,
}

impl ClaimItem {
    /// `req`, whose token is `token`, in group `group`, its kind stored as `kind`.
    pub(super) fn new(req: &ClaimRequest<'_>, token: i64, group: &str, kind: i64) -> Self {
        ClaimItem {
            lease: req.lease.to_owned(),
            session: req.session.as_str().to_owned(),
            token,
            job: req.job.to_owned(),
            grp: group.to_owned(),
            kind,
            slot: req.slot_ms,
            node: req.node.to_owned(),
            started: req.started_ms,
            attempts: i64::from(req.attempts.max(1)),
        }
    }
}

/// A run's end record as the batch end routine reads it: the record's columns; it overwrites
/// the record of its job, kind and slot written under its token.
#[derive(Debug, Serialize)]
pub(super) struct EndItem {
    job: String,
    kind: i64,
    slot: i64,
    outcome: &'static str,
    attempt: i64,
    attempts: i64,
    session: String,
    node: String,
    token: i64,
    started: Option<i64>,
    ended: Option<i64>,
    error: Option<String>,
}

impl EndItem {
    /// `r`, its kind stored as `kind`, its error cut to what the store keeps.
    pub(super) fn new(r: &RunRecord, kind: i64) -> Self {
        EndItem {
            job: r.job.clone(),
            kind,
            slot: r.slot_ms,
            outcome: r.outcome.as_str(),
            attempt: i64::from(r.attempt),
            attempts: i64::from(r.attempts),
            session: r.session.clone(),
            node: r.node.clone(),
            token: i64::try_from(r.token).unwrap_or(i64::MAX),
            started: r.started_ms,
            ended: r.ended_ms,
            error: r.error.as_deref().map(truncate_error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(fail: bool) -> Call<i64> {
        Arc::new(move |json: String| {
            Box::pin(async move {
                if fail {
                    return Err(BackendError::Protocol("refused".to_owned()));
                }
                let items: Vec<serde_json::Value> =
                    serde_json::from_str(&json).map_err(|e| BackendError::Protocol(e.to_string()))?;
                // Answers every item but the one whose value is 7, in reverse order.
                Ok(items
                    .iter()
                    .rev()
                    .filter(|v| v["v"] != 7)
                    .map(|v| (v["i"].as_u64().unwrap_or(0) as usize, v["v"].as_i64().unwrap_or(0) * 10))
                    .collect())
            })
        })
    }

    #[derive(Serialize)]
    struct V {
        v: i64,
    }

    #[tokio::test]
    async fn each_item_gets_its_own_answer_whatever_the_order_of_the_rows() {
        let b = Batches::start(echo(false), Arc::from("test"));
        let calls = (0..600).map(|v| b.call(V { v }));
        let got = futures_util::future::join_all(calls).await;
        for (v, a) in got.into_iter().enumerate() {
            let want = if v == 7 { None } else { Some(v as i64 * 10) };
            assert_eq!(a.ok().flatten(), want, "item {v}");
        }
    }

    #[tokio::test]
    async fn a_failed_batch_answers_each_of_its_items_with_the_error() {
        let b = Batches::start(echo(true), Arc::from("test"));
        let got = futures_util::future::join_all((0..5).map(|v| b.call(V { v }))).await;
        assert!(got.iter().all(|a| matches!(a, Err(BackendError::Protocol(m)) if m == "refused")), "{got:?}");
    }
}
