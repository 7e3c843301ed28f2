//! The checker on histories whose verdict is known: linearizable ones (some only after
//! backtracking, some only through an operation whose outcome was lost), and violations of
//! each rule of the model (some only found after backtracking).

use std::time::Duration;

use super::{Budget, Verdict, check_history};
use crate::lincheck::model::Tolerance;
use crate::lincheck::record::{Call, Op, Outcome};

const MS: u128 = 1_000_000;

/// A history written by hand: each call with its interval in ms (`None`: it never returned).
#[derive(Default)]
struct H(Vec<Op>);

impl H {
    fn op(mut self, call: Call, inv: u128, ret: Option<u128>, outcome: Outcome) -> Self {
        let seq = self.0.len() as u64;
        self.0.push(Op { process: 1, seq, call, invoked: inv * MS, returned: ret.map(|r| r * MS), outcome });
        self
    }
    /// Opens session `s` with a 1 s lifetime, during [inv, ret].
    fn open(self, s: &str, inv: u128, ret: u128) -> Self {
        let ttl = Duration::from_secs(1);
        self.op(Call::Open { ttl }, inv, Some(ret), Outcome::Opened { session: s.into(), remaining: ttl })
    }
    fn keep(self, s: &str, inv: u128, ret: u128, outcome: Outcome) -> Self {
        self.op(Call::KeepAlive { session: s.into() }, inv, Some(ret), outcome)
    }
    fn acquire(self, s: &str, inv: u128, ret: u128, outcome: Outcome) -> Self {
        self.op(Call::Acquire { session: s.into(), name: "x".into() }, inv, Some(ret), outcome)
    }
    fn lost_acquire(self, s: &str, inv: u128) -> Self {
        self.op(Call::Acquire { session: s.into(), name: "x".into() }, inv, None, Outcome::Unknown)
    }
    fn release(self, s: &str, token: u64, inv: u128, ret: u128, freed: bool) -> Self {
        self.op(Call::Release { session: s.into(), name: "x".into(), token }, inv, Some(ret), Outcome::Bool(freed))
    }
    fn close(self, s: &str, inv: u128, ret: u128) -> Self {
        self.op(Call::Close { session: s.into() }, inv, Some(ret), Outcome::Done)
    }
    fn claim(self, s: &str, token: u64, slot: i64, inv: u128, ret: u128, ok: bool) -> Self {
        let call = Call::Claim { session: s.into(), name: "x".into(), token, slot };
        self.op(call, inv, Some(ret), Outcome::Bool(ok))
    }
    fn verdict(&self) -> Verdict {
        check_history(&self.0, Tolerance(Duration::from_millis(10)), Budget::default()).verdict
    }
}

fn alive() -> Outcome {
    Outcome::Alive { remaining: Duration::from_secs(1) }
}

fn assert_violation(h: &H, what: &str) {
    match h.verdict() {
        Verdict::Violation { name, detail } => {
            assert!(name == "x" || name == "(sessions without a lease)", "{what}: {name}");
            assert!(detail.contains("linearize"), "{what}: {detail}");
        }
        v => panic!("{what}: expected a violation, got {v:?}"),
    }
}

/// A and B open; A wins, B is refused, A releases, B wins with a higher token.
fn handover() -> H {
    H::default()
        .open("A", 0, 5)
        .open("B", 0, 5)
        .acquire("A", 10, 20, Outcome::Won(1))
        .acquire("B", 30, 40, Outcome::Held)
        .release("A", 1, 50, 60, true)
        .acquire("B", 70, 80, Outcome::Won(2))
}

#[test]
fn v4_a_sequential_handover_is_linearizable() {
    assert_eq!(handover().verdict(), Verdict::Linearizable);
}

