//! The jobs store conformance suite: one function per rule of the
//! [`JobStore`](crate::job_store::JobStore) contract. Every backend with a jobs store runs all
//! of them against a real server through [`jobs_suite!`](crate::jobs_suite); [`RULES`] lists
//! them.
//!
//! Each function takes the backend (whose [`Backend::job_store`] must answer `Some`), uses
//! fresh lease and job names, and needs no waiting (but `jobs_registry_expires_with_its_session`,
//! which waits for a session to expire), so suites may share one server.

use crate::backend::{Acquire, Backend, SessionId};
use crate::job_store::{
    Claim, ClaimRequest, MAX_ERROR_BYTES, MAX_PENDING_REQUESTS, MAX_REGISTRY_BYTES, Outcome, Refusal, RunRecord,
    SharedJobStore, SlotKind, Triggered,
};
use crate::tck::conformance::{TTL, unique};

/// Every rule of the suite, in the order [`jobs_suite!`](crate::jobs_suite) runs them.
pub const RULES: &[&str] = &[
    "jobs_claim_is_fenced",
    "jobs_claim_is_monotonic",
    "jobs_claim_writes_the_running_record",
    "jobs_finish_overwrites_the_claimed_record",
    "jobs_abandoned_run_is_closed_by_its_token",
    "jobs_append_is_insert_if_absent",
    "jobs_history_is_newest_first",
    "jobs_retention_bounded",
    "jobs_retention_is_configurable",
    "jobs_error_text_truncated",
    "jobs_pause_blocks_claims",
    "jobs_backfill_runs_a_slot_that_did_not_run_once",
    "jobs_backfill_is_fenced",
    "jobs_backfill_refuses_slots_outside_the_retained_history",
    "jobs_group_pause_applies_to_partitions",
    "jobs_trigger_is_taken_once_by_the_holder",
    "jobs_pending_requests_are_read_by_prefix",
    "jobs_trigger_retry_with_the_same_key_runs_once",
    "jobs_distinct_request_keys_each_run",
    "jobs_pending_requests_are_bounded",
    "jobs_trigger_payload_rides_with_its_request",
    "jobs_group_trigger_runs_each_partition_once",
    "jobs_own_and_group_requests_run_once",
    "jobs_trigger_waits_while_paused",
    "jobs_manual_slots_are_distinct_within_one_millisecond",
    "jobs_control_version_moves",
    "jobs_control_broadcast_where_supported",
    "jobs_control_broadcast_covers_pause_and_resume",
    "jobs_control_broadcast_is_not_a_claim",
    "jobs_lists_known_jobs",
    "jobs_pause_survives_reopen",
    "jobs_registry_lives_with_its_session",
    "jobs_registry_expires_with_its_session",
];

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

fn store_of<B: Backend>(b: &B) -> SharedJobStore {
    match b.job_store() {
        Some(s) => s,
        None => panic!("{} has no jobs store: Backend::job_store answered None", b.describe()),
    }
}

/// How long a [`holder`]'s session lives. Nothing renews it, so it must outlast the longest
/// test on a loaded machine: `jobs_retention_bounded` makes about 160 calls, which took 3.4 s on
/// MariaDB with both cores busy, and its session expiring midway (the claims then answer
/// `NotHolder`) failed a CI run when this was `4 * TTL` (6 s). No test here waits for it to end.
const HOLDER_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// A live session holding a fresh lease: `(session, lease, token)`.
async fn holder<B: Backend>(b: &B) -> (SessionId, String, u64) {
    let s = ok(b.open_session(HOLDER_TTL).await, "open_session").id;
    let lease = unique("jl");
    match ok(b.acquire(&s, &lease).await, "acquire") {
        Acquire::Won(t) => (s, lease, t),
        other => panic!("expected to win `{lease}`, got {other:?}"),
    }
}

fn req<'a>(
    s: &'a SessionId,
    lease: &'a str,
    token: u64,
    job: &'a str,
    slot_ms: i64,
    kind: SlotKind,
) -> ClaimRequest<'a> {
    ClaimRequest {
        session: s,
        lease,
        token,
        job,
        slot_ms,
        kind,
        node: "tck-node",
        started_ms: slot_ms + 3,
        attempts: 1,
    }
}

async fn claim(store: &SharedJobStore, r: ClaimRequest<'_>) -> Claim {
    ok(store.claim_run(r).await, "claim_run")
}

fn claimed(c: Claim, what: &str) -> RunRecord {
    match c {
        Claim::Claimed(r) => r,
        other => panic!("{what}: expected Claimed, got {other:?}"),
    }
}

const T0: i64 = 1_780_000_000_000;

/// A run-now request of `job` with `key` at `at_ms` that the store must make anew.
async fn trigger(store: &SharedJobStore, job: &str, key: &str, at_ms: i64) -> crate::job_store::Request {
    match ok(store.trigger(job, key, at_ms).await, "trigger") {
        Triggered::Requested(r) => r,
        other => panic!("trigger `{job}` with key `{key}`: expected a new request, got {other:?}"),
    }
}

/// A manual claim that must take a request: its record (kind, slot, request key checked by
/// the caller), finished as `ran` so that the history shows it.
async fn run_manual(store: &SharedJobStore, r: ClaimRequest<'_>, what: &str) -> RunRecord {
    let rec = claimed(claim(store, r).await, what);
    assert_eq!((rec.kind, rec.outcome), (SlotKind::Manual, Outcome::Running), "{what}");
    let done = RunRecord { outcome: Outcome::Ran, ended_ms: Some(rec.slot_ms + 1), ..rec.clone() };
    assert!(ok(store.finish_run(&done).await, "finish_run"), "{what}: the finish matched");
    rec
}

/// Claims are fenced: only the session holding the lease with this token may claim; a wrong
/// token, another session, or a released lease answers `NotHolder`.
pub async fn jobs_claim_is_fenced<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let other = ok(b.open_session(TTL).await, "open_session").id;
    let job = unique("job");
    assert_eq!(claim(&store, req(&s, &lease, token + 1, &job, T0, SlotKind::Scheduled)).await, Claim::NotHolder);
    assert_eq!(claim(&store, req(&other, &lease, token, &job, T0, SlotKind::Scheduled)).await, Claim::NotHolder);
    assert!(ok(b.release(&s, &lease, token).await, "release"));
    assert_eq!(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, Claim::NotHolder);
    assert!(ok(store.history(&job, 10).await, "history").is_empty(), "a refused claim writes nothing");
    let _ = b.close_session(&s).await;
    let _ = b.close_session(&other).await;
}

