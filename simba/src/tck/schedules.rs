//! The schedule store conformance suite: one function per rule of the
//! [`ScheduleStore`](crate::schedule_store::ScheduleStore) contract (rules A6 to A9). Every
//! backend with a schedule store runs all of them against a real server through
//! [`schedules_suite!`](crate::schedules_suite); [`RULES`] lists them.
//!
//! Each function takes the backend (whose [`Backend::schedule_store`] must answer `Some`) and
//! works in a fresh space (namespace) of its own, so suites may share one server and run in
//! parallel; none waits.

use crate::backend::Backend;
use crate::schedule_store::{
    Actor, AuditAction, AuditRecord, Created, ListQuery, MAX_PAYLOAD_BYTES, Misfire, Policies, Schedule, ScheduleSpec,
    SharedScheduleStore, partition_of,
};
use crate::tck::conformance::unique;

/// Every rule of the suite, in the order [`schedules_suite!`](crate::schedules_suite) runs them.
pub const RULES: &[&str] = &[
    "schedules_create_stores_and_fills_the_bookkeeping",
    "schedules_create_refuses_a_duplicate",
    "schedules_concurrent_creates_of_one_id_store_one",
    "schedules_update_replaces_the_definition",
    "schedules_delete_removes",
    "schedules_pause_and_resume_keep_the_note",
    "schedules_every_write_bumps_its_partition_counter",
    "schedules_partition_count_is_fixed_per_space",
    "schedules_list_pages_and_filters",
    "schedules_audit_records_every_write",
    "schedules_audit_retention_bounded",
    "schedules_record_audits_an_action_that_writes_no_schedule",
    "schedules_spaces_share_nothing",
    "schedules_payload_and_policies_round_trip",
    "schedules_slot_claim_uses_the_schedules_own_ledger",
    "schedules_concurrent_slot_claims_are_each_answered_as_alone",
    "schedules_survive_reopen",
    "schedules_concurrent_writes_of_one_schedule_lose_nothing",
    "schedules_long_listings_hold_every_schedule_once",
    "schedules_lowered_audit_retention_trims_at_the_next_write",
    "schedules_writes_of_many_spaces_at_once_all_land",
];

const P: u32 = 16;
const T0: i64 = 1_780_000_000_000;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// The backend's schedule store, in a fresh space of this test's own.
fn store_of<B: Backend>(b: &B) -> SharedScheduleStore {
    match b.schedule_store() {
        Some(s) => s.in_space(&unique("tck")),
        None => panic!("{} has no schedule store: Backend::schedule_store answered None", b.describe()),
    }
}

fn actor(who: &str, at_ms: i64) -> Actor<'_> {
    Actor { who, at_ms, note: None }
}

fn daily(id: &str) -> Schedule {
    Schedule::new(id, "report", ScheduleSpec::cron("0 0 9 * * *", "Europe/Berlin")).with_payload(r#"{"tenant":4711}"#)
}

async fn create(store: &SharedScheduleStore, s: &Schedule, at_ms: i64) -> Created {
    ok(store.create(s, P, &actor("alice", at_ms)).await, "create")
}

async fn get(store: &SharedScheduleStore, id: &str) -> Option<Schedule> {
    ok(store.get(id).await, "get")
}

async fn counter(store: &SharedScheduleStore, partition: u32) -> u64 {
    ok(store.changes().await, "changes").into_iter().find(|(p, _)| *p == partition).map_or(0, |(_, c)| c)
}

async fn audit(store: &SharedScheduleStore, target: Option<&str>) -> Vec<AuditRecord> {
    ok(store.audit(target, 100).await, "audit")
}

/// A6: a create stores the schedule as given, with its partition (`fnv1a64(id) mod P`),
/// revision 1, and its creator as creator and last writer.
pub async fn schedules_create_stores_and_fills_the_bookkeeping<B: Backend>(b: B) {
    let store = store_of(&b);
    let s = daily("tenant-4711.report");
    assert_eq!(create(&store, &s, T0).await, Created::Created);
    let got = get(&store, &s.id).await.expect("the created schedule is read back");
    let expected = Schedule {
        partition: partition_of(&s.id, P),
        created_by: "alice".into(),
        created_ms: T0,
        updated_by: "alice".into(),
        updated_ms: T0,
        revision: 1,
        ..s
    };
    assert_eq!(got, expected);
    assert_eq!(got.partition, 1, "fnv1a64(\"tenant-4711.report\") mod 16");
    assert_eq!(get(&store, "tenant-4712.report").await, None);
}

/// A6: a create of an existing id writes nothing: the first schedule stays, no counter moves,
/// no audit record is added.
pub async fn schedules_create_refuses_a_duplicate<B: Backend>(b: B) {
    let store = store_of(&b);
    let s = daily("dup");
    assert_eq!(create(&store, &s, T0).await, Created::Created);
    let before = (counter(&store, partition_of("dup", P)).await, audit(&store, None).await.len());
    let other = Schedule::new("dup", "other", ScheduleSpec::fixed_rate(std::time::Duration::from_secs(5)));
    assert_eq!(create(&store, &other, T0 + 1).await, Created::Exists);
    let got = get(&store, "dup").await.expect("still there");
    assert_eq!((got.handler.as_str(), got.revision, got.created_ms), ("report", 1, T0), "the first one stays");
    assert_eq!((counter(&store, partition_of("dup", P)).await, audit(&store, None).await.len()), before);
}

/// A6: of several clients creating one id at once, exactly one stores it.
pub async fn schedules_concurrent_creates_of_one_id_store_one<B: Backend>(b: B) {
    let store = store_of(&b);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let s = Schedule::new("race", format!("h{i}"), ScheduleSpec::cron("* * * * * *", "UTC"));
            store.create(&s, P, &Actor { who: "racer", at_ms: T0 + i, note: None }).await
        }));
    }
    let mut created = 0;
    for t in tasks {
        match ok(t.await, "join") {
            Ok(Created::Created) => created += 1,
            Ok(Created::Exists) => {}
            other => panic!("a racing create answered {other:?}"),
        }
    }
    assert_eq!(created, 1, "exactly one create stores the id");
    assert_eq!(audit(&store, Some("race")).await.len(), 1);
    assert_eq!(counter(&store, partition_of("race", P)).await, 1);
}

