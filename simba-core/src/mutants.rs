//! Deliberate rule breaks inside the core, switched on one at a time by the model checker so
//! that breaking a rule in the engine's own code is caught by the model check (V1). Compiled
//! in only with `--cfg simba_mutants` (this repository's `.cargo/config.toml` sets it for its
//! own builds, as tokio's `--cfg tokio_unstable`; a dependent crate never gets it): without it
//! [`active`] is always `false` and the switch does not exist. It is no cargo feature, so no
//! feature of the published crates can turn a rule break on.

/// A rule broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mutant {
    /// [`ReleasedTokens::release_acknowledged`](super::ledger::ReleasedTokens::release_acknowledged)
    /// forgets the record at once even while an acquisition of the name is in flight (breaks
    /// K4: that acquisition's reply may carry the released token).
    PruneReleasedInFlight,
    /// [`judge_win`](super::ledger::judge_win) adopts a won token at or below one the session
    /// released (breaks K4 and so T3).
    AdoptReleasedToken,
    /// [`reconcile`](super::ledger::reconcile) judges every held term against the listing,
    /// including one adopted after the listing was asked for: it is revoked `TakenOver` and
    /// the election wins the same token again as a new term (breaks T2, T3).
    ReconcileStaleSnapshot,
    /// [`AttemptSlot::abandon`](super::attempt::AttemptSlot::abandon) frees the K3 slot at
    /// once, before the abandoned acquisition's reply arrived: a next attempt may adopt the
    /// lease, and the abandoned attempt's late `Won` then releases it under the valid term
    /// (breaks K3, then term disjointness; `election.rs` `abandon()` did this once).
    AbandonFreesSlot,
    /// [`SessionMachine::opened`](super::session::SessionMachine::opened) and
    /// [`renewed`](super::session::SessionMachine::renewed) count the local deadline from the
    /// reply's arrival instead of the request's `sent_at` (breaks D1: a slow reply lengthens
    /// the deadline past the store's expiry, so D6 fails).
    DeadlineFromArrival,
    /// [`Timing::local_validity`](super::timing::Timing::local_validity) leaves out the drift
    /// term: `remaining - margin` (breaks D1 and so D6: a node clock slower than the store's
    /// outlives the store's expiry).
    IgnoreDrift,
    /// [`answers_current_attempt`](super::attempt::answers_current_attempt) says every
    /// acquisition reply answers the current attempt: a `Won` of an abandoned attempt, of one
    /// given up at its D2 timeout, or of one sent for a session that has ended since, is
    /// judged for adoption into the session live now (breaks K4; the released-token check of
    /// [`judge_win`](super::ledger::judge_win) is kept).
    AdoptLateReply,
    /// The H1 handover list of [`ElectionMachine`](super::election::ElectionMachine) releases
    /// the lease before it waits for the term's task (`Revoke`, `Release`, `AwaitTask`, ...):
    /// the next holder may win the lease while the task still works under the revoked term
    /// (breaks H1 and H5).
    ReleaseBeforeTask,
    /// [`rebalance::target`](super::rebalance::target) gives the `ceil` share to every rank up to
    /// `n mod m` inclusive instead of below it (an off-by-one): the shares add up to more than
    /// `n`, so a member never reaches its share and keeps contending for partitions others hold
    /// (breaks J6's convergence).
    CeilShareOffByOne,
}

#[cfg(simba_mutants)]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutant>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with `mutant` switched on in this thread (none with `None`), then restores the
/// switch.
#[cfg(simba_mutants)]
pub fn with<R>(mutant: Option<Mutant>, f: impl FnOnce() -> R) -> R {
    let previous = ACTIVE.with(|a| a.replace(mutant));
    let r = f();
    ACTIVE.with(|a| a.set(previous));
    r
}

/// Whether `mutant` is switched on in this thread (never without the feature `mutants`).
pub fn active(mutant: Mutant) -> bool {
    #[cfg(simba_mutants)]
    {
        ACTIVE.with(|a| a.get() == Some(mutant))
    }
    #[cfg(not(simba_mutants))]
    {
        let _ = mutant;
        false
    }
}