/// Scheduled slots are monotonic per job across terms: a slot at or before the last claimed
/// one answers `AlreadyClaimed`, also for the next term; a later one is claimed.
pub async fn jobs_claim_is_monotonic<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    claimed(claim(&store, req(&s, &lease, token, &job, T0 + 1000, SlotKind::Scheduled)).await, "first slot");
    assert_eq!(
        claim(&store, req(&s, &lease, token, &job, T0 + 1000, SlotKind::Scheduled)).await,
        Claim::AlreadyClaimed
    );
    assert_eq!(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::CaughtUp)).await, Claim::AlreadyClaimed);
    assert!(ok(b.release(&s, &lease, token).await, "release"));
    let t2 = match ok(b.acquire(&s, &lease).await, "acquire") {
        Acquire::Won(t) => t,
        other => panic!("re-acquire: {other:?}"),
    };
    assert_eq!(
        claim(&store, req(&s, &lease, t2, &job, T0 + 1000, SlotKind::Scheduled)).await,
        Claim::AlreadyClaimed,
        "the next term must not run a slot the previous one claimed"
    );
    claimed(claim(&store, req(&s, &lease, t2, &job, T0 + 2000, SlotKind::Scheduled)).await, "later slot");
    let st = ok(store.job(&job).await, "job").expect("a claimed job is known");
    assert_eq!(st.last_slot_ms, Some(T0 + 2000));
    let _ = b.close_session(&s).await;
}

/// The claim writes the slot's `running` record (attempt 1) in the same call.
pub async fn jobs_claim_writes_the_running_record<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let mut r = req(&s, &lease, token, &job, T0, SlotKind::Scheduled);
    r.attempts = 3;
    let rec = claimed(claim(&store, r).await, "claim");
    let h = ok(store.history(&job, 10).await, "history");
    assert_eq!(h, vec![rec.clone()]);
    assert_eq!(
        (rec.outcome, rec.kind, rec.slot_ms, rec.attempt, rec.attempts, rec.token),
        (Outcome::Running, SlotKind::Scheduled, T0, 1, 3, token)
    );
    assert_eq!((rec.session.as_str(), rec.node.as_str(), rec.started_ms), (s.as_str(), "tck-node", Some(T0 + 3)));
    let _ = b.close_session(&s).await;
}

/// `finish_run` overwrites the claimed record (one record per slot) and only a record claimed
/// with the same token; it works after the term ended.
pub async fn jobs_finish_overwrites_the_claimed_record<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let mut rec = claimed(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, "claim");
    assert!(ok(b.release(&s, &lease, token).await, "release"));
    rec.outcome = Outcome::Ran;
    rec.ended_ms = Some(T0 + 50);
    let mut forged = rec.clone();
    forged.token = token + 7;
    forged.outcome = Outcome::Failed;
    assert!(!ok(store.finish_run(&forged).await, "finish_run"), "another token must not overwrite");
    assert!(ok(store.finish_run(&rec).await, "finish_run"));
    assert_eq!(ok(store.history(&job, 10).await, "history"), vec![rec.clone()]);
    let mut unclaimed = rec.clone();
    unclaimed.slot_ms = T0 + 999;
    assert!(!ok(store.finish_run(&unclaimed).await, "finish_run"), "finish of an unclaimed slot writes nothing");
    assert_eq!(ok(store.history(&job, 10).await, "history").len(), 1);
    let _ = b.close_session(&s).await;
}

/// A run left `running` by a holder whose session ended (its process killed) is what the next
/// holder finds as the job's newest record when its term starts, and `finish_run` with the
/// record's own token closes it (the engine records it `cancelled`); the new holder's claims go
/// on as usual.
pub async fn jobs_abandoned_run_is_closed_by_its_token<B: Backend>(b: B) {
    let store = store_of(&b);
    let (dead, lease, token) = holder(&b).await;
    let job = unique("job");
    let mut left = claimed(claim(&store, req(&dead, &lease, token, &job, T0, SlotKind::Scheduled)).await, "claim");
    ok(b.close_session(&dead).await, "close_session");
    let next = ok(b.open_session(HOLDER_TTL).await, "open_session").id;
    let next_token = match ok(b.acquire(&next, &lease).await, "acquire") {
        Acquire::Won(t) => t,
        other => panic!("expected to win `{lease}` after its holder's session closed, got {other:?}"),
    };
    assert!(next_token > token, "T3: the next term's token {next_token} must exceed {token}");
    let state = ok(store.job(&job).await, "job").expect("the job is known");
    assert_eq!(state.last.as_ref(), Some(&left), "the newest record is the one left running");
    left.outcome = Outcome::Cancelled;
    left.error = Some("abandoned".to_owned());
    assert!(ok(store.finish_run(&left).await, "finish_run"), "the record's own token closes it");
    let rec =
        claimed(claim(&store, req(&next, &lease, next_token, &job, T0 + 1000, SlotKind::Scheduled)).await, "claim");
    let h = ok(store.history(&job, 10).await, "history");
    assert_eq!(h, vec![rec, left]);
    let _ = b.close_session(&next).await;
}

/// `append` inserts a record unless one with its identity exists (idempotent, never
/// overwrites a claimed run).
pub async fn jobs_append_is_insert_if_absent<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let missed = RunRecord::not_run(&job, T0, Outcome::Missed);
    assert!(ok(store.append(&missed).await, "append"));
    assert!(!ok(store.append(&missed).await, "append"), "appending twice inserts once");
    let run = claimed(claim(&store, req(&s, &lease, token, &job, T0 + 1000, SlotKind::Scheduled)).await, "claim");
    let skipped = RunRecord::not_run(&job, T0 + 1000, Outcome::SkippedRunning);
    assert!(!ok(store.append(&skipped).await, "append"), "append must not overwrite a claimed slot");
    assert_eq!(ok(store.history(&job, 10).await, "history"), vec![run, missed]);
    let _ = b.close_session(&s).await;
}

/// `history` answers newest first (by slot, then kind), at most `limit` records.
pub async fn jobs_history_is_newest_first<B: Backend>(b: B) {
    let store = store_of(&b);
    let job = unique("job");
    for k in [3, 1, 4, 0, 2] {
        ok(store.append(&RunRecord::not_run(&job, T0 + k * 1000, Outcome::Missed)).await, "append");
    }
    let h = ok(store.history(&job, 3).await, "history");
    let slots: Vec<i64> = h.iter().map(|r| r.slot_ms - T0).collect();
    assert_eq!(slots, vec![4000, 3000, 2000]);
    assert!(ok(store.history(&unique("never"), 10).await, "history").is_empty());
}