/// A6: an update replaces handler, spec, payload and policies, bumps the revision and names
/// its writer; creation, pause and partition stay. An update of a missing id answers `None`
/// and writes nothing.
pub async fn schedules_update_replaces_the_definition<B: Backend>(b: B) {
    let store = store_of(&b);
    let s = daily("edit-me");
    create(&store, &s, T0).await;
    let paused =
        ok(store.set_paused("edit-me", true, &Actor { who: "bob", at_ms: T0 + 1, note: Some("why") }).await, "pause");
    assert_eq!(paused, Some(false));
    let edited = Schedule::new("edit-me", "invoice", ScheduleSpec::fixed_rate(std::time::Duration::from_secs(90)))
        .with_payload("[1,2]")
        .with_policies(Policies::default().with_misfire(Misfire::RunOnce));
    assert_eq!(ok(store.update(&edited, &actor("carol", T0 + 2)).await, "update"), Some(3));
    let got = get(&store, "edit-me").await.expect("still there");
    assert_eq!(
        (got.handler.as_str(), &got.spec, got.payload.as_str(), got.policies),
        ("invoice", &edited.spec, "[1,2]", edited.policies)
    );
    assert_eq!((got.created_by.as_str(), got.created_ms), ("alice", T0), "creation stays");
    assert_eq!((got.updated_by.as_str(), got.updated_ms, got.revision), ("carol", T0 + 2, 3));
    assert_eq!((got.paused, got.pause_note.as_deref()), (true, Some("why")), "the pause stays");
    assert_eq!(got.partition, partition_of("edit-me", P));
    let before = (counter(&store, partition_of("nobody", P)).await, audit(&store, None).await.len());
    let missing = Schedule { id: "nobody".into(), ..edited };
    assert_eq!(ok(store.update(&missing, &actor("carol", T0 + 3)).await, "update"), None);
    assert_eq!((counter(&store, partition_of("nobody", P)).await, audit(&store, None).await.len()), before);
    assert_eq!(get(&store, "nobody").await, None, "an update creates nothing");
}

/// A6: a delete removes the schedule and says so; deleting it again answers `false` and
/// writes nothing; the id can be created again.
pub async fn schedules_delete_removes<B: Backend>(b: B) {
    let store = store_of(&b);
    create(&store, &daily("gone"), T0).await;
    assert!(ok(store.delete("gone", &actor("dave", T0 + 1)).await, "delete"));
    assert_eq!(get(&store, "gone").await, None);
    let before = audit(&store, None).await.len();
    assert!(!ok(store.delete("gone", &actor("dave", T0 + 2)).await, "delete"));
    assert_eq!(audit(&store, None).await.len(), before, "a delete of nothing is not recorded");
    assert_eq!(create(&store, &daily("gone"), T0 + 3).await, Created::Created, "the id is free again");
    assert_eq!(get(&store, "gone").await.map(|s| s.revision), Some(1));
}

