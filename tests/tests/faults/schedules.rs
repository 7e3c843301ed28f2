//! The multi-process schedules test of issue 36 ("Done when"): three `simba-schedule-node`
//! processes on one SQLite file and, at the same time, three on one PostgreSQL database, with
//! [`SCHEDULES`] schedules stored as data (a cron slot every [`PERIOD_S`] s, their offsets
//! spread over the period: about 100 fenced, recorded fires a second per store), a 1.5 s lease
//! renewed every 500 ms and 16 partitions of `simba.schedules`.
//!
//! While they run, the test kills one node with SIGKILL (in the middle of runs: every node has
//! runs in flight at every moment) and starts it again, stops another (SIGSTOP) for longer than
//! its lease and lets it go on, and, through the operators' API, edits, deletes, pauses (and
//! resumes some of) [`TOUCHED`] schedules each and asks for runs now, half of them with a
//! payload of their own. It then stops the nodes, starts one again until it has recorded the
//! slots the others left unclaimed as they stopped (rule A14), and reads every schedule's
//! history. Then:
//!
//! - no slot ran twice: no two `fire` lines of the nodes' logs share a schedule, a slot and a
//!   kind; no two records of a schedule share a slot;
//! - every slot of every schedule nobody touched, in the window, has exactly one record (ran,
//!   failed, missed, cancelled), none left `running`, and each `ran` record ran on the node and
//!   under the token it names;
//! - an edited schedule's slots follow the new spec and its runs carry the new payload from
//!   [`SETTLE`] after the edit; a deleted one fires no slot after it, a paused one none while
//!   paused (a resumed one fires again);
//! - every run-now request ran exactly once, as a `manual` record naming its key, with the
//!   request's payload when it had one;
//! - the audit trail holds every action, by whom.
//!
//! [`SETTLE`] (2 s) is how long after an operator's write its effect is checked: four renewal
//! intervals, not one, because two busy cores running six nodes and two stores stretch the
//! nodes' reads (the one-interval bound is tested on paused time, rule A11).

#![allow(clippy::print_stderr)] // The figures and failures are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use simba::admin::{ScheduleError, Schedules, TriggerOptions};
use simba::job_store::{Outcome, RunRecord, SharedJobStore, SlotKind};
use simba::schedule_store::{AuditAction, ListQuery, Schedule, ScheduleSpec, job_name};
use simba::{Simba, SimbaConfig};

use crate::nodes::{self, Node, signal};

const NODES: [&str; 3] = ["a", "b", "c"];
/// Schedules per store.
const SCHEDULES: usize = 2_000;
/// Every schedule fires once per period, at its own second of it.
const PERIOD_S: usize = 20;
/// How many schedules each kind of operator action touches.
const TOUCHED: usize = 40;
/// How long after a write its effect is checked (see the module's text).
const SETTLE: i64 = 2_000;
/// How late a loaded node may be for a slot: a touched schedule's slots up to this long before
/// the first fault may have been left unfired by the node then killed.
const LATE: i64 = 3_000;
/// How long the nodes run after the start.
const RUN: Duration = Duration::from_secs(37);

/// One store's run: its directory (config, node logs) and store URL.
struct Setup {
    dir: PathBuf,
    url: String,
    label: &'static str,
}

impl Setup {
    fn spawn(&self, name: &'static str) -> Node {
        let envs = [("SIMBA_NODE_TRACING", "1"), ("RUST_LOG", "warn,simba::job=info")];
        nodes::spawn(env!("CARGO_BIN_EXE_simba-schedule-node"), &self.dir, name, envs)
    }

    /// Every `fire` line of the nodes' logs.
    fn fires(&self) -> Vec<Fire> {
        let mut out = Vec::new();
        for name in NODES {
            let text = std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            out.extend(text.lines().filter_map(Fire::parse));
        }
        out
    }

    /// The last lines each node wrote to its stderr, for a failure message.
    fn stderr_tail(&self) -> String {
        nodes::stderr_tail(&self.dir, self.label, &NODES, 30)
    }
}

/// One run a node started: `fire <mono> <id> <slot_ms> <kind> <token> <v> <pid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fire {
    id: String,
    slot_ms: i64,
    kind: String,
    token: u64,
    v: u64,
}