/// Retention is bounded by the store: at most `retention()` records per job, the newest.
pub async fn jobs_retention_bounded<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let keep = store.retention();
    assert!(keep >= 1, "retention must be at least 1");
    let total = keep as i64 + 5;
    for k in 0..total {
        let rec = claimed(claim(&store, req(&s, &lease, token, &job, T0 + k, SlotKind::Scheduled)).await, "claim");
        if k % 2 == 0 {
            let mut done = rec;
            done.outcome = Outcome::Ran;
            ok(store.finish_run(&done).await, "finish_run");
        }
    }
    let h = ok(store.history(&job, keep * 2).await, "history");
    assert_eq!(h.len(), keep, "the store must keep exactly the newest {keep}");
    assert_eq!(h.first().map(|r| r.slot_ms), Some(T0 + total - 1));
    assert_eq!(h.last().map(|r| r.slot_ms), Some(T0 + total - keep as i64));
    let _ = b.close_session(&s).await;
}

/// [`JobStore::keeping`](crate::job_store::JobStore::keeping) gives the same store with another
/// bound (`[history] retention`): its writes keep at most that many records per job, the
/// newest; a bound of 0 keeps 1.
pub async fn jobs_retention_is_configurable<B: Backend>(b: B) {
    let store = store_of(&b).keeping(3);
    assert_eq!(store.retention(), 3);
    assert_eq!(store.keeping(0).retention(), 1, "at least one record is kept");
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    for k in 0..6 {
        claimed(claim(&store, req(&s, &lease, token, &job, T0 + k, SlotKind::Scheduled)).await, "claim");
    }
    ok(store.append(&RunRecord::not_run(&job, T0 + 6, Outcome::Missed)).await, "append");
    let slots: Vec<i64> = ok(store.history(&job, 10).await, "history").iter().map(|r| r.slot_ms - T0).collect();
    assert_eq!(slots, vec![6, 5, 4], "the newest 3 are kept");
    // A lowered bound: the next write drops every record past it, however many (a store that
    // looks only at the oldest few records for the one a write at full retention drops must
    // look further), by an append and by a run's claim and end.
    let job = unique("job");
    let wide = store_of(&b).keeping(20);
    for k in 0..15 {
        ok(wide.append(&RunRecord::not_run(&job, T0 + k, Outcome::Missed)).await, "append");
    }
    ok(store_of(&b).keeping(2).append(&RunRecord::not_run(&job, T0 + 15, Outcome::Missed)).await, "append");
    let slots: Vec<i64> = ok(wide.history(&job, 20).await, "history").iter().map(|r| r.slot_ms - T0).collect();
    assert_eq!(slots, vec![15, 14], "a write at retention 2 after 15 records keeps the newest 2");
    for k in 16..30 {
        ok(wide.append(&RunRecord::not_run(&job, T0 + k, Outcome::Missed)).await, "append");
    }
    let one = store_of(&b).keeping(1);
    let mut run = claimed(claim(&one, req(&s, &lease, token, &job, T0 + 30, SlotKind::Scheduled)).await, "claim");
    run.outcome = Outcome::Ran;
    assert!(ok(one.finish_run(&run).await, "finish_run"));
    let slots: Vec<i64> = ok(wide.history(&job, 20).await, "history").iter().map(|r| r.slot_ms - T0).collect();
    assert_eq!(slots, vec![30], "a run claimed and ended at retention 1 keeps its own record only");
    let _ = b.close_session(&s).await;
}

/// Error text is kept to at most 1 KiB.
pub async fn jobs_error_text_truncated<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let mut rec = claimed(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, "claim");
    rec.outcome = Outcome::Failed;
    rec.error = Some("ü".repeat(3 * MAX_ERROR_BYTES));
    assert!(ok(store.finish_run(&rec).await, "finish_run"));
    let h = ok(store.history(&job, 1).await, "history");
    let e = h.first().and_then(|r| r.error.clone()).expect("the error text is kept");
    assert!(e.len() <= MAX_ERROR_BYTES && e.len() >= MAX_ERROR_BYTES - 4, "kept {} bytes", e.len());
    assert!(e.chars().all(|c| c == 'ü'));
    let _ = b.close_session(&s).await;
}

/// Rule J15: a backfill's claim runs a slot at or before the ledger that no record says ran
/// (none, `missed`, `skipped_running`), once: its `running` record has kind `backfill`, a
/// second backfill of the slot is refused, a slot that ran is refused (naming when it ran), a
/// slot after the ledger is the scheduler's; paused, nothing runs; the ledger never moves (the
/// next scheduled slot is claimed as before).
pub async fn jobs_backfill_runs_a_slot_that_did_not_run_once<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let ran = claimed(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, "first slot");
    assert!(ok(store.finish_run(&RunRecord { outcome: Outcome::Ran, ..ran.clone() }).await, "finish_run"));
    assert!(ok(store.append(&RunRecord::not_run(&job, T0 + 1000, Outcome::Missed)).await, "append"));
    assert!(ok(store.append(&RunRecord::not_run(&job, T0 + 2000, Outcome::SkippedRunning)).await, "append"));
    claimed(claim(&store, req(&s, &lease, token, &job, T0 + 4000, SlotKind::Scheduled)).await, "ledger slot");
    let backfill = |slot| req(&s, &lease, token, &job, slot, SlotKind::Backfill);

    assert_eq!(
        claim(&store, backfill(T0)).await,
        Claim::Refused(Refusal::AlreadyRan { started_ms: Some(T0 + 3) }),
        "a slot that ran is refused, naming when"
    );
    assert_eq!(
        claim(&store, backfill(T0 + 4000)).await,
        Claim::Refused(Refusal::AlreadyRan { started_ms: Some(T0 + 4003) }),
        "a slot that runs is refused"
    );
    assert_eq!(claim(&store, backfill(T0 + 4001)).await, Claim::Refused(Refusal::SchedulersSlot), "after the ledger");
    ok(store.set_paused(&job, true).await, "pause");
    assert_eq!(claim(&store, backfill(T0 + 1000)).await, Claim::Paused, "paused: nothing runs");
    ok(store.set_paused(&job, false).await, "resume");
    for slot in [T0 + 1000, T0 + 2000, T0 + 3000] {
        let rec = claimed(claim(&store, backfill(slot)).await, "a slot that did not run");
        assert_eq!(
            (rec.kind, rec.slot_ms, rec.outcome, rec.token),
            (SlotKind::Backfill, slot, Outcome::Running, token)
        );
        assert_eq!(
            claim(&store, backfill(slot)).await,
            Claim::Refused(Refusal::AlreadyRan { started_ms: Some(slot + 3) }),
            "a slot is backfilled at most once, even while its run is in flight"
        );
        let done = RunRecord { outcome: Outcome::Ran, ended_ms: Some(slot + 9), ..rec };
        assert!(ok(store.finish_run(&done).await, "finish_run"), "the backfill's record is finished by its token");
        assert!(matches!(claim(&store, backfill(slot)).await, Claim::Refused(Refusal::AlreadyRan { .. })));
    }
    let state = ok(store.job(&job).await, "job").unwrap_or_else(|| panic!("`{job}` is known"));
    assert_eq!(state.last_slot_ms, Some(T0 + 4000), "the ledger did not move");
    let kinds: Vec<(i64, SlotKind)> =
        ok(store.history(&job, 10).await, "history").iter().map(|r| (r.slot_ms, r.kind)).collect();
    assert_eq!(
        kinds,
        [
            (T0 + 4000, SlotKind::Scheduled),
            (T0 + 3000, SlotKind::Backfill),
            (T0 + 2000, SlotKind::Backfill),
            (T0 + 2000, SlotKind::Scheduled),
            (T0 + 1000, SlotKind::Backfill),
            (T0 + 1000, SlotKind::Scheduled),
            (T0, SlotKind::Scheduled),
        ]
    );
    assert_eq!(
        claim(&store, req(&s, &lease, token, &job, T0 + 4000, SlotKind::Scheduled)).await,
        Claim::AlreadyClaimed
    );
    claimed(claim(&store, req(&s, &lease, token, &job, T0 + 5000, SlotKind::Scheduled)).await, "the next slot");
}