/// A6: pause keeps its note, a second pause replaces it, resume clears it; each answers the
/// state before and bumps the revision; a missing id answers `None`.
pub async fn schedules_pause_and_resume_keep_the_note<B: Backend>(b: B) {
    let store = store_of(&b);
    create(&store, &daily("p"), T0).await;
    let pause = |note, at_ms| Actor { who: "erin", at_ms, note };
    assert_eq!(ok(store.set_paused("p", true, &pause(Some("db migration"), T0 + 1)).await, "pause"), Some(false));
    let got = get(&store, "p").await.expect("there");
    assert_eq!((got.paused, got.pause_note.as_deref(), got.revision), (true, Some("db migration"), 2));
    assert_eq!((got.updated_by.as_str(), got.updated_ms), ("erin", T0 + 1));
    assert_eq!(ok(store.set_paused("p", true, &pause(Some("longer"), T0 + 2)).await, "pause"), Some(true));
    assert_eq!(get(&store, "p").await.and_then(|s| s.pause_note), Some("longer".to_owned()));
    assert_eq!(ok(store.set_paused("p", false, &pause(Some("done"), T0 + 3)).await, "resume"), Some(true));
    let got = get(&store, "p").await.expect("there");
    assert_eq!((got.paused, got.pause_note, got.revision), (false, None, 4));
    assert_eq!(ok(store.set_paused("nobody", true, &pause(None, T0 + 4)).await, "pause"), None);
}

/// A6: every write bumps its schedule's partition counter by one, in the same step; the
/// other partitions' counters stay.
pub async fn schedules_every_write_bumps_its_partition_counter<B: Backend>(b: B) {
    let store = store_of(&b);
    // "a" and "x" are in partitions 12 and 7 of 16 (rule A2's frozen values).
    let (pa, px) = (partition_of("a", P), partition_of("x", P));
    assert_ne!(pa, px);
    create(&store, &daily("a"), T0).await;
    assert_eq!((counter(&store, pa).await, counter(&store, px).await), (1, 0));
    let edited = daily("a").with_payload("2");
    ok(store.update(&edited, &actor("f", T0 + 1)).await, "update");
    ok(store.set_paused("a", true, &actor("f", T0 + 2)).await, "pause");
    ok(store.set_paused("a", false, &actor("f", T0 + 3)).await, "resume");
    assert_eq!(counter(&store, pa).await, 4);
    create(&store, &daily("x"), T0 + 4).await;
    ok(store.delete("a", &actor("f", T0 + 5)).await, "delete");
    assert_eq!((counter(&store, pa).await, counter(&store, px).await), (5, 1));
    let changes = ok(store.changes().await, "changes");
    assert_eq!(
        changes,
        {
            let mut c = vec![(pa, 5), (px, 1)];
            c.sort();
            c
        },
        "ordered by partition"
    );
}

/// A9: the first create of a space writes its partition count; a create with another count
/// is refused, naming the stored one, and writes nothing.
pub async fn schedules_partition_count_is_fixed_per_space<B: Backend>(b: B) {
    let store = store_of(&b);
    assert_eq!(ok(store.partitions().await, "partitions"), None, "nothing created yet");
    assert_eq!(create(&store, &daily("first"), T0).await, Created::Created);
    assert_eq!(ok(store.partitions().await, "partitions"), Some(P));
    let refused = ok(store.create(&daily("second"), P * 2, &actor("g", T0 + 1)).await, "create");
    assert_eq!(refused, Created::PartitionsDiffer { stored: P });
    assert_eq!(get(&store, "second").await, None, "nothing stored");
    assert_eq!(audit(&store, None).await.len(), 1);
}

