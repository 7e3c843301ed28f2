//! The J6 rebalance decision, pure: with `m` live members and `n` partitions, each member
//! converges to `floor(n/m)` or `ceil(n/m)` partitions. Which members get the `ceil` share is
//! decided by rank in the sorted member list, so every member computes the same targets from
//! the same list. A member over its share steps its highest-numbered surplus partitions down
//! (keeping the rest: sticky); a member under its share tries free partitions from its natural
//! segment on, so members mostly try different ones. Leases keep two members from ever
//! holding one partition; this decision only has to converge.

use std::collections::BTreeSet;

use super::mutants::{Mutant, active};

/// How many partitions member `rank` of `members` should hold (J6).
pub fn target(partitions: u32, members: usize, rank: usize) -> u32 {
    let m = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    let rank = u32::try_from(rank).unwrap_or(u32::MAX);
    let ceil = rank < partitions % m || (active(Mutant::CeilShareOffByOne) && rank == partitions % m);
    partitions / m + u32::from(ceil)
}

/// What one member does in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Its share is what it holds (or it is not listed and cannot judge): nothing.
    Keep,
    /// Over its share: hand these partitions over (H1), highest-numbered first.
    StepDown(Vec<u32>),
    /// Under its share: try these partitions, in order, until `need` were won.
    Acquire {
        /// How many more it should hold.
        need: usize,
        /// The partitions to try, in order (none it holds or is handing over).
        candidates: Vec<u32>,
    },
}