/// Rule J15: a backfill's claim is fenced as every claim: another session or a stale token
/// answers `NotHolder` and writes nothing.
pub async fn jobs_backfill_is_fenced<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let other = ok(b.open_session(TTL).await, "open_session").id;
    let job = unique("job");
    assert!(ok(store.append(&RunRecord::not_run(&job, T0, Outcome::Missed)).await, "append"));
    claimed(claim(&store, req(&s, &lease, token, &job, T0 + 1000, SlotKind::Scheduled)).await, "ledger slot");
    assert_eq!(claim(&store, req(&other, &lease, token, &job, T0, SlotKind::Backfill)).await, Claim::NotHolder);
    assert_eq!(claim(&store, req(&s, &lease, token + 1, &job, T0, SlotKind::Backfill)).await, Claim::NotHolder);
    assert_eq!(ok(store.history(&job, 10).await, "history").len(), 2, "nothing written");
    let rec = claimed(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Backfill)).await, "the holder");
    assert_eq!(rec.kind, SlotKind::Backfill);
}

/// Rule J15: a slot older than the job's oldest record kept is refused as outside the
/// retained history (its record may have been dropped), never guessed; a slot without a
/// record inside the history runs.
pub async fn jobs_backfill_refuses_slots_outside_the_retained_history<B: Backend>(b: B) {
    let store = store_of(&b).keeping(3);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    for k in 0..5 {
        let rec = claimed(claim(&store, req(&s, &lease, token, &job, T0 + k * 10, SlotKind::Scheduled)).await, "claim");
        assert!(ok(store.finish_run(&RunRecord { outcome: Outcome::Ran, ..rec }).await, "finish_run"));
    }
    let kept: Vec<i64> = ok(store.history(&job, 10).await, "history").iter().map(|r| r.slot_ms).collect();
    assert_eq!(kept, [T0 + 40, T0 + 30, T0 + 20]);
    let backfill = |slot| req(&s, &lease, token, &job, slot, SlotKind::Backfill);
    for slot in [T0 + 10, T0 + 5, T0] {
        assert_eq!(claim(&store, backfill(slot)).await, Claim::Refused(Refusal::OutsideHistory), "slot {slot}");
    }
    let rec = claimed(claim(&store, backfill(T0 + 25)).await, "no record inside the history");
    assert_eq!((rec.kind, rec.slot_ms), (SlotKind::Backfill, T0 + 25));
}

/// A paused job is claimed nowhere (`Paused`, no record), its scheduled slot is consumed, and
/// `set_paused` answers the previous state; resuming lets later slots run.
pub async fn jobs_pause_blocks_claims<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    assert!(!ok(store.set_paused(&job, true).await, "pause"), "was not paused");
    assert!(ok(store.set_paused(&job, true).await, "pause"), "pausing twice says it was paused");
    assert!(ok(store.job(&job).await, "job").is_some_and(|j| j.paused));
    assert_eq!(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, Claim::Paused);
    assert!(ok(store.history(&job, 10).await, "history").is_empty(), "a paused slot writes no record");
    assert!(ok(store.set_paused(&job, false).await, "resume"));
    assert_eq!(
        claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await,
        Claim::AlreadyClaimed,
        "the paused slot was consumed"
    );
    claimed(claim(&store, req(&s, &lease, token, &job, T0 + 1000, SlotKind::Scheduled)).await, "after resume");
    let _ = b.close_session(&s).await;
}

/// Pausing a group `g` pauses every partition `g/i`; pausing `g/i` pauses only that one.
pub async fn jobs_group_pause_applies_to_partitions<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let g = unique("grp");
    let (p0, p1) = (format!("{g}/0"), format!("{g}/1"));
    ok(store.set_paused(&g, true).await, "pause");
    assert_eq!(claim(&store, req(&s, &lease, token, &p0, T0, SlotKind::Scheduled)).await, Claim::Paused);
    ok(store.set_paused(&g, false).await, "resume");
    ok(store.set_paused(&p1, true).await, "pause");
    claimed(claim(&store, req(&s, &lease, token, &p0, T0 + 1, SlotKind::Scheduled)).await, "p0");
    assert_eq!(claim(&store, req(&s, &lease, token, &p1, T0 + 2, SlotKind::Scheduled)).await, Claim::Paused);
    let _ = b.close_session(&s).await;
}