/// A10: a list is ordered by id, byte by byte (upper case before lower case), filtered by
/// handler or by id prefix (`_` and `.` are no wildcards), and paged by the last id read.
pub async fn schedules_list_pages_and_filters<B: Backend>(b: B) {
    let store = store_of(&b);
    let ids = ["b.1", "B_2", "a.1", "a_2", "ab", "a.10", "Z"];
    for (i, id) in ids.iter().enumerate() {
        let handler = if id.starts_with('a') { "alpha" } else { "other" };
        let s = Schedule::new(*id, handler, ScheduleSpec::cron("0 0 * * * *", "UTC"));
        assert_eq!(create(&store, &s, T0 + i as i64).await, Created::Created);
    }
    let list = |q: ListQuery| {
        let store = store.clone();
        async move { ok(store.list(&q).await, "list").into_iter().map(|s| s.id).collect::<Vec<_>>() }
    };
    assert_eq!(list(ListQuery::first(100)).await, ["B_2", "Z", "a.1", "a.10", "a_2", "ab", "b.1"]);
    assert_eq!(list(ListQuery::first(100).prefix("a.")).await, ["a.1", "a.10"], "`.` is no wildcard");
    assert_eq!(list(ListQuery::first(100).prefix("a_")).await, ["a_2"], "`_` is no wildcard");
    assert_eq!(list(ListQuery::first(100).prefix("a")).await, ["a.1", "a.10", "a_2", "ab"]);
    assert_eq!(list(ListQuery::first(100).handler("other")).await, ["B_2", "Z", "b.1"]);
    assert_eq!(list(ListQuery::first(100).handler("alpha").prefix("a.1")).await, ["a.1", "a.10"]);
    assert_eq!(list(ListQuery::first(3)).await, ["B_2", "Z", "a.1"]);
    assert_eq!(list(ListQuery::first(3).after("a.1")).await, ["a.10", "a_2", "ab"]);
    assert_eq!(list(ListQuery::first(3).after("ab")).await, ["b.1"]);
    assert_eq!(list(ListQuery::first(3).after("b.1")).await, Vec::<String>::new());
    assert_eq!(list(ListQuery::first(2).prefix("a").after("a.10")).await, ["a_2", "ab"]);
    assert_eq!(list(ListQuery::first(0)).await, Vec::<String>::new());
    // A holder loads its partition's schedules: exactly the ids placed there, in id order.
    let mut sorted: Vec<&str> = ids.to_vec();
    sorted.sort_unstable();
    for p in 0..P {
        let want: Vec<&str> = sorted.iter().copied().filter(|id| partition_of(id, P) == p).collect();
        assert_eq!(list(ListQuery::first(100).partition(p)).await, want, "partition {p}");
    }
}

/// A7: every write is recorded with who, when, what, the target and the note, newest first,
/// readable for one target.
pub async fn schedules_audit_records_every_write<B: Backend>(b: B) {
    let store = store_of(&b);
    create(&store, &daily("s1"), T0).await;
    create(&store, &daily("s2"), T0 + 1).await;
    ok(store.update(&daily("s1").with_payload("1"), &actor("bob", T0 + 2)).await, "update");
    ok(store.set_paused("s1", true, &Actor { who: "carol", at_ms: T0 + 3, note: Some("incident 7") }).await, "pause");
    ok(store.set_paused("s1", false, &actor("carol", T0 + 4)).await, "resume");
    ok(store.delete("s2", &Actor { who: "dave", at_ms: T0 + 5, note: Some("tenant left") }).await, "delete");
    let all = audit(&store, None).await;
    let seen: Vec<(i64, &str, AuditAction, &str, Option<&str>)> =
        all.iter().map(|r| (r.at_ms, r.who.as_str(), r.action, r.target.as_str(), r.note.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (T0 + 5, "dave", AuditAction::Delete, "s2", Some("tenant left")),
            (T0 + 4, "carol", AuditAction::Resume, "s1", None),
            (T0 + 3, "carol", AuditAction::Pause, "s1", Some("incident 7")),
            (T0 + 2, "bob", AuditAction::Update, "s1", None),
            (T0 + 1, "alice", AuditAction::Create, "s2", None),
            (T0, "alice", AuditAction::Create, "s1", None),
        ]
    );
    let s2: Vec<AuditAction> = audit(&store, Some("s2")).await.iter().map(|r| r.action).collect();
    assert_eq!(s2, [AuditAction::Delete, AuditAction::Create]);
    assert_eq!(ok(store.audit(None, 2).await, "audit").len(), 2, "the limit");
}

/// A7: the store keeps the newest `audit_retention` records of a space.
pub async fn schedules_audit_retention_bounded<B: Backend>(b: B) {
    let store = store_of(&b).keeping_audit(3);
    assert_eq!(store.audit_retention(), 3);
    for i in 0..6 {
        create(&store, &daily(&format!("r{i}")), T0 + i).await;
    }
    let kept: Vec<String> = audit(&store, None).await.into_iter().map(|r| r.target).collect();
    assert_eq!(kept, ["r5", "r4", "r3"]);
}