/// J6: the round of member `me` of the group's `members` (as the backend listed them, sorted
/// or not; `me` is counted even when the listing missed it), holding `held` and handing over
/// `leaving`, in a group of `partitions`. `released` are partitions whose release was heard
/// since the last round (where the backend broadcasts releases, K2): a member under its share
/// tries them first, since they are likely free, then the rest from its natural segment on.
pub fn plan<S: Ord + Clone>(
    partitions: u32,
    members: &[S],
    me: &S,
    held: &BTreeSet<u32>,
    leaving: &BTreeSet<u32>,
    released: &BTreeSet<u32>,
) -> Plan {
    let mut members: Vec<S> = members.to_vec();
    if !members.contains(me) {
        members.push(me.clone());
    }
    members.sort();
    members.dedup();
    let rank = members.iter().position(|m| m == me).unwrap_or(0);
    let want = target(partitions, members.len(), rank) as usize;
    if held.len() > want {
        return Plan::StepDown(held.iter().rev().take(held.len() - want).copied().collect());
    }
    let need = want - held.len();
    if need == 0 || partitions == 0 {
        return Plan::Keep;
    }
    let start = u32::try_from(rank as u64 * u64::from(partitions) / members.len() as u64).unwrap_or(0);
    let free = |i: &u32| *i < partitions && !held.contains(i) && !leaving.contains(i);
    let natural = (0..partitions).map(|k| (start + k) % partitions);
    let first: Vec<u32> = natural.clone().filter(|i| released.contains(i) && free(i)).collect();
    let candidates = first.iter().copied().chain(natural.filter(|i| !released.contains(i) && free(i))).collect();
    Plan::Acquire { need, candidates }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[u32]) -> BTreeSet<u32> {
        v.iter().copied().collect()
    }

    /// J6: the shares are floor or ceil, the ceil ones by rank, and they add up to `n`.
    #[test]
    fn j6_targets_are_floor_or_ceil_by_rank() {
        assert_eq!((0..3).map(|r| target(8, 3, r)).collect::<Vec<_>>(), vec![3, 3, 2]);
        assert_eq!((0..4).map(|r| target(2, 4, r)).collect::<Vec<_>>(), vec![1, 1, 0, 0]);
        assert_eq!(target(16, 0, 0), 16, "no listing: the member counts itself");
        for m in 1..20usize {
            assert_eq!((0..m).map(|r| target(1024, m, r)).sum::<u32>(), 1024);
        }
    }

    /// J6: shares are floor(n/m) or ceil(n/m) and add up to n (moved from `job/group.rs`).
    #[test]
    fn j6_targets() {
        for (n, m) in [(16u32, 3usize), (16, 2), (64, 4), (64, 3), (5, 7), (1, 1), (100_000, 7)] {
            let t: Vec<u32> = (0..m).map(|r| target(n, m, r)).collect();
            assert_eq!(t.iter().sum::<u32>(), n, "{n}/{m}");
            assert!(t.iter().all(|x| *x == n / m as u32 || *x == n.div_ceil(m as u32)), "{n}/{m}: {t:?}");
        }
        assert_eq!((0..3).map(|r| target(16, 3, r)).collect::<Vec<_>>(), vec![6, 5, 5]);
    }

    /// J6 sticky: a member over its share steps its highest-numbered partitions down and keeps
    /// the rest.
    #[test]
    fn j6_surplus_steps_down_the_highest_partitions() {
        let held = set(&[0, 1, 2, 5, 7]);
        assert_eq!(plan(8, &["a", "b"], &"a", &held, &set(&[]), &set(&[])), Plan::StepDown(vec![7]));
        assert_eq!(plan(8, &["a", "b", "c"], &"c", &held, &set(&[]), &set(&[])), Plan::StepDown(vec![7, 5, 2]));
    }

    /// J6: a member under its share tries the partitions it neither holds nor hands over,
    /// from its natural segment on (rank * n / m), wrapping around.
    #[test]
    fn j6_deficit_tries_free_partitions_from_the_natural_segment() {
        assert_eq!(
            plan(8, &["b", "a"], &"b", &set(&[4]), &set(&[6]), &set(&[])),
            Plan::Acquire { need: 3, candidates: vec![5, 7, 0, 1, 2, 3] }
        );
        assert_eq!(plan(8, &["a", "b"], &"a", &set(&[0, 1, 2, 3]), &set(&[]), &set(&[])), Plan::Keep);
    }

    /// J6: a member the listing missed (it joined after the backend answered) counts itself,
    /// and a duplicate listing counts once.
    #[test]
    fn j6_missing_or_duplicate_member_in_the_listing() {
        assert_eq!(
            plan(4, &["a"], &"b", &set(&[]), &set(&[]), &set(&[])),
            Plan::Acquire { need: 2, candidates: vec![2, 3, 0, 1] }
        );
        assert_eq!(plan(4, &["a", "a", "b"], &"a", &set(&[0, 1, 2]), &set(&[]), &set(&[])), Plan::StepDown(vec![2]));
        assert_eq!(plan(0, &["a"], &"a", &set(&[]), &set(&[]), &set(&[])), Plan::Keep);
    }

    /// J6: partitions whose release was heard are tried first (in the
    /// member's natural order), then the rest; one it holds, hands over, or that does not
    /// exist is never a candidate; a member at its share ignores them.
    #[test]
    fn j6_released_partitions_are_tried_first() {
        assert_eq!(
            plan(8, &["b", "a"], &"b", &set(&[4]), &set(&[6]), &set(&[1, 6, 4, 2, 9])),
            Plan::Acquire { need: 3, candidates: vec![1, 2, 5, 7, 0, 3] }
        );
        assert_eq!(plan(8, &["a", "b"], &"a", &set(&[0, 1, 2, 3]), &set(&[]), &set(&[5])), Plan::Keep);
    }
    /// The mutant the model checker must catch: the ceil share goes to one rank too many, so
    /// the shares add up to more than `n` (breaks J6's convergence).
    #[cfg(simba_mutants)]
    #[test]
    fn j6_mutant_ceil_share_off_by_one_overcounts() {
        let shares = || (0..2).map(|r| target(3, 2, r)).collect::<Vec<_>>();
        assert_eq!(crate::mutants::with(Some(Mutant::CeilShareOffByOne), shares), vec![2, 2]);
        assert_eq!(shares(), vec![2, 1], "off outside `with`");
    }
}