/// R3: a run-now request is pending until a holder's manual claim takes it (once, at the
/// request's slot, naming its key); a non-holder cannot take it; two requests are two runs,
/// oldest first.
pub async fn jobs_trigger_is_taken_once_by_the_holder<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    assert_eq!(claim(&store, req(&s, &lease, token, &job, T0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    let r1 = trigger(&store, &job, "first", T0 + 10).await;
    let r2 = trigger(&store, &job, "second", T0 + 20).await;
    assert!(r2.id > r1.id, "trigger ids increase: {r1:?} then {r2:?}");
    assert_eq!(ok(store.job(&job).await, "job").and_then(|j| j.trigger_pending_ms), Some(T0 + 20));
    assert_eq!(claim(&store, req(&s, &lease, token + 1, &job, T0, SlotKind::Manual)).await, Claim::NotHolder);
    let rec = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "manual");
    assert_eq!((rec.kind, rec.slot_ms, rec.outcome), (SlotKind::Manual, T0 + 10, Outcome::Running));
    assert_eq!(rec.request_key.as_deref(), Some("first"), "the record names its request");
    let rec = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "second");
    assert_eq!((rec.slot_ms, rec.request_key.as_deref()), (T0 + 20, Some("second")));
    assert_eq!(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    assert_eq!(ok(store.job(&job).await, "job").and_then(|j| j.trigger_pending_ms), None);
    let _ = b.close_session(&s).await;
}

/// A15: `pending_requests(prefix)` names exactly the jobs under the prefix with a request of
/// their own pending, ordered by name: not a job with a control row and no request, not one
/// whose request a claim took, not one outside the prefix (a name that only starts like it
/// included).
pub async fn jobs_pending_requests_are_read_by_prefix<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let prefix = format!("{}/", unique("pending"));
    let [a, b_job, taken, quiet] = ["a", "b", "taken", "quiet"].map(|n| format!("{prefix}{n}"));
    let outside = format!("{}x/a", prefix.trim_end_matches('/'));
    for (job, key) in [(&b_job, "kb"), (&a, "ka"), (&taken, "kt"), (&outside, "ko")] {
        trigger(&store, job, key, T0).await;
    }
    ok(store.set_paused(&quiet, false).await, "a control row without a request");
    let _ = claimed(claim(&store, req(&s, &lease, token, &taken, 0, SlotKind::Manual)).await, "taken");
    let pending = ok(store.pending_requests(&prefix).await, "pending requests");
    assert_eq!(pending, vec![a.clone(), b_job.clone()], "the pending requests under `{prefix}`");
    let _ = claimed(claim(&store, req(&s, &lease, token, &a, 0, SlotKind::Manual)).await, "a");
    assert_eq!(ok(store.pending_requests(&prefix).await, "pending requests"), vec![b_job]);
    let _ = b.close_session(&s).await;
}

/// R3: a request sent again with its key (a retry after a lost answer) is the same request:
/// while it is pending, and after its run, the store answers `Known` with it, and no second
/// manual run follows.
pub async fn jobs_trigger_retry_with_the_same_key_runs_once<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let made = trigger(&store, &job, "retry-me", T0).await;
    let again = ok(store.trigger(&job, "retry-me", T0 + 5).await, "retry while pending");
    assert_eq!(again, Triggered::Known(made.clone()), "a retry while pending");
    let rec = run_manual(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual), "the request's run").await;
    assert_eq!((rec.slot_ms, rec.request_key.as_deref()), (T0, Some("retry-me")));
    assert_eq!(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    let late = ok(store.trigger(&job, "retry-me", T0 + 9).await, "retry after the run");
    assert_eq!(late, Triggered::Known(made), "a retry after the run");
    assert_eq!(
        claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await,
        Claim::AlreadyClaimed,
        "no second run"
    );
    let h = ok(store.history(&job, 10).await, "history");
    assert_eq!(h.len(), 1, "one run, one record: {h:?}");
    assert_eq!(ok(store.job(&job).await, "job").and_then(|j| j.trigger_pending_ms), None);
    let _ = b.close_session(&s).await;
}

/// A15: a request's payload (a schedule's run-now override) comes back on the record of the
/// claim that takes that request, and only that one: the next request's run has its own (or
/// none); history does not keep it; a retry while pending answers the request with its
/// payload; at most [`MAX_PENDING_PAYLOADS`](crate::job_store::MAX_PENDING_PAYLOADS) pending
/// requests carry one.
pub async fn jobs_trigger_payload_rides_with_its_request<B: Backend>(b: B) {
    use crate::job_store::{MAX_PENDING_PAYLOADS, Trigger};
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = format!("schedule/{}", unique("sch"));
    let payload = "{\"tenant\": 4711, \"note\": \"50% off\\nnow\"}";
    let made = ok(store.trigger_with(&job, Trigger::new("with-payload", T0).with_payload(payload)).await, "trigger");
    let Triggered::Requested(made) = made else { panic!("expected a new request, got {made:?}") };
    assert_eq!(made.payload.as_deref(), Some(payload));
    let again = ok(store.trigger_with(&job, Trigger::new("with-payload", T0 + 1)).await, "retry");
    assert_eq!(again, Triggered::Known(made), "a retry while pending: the request with its payload");
    trigger(&store, &job, "plain", T0 + 2).await;
    let first = run_manual(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual), "the payload's run").await;
    assert_eq!(
        (first.request_key.as_deref(), first.payload_override.as_deref()),
        (Some("with-payload"), Some(payload))
    );
    let second = run_manual(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual), "the plain run").await;
    assert_eq!((second.request_key.as_deref(), second.payload_override), (Some("plain"), None));
    let h = ok(store.history(&job, 10).await, "history");
    assert!(h.len() == 2 && h.iter().all(|r| r.payload_override.is_none()), "history keeps no payload: {h:?}");
    for i in 0..MAX_PENDING_PAYLOADS {
        let t =
            ok(store.trigger_with(&job, Trigger::new(&format!("p{i}"), T0 + 10).with_payload("{}")).await, "trigger");
        assert!(matches!(t, Triggered::Requested(_)), "payload {i}: {t:?}");
    }
    let full = ok(store.trigger_with(&job, Trigger::new("p-more", T0 + 10).with_payload("{}")).await, "one too many");
    assert_eq!(full, Triggered::Full { pending: MAX_PENDING_PAYLOADS });
    trigger(&store, &job, "plain-again", T0 + 11).await;
    let _ = b.close_session(&s).await;
}