/// A7, A15, A16: an action that changes no schedule (a trigger, a backfill) is recorded by
/// `record`: its audit record and its partition's counter, the row untouched (same revision,
/// same content); a missing id records nothing.
pub async fn schedules_record_audits_an_action_that_writes_no_schedule<B: Backend>(b: B) {
    let store = store_of(&b);
    create(&store, &daily("t1"), T0).await;
    let before = get(&store, "t1").await;
    let part = partition_of("t1", P);
    let moved = counter(&store, part).await;
    let by = Actor { who: "erin", at_ms: T0 + 7, note: Some("request deploy-42") };
    assert!(ok(store.record("t1", AuditAction::Trigger, &by).await, "record"), "the schedule exists");
    assert_eq!(get(&store, "t1").await, before, "the row, its revision included, is untouched");
    assert_eq!(counter(&store, part).await, moved + 1, "the partition's counter moved");
    let newest = audit(&store, Some("t1")).await;
    let seen: Vec<(i64, &str, AuditAction, Option<&str>)> =
        newest.iter().map(|r| (r.at_ms, r.who.as_str(), r.action, r.note.as_deref())).collect();
    assert_eq!(
        seen,
        [(T0 + 7, "erin", AuditAction::Trigger, Some("request deploy-42")), (T0, "alice", AuditAction::Create, None)]
    );
    assert!(!ok(store.record("nope", AuditAction::Trigger, &by).await, "record"), "no such schedule");
    assert_eq!(audit(&store, None).await.len(), 2, "nothing recorded for a missing id");
    // A16: a backfill's request is recorded the same way, and read back as a backfill.
    let by = Actor { who: "frank", at_ms: T0 + 9, note: Some("request backfill:1:2:1000:ab") };
    assert!(ok(store.record("t1", AuditAction::Backfill, &by).await, "record"), "the schedule exists");
    let newest = audit(&store, Some("t1")).await;
    assert_eq!(newest.first().map(|r| (r.who.as_str(), r.action)), Some(("frank", AuditAction::Backfill)));
}

/// A8: spaces (namespaces) share nothing: the same id in two spaces is two schedules, with
/// their own partition counts, counters, listings and audit trails.
pub async fn schedules_spaces_share_nothing<B: Backend>(b: B) {
    let one = store_of(&b);
    let two = one.in_space(&unique("tck"));
    assert_eq!(create(&one, &daily("same"), T0).await, Created::Created);
    assert_eq!(ok(two.create(&daily("same"), P * 2, &actor("x", T0)).await, "create"), Created::Created);
    assert_eq!(ok(one.partitions().await, "partitions"), Some(P));
    assert_eq!(ok(two.partitions().await, "partitions"), Some(P * 2));
    ok(two.set_paused("same", true, &actor("x", T0 + 1)).await, "pause");
    assert_eq!(get(&one, "same").await.map(|s| s.paused), Some(false));
    assert_eq!(ok(one.list(&ListQuery::first(10)).await, "list").len(), 1);
    assert_eq!(audit(&one, None).await.len(), 1);
    assert_eq!(audit(&two, None).await.len(), 2);
    assert_eq!(counter(&one, partition_of("same", P)).await, 1);
}

/// A6: the payload (any JSON text up to the bound, any Unicode) and the policies come back
/// exactly as written.
pub async fn schedules_payload_and_policies_round_trip<B: Backend>(b: B) {
    let store = store_of(&b);
    let text = format!("{{\"k\":\"{}\"}}", "é✓".repeat((MAX_PAYLOAD_BYTES - 16) / 5));
    assert!(text.len() <= MAX_PAYLOAD_BYTES && text.len() > MAX_PAYLOAD_BYTES - 32);
    let s = daily("big").with_payload(text.clone()).with_policies(Policies::default().with_misfire(Misfire::RunOnce));
    create(&store, &s, T0).await;
    let got = get(&store, "big").await.expect("there");
    assert_eq!((got.payload, got.policies), (text, s.policies));
}

/// A6: what one client wrote, another client of the same store (a new connection) reads.
pub async fn schedules_survive_reopen<B: Backend>(first: B, second: B) {
    let one = store_of(&first);
    create(&one, &daily("kept"), T0).await;
    ok(one.set_paused("kept", true, &Actor { who: "h", at_ms: T0 + 1, note: Some("n") }).await, "pause");
    let space = one.space().to_owned();
    drop((one, first));
    let two = match second.schedule_store() {
        Some(s) => s.in_space(&space),
        None => panic!("{} has no schedule store", second.describe()),
    };
    let got = get(&two, "kept").await.expect("read by another client");
    assert_eq!((got.paused, got.pause_note.as_deref(), got.revision), (true, Some("n"), 2));
    assert_eq!(ok(two.partitions().await, "partitions"), Some(P));
}

/// A holder of a partition's lease claiming schedule slots under it (rule A5's tests).
#[derive(Clone)]
struct Holder {
    jobs: crate::job_store::SharedJobStore,
    session: crate::backend::SessionId,
    lease: String,
}

impl Holder {
    /// A session of `b` that won a lease of its own; its token.
    async fn won<B: Backend>(b: &B, lease: &str) -> (Self, u64) {
        use crate::backend::Acquire;
        let Some(jobs) = b.job_store() else { panic!("{} has schedules but no jobs store", b.describe()) };
        let session = ok(b.open_session(std::time::Duration::from_secs(30)).await, "open_session").id;
        let lease = unique(lease);
        let Acquire::Won(token) = ok(b.acquire(&session, &lease).await, "acquire") else { panic!("won {lease}") };
        (Holder { jobs, session, lease }, token)
    }