#[test]
fn v4_a_second_holder_is_a_violation() {
    // B wins while A holds, 30 ms into A's 1 s session: two holders.
    let h = H::default().open("A", 0, 5).open("B", 0, 5).acquire("A", 10, 20, Outcome::Won(1)).acquire(
        "B",
        30,
        40,
        Outcome::Won(2),
    );
    assert_violation(&h, "double grant");
    // The same grant with A's token: the nodes' own overlap check counts only distinct tokens.
    let h = H::default().open("A", 0, 5).open("B", 0, 5).acquire("A", 10, 20, Outcome::Won(1)).acquire(
        "B",
        30,
        40,
        Outcome::Won(1),
    );
    assert_violation(&h, "double grant with the holder's token");
}

#[test]
fn v4_a_holder_expires_only_after_its_window() {
    // A's window ends at 0 + 1000 ms (its open), then 600 + 1000 (its keep-alive).
    let base = || {
        H::default().open("A", 0, 5).open("B", 0, 5).acquire("A", 10, 20, Outcome::Won(1)).keep("A", 600, 610, alive())
    };
    assert_violation(&base().acquire("B", 1200, 1210, Outcome::Won(2)), "won inside the renewed window");
    assert_eq!(base().acquire("B", 1605, 1615, Outcome::Won(2)).verdict(), Verdict::Linearizable);
    // The tolerance: 5 ms before the window's end, completed at 1595 + 10 ms of tolerance.
    assert_eq!(base().acquire("B", 1590, 1595, Outcome::Won(2)).verdict(), Verdict::Linearizable);
    assert_violation(&base().acquire("B", 1580, 1585, Outcome::Won(2)), "won 15 ms early");
}

#[test]
fn v4_tokens_strictly_increase() {
    let h = handover().release("B", 2, 90, 95, true).acquire("A", 100, 110, Outcome::Won(2));
    assert_violation(&h, "a token granted twice");
    let h = handover().release("B", 2, 90, 95, true).acquire("A", 100, 110, Outcome::Won(7));
    assert_eq!(h.verdict(), Verdict::Linearizable, "tokens need not be contiguous (ZooKeeper, etcd)");
}

#[test]
fn v4_an_expired_session_never_answers_live() {
    let h = H::default().open("A", 0, 5).keep("A", 1100, 1110, Outcome::Expired).keep("A", 1200, 1210, alive());
    assert_violation(&h, "alive after expired");
    let h = H::default()
        .open("A", 0, 5)
        .keep("A", 1100, 1110, Outcome::Expired)
        .acquire("A", 1200, 1210, Outcome::Won(1))
        .acquire("B", 1300, 1310, Outcome::Held);
    assert_violation(&h, "won after expired");
    // And a session that answers expired inside its window expired early.
    let h = H::default().open("A", 0, 5).acquire("A", 10, 20, Outcome::Won(1)).keep("A", 300, 310, Outcome::Expired);
    assert_violation(&h, "expired early");
}

#[test]
fn v4_release_only_by_the_holder_with_its_token() {
    let h = handover().release("A", 1, 90, 95, true);
    assert_violation(&h, "released by the previous holder");
    let h = handover().release("B", 1, 90, 95, true);
    assert_violation(&h, "released with an old token");
    // A refused release of somebody else's lease, and a freed lease taken at once.
    let h = handover().release("A", 2, 90, 95, false).release("B", 2, 100, 105, true).acquire(
        "A",
        110,
        120,
        Outcome::Won(3),
    );
    assert_eq!(h.verdict(), Verdict::Linearizable);
    // A released lease answers held to nobody.
    assert_violation(&handover().release("B", 2, 90, 95, true).acquire("A", 100, 110, Outcome::Held), "held when free");
}

#[test]
fn v4_closing_frees_the_lease_and_ends_the_session() {
    let h = handover().close("B", 90, 95).acquire("A", 100, 110, Outcome::Won(3));
    assert_eq!(h.verdict(), Verdict::Linearizable);
    // Its lease may still be answered held until the store drops the session (ZooKeeper when
    // the close could not reach the server).
    let h = handover().close("B", 90, 95).acquire("A", 100, 110, Outcome::Held).acquire("A", 120, 130, Outcome::Won(3));
    assert_eq!(h.verdict(), Verdict::Linearizable);
    assert_violation(&handover().close("B", 90, 95).keep("B", 100, 110, alive()), "alive after close");
}