/// R3: requests with distinct keys made before any claim are distinct runs, oldest first,
/// each at its own slot (the second one later than the first even at the same instant), and
/// each record names its request, in the history too.
pub async fn jobs_distinct_request_keys_each_run<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let a = trigger(&store, &job, "key-a", T0).await;
    let b2 = trigger(&store, &job, "key-b", T0).await;
    assert!(b2.id > a.id && b2.slot_ms > a.slot_ms, "distinct requests: {a:?}, {b2:?}");
    let ra = run_manual(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual), "first run").await;
    let rb = run_manual(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual), "second run").await;
    assert_eq!(
        [(ra.slot_ms, ra.request_key.as_deref()), (rb.slot_ms, rb.request_key.as_deref())],
        [(a.slot_ms, Some("key-a")), (b2.slot_ms, Some("key-b"))]
    );
    assert_eq!(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    let h = ok(store.history(&job, 10).await, "history");
    let named: Vec<(i64, Outcome, Option<&str>)> =
        h.iter().map(|r| (r.slot_ms, r.outcome, r.request_key.as_deref())).collect();
    assert_eq!(
        named,
        vec![(b2.slot_ms, Outcome::Ran, Some("key-b")), (a.slot_ms, Outcome::Ran, Some("key-a"))],
        "the history names each run's request"
    );
    let last = ok(store.job(&job).await, "job").and_then(|j| j.last);
    assert_eq!(last.and_then(|r| r.request_key).as_deref(), Some("key-b"), "the job's newest record too");
    let _ = b.close_session(&s).await;
}

/// R3: at most `MAX_PENDING_REQUESTS` requests of a job wait: one more is refused (`Full`,
/// nothing made); once a claim took one, a new key is accepted again.
pub async fn jobs_pending_requests_are_bounded<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    for i in 0..MAX_PENDING_REQUESTS {
        trigger(&store, &job, &format!("q{i}"), T0).await;
    }
    let full = ok(store.trigger(&job, "one-too-many", T0).await, "trigger");
    assert_eq!(full, Triggered::Full { pending: MAX_PENDING_REQUESTS });
    assert!(
        matches!(ok(store.trigger(&job, "q0", T0).await, "retry"), Triggered::Known(_)),
        "a retry of a pending key is still known when the queue is full"
    );
    let rec = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "manual");
    assert_eq!(rec.request_key.as_deref(), Some("q0"), "the oldest first");
    trigger(&store, &job, "one-too-many", T0).await;
    let _ = b.close_session(&s).await;
}

/// A request for group `g` runs once on each partition `g/i`.
pub async fn jobs_group_trigger_runs_each_partition_once<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let g = unique("grp");
    let (p0, p1) = (format!("{g}/0"), format!("{g}/1"));
    trigger(&store, &g, "group-run", T0 + 5).await;
    for p in [&p0, &p1] {
        let rec = claimed(claim(&store, req(&s, &lease, token, p, 0, SlotKind::Manual)).await, "partition");
        assert_eq!((rec.job.as_str(), rec.slot_ms), (p.as_str(), T0 + 5));
        assert_eq!(rec.request_key.as_deref(), Some("group-run"), "the partition's record names the request");
        assert_eq!(claim(&store, req(&s, &lease, token, p, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    }
    let _ = b.close_session(&s).await;
}

/// R3: the job's own and its group's run-now requests both pending: each runs once on the
/// partition, its own first; the partition's run of the group's request gets a slot after
/// its own request's, so two records, never one overwriting the other. The group's request is
/// taken by this partition only: another partition still runs it once.
pub async fn jobs_own_and_group_requests_run_once<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let g = unique("grp");
    let (p0, p1) = (format!("{g}/0"), format!("{g}/1"));
    trigger(&store, &p0, "own", T0 + 30).await;
    trigger(&store, &g, "group", T0 + 30).await;
    let own = run_manual(&store, req(&s, &lease, token, &p0, 0, SlotKind::Manual), "own request").await;
    let grp = run_manual(&store, req(&s, &lease, token, &p0, 0, SlotKind::Manual), "group request").await;
    assert_eq!(
        [(own.slot_ms, own.request_key.as_deref()), (grp.slot_ms, grp.request_key.as_deref())],
        [(T0 + 30, Some("own")), (T0 + 31, Some("group"))],
        "two runs, own first, at distinct slots"
    );
    assert_eq!(claim(&store, req(&s, &lease, token, &p0, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    assert_eq!(ok(store.job(&p0).await, "job").and_then(|j| j.trigger_pending_ms), None);
    assert_eq!(ok(store.history(&p0, 10).await, "history").len(), 2, "two records");
    let rec = claimed(claim(&store, req(&s, &lease, token, &p1, 0, SlotKind::Manual)).await, "the other partition");
    assert_eq!((rec.slot_ms, rec.request_key.as_deref()), (T0 + 30, Some("group")));
    assert_eq!(claim(&store, req(&s, &lease, token, &p1, 0, SlotKind::Manual)).await, Claim::AlreadyClaimed);
    let _ = b.close_session(&s).await;
}

/// A request for a paused job stays pending and runs after resume.
pub async fn jobs_trigger_waits_while_paused<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    ok(store.set_paused(&job, true).await, "pause");
    trigger(&store, &job, "while-paused", T0).await;
    assert_eq!(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, Claim::Paused);
    ok(store.set_paused(&job, false).await, "resume");
    claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "after resume");
    let _ = b.close_session(&s).await;
}

/// A manual slot is the request's time, and it names the run's record: each request gets a
/// later slot than the previous one even in the same millisecond (or with a clock that stepped
/// back), so two run-now requests are two records, never one overwriting the other, whether
/// the first was taken before the second was made or not.
pub async fn jobs_manual_slots_are_distinct_within_one_millisecond<B: Backend>(b: B) {
    let store = store_of(&b);
    let (s, lease, token) = holder(&b).await;
    let job = unique("job");
    let mut slots = Vec::new();
    for (i, at) in [T0, T0, T0 - 5].into_iter().enumerate() {
        trigger(&store, &job, &format!("m{i}"), at).await;
        let rec = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "manual");
        let mut done = rec.clone();
        done.outcome = Outcome::Ran;
        done.ended_ms = Some(T0 + 1);
        ok(store.finish_run(&done).await, "finish_run");
        slots.push(rec.slot_ms);
    }
    assert_eq!(slots, vec![T0, T0 + 1, T0 + 2], "each taken request gets a later slot than the last one");
    let h = ok(store.history(&job, 10).await, "history");
    assert_eq!(h.len(), 3, "three runs, three records: {h:?}");
    trigger(&store, &job, "late", T0 + 50).await;
    trigger(&store, &job, "stepped-back", T0 + 40).await;
    let rec = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "manual");
    let next = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "manual");
    assert_eq!([rec.slot_ms, next.slot_ms], [T0 + 50, T0 + 51], "pending requests do not collapse");
    let _ = b.close_session(&s).await;
}