    /// The claim of `job`'s scheduled slot `slot_ms` under `token`.
    async fn claim(&self, job: &str, slot_ms: i64, token: u64) -> crate::job_store::Claim {
        let req = crate::job_store::ClaimRequest {
            session: &self.session,
            lease: &self.lease,
            token,
            job,
            slot_ms,
            kind: crate::job_store::SlotKind::Scheduled,
            node: "tck-node",
            started_ms: slot_ms + 3,
            attempts: 1,
        };
        ok(self.jobs.claim_run(req).await, "claim_run")
    }
}

/// A5: a schedule's slot (job name `schedule/<id>`) is claimed under its partition's lease and
/// token on the schedule's own ledger: two schedules of one partition both claim the same
/// instant (the lease's last slot is no ledger of theirs), each slot once, monotonic per
/// schedule, fenced by the token, and a pause of the schedule's job name consumes the slot
/// without a run, as does a pause of `schedule` (every schedule). Each store with schedules
/// claims them through the jobs store it has beside.
pub async fn schedules_slot_claim_uses_the_schedules_own_ledger<B: Backend>(b: B) {
    use crate::job_store::Claim;
    let (holder, token) = Holder::won(&b, "simba.schedules.sc").await;
    let jobs = &holder.jobs;
    let (a, z) = (simba_core::schedules::job_name(&unique("a")), simba_core::schedules::job_name(&unique("z")));
    let is_claimed = |c: &Claim| matches!(c, Claim::Claimed(_));
    assert!(is_claimed(&holder.claim(&a, T0, token).await), "the first schedule's slot");
    assert!(is_claimed(&holder.claim(&z, T0, token).await), "another schedule of the partition, same instant");
    assert_eq!(holder.claim(&a, T0, token).await, Claim::AlreadyClaimed, "each slot once");
    assert_eq!(holder.claim(&a, T0 - 1000, token).await, Claim::AlreadyClaimed, "monotonic per schedule");
    assert_eq!(holder.claim(&a, T0 + 1000, token + 1).await, Claim::NotHolder, "fenced by the token");
    ok(jobs.set_paused(&a, true).await, "pause");
    assert_eq!(holder.claim(&a, T0 + 1000, token).await, Claim::Paused);
    ok(jobs.set_paused(&a, false).await, "resume");
    assert_eq!(holder.claim(&a, T0 + 1000, token).await, Claim::AlreadyClaimed, "the paused slot was consumed");
    let Claim::Claimed(rec) = holder.claim(&a, T0 + 2000, token).await else { panic!("claimed after resume") };
    assert_eq!((rec.job.as_str(), rec.slot_ms, rec.token), (a.as_str(), T0 + 2000, token));
    let history = ok(jobs.history(&a, 10).await, "history");
    assert_eq!(history.iter().map(|r| r.slot_ms).collect::<Vec<_>>(), [T0 + 2000, T0], "recorded as a job's slots");
    // Every schedule's pause, the job name `schedule` (here under a namespace of its own, so
    // that no other test's schedules are paused): a slot is consumed without a run.
    let every = format!("{}~schedule", unique("ns"));
    let c = format!("{every}/{}", unique("c"));
    assert!(is_claimed(&holder.claim(&c, T0, token).await), "a namespaced schedule's slot");
    ok(jobs.set_paused(&every, true).await, "pause every schedule");
    assert_eq!(holder.claim(&c, T0 + 1000, token).await, Claim::Paused, "the pause of `schedule` holds every schedule");
    ok(jobs.set_paused(&every, false).await, "resume every schedule");
    assert_eq!(
        holder.claim(&c, T0 + 1000, token).await,
        Claim::AlreadyClaimed,
        "the slot paused by `schedule` was consumed"
    );
    assert!(is_claimed(&holder.claim(&c, T0 + 2000, token).await), "claimed after the resume");
}