#[test]
fn v4_claims_need_the_term_and_a_later_slot() {
    let h = handover().claim("B", 2, 100, 90, 95, true).claim("B", 2, 200, 100, 105, true);
    assert_eq!(h.verdict(), Verdict::Linearizable);
    assert_violation(&handover().claim("B", 2, 100, 90, 95, true).claim("B", 2, 100, 100, 105, true), "slot twice");
    assert_violation(&handover().claim("A", 1, 100, 90, 95, true), "claimed by the previous holder");
}

#[test]
fn v4_linearizable_only_after_backtracking() {
    // A's acquisition [30, 200] is invoked first and wins token 3; B's [40, 90] wins token 2
    // and B releases it [100, 110]. Trying A first (its invocation comes first) leads nowhere:
    // B cannot win while A holds. Only B, its release, then A works.
    let h = H::default()
        .open("A", 0, 5)
        .open("B", 0, 5)
        .open("C", 0, 5)
        .acquire("C", 6, 8, Outcome::Won(1))
        .release("C", 1, 10, 12, true)
        .acquire("A", 30, 200, Outcome::Won(3))
        .acquire("B", 40, 90, Outcome::Won(2))
        .release("B", 2, 100, 110, true);
    assert_eq!(h.verdict(), Verdict::Linearizable);
}

#[test]
fn v4_a_violation_found_after_backtracking() {
    // As above, but A's acquisition returns at 95, before B's release starts: every order
    // fails, and the search must try both before it says so.
    let h = H::default()
        .open("A", 0, 5)
        .open("B", 0, 5)
        .open("C", 0, 5)
        .acquire("C", 6, 8, Outcome::Won(1))
        .release("C", 1, 10, 12, true)
        .acquire("A", 30, 95, Outcome::Won(3))
        .acquire("B", 40, 90, Outcome::Won(2))
        .release("B", 2, 100, 110, true);
    assert_violation(&h, "two holders whichever comes first");
}

#[test]
fn v4_a_lost_acquisition_may_have_won() {
    // C frees the lease; A's acquisition is lost (no answer); B is then refused: only A's lost
    // call, applied, explains it. Without it, the same refusal is a violation.
    let base = || {
        H::default()
            .open("A", 0, 5)
            .open("B", 0, 5)
            .open("C", 0, 5)
            .acquire("C", 6, 8, Outcome::Won(1))
            .release("C", 1, 10, 12, true)
    };
    let h = base().lost_acquire("A", 20).acquire("B", 50, 60, Outcome::Held);
    assert_eq!(h.verdict(), Verdict::Linearizable);
    assert_violation(&base().acquire("B", 50, 60, Outcome::Held), "held when free, nothing lost");
    // The lost grant's token is unknown but above 1: A's retry learns it, and B's later win
    // (after A's window) must be above it.
    let h = base()
        .lost_acquire("A", 20)
        .acquire("B", 50, 60, Outcome::Held)
        .acquire("A", 70, 80, Outcome::Won(2))
        .acquire("B", 1100, 1110, Outcome::Won(2));
    assert_violation(&h, "the lost grant's token granted again");
}

#[test]
fn v4_the_search_is_bounded() {
    // A token granted twice after many concurrent lost acquisitions: to call it a violation the
    // search must try every order of the lost calls, which a budget of 50 steps cannot.
    let mut h = H::default();
    for i in 0..12 {
        h = h.open(&format!("S{i}"), 0, 5);
    }
    for i in 0..12 {
        h = h.lost_acquire(&format!("S{i}"), 10);
    }
    h = h.acquire("T", 20, 30, Outcome::Won(1)).acquire("U", 40, 50, Outcome::Won(1));
    let c =
        check_history(&h.0, Tolerance(Duration::from_millis(10)), Budget { steps: 50, time: Duration::from_secs(5) });
    match c.verdict {
        Verdict::Unknown { reason, .. } => assert!(reason.contains("budget"), "{reason}"),
        v => panic!("expected unknown, got {v:?}"),
    }
}