impl Fire {
    fn parse(line: &str) -> Option<Fire> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 8 || f[0] != "fire" {
            return None;
        }
        Some(Fire {
            id: f[2].to_owned(),
            slot_ms: f[3].parse().ok()?,
            kind: f[4].to_owned(),
            token: f[5].parse().ok()?,
            v: f[6].parse().ok()?,
        })
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The second of the period schedule `i` fires at.
fn offset(i: usize) -> usize {
    i % PERIOD_S
}

fn spec(second: usize) -> ScheduleSpec {
    ScheduleSpec::cron(format!("{second}/{PERIOD_S} * * * * *"), "UTC")
}

fn id(i: usize) -> String {
    format!("tenant-{i:05}.tick")
}

fn schedule(i: usize, second: usize, v: u64) -> Schedule {
    Schedule::new(id(i), "tick", spec(second)).with_payload(format!(r#"{{"id": "{}", "v": {v}}}"#, id(i)))
}

/// The slots of a schedule firing at `second` of the period within `[from, to]`.
fn slots(second: usize, (from, to): (i64, i64)) -> Vec<i64> {
    let period = PERIOD_S as i64 * 1000;
    let first = from.div_euclid(period) * period + second as i64 * 1000;
    (0..).map(|k| first + k * period).skip_while(|s| *s < from).take_while(|s| *s <= to).collect()
}

/// What the operators did to one schedule, at which wall instants.
#[derive(Debug, Default, Clone)]
struct Touch {
    edited: Option<(i64, usize)>,
    deleted: Option<i64>,
    paused: Option<i64>,
    /// Whether it is resumed later, and when it was.
    resume: bool,
    resumed: Option<i64>,
    /// Run-now requests: key, with a payload (v = 999).
    triggered: Vec<(String, bool)>,
}

/// Issue 36 ("Done when"): schedules stored as data across kill -9, SIGSTOP past the lease,
/// edits, deletes, pauses and runs now, on SQLite and PostgreSQL at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schedule_slot_is_accounted_for_once_across_faults_and_operators() {
    let _serial = crate::SERIAL.lock().await;
    let sqlite = async {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("simba.db");
        let s =
            Setup { dir: dir.path().to_owned(), url: format!("sqlite://{}?mode=rwc", db.display()), label: "SQLite" };
        check(&s).await;
    };
    // A PostgreSQL database of its own, dropped at the end.
    let postgres = async {
        let Some(server) = simba_tests::server_url("SIMBA_TEST_POSTGRES_URL") else { return };
        let admin = sqlx::PgPool::connect(&server).await.expect("connect to the PostgreSQL test server");
        let database = format!("simba_sched_{:016x}", rand::random::<u64>());
        simba_tests::servers::exec(&admin, format!("CREATE DATABASE {database}")).await;
        let user = server.split_once("://").and_then(|(_, r)| r.split_once('@')).map_or("postgres", |(u, _)| u);
        let url = simba_tests::servers::url_for("postgres", &server, user, &database);
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Setup { dir: dir.path().to_owned(), url, label: "PostgreSQL" };
        check(&s).await;
        simba_tests::servers::exec(&admin, format!("DROP DATABASE {database} WITH (FORCE)")).await;
    };
    tokio::join!(sqlite, postgres);
}

/// An operator's write, repeated (as an operator would) while the store does not answer: on
/// SQLite a stopped node may hold the file's write lock, and every write then waits for it
/// (README, "SQLite"). A delete whose first answer was lost answers `NotFound` when repeated,
/// which is done. At most 20 s.
async fn operate<T, F: std::future::Future<Output = Result<T, ScheduleError>>>(
    label: &str,
    what: &str,
    op: impl Fn() -> F,
) -> Option<T> {
    let start = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        match op().await {
            Ok(v) => return Some(v),
            Err(ScheduleError::NotFound { .. }) if tries > 1 && what.starts_with("delete") => return None,
            Err(e @ (ScheduleError::Store(_) | ScheduleError::Trigger(_)))
                if start.elapsed() < Duration::from_secs(20) =>
            {
                eprintln!("{label}: {what}: {e}; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{label}: {what} (try {tries}): {e}"),
        }
    }
}

/// Creates the schedules (16 at a time), through the operators' API.
async fn create_all(api: &Schedules) {
    use futures_util::stream::{self, StreamExt};
    let created: Vec<Result<Schedule, String>> = stream::iter(0..SCHEDULES)
        .map(|i| async move { api.create(schedule(i, offset(i), 1), "setup").await.map_err(|e| e.to_string()) })
        .buffer_unordered(16)
        .collect()
        .await;
    let failed: Vec<&String> = created.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} creates failed: {:?}", failed.len(), &failed[..failed.len().min(3)]);
}

/// Three nodes on `s.url`; the faults, the operators; then the checks.
async fn check(s: &Setup) {
    let began = Instant::now();
    std::fs::write(
        s.dir.join("simba.toml"),
        format!(
            "[backend]\nurl = \"{}\"\n\n[session]\nlease_duration = \"1500ms\"\nrenew_interval = \"500ms\"\n\n\
             [schedules]\npartitions = 16\n",
            s.url
        ),
    )
    .expect("write config");
    let client = Simba::connect_in(&s.url, None, SimbaConfig::default()).await.expect("connect");
    let api = Schedules::for_client(&client).expect("a schedule store").with_partitions(16).expect("16");
    create_all(&api).await;
    eprintln!("{}: {SCHEDULES} schedules created in {:?}", s.label, began.elapsed());
    let mut nodes: Vec<Node> = NODES.iter().map(|n| s.spawn(n)).collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let window_start = now_ms();
    let mut touch: BTreeMap<usize, Touch> = BTreeMap::new();
    let mut faults: Vec<String> = Vec::new();

    // The schedules each action touches: disjoint sets, spread over the partitions.
    let pick = |k: usize| (0..TOUCHED).map(move |j| 7 + j * 41 + k * 11).collect::<Vec<usize>>();
    let (edit, delete, pause, trigger) = (pick(0), pick(1), pick(2), pick(3));

    tokio::time::sleep(Duration::from_secs(6)).await;
    let killed_at = now_ms();
    signal(&nodes[0], "KILL");
    let _ = nodes[0].child.wait();
    faults.push(format!("kill -9 node a at {killed_at}"));
    for &i in &edit {
        let second = (offset(i) + 7) % PERIOD_S;
        operate(s.label, "update", || api.update(schedule(i, second, 2), "ops-edit")).await;
        touch.entry(i).or_default().edited = Some((now_ms(), second));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    nodes[0] = s.spawn("a");
    faults.push(format!("node a started again at {}", now_ms()));
    for &i in &delete {
        let name = id(i);
        operate(s.label, "delete", || api.delete(&name, "ops-delete", Some("tenant left"))).await;
        touch.entry(i).or_default().deleted = Some(now_ms());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(&nodes[1], "STOP");
    faults.push(format!("SIGSTOP node b at {}", now_ms()));
    // Let go after 4 s whatever the operator is doing: on SQLite the stopped node may hold the
    // file's write lock, and the pauses below wait for it.
    let stopped = nodes[1].child.id();
    let cont = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let _ = Command::new("kill").arg("-CONT").arg(stopped.to_string()).status();
        now_ms()
    });
    for (n, &i) in pause.iter().enumerate() {
        let name = id(i);
        operate(s.label, "pause", || api.pause(&name, "ops-pause", Some("freeze"))).await;
        touch.entry(i).or_default().paused = Some(now_ms());
        touch.entry(i).or_default().resume = n % 2 == 0;
    }
    let resumed_at = cont.await.expect("SIGCONT");
    faults.push(format!("SIGCONT node b at {resumed_at}"));
    for (n, &i) in trigger.iter().enumerate() {
        let key = format!("req-{i}");
        let payload = format!(r#"{{"id": "{}", "v": 999}}"#, id(i));
        let with_payload = n % 2 == 0;
        let mut options = TriggerOptions::new().key(&key);
        if with_payload {
            options = options.payload(&payload);
        }
        let name = id(i);
        operate(s.label, "trigger", || api.trigger(&name, "ops-trigger", options)).await;
        touch.entry(i).or_default().triggered.push((key, with_payload));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    for &i in &pause {
        if touch.get(&i).is_some_and(|t| t.resume) {
            let name = id(i);
            operate(s.label, "resume", || api.resume(&name, "ops-resume", None)).await;
            touch.entry(i).or_default().resumed = Some(now_ms());
        }
    }
    let left = RUN.saturating_sub(Duration::from_millis(u64::try_from(now_ms() - window_start).unwrap_or(0)));
    tokio::time::sleep(left).await;
    let window_end = now_ms() - 3_000;
    for n in &nodes {
        signal(n, "TERM");
    }
    for n in &mut nodes {
        let _ = n.child.wait();
    }
    let store = client.job_store().expect("a jobs store");
    // A14: the slots none of the stopping nodes claimed (a loaded node may be seconds late for
    // its last ones) are recorded `missed` by the next holder at the start of its terms. One
    // node started again holds every partition, records them, and stops: the window's end
    // need not guess how late the nodes were.
    let mut recorder = s.spawn("a");
    faults.push(format!("node a started again after the stop at {}", now_ms()));
    let recorded = tail_recorded(&store, &touch, window_end).await;
    signal(&recorder, "TERM");
    let _ = recorder.child.wait();
    faults.push(format!("the untouched schedules' last slots recorded: {recorded:?}"));
    for f in &faults {
        eprintln!("{}: {f}", s.label);
    }
    let verdict = verify(s, &api, &store, &touch, (window_start, window_end, killed_at)).await;
    client.close().await;
    eprintln!("{}: {verdict} (the run took {:?})", s.label, began.elapsed());
}

/// Waits (at most 60 s) until every untouched schedule has a record of its last slot at or
/// before `end`; returns how long that took, or `None` when some still have none (the checks
/// then name them).
async fn tail_recorded(store: &SharedJobStore, touch: &BTreeMap<usize, Touch>, end: i64) -> Option<Duration> {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(60) {
        let h = histories(store).await;
        let done = h.iter().filter(|(i, _)| !touch.contains_key(i)).all(|(i, recs)| {
            let last = slots(offset(*i), (end - PERIOD_S as i64 * 1000, end)).last().copied();
            last.is_none_or(|last| recs.iter().any(|r| r.kind != SlotKind::Manual && r.slot_ms == last))
        });
        if done {
            return Some(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// Every schedule's records, by index (deleted ones included: history outlives them).
async fn histories(store: &SharedJobStore) -> BTreeMap<usize, Vec<RunRecord>> {
    use futures_util::stream::{self, StreamExt};
    stream::iter(0..SCHEDULES)
        .map(|i| {
            let store = store.clone();
            async move {
                let mut h = store.history(&job_name(&id(i)), 1000).await.expect("history");
                h.reverse();
                (i, h)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// The checks of the module's text; the figures as one line.
async fn verify(
    s: &Setup,
    api: &Schedules,
    store: &SharedJobStore,
    touch: &BTreeMap<usize, Touch>,
    window: (i64, i64, i64),
) -> String {
    let fires = s.fires();
    let h = histories(store).await;
    let fail = |what: String| -> ! { panic!("{}: {what}\n{}", s.label, s.stderr_tail()) };

    // No slot ran twice, on any node.
    let mut seen = BTreeSet::new();
    for f in &fires {
        if !seen.insert((f.id.clone(), f.slot_ms, f.kind.clone())) {
            fail(format!("slot {} of {} ({}) ran twice: {:?}", f.slot_ms, f.id, f.kind, fires_of(&fires, &f.id)));
        }
    }
    let by_id: BTreeMap<&str, Vec<&Fire>> = fires.iter().fold(BTreeMap::new(), |mut m, f| {
        m.entry(f.id.as_str()).or_default().push(f);
        m
    });
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (i, recs) in &h {
        let id = id(*i);
        let mine = by_id.get(id.as_str()).cloned().unwrap_or_default();
        let t = touch.get(i).cloned().unwrap_or_default();
        let mut slots_seen = BTreeSet::new();
        for r in recs {
            if r.kind != SlotKind::Manual && !slots_seen.insert(r.slot_ms) {
                fail(format!("{id}: two records of slot {}: {recs:?}", r.slot_ms));
            }
            if r.outcome == Outcome::Running {
                fail(format!("{id}: a record left running: {r:?}"));
            }
            if r.outcome == Outcome::Ran && r.kind != SlotKind::Manual {
                let ran = mine.iter().any(|f| f.slot_ms == r.slot_ms && f.token == r.token);
                if !ran {
                    fail(format!(
                        "{id}: `ran` record of slot {} (token {}) without its run: {mine:?}",
                        r.slot_ms, r.token
                    ));
                }
            }
        }
        check_one(&id, recs, &mine, &t, window).unwrap_or_else(|e| fail(e));
        for r in recs.iter().filter(|r| r.slot_ms >= window.0 && r.slot_ms <= window.1) {
            *counts.entry(r.outcome.as_str()).or_default() += 1;
        }
    }
    let audit = api.audit(None, 100_000).await.expect("audit");
    let by_action = |a: AuditAction| audit.iter().filter(|r| r.action == a).count();
    let expected = [
        (AuditAction::Create, SCHEDULES, "setup"),
        (AuditAction::Update, TOUCHED, "ops-edit"),
        (AuditAction::Delete, TOUCHED, "ops-delete"),
        (AuditAction::Pause, TOUCHED, "ops-pause"),
        (AuditAction::Resume, TOUCHED / 2, "ops-resume"),
        (AuditAction::Trigger, TOUCHED, "ops-trigger"),
    ];
    for (action, n, who) in expected {
        let mine = audit.iter().filter(|r| r.action == action && r.who == who).count();
        if by_action(action) != n || mine != n {
            fail(format!("the audit trail holds {} `{action}` records ({mine} by {who}), not {n}", by_action(action)));
        }
    }
    let left = api.list(ListQuery::first(1000)).await.expect("list").schedules.len();
    assert!(left > 0, "{}: the schedules are listed", s.label);
    format!("{} fires logged, no slot twice; records in the window by outcome: {counts:?}", fires.len())
}

fn fires_of<'a>(fires: &'a [Fire], id: &str) -> Vec<&'a Fire> {
    fires.iter().filter(|f| f.id == id).collect()
}

/// One schedule's records and runs against what the operators did to it. A touched
/// schedule's slots until [`LATE`] before the first fault (`killed`) must all be recorded;
/// after that and before an operator's write, a slot that the failover left unclaimed belongs to the spec the
/// write replaced and is not recorded by the next holder (rule A14: nothing before the
/// schedule's last write), so those are not required.
fn check_one(
    id: &str,
    recs: &[RunRecord],
    mine: &[&Fire],
    t: &Touch,
    (w0, w1, killed): (i64, i64, i64),
) -> Result<(), String> {
    let i: usize = id.trim_start_matches("tenant-").trim_end_matches(".tick").parse().unwrap_or_default();
    let recorded: BTreeSet<i64> = recs.iter().filter(|r| r.kind != SlotKind::Manual).map(|r| r.slot_ms).collect();
    let ran_after = |from: i64| mine.iter().filter(|f| f.kind != "manual" && f.slot_ms > from).count();
    // The windows in which every slot of the current spec must have exactly one record.
    let mut due: Vec<i64> = Vec::new();
    match (t.edited, t.deleted, t.paused) {
        (Some((at, second)), _, _) => {
            due.extend(slots(offset(i), (w0, killed.min(at) - LATE)));
            due.extend(slots(second, (at + SETTLE, w1)));
            if let Some(f) = mine.iter().find(|f| f.kind != "manual" && f.slot_ms > at + SETTLE && f.v != 2) {
                return Err(format!("{id}: a run after the edit with the old payload: {f:?}"));
            }
            let old: Vec<i64> = slots(offset(i), (at + SETTLE, w1));
            if let Some(f) = mine.iter().find(|f| f.kind != "manual" && old.contains(&f.slot_ms)) {
                return Err(format!("{id}: a slot of the old spec ran after the edit: {f:?}"));
            }
        }
        (None, Some(at), _) => {
            due.extend(slots(offset(i), (w0, killed.min(at) - LATE)));
            if ran_after(at + SETTLE) > 0 {
                return Err(format!("{id}: ran after its delete at {at}: {mine:?}"));
            }
        }
        (None, None, Some(at)) => {
            due.extend(slots(offset(i), (w0, killed.min(at) - LATE)));
            let until = t.resumed.unwrap_or(i64::MAX);
            let during = mine.iter().filter(|f| f.kind != "manual" && f.slot_ms > at + SETTLE && f.slot_ms < until);
            if let Some(f) = during.into_iter().next() {
                return Err(format!("{id}: ran while paused ({at} to {until}): {f:?}"));
            }
            if until != i64::MAX {
                due.extend(slots(offset(i), (until + SETTLE, w1)));
            }
        }
        (None, None, None) => due.extend(slots(offset(i), (w0, w1))),
    }
    if let Some(missing) = due.iter().find(|s| !recorded.contains(s)) {
        return Err(format!("{id}: slot {missing} has no record (window {w0}..{w1}, {t:?}): {recs:?}"));
    }
    for (key, with_payload) in &t.triggered {
        let manual: Vec<&RunRecord> = recs.iter().filter(|r| r.request_key.as_deref() == Some(key)).collect();
        let runs: Vec<&&Fire> = mine.iter().filter(|f| f.kind == "manual").collect();
        // One record per request, at most one run: a claim whose answer was lost took the
        // request without running it (`missed`, rule R3), or its record was closed as
        // abandoned by the next holder; a request that ran, ran once with its payload.
        if manual.len() != 1 || manual[0].kind != SlotKind::Manual || runs.len() > 1 {
            return Err(format!("{id}: request {key}: records {manual:?}, runs {runs:?}"));
        }
        if manual[0].outcome == Outcome::Ran && runs.is_empty() {
            return Err(format!("{id}: request {key} recorded `ran` without its run: {manual:?}"));
        }
        let v = if *with_payload { 999 } else { 1 };
        if let Some(run) = runs.first()
            && (run.v != v || run.slot_ms != manual[0].slot_ms)
        {
            return Err(format!(
                "{id}: request {key} ran with v {} at {} (want v {v}): {manual:?}",
                run.v, run.slot_ms
            ));
        }
    }
    Ok(())
}
