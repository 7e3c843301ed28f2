//! Exhaustive model checking of the lease protocol (SPEC rule V1).
//!
//! The model (`simba_tests::model`) has two nodes, one backend and one lease name (two in the
//! combined configuration, explored to a depth bound); a network
//! that delays (up to one tick, one message at a time across a tick boundary), reorders and
//! loses messages; clocks whose rates differ within `drift`; pauses; crashes. Every reachable
//! state within the bounds of each configuration is checked against term disjointness, token
//! monotonicity and the durable-session property, and (with tasks under the terms) exclusive
//! work and the handover order; each node's elections run the engine's election machine. A
//! second model drives the engine's rebalance decision for 2 nodes x 3 partitions. Then each
//! deliberately broken rule (a mutant) must be caught, with a counterexample printed.
//!
//! Run with `cargo test -p simba-tests --test engine model_check -- --nocapture` to see the figures
//! and the traces; `docs/adr/0006-protocol-model.md` explains the model and its bounds. The
//! larger configurations run in a release build:
//! `cargo test --release -p simba-tests --test engine model_check -- --ignored --nocapture`.

#![allow(clippy::print_stderr)] // The figures and the counterexamples are printed for the report.

use std::thread;
use std::time::Instant;

use simba_tests::model::lease::seen;
use simba_tests::model::rebalance::{self, RebalanceModel};
use simba_tests::model::{
    Config, Invariant, LeaseModel, Model, Mutant, Schedule, Transition, Violation, explore, explore_bounded,
};

/// A safety valve: a configuration that reaches this many states fails its test instead of
/// running for minutes (the bounds below stay far from it).
const MAX_STATES: usize = 10_000_000;

/// Explores `cfg` with the correct rules; panics with the trace on a violation, when the
/// exploration is cut short, or when a behaviour of `must_see` (bits of `seen`) was never
/// exercised (the configuration would check it vacuously).
fn check_correct(name: &str, cfg: Config, must_see: u64, max_states: usize) -> usize {
    let max_depth = cfg.max_depth;
    let model = LeaseModel::new(cfg);
    let r = explore_bounded(&model, max_states, max_depth);
    eprintln!(
        "correct model, {name}: {} states, {} transitions, depth {}, {:.2?}, complete: {}, frontier {}, exercised: {}",
        r.states,
        r.transitions,
        r.depth,
        r.elapsed,
        r.complete,
        r.frontier,
        seen::names(r.observed).join(" ")
    );
    if let Some(cex) = &r.counterexample {
        panic!("{name}: the correct model breaks {:?}:\n{}", cex.violation.invariant, model.render(cex));
    }
    match max_depth {
        None => assert!(r.complete, "{name}: not explored completely within {max_states} states"),
        // Complete up to the bound: every state within it was reached, none cut by max_states.
        Some(d) => assert!(
            r.states < max_states && (r.complete || r.depth == d),
            "{name}: not explored completely up to depth {d} within {max_states} states"
        ),
    }
    let missing = must_see & !r.observed;
    assert!(missing == 0, "{name}: never exercised {:?}", seen::names(missing));
    r.states
}