/// The control version changes on every pause, resume and trigger.
pub async fn jobs_control_version_moves<B: Backend>(b: B) {
    let store = store_of(&b);
    let job = unique("job");
    let v0 = ok(store.control_version().await, "control_version");
    ok(store.set_paused(&job, true).await, "pause");
    let v1 = ok(store.control_version().await, "control_version");
    ok(store.trigger(&job, "k3", T0).await, "trigger");
    let v2 = ok(store.control_version().await, "control_version");
    ok(store.set_paused(&job, false).await, "resume");
    let v3 = ok(store.control_version().await, "control_version");
    assert!(v0 != v1 && v1 != v2 && v2 != v3, "versions {v0} {v1} {v2} {v3}");
}

/// Where the store broadcasts control changes, a subscriber hears the job's name.
pub async fn jobs_control_broadcast_where_supported<B: Backend>(b: B) {
    let store = store_of(&b);
    let Some(mut rx) = store.subscribe_control() else { return };
    let job = unique("job");
    ok(store.trigger(&job, "k4", T0).await, "trigger");
    let heard = tokio::time::timeout(crate::tck::conformance::TTL * 2, async {
        loop {
            match rx.recv().await {
                Ok(n) if n == job => return true,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(heard, Ok(true), "the trigger of `{job}` was not broadcast");
}

/// Where the store broadcasts control changes, a pause and a resume are heard too, not only
/// run-now requests: a holder stops and starts a job at once (an empty name, a store's "read
/// the control version again", may come between them).
pub async fn jobs_control_broadcast_covers_pause_and_resume<B: Backend>(b: B) {
    let store = store_of(&b);
    let Some(mut rx) = store.subscribe_control() else { return };
    let job = unique("job");
    for (paused, what) in [(true, "pause"), (false, "resume")] {
        ok(store.set_paused(&job, paused).await, what);
        let heard = tokio::time::timeout(crate::tck::conformance::TTL * 2, async {
            loop {
                match rx.recv().await {
                    Ok(n) if n == job => return true,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(_) => return false,
                }
            }
        })
        .await;
        assert_eq!(heard, Ok(true), "the {what} of `{job}` was not broadcast");
    }
}

/// The names a broadcast delivers until `name` is heard (the last of them), within `TTL * 2`;
/// `None` when `name` was not heard. A subscriber that fell behind gets `"(lagged)"`.
async fn heard_until(rx: &mut tokio::sync::broadcast::Receiver<String>, name: &str) -> Option<Vec<String>> {
    let mut heard = Vec::new();
    let until = tokio::time::timeout(crate::tck::conformance::TTL * 2, async {
        loop {
            match rx.recv().await {
                Ok(n) => {
                    let done = n == name;
                    heard.push(n);
                    if done {
                        return true;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => heard.push("(lagged)".to_owned()),
                Err(_) => return false,
            }
        }
    })
    .await;
    (until == Ok(true)).then_some(heard)
}

/// R4: the broadcast carries control changes (pause, resume, a run-now request) and not the
/// writes of a claim or of history: scheduled claims (the job's last slot), a run-now claim
/// (the request taken), a finished run and an appended record are not heard. Every heard name
/// wakes every job's scheduler of every node; a store that broadcast its claims woke them
/// after each run of every job (etcd before `bd11963`, ZooKeeper). A request for another job
/// made after those writes is heard after anything they could have broadcast (one ordered
/// stream), so the check needs no quiet period.
pub async fn jobs_control_broadcast_is_not_a_claim<B: Backend>(b: B) {
    let store = store_of(&b);
    let Some(mut rx) = store.subscribe_control() else { return };
    let (s, lease, token) = holder(&b).await;
    let (job, other) = (unique("job"), unique("other"));
    ok(store.trigger(&job, "k5", T0 + 500).await, "trigger");
    assert!(heard_until(&mut rx, &job).await.is_some(), "the trigger of `{job}` was not broadcast");
    let mut last = None;
    for slot in [T0, T0 + 100, T0 + 200] {
        last = Some(claimed(claim(&store, req(&s, &lease, token, &job, slot, SlotKind::Scheduled)).await, "slot"));
    }
    let manual = claimed(claim(&store, req(&s, &lease, token, &job, 0, SlotKind::Manual)).await, "run now");
    assert_eq!(manual.slot_ms, T0 + 500, "the run-now claim takes the request");
    if let Some(mut rec) = last {
        rec.outcome = Outcome::Ran;
        rec.ended_ms = Some(T0 + 250);
        assert!(ok(store.finish_run(&rec).await, "finish_run"), "the claimed run is finished");
    }
    let missed = RunRecord::not_run(job.as_str(), T0 + 300, Outcome::Missed);
    assert!(ok(store.append(&missed).await, "append"), "the missed slot is appended");
    ok(store.trigger(&other, "k6", T0).await, "trigger another job");
    let heard = heard_until(&mut rx, &other).await;
    let Some(heard) = heard else { panic!("the trigger of `{other}` was not broadcast") };
    assert!(
        !heard.iter().any(|n| *n == job || n == "(lagged)"),
        "a claim or a history write of `{job}` was broadcast as a control change: heard {heard:?}"
    );
    ok(store.set_paused(&job, true).await, "pause");
    assert!(heard_until(&mut rx, &job).await.is_some(), "the pause of `{job}` was not broadcast");
    let _ = b.close_session(&s).await;
}

/// `jobs()` lists every job with a record or a control row, ordered by name, with its state.
pub async fn jobs_lists_known_jobs<B: Backend>(b: B) {
    let store = store_of(&b);
    let (a, z) = (unique("list-a"), unique("list-z"));
    ok(store.append(&RunRecord::not_run(&z, T0, Outcome::Missed)).await, "append");
    ok(store.set_paused(&a, true).await, "pause");
    let all = ok(store.jobs().await, "jobs");
    let names: Vec<&str> = all.iter().map(|j| j.job.as_str()).collect();
    let (ia, iz) = (names.iter().position(|n| *n == a), names.iter().position(|n| *n == z));
    assert!(ia.is_some() && iz.is_some() && ia < iz, "jobs() = {names:?}");
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "ordered by name");
    let ja = all.iter().find(|j| j.job == a).expect("listed");
    assert!(ja.paused && ja.last.is_none());
    let jz = all.iter().find(|j| j.job == z).expect("listed");
    assert_eq!(jz.last.as_ref().map(|r| r.outcome), Some(Outcome::Missed));
}

/// Pause, pending requests, the last claimed slot and history survive a reconnect: a second
/// client (`b2`, a new connection to the same store) sees them.
pub async fn jobs_pause_survives_reopen<B: Backend>(b1: B, b2: B) {
    let store1 = store_of(&b1);
    let (s, lease, token) = holder(&b1).await;
    let job = unique("job");
    claimed(claim(&store1, req(&s, &lease, token, &job, T0, SlotKind::Scheduled)).await, "claim");
    ok(store1.set_paused(&job, true).await, "pause");
    ok(store1.trigger(&job, "k7", T0 + 7).await, "trigger");
    drop(store1);
    let _ = b1.close_session(&s).await;
    drop(b1);
    let store2 = store_of(&b2);
    let st = ok(store2.job(&job).await, "job").expect("the job is known after a reconnect");
    assert!(st.paused);
    assert_eq!((st.last_slot_ms, st.trigger_pending_ms), (Some(T0), Some(T0 + 7)));
    assert_eq!(ok(store2.history(&job, 10).await, "history").len(), 1);
}

/// The registries of `sessions` only (suites share a server, so other tests publish too).
async fn registries_of(store: &SharedJobStore, sessions: &[&SessionId]) -> Vec<(SessionId, String)> {
    let all = ok(store.registries().await, "registries");
    all.into_iter().filter(|(s, _)| sessions.contains(&s)).collect()
}

/// A session's registry is published, replaced by its next publish, read
/// back byte for byte up to [`MAX_REGISTRY_BYTES`] (quotes, newlines, non-ASCII), listed by
/// session id, and gone once the session is closed; a closed session cannot publish.
pub async fn jobs_registry_lives_with_its_session<B: Backend>(b: B) {
    let store = store_of(&b);
    let s1 = ok(b.open_session(HOLDER_TTL).await, "open_session").id;
    let s2 = ok(b.open_session(HOLDER_TTL).await, "open_session").id;
    assert!(ok(store.publish_registry(&s1, "{\"jobs\": 1}").await, "publish"), "a live session publishes");
    assert!(ok(store.publish_registry(&s2, "b").await, "publish"));
    let unit = "é\"\n{}x";
    let big: String = unit.repeat(MAX_REGISTRY_BYTES / unit.len());
    assert!(big.len() <= MAX_REGISTRY_BYTES && big.len() > MAX_REGISTRY_BYTES - unit.len());
    assert!(ok(store.publish_registry(&s1, &big).await, "publish again"));
    let mut want = vec![(s1.clone(), big.clone()), (s2.clone(), "b".to_owned())];
    want.sort();
    let got = registries_of(&store, &[&s1, &s2]).await;
    assert_eq!(got.len(), 2, "one entry per session, the second publish replacing the first");
    assert!(
        got == want,
        "registries differ from what was published (lengths {:?})",
        got.iter().map(|g| g.1.len()).collect::<Vec<_>>()
    );
    let all = ok(store.registries().await, "registries");
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "ordered by session id");
    ok(b.close_session(&s1).await, "close_session");
    assert_eq!(registries_of(&store, &[&s1, &s2]).await, vec![(s2.clone(), "b".to_owned())], "closed: gone");
    assert!(!ok(store.publish_registry(&s1, "late").await, "publish"), "a closed session cannot publish");
    assert_eq!(registries_of(&store, &[&s1, &s2]).await, vec![(s2.clone(), "b".to_owned())]);
    ok(b.close_session(&s2).await, "close_session");
}

/// The registry of a session that expires (nobody renews it: its process was
/// killed) is no longer listed once the session has expired.
pub async fn jobs_registry_expires_with_its_session<B: Backend>(b: B) {
    use std::time::Duration;
    let store = store_of(&b);
    let grant = ok(b.open_session(TTL).await, "open_session");
    let keeper = ok(b.open_session(HOLDER_TTL).await, "open_session").id;
    assert!(ok(store.publish_registry(&grant.id, "dies").await, "publish"));
    assert!(ok(store.publish_registry(&keeper, "lives").await, "publish"));
    assert_eq!(registries_of(&store, &[&grant.id]).await.len(), 1);
    tokio::time::sleep(grant.remaining.max(TTL) + Duration::from_millis(1500)).await;
    assert_eq!(registries_of(&store, &[&grant.id]).await, Vec::new(), "an expired session's registry is not listed");
    // Publishing (here by another session) also drops what expired sessions left.
    assert!(ok(store.publish_registry(&keeper, "lives").await, "publish"));
    assert_eq!(registries_of(&store, &[&grant.id, &keeper]).await, vec![(keeper.clone(), "lives".to_owned())]);
    ok(b.close_session(&keeper).await, "close_session");
}

/// Expands to one `#[tokio::test]` per rule of the jobs store suite ([`RULES`]), for the
/// backend that `$make` (an async fn or closure returning a future of a backend) builds.
///
/// ```no_run
/// use simba::backend::memory::MemoryBackend;
///
/// async fn make() -> MemoryBackend {
///     MemoryBackend::new()
/// }
/// simba::jobs_suite!(make);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! jobs_suite {
    ($make:expr) => {
        $crate::jobs_suite!(@tests $make;
            jobs_claim_is_fenced,
            jobs_claim_is_monotonic,
            jobs_claim_writes_the_running_record,
            jobs_finish_overwrites_the_claimed_record,
            jobs_abandoned_run_is_closed_by_its_token,
            jobs_append_is_insert_if_absent,
            jobs_history_is_newest_first,
            jobs_retention_bounded,
            jobs_retention_is_configurable,
            jobs_error_text_truncated,
            jobs_pause_blocks_claims,
            jobs_backfill_runs_a_slot_that_did_not_run_once,
            jobs_backfill_is_fenced,
            jobs_backfill_refuses_slots_outside_the_retained_history,
            jobs_group_pause_applies_to_partitions,
            jobs_trigger_is_taken_once_by_the_holder,
            jobs_pending_requests_are_read_by_prefix,
            jobs_trigger_retry_with_the_same_key_runs_once,
            jobs_distinct_request_keys_each_run,
            jobs_pending_requests_are_bounded,
            jobs_trigger_payload_rides_with_its_request,
            jobs_group_trigger_runs_each_partition_once,
            jobs_own_and_group_requests_run_once,
            jobs_trigger_waits_while_paused,
            jobs_manual_slots_are_distinct_within_one_millisecond,
            jobs_control_version_moves,
            jobs_control_broadcast_where_supported,
            jobs_control_broadcast_covers_pause_and_resume,
            jobs_control_broadcast_is_not_a_claim,
            jobs_lists_known_jobs,
            jobs_registry_lives_with_its_session,
            jobs_registry_expires_with_its_session
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn jobs_pause_survives_reopen() {
            $crate::tck::jobs::jobs_pause_survives_reopen(($make)().await, ($make)().await).await;
        }
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::tck::jobs::$name(($make)().await).await;
            }
        )*
    };
}