/// A5 under load: a partition's holder claims many schedules' slots at one instant, as a
/// one-second cron makes it do (a store may send such claims to the server together: ADR 0020,
/// "claims in batches"). Each claim is answered as it would be alone: of two claims of one
/// slot exactly one is claimed, a claim under a stale token is refused whatever claims go
/// with it, and each schedule's history holds its slot once.
pub async fn schedules_concurrent_slot_claims_are_each_answered_as_alone<B: Backend>(b: B) {
    use crate::job_store::Claim;
    const N: usize = 120;
    let (holder, token) = Holder::won(&b, "simba.schedules.cc").await;
    let names: Vec<String> = (0..N).map(|i| simba_core::schedules::job_name(&unique(&format!("c{i}")))).collect();
    let claim = |job: &String, slot_ms: i64, token: u64| {
        let (holder, job) = (holder.clone(), job.clone());
        tokio::spawn(async move {
            let claim = holder.claim(&job, slot_ms, token).await;
            (job, token, claim)
        })
    };
    // Three instants; at each, per schedule: its slot twice under the term's token, once under
    // a stale one.
    let slots = [T0, T0 + 1000, T0 + 2000];
    for slot in slots {
        let claims: Vec<_> = names
            .iter()
            .flat_map(|job| [claim(job, slot, token), claim(job, slot, token), claim(job, slot, token + 1)])
            .collect();
        let mut answers: std::collections::BTreeMap<String, Vec<(u64, Claim)>> = Default::default();
        for t in claims {
            let (job, token, claim) = ok(t.await, "join");
            answers.entry(job).or_default().push((token, claim));
        }
        for job in &names {
            let got = &answers[job];
            let claimed = got.iter().filter(|(t, c)| *t == token && matches!(c, Claim::Claimed(_))).count();
            let taken = got.iter().filter(|(t, c)| *t == token && *c == Claim::AlreadyClaimed).count();
            assert_eq!((claimed, taken), (1, 1), "{job} at {slot}: one of its two claims wins: {got:?}");
            let stale = got.iter().any(|(t, c)| *t == token + 1 && *c == Claim::NotHolder);
            assert!(stale, "{job} at {slot}: the stale token: {got:?}");
        }
    }
    for job in &names {
        let history = ok(holder.jobs.history(job, 10).await, "history");
        let got: Vec<(i64, u64)> = history.iter().map(|r| (r.slot_ms, r.token)).collect();
        assert_eq!(got, slots.iter().rev().map(|s| (*s, token)).collect::<Vec<_>>(), "{job}");
    }
}

/// A6: writers racing on one schedule lose no write: every update, pause and resume answered
/// that it wrote, and each bumped the revision and the partition's counter once and was
/// recorded once (optimistic stores read again when another writer got in first).
pub async fn schedules_concurrent_writes_of_one_schedule_lose_nothing<B: Backend>(b: B) {
    let store = store_of(&b);
    create(&store, &daily("hot"), T0).await;
    let mut tasks = Vec::new();
    for i in 0..6_i64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let a = Actor { who: "racer", at_ms: T0 + 1 + i, note: None };
            match i % 3 {
                0 => store.update(&daily("hot").with_payload(i.to_string()), &a).await.map(|r| r.is_some()),
                1 => store.set_paused("hot", true, &a).await.map(|r| r.is_some()),
                _ => store.set_paused("hot", false, &a).await.map(|r| r.is_some()),
            }
        }));
    }
    for t in tasks {
        assert!(ok(ok(t.await, "join"), "a racing write"), "the schedule exists");
    }
    let got = get(&store, "hot").await.expect("there");
    assert_eq!(got.revision, 7, "create plus six writes: {got:?}");
    assert_eq!(counter(&store, partition_of("hot", P)).await, 7);
    assert_eq!(audit(&store, Some("hot")).await.len(), 7);
}

/// A10: listings longer than one read of a store hold every schedule once, in id order:
/// unfiltered and paged, by prefix, by handler (after an update moved one to another
/// handler) and by partition.
pub async fn schedules_long_listings_hold_every_schedule_once<B: Backend>(b: B) {
    let store = store_of(&b);
    let ids: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
    let handler = |i: usize| if i.is_multiple_of(2) { "even" } else { "odd" };
    let spec = ScheduleSpec::cron("0 0 * * * *", "UTC");
    for (i, id) in ids.iter().enumerate() {
        let s = Schedule::new(id, handler(i), spec.clone());
        assert_eq!(create(&store, &s, T0 + i as i64).await, Created::Created, "{id}");
    }
    let moved = Schedule::new("t000", "odd", spec.clone());
    assert_eq!(ok(store.update(&moved, &actor("m", T0 + 400)).await, "update"), Some(2));
    let list = |q: ListQuery| {
        let store = store.clone();
        async move { ok(store.list(&q).await, "list").into_iter().map(|s| s.id).collect::<Vec<_>>() }
    };
    assert_eq!(list(ListQuery::first(1000)).await, ids);
    assert_eq!(list(ListQuery::first(120).after("t099")).await, ids[100..220]);
    assert_eq!(list(ListQuery::first(1000).prefix("t1")).await, ids[100..200]);
    let odd: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| *i == 0 || !i.is_multiple_of(2)).map(|(_, id)| id.clone()).collect();
    assert_eq!(list(ListQuery::first(1000).handler("odd")).await, odd);
    assert_eq!(list(ListQuery::first(1000).handler("even")).await.len(), 149, "t000 moved to `odd`");
    let mut seen = 0;
    for p in 0..P {
        let want: Vec<String> = ids.iter().filter(|id| partition_of(id, P) == p).cloned().collect();
        let got = list(ListQuery::first(1000).partition(p)).await;
        assert_eq!(got, want, "partition {p}");
        let odd_here: Vec<String> = want.iter().filter(|id| odd.contains(id)).cloned().collect();
        assert_eq!(list(ListQuery::first(1000).partition(p).handler("odd")).await, odd_here, "partition {p}, odd");
        seen += got.len();
    }
    assert_eq!(seen, ids.len());
}