/// Explores the named configurations on two threads (the target machine has two cores).
fn check_all(configs: Vec<(&'static str, Config, u64)>, max_states: usize) {
    let start = Instant::now();
    let (a, b): (Vec<_>, Vec<_>) = configs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let states: usize = thread::scope(|s| {
        let run = |group: Vec<(usize, (&'static str, Config, u64))>| {
            group.into_iter().map(|(_, (name, cfg, must))| check_correct(name, cfg, must, max_states)).sum::<usize>()
        };
        let h = s.spawn(move || run(b));
        let n = run(a);
        n + h.join().expect("a model-checking thread panicked")
    });
    eprintln!("correct model: {states} states in all, {:.2?} wall time", start.elapsed());
}

/// What every configuration must exercise: terms, a lease won again after a term, a handover
/// from one node to the other, renewals, backend expiry, and a late `Won` reply (K4).
const COMMON: u64 = seen::TERM | seen::LATER_TERM | seen::HANDOVER | seen::RENEWED | seen::EXPIRY | seen::LATE_WIN;

/// The correct rules hold in every reachable state of four configurations (see
/// `Config::{drift, handover, pauses, crashes}` for the bounds), and each configuration
/// exercises what it is meant to cover: 1,796,160 states, about 30 s of CPU in a debug
/// build (on two threads), about 110 MB.
#[test]
fn correct_model_holds_exhaustively() {
    check_all(
        vec![
            // Alternating between the two threads: crashes + pauses, drift + handover (about
            // the same number of transitions each).
            ("crashes", Config::crashes(), COMMON | seen::CRASH),
            ("drift", Config::drift(), COMMON | seen::DRIFT | seen::DELAYED),
            ("pauses", Config::pauses(), COMMON | seen::PAUSED_HOLDER),
            ("handover", Config::handover(), COMMON | seen::DELAYED),
        ],
        MAX_STATES,
    );
}

/// Issue 13: drift and delays, pauses and a crash together, 2 nodes x 2 leases (see
/// `Config::combined_two_leases`), every state within 11 steps of the start (the symmetry of
/// nodes and of names reduces it about fourfold; ADR 0006 has the figures). Every invariant is
/// judged per lease, and the run must exercise a crash, drift, a delayed message, a paused
/// holder, one node holding both leases and each node holding one.
#[test]
fn combined_two_leases_holds_to_depth_11() {
    check_correct(
        "combined, 2 leases",
        Config { max_depth: Some(COMBINED_DEPTH), ..Config::combined_two_leases() },
        COMMON | seen::CRASH | seen::DRIFT | seen::DELAYED | seen::PAUSED_HOLDER | seen::BOTH_HELD | seen::SPLIT,
        MAX_STATES,
    );
}

/// The depth bound of the combined configuration in CI.
const COMBINED_DEPTH: usize = 11;

/// Issue 13 item 3, the part of the node the model does not take from `simba_core`: when
/// the session machine sends its open and keep-alives, and when the election machine sends an
/// attempt. Under `Schedule::Anytime` a node sends each of them at any instant its rules allow
/// (one call in flight per session and per name, no attempt while it holds the term), not on
/// the timers of `Schedule::Timers`, so every send schedule that the engine's
/// `SessionMachine` and `ElectionMachine` can produce, with any timer change, is among the runs
/// explored; the three invariants holding here means that no timing of the sends, right or
/// wrong, breaks safety (a wrong timer can only cost liveness, which the model does not judge).
/// Drift with delays and a crash, one lease, every state within ANYTIME_DEPTH steps.
#[test]
fn any_send_schedule_holds() {
    check_correct(
        "anytime sends, drift + crash",
        Config { schedule: Schedule::Anytime, max_depth: Some(ANYTIME_DEPTH), ..Config::drift_crash() },
        COMMON | seen::CRASH | seen::DRIFT | seen::DELAYED,
        MAX_STATES,
    );
}

/// The depth bound of the any-schedule configuration in CI.
const ANYTIME_DEPTH: usize = 16;

/// The larger configurations, in a release build: drift and delays with pauses, with a
/// crash, and with clock rates chosen anew at every tick. 16.4 million states, about 110 s
/// and 1.2 GB on two cores.
#[test]
#[ignore = "a release build: cargo test --release -p simba-tests --test engine model_check -- --ignored --nocapture"]
fn larger_configurations_hold_exhaustively() {
    check_all(
        vec![
            ("drift + pauses", Config::drift_pauses(), COMMON | seen::DRIFT | seen::DELAYED | seen::PAUSED_HOLDER),
            ("drift per tick", Config::drift_per_tick(), COMMON | seen::DRIFT | seen::DELAYED),
            ("drift + crash", Config::drift_crash(), COMMON | seen::CRASH | seen::DRIFT | seen::DELAYED),
        ],
        30_000_000,
    );
}

/// Wider bounds for the election machine and the rebalance, for a release build: the
/// election with tasks under drift (every mix of clock rates 3 and 4), and the rebalance with
/// `SIMBA_MODEL_PARTITIONS` partitions (default 5) and 4 sessions (two crashes and rejoins).
#[test]
#[ignore = "a release build: SIMBA_MODEL_PARTITIONS=5 cargo test --release -p simba-tests --test engine model_check::wider -- --ignored --nocapture"]
fn wider_election_and_rebalance_hold() {
    check_all(
        vec![(
            "election machine, tasks, drift",
            Config { rates: vec![3, 4], ..Config::election() },
            COMMON | seen::DRIFT | seen::TASK_AWAITED | seen::TASK_ABORTED | seen::LOST_WITH_TASK | seen::COOLDOWN,
        )],
        30_000_000,
    );
    let partitions = std::env::var("SIMBA_MODEL_PARTITIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let model = RebalanceModel::new(rebalance::Config { partitions, max_sessions: 4, ..rebalance::Config::small() });
    let r = explore(&model, 30_000_000);
    eprintln!(
        "rebalance, 2 nodes x {partitions} partitions, 4 sessions: {} states, {} transitions, depth {}, {:.2?}",
        r.states, r.transitions, r.depth, r.elapsed
    );
    assert!(r.counterexample.is_none() && r.complete, "{:?}", r.counterexample.map(|c| c.violation));
}

/// Explores `cfg` with `mutant`; a violation of `expected` must be found. Prints the trace.
fn caught(mutant: Mutant, cfg: Config, expected: Invariant) {
    let model = LeaseModel::new(cfg.with_mutant(mutant));
    let r = explore(&model, MAX_STATES);
    let Some(cex) = &r.counterexample else {
        panic!("mutant {mutant:?} was not caught ({} states, complete: {})", r.states, r.complete);
    };
    eprintln!(
        "mutant {mutant:?}: caught after {} states in {:.2?}, a trace of {} steps:\n{}",
        r.states,
        r.elapsed,
        cex.actions.len(),
        model.render(cex)
    );
    assert_eq!(cex.violation.invariant, expected, "mutant {mutant:?} broke another invariant than expected");
}

/// (a) `deadline = arrival + validity` instead of `sent_at + validity` (D1): a reply that
/// took a tick gives a deadline past the backend's expiry. The break is switched on inside the
/// engine's `simba_core::session::SessionMachine` (`opened`, `renewed`), which the model runs
/// for every `Opened` and `Alive` reply (issue 13 item 3).
#[test]
fn mutant_a_deadline_from_arrival_is_caught() {
    caught(Mutant::DeadlineFromArrival, Config::drift(), Invariant::DurableSession);
}

/// (b) `drift = 0` in the node's formula while its clock runs at 3/4 of the backend's. The
/// break is switched on inside the engine's D1 formula, `simba_core::Timing::local_validity`,
/// which the session machine the model runs uses.
#[test]
fn mutant_b_drift_ignored_is_caught() {
    caught(Mutant::IgnoreDrift, Config::drift(), Invariant::DurableSession);
}

/// (c) Adopting an acquire reply that does not answer the current attempt (K4): here the
/// reply of an attempt the node gave up on, from a session that has ended since, is adopted
/// into the next session. The node holds the same token twice (and the lease belongs to the
/// old session, which the backend will expire under the new term). The break is switched on
/// inside the engine's K4 rule, `simba_core::attempt::answers_current_attempt`, which the
/// model asks for every acquisition reply (and the engine's `Shared::settle_attempt` and
/// `settle_abandoned` for every acquisition result).
#[test]
fn mutant_c_late_acquire_reply_adopted_is_caught() {
    caught(Mutant::AdoptLateReply, Config::drift(), Invariant::TokenMonotonicity);
}

/// (d) The backend releases without comparing the token (T7): a late release of token 1 frees
/// the node's later term 2, and the other node wins token 3 while term 2 is still valid. The
/// one mutant of the modelled backend (the store's side of T7), not of `simba_core`.
#[test]
fn mutant_d_release_without_token_is_caught() {
    caught(Mutant::ReleaseWithoutToken, Config::handover(), Invariant::TermDisjointness);
}

/// The engine's K3 slot (`simba_core::attempt::AttemptSlot::abandon`, which the model asks at
/// every step-down) frees the slot at once, as `election.rs` `abandon()` once did: a new
/// attempt can win the same token (the session already holds the lease) and adopt it, and then
/// the abandoned attempt's late `Won` releases it while the term is valid. The correct slot
/// keeps K3 strictly: an abandoned attempt stays in flight until its reply or its timeout.
#[test]
fn engine_abandon_frees_slot_is_caught() {
    caught(Mutant::AbandonFreesSlot, Config::drift(), Invariant::TermDisjointness);
}

/// The engine's `reconcile()` (session.rs) judges every held term against a snapshot of the
/// backend's leases, including a term adopted after the snapshot was taken: it revokes it
/// (`TakenOver`), and the election wins the same token again as a new term (T2, T3). The
/// correct model only judges the terms the keep-alive's digest covered.
#[test]
fn engine_stale_reconcile_is_caught() {
    caught(Mutant::ReconcileStaleSnapshot, Config::drift(), Invariant::TokenMonotonicity);
}

/// K4 with pruning (issue 16 item 7): the released-token record of a name is forgotten once a
/// release of it is acknowledged and no acquisition of the name is in flight, or when the
/// attempt in flight at the acknowledgement ends. With the handover bounds and release
/// acknowledgements the model holds, and it reaches the deferred case (`prune-deferred`: an
/// acknowledgement while an acquisition that may still win the released token is in flight).
#[test]
fn k4_pruning_released_tokens_after_acknowledged_releases_holds() {
    check_all(vec![("release acks", Config::release_acks(), COMMON | seen::PRUNE_DEFERRED)], MAX_STATES);
}

/// The same pruning done at once, while an acquisition of the name is in flight: the backend
/// answered the acquisition with the token it held before it applied the release, and the
/// node adopts that token again (T3) after the release freed the lease. The break is switched
/// on inside the engine's own `simba_core::ledger::ReleasedTokens` (issue 13 item 3): the
/// model runs that code for the node's K4 record.
#[test]
fn k4_pruning_while_an_attempt_is_in_flight_is_caught() {
    caught(Mutant::PruneReleasedInFlight, Config::release_acks(), Invariant::TokenMonotonicity);
}

/// K4 broken inside the engine's own code (issue 13 item 3): `simba_core::ledger::judge_win`
/// adopts a won token at or below one the session released, and the model, which asks
/// `judge_win` for every adoption, finds the node holding a token it already gave back (T3).
#[test]
fn core_adopt_released_token_is_caught() {
    caught(Mutant::AdoptReleasedToken, Config::release_acks(), Invariant::TokenMonotonicity);
}

/// The election machine with tasks (H1-H5, K1, K3, T7): every node's election of the name is
/// the engine's `ElectionMachine`, fed the contender's events and its commands executed as the
/// contender executes them (the model keeps its phase and rebuilds it per event). Every term
/// runs a task; a step-down (cooling down for a tick, H4) waits for the task or aborts it at
/// the term's deadline (H1, H5); a term lost any other way aborts it at once (H3); a task
/// that returns on its own steps down. Besides the three invariants of V1: no two nodes work
/// under the name at one instant (a valid term, or the task of a term being handed over), and
/// the handover lists are honoured (revoke, then the task's end, then the release; no task
/// outside a term; no term while cooling down). Explored completely, and every one of those
/// behaviours is exercised.
#[test]
fn h1_h5_election_machine_with_tasks_holds() {
    check_all(
        vec![(
            "election machine, tasks",
            Config::election(),
            COMMON
                | seen::TASK_AWAITED
                | seen::TASK_ABORTED
                | seen::TASK_RETURNED
                | seen::LOST_WITH_TASK
                | seen::COOLDOWN,
        )],
        MAX_STATES,
    );
}

/// H1 broken inside the engine's own election machine: its handover list releases the lease
/// before it waits for the term's task. The model, which executes the machine's list as the
/// contender does, sees the release go out while the task still works (and, one step later,
/// the other node can win the lease while it does).
#[test]
fn h1_mutant_release_before_task_is_caught() {
    caught(Mutant::ReleaseBeforeTask, Config::election(), Invariant::HandoverOrder);
}

/// What the same mutant leads to when the handover order is not judged: the release frees the
/// lease while the stepped-down node's task still works, the other node wins it, and two nodes
/// work under the name at once (H1, H5; `ExclusiveWork`).
#[test]
fn h1_mutant_release_before_task_lets_two_nodes_work_at_once() {
    let model = LeaseModel::new(Config::election().with_mutant(Mutant::ReleaseBeforeTask));
    let only = Only(model, Invariant::ExclusiveWork);
    let r = explore(&only, MAX_STATES);
    let Some(cex) = &r.counterexample else { panic!("two nodes never worked at once ({} states)", r.states) };
    eprintln!(
        "mutant ReleaseBeforeTask, judged on exclusive work only: caught after {} states, a trace of {} steps:\n{}",
        r.states,
        cex.actions.len(),
        only.0.render(cex)
    );
    assert_eq!(cex.violation.invariant, Invariant::ExclusiveWork);
}

/// A model judged on one invariant only: the others' violations are ignored, to show where a
/// mutant caught by another invariant first leads.
struct Only<M: Model>(M, M::Invariant);

impl<M: Model> Model for Only<M> {
    type State = M::State;
    type Action = M::Action;
    type Invariant = M::Invariant;

    fn initial_states(&self) -> Vec<M::State> {
        self.0.initial_states()
    }

    fn successors(&self, state: &M::State, out: &mut Vec<Transition<M::State, M::Action, M::Invariant>>) {
        self.0.successors(state, out);
        for t in out.iter_mut() {
            t.violation = t.violation.take().filter(|v| v.invariant == self.1);
        }
    }

    fn check(&self, state: &M::State) -> Option<Violation<M::Invariant>> {
        self.0.check(state).filter(|v| v.invariant == self.1)
    }
}

/// J6 with the engine's rebalance decision (`simba_core::rebalance::plan`, driven as the
/// group loop drives it): 2 nodes x 3 partitions, joins, a crash and a rejoin, listings that
/// are stale or in either order, handovers that end later. In every reachable state no
/// partition is claimed twice, and from every state the members settle into a balanced
/// assignment once nothing joins or crashes any more.
#[test]
fn j6_rebalance_converges_and_never_doubly_holds() {
    let model = RebalanceModel::new(rebalance::Config::small());
    let r = explore(&model, MAX_STATES);
    eprintln!(
        "rebalance, 2 nodes x 3 partitions: {} states, {} transitions, depth {}, {:.2?}, complete: {}",
        r.states, r.transitions, r.depth, r.elapsed, r.complete
    );
    if let Some(cex) = &r.counterexample {
        panic!("the rebalance breaks {:?}: {}\n{:?}", cex.violation.invariant, cex.violation.detail, cex.actions);
    }
    assert!(r.complete, "not explored completely");
    let all = rebalance::seen::STEP_DOWN
        | rebalance::seen::RELEASED_TAKEN
        | rebalance::seen::STALE_VIEW
        | rebalance::seen::CRASH
        | rebalance::seen::CONTENDED;
    assert_eq!(r.observed & all, all, "a behaviour was never exercised: {:#b}", r.observed);
}

/// J6 broken inside the engine's `rebalance::target`: the ceil share goes to one rank too many,
/// the shares add up to more than the partitions, and a member never settles.
#[test]
fn j6_mutant_ceil_share_off_by_one_is_caught() {
    let cfg = rebalance::Config { mutant: Some(rebalance::Mutant::CeilShareOffByOne), ..rebalance::Config::small() };
    let r = explore(&RebalanceModel::new(cfg), MAX_STATES);
    let Some(cex) = &r.counterexample else { panic!("the mutant was not caught ({} states)", r.states) };
    eprintln!(
        "mutant CeilShareOffByOne: caught after {} states, a trace of {} steps: {:?}: {}",
        r.states,
        cex.actions.len(),
        cex.actions,
        cex.violation.detail
    );
    assert_eq!(cex.violation.invariant, rebalance::Invariant::Converges);
}

/// The figures of ADR 0006 for the symmetry reduction of the combined configuration: states
/// within 10 steps with no symmetry, each symmetry alone, and both (as CI runs it). Each
/// reduction must shrink the count. About 2 minutes in a debug build.
#[test]
#[ignore = "ADR figures: cargo test -p simba-tests --all-features --test engine model_check::combined_symmetry_figures -- --ignored --nocapture"]
fn combined_symmetry_figures() {
    let run = |node_symmetry, name_symmetry| {
        let model = LeaseModel::new(Config { node_symmetry, name_symmetry, ..Config::combined_two_leases() });
        let r = explore_bounded(&model, MAX_STATES, Some(10));
        eprintln!(
            "combined, 2 leases, depth 10, node symmetry {node_symmetry}, name symmetry {name_symmetry}: {} states, \
             {} transitions, {:.2?}",
            r.states, r.transitions, r.elapsed
        );
        assert!(r.counterexample.is_none() && r.states < MAX_STATES);
        r.states
    };
    let none = run(false, false);
    let nodes = run(true, false);
    let names = run(false, true);
    let both = run(true, true);
    assert!(nodes < none && names < none && both < nodes && both < names, "a symmetry reduced nothing");
}