/// A7: after the retention was lowered, the next write keeps exactly the newest records of the
/// lower bound, however many older ones it drops.
pub async fn schedules_lowered_audit_retention_trims_at_the_next_write<B: Backend>(b: B) {
    let store = store_of(&b);
    for i in 0..12 {
        create(&store, &daily(&format!("l{i:02}")), T0 + i).await;
    }
    assert_eq!(audit(&store, None).await.len(), 12);
    let lower = store.keeping_audit(2);
    create(&lower, &daily("l12"), T0 + 12).await;
    let kept: Vec<String> = audit(&store, None).await.into_iter().map(|r| r.target).collect();
    assert_eq!(kept, ["l12", "l11"]);
}

/// A7, A8: writes of different spaces at once never fail each other (no lock of one space's
/// audit trail reaches another's): 4 spaces, 3 writers each, 10 writes per writer, trimming a
/// trail of 2 records at every write; every write lands and each trail ends at 2 records.
pub async fn schedules_writes_of_many_spaces_at_once_all_land<B: Backend>(b: B) {
    let base = store_of(&b).keeping_audit(2);
    let spaces: Vec<SharedScheduleStore> = (0..4).map(|_| base.in_space(&unique("tck")).keeping_audit(2)).collect();
    let mut writers = tokio::task::JoinSet::new();
    for (k, space) in spaces.iter().enumerate() {
        for w in 0..3 {
            let space = space.clone();
            writers.spawn(async move {
                for i in 0..10 {
                    let id = format!("s{k}-w{w}-{i}");
                    let at = T0 + i64::from(i);
                    let created =
                        space.create(&daily(&id), P, &actor("x", at)).await.map_err(|e| format!("{id}: {e}"))?;
                    if created != Created::Created {
                        return Err(format!("{id}: {created:?}"));
                    }
                }
                Ok::<(), String>(())
            });
        }
    }
    while let Some(done) = writers.join_next().await {
        ok(ok(done, "writer"), "a write of one space beside others");
    }
    for space in &spaces {
        assert_eq!(ok(space.list(&ListQuery::first(100)).await, "list").len(), 30, "every write landed");
        assert_eq!(audit(space, None).await.len(), 2, "the trail trimmed to its retention");
    }
}

/// Expands to one `#[tokio::test]` per rule of the schedule store suite ([`RULES`]), for the
/// backend that `$make` (an async fn or closure returning a future of a backend) builds.
///
/// ```no_run
/// use simba::backend::memory::MemoryBackend;
///
/// async fn make() -> MemoryBackend {
///     MemoryBackend::new()
/// }
/// simba::schedules_suite!(make);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! schedules_suite {
    ($make:expr) => {
        $crate::schedules_suite!(@tests $make;
            schedules_create_stores_and_fills_the_bookkeeping,
            schedules_create_refuses_a_duplicate,
            schedules_concurrent_creates_of_one_id_store_one,
            schedules_update_replaces_the_definition,
            schedules_delete_removes,
            schedules_pause_and_resume_keep_the_note,
            schedules_every_write_bumps_its_partition_counter,
            schedules_partition_count_is_fixed_per_space,
            schedules_list_pages_and_filters,
            schedules_audit_records_every_write,
            schedules_audit_retention_bounded,
            schedules_record_audits_an_action_that_writes_no_schedule,
            schedules_spaces_share_nothing,
            schedules_payload_and_policies_round_trip,
            schedules_slot_claim_uses_the_schedules_own_ledger,
            schedules_concurrent_slot_claims_are_each_answered_as_alone,
            schedules_concurrent_writes_of_one_schedule_lose_nothing,
            schedules_long_listings_hold_every_schedule_once,
            schedules_lowered_audit_retention_trims_at_the_next_write,
            schedules_writes_of_many_spaces_at_once_all_land
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn schedules_survive_reopen() {
            $crate::tck::schedules::schedules_survive_reopen(($make)().await, ($make)().await).await;
        }
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::tck::schedules::$name(($make)().await).await;
            }
        )*
    };
}
