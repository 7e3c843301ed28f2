//! The lease ledger's rules (K3, K4, T6), pure: what a session remembers of the tokens it
//! released, whether a won lease becomes a term, and what a reconcile after a keep-alive digest
//! mismatch revokes and releases. The engine keeps the ledger's state under the client's state
//! lock and asks these functions every decision, so each rule is written once.

use std::collections::{HashMap, HashSet};

use super::mutants::{Mutant, active};

/// The K4 record of one session: the highest token it released per lease name, kept while it
/// matters (see [`release_acknowledged`](ReleasedTokens::release_acknowledged)).
#[derive(Debug, Default, Clone)]
pub struct ReleasedTokens {
    records: HashMap<String, Released>,
}

/// The record of one name: the highest token released, and whether a release of that token
/// was acknowledged while an acquisition of the name was in flight.
#[derive(Debug, Clone, Copy)]
struct Released {
    token: u64,
    acked: bool,
}

impl ReleasedTokens {
    /// The session released (or is releasing) `name` with `token` (K4): from now on a won
    /// acquisition of `name` at or below `token` is not adopted.
    pub fn note_released(&mut self, name: &str, token: u64) {
        let e = self.records.entry(name.to_owned()).or_insert(Released { token: 0, acked: false });
        if token >= e.token {
            // A release of this token is outstanding again: not acknowledged yet.
            *e = Released { token, acked: false };
        }
    }

    /// The highest token the session released for `name` while it still matters (0 when
    /// none).
    pub fn max_released(&self, name: &str) -> u64 {
        self.records.get(name).map_or(0, |e| e.token)
    }

    /// The backend answered a release of `name` with `token` (either answer: freed, or not
    /// held). After it the backend no longer holds `name` for this session with `token`, so an
    /// acquisition sent from now on wins, if at all, a greater token (T3), and the record of
    /// `name` is forgotten; this keeps the record from growing with every name a session ever
    /// released. Unless an acquisition of `name` is in flight (`in_flight`,
    /// K3): the backend may have answered it with the released token before it applied the
    /// release, so the record stays until that attempt ends
    /// ([`attempt_ended`](ReleasedTokens::attempt_ended)). Checked by the model
    /// (`k4_pruning_released_tokens_after_acknowledged_releases_holds`, and the mutant that
    /// prunes while in flight, `k4_pruning_while_an_attempt_is_in_flight_is_caught`).
    pub fn release_acknowledged(&mut self, name: &str, token: u64, in_flight: bool) {
        let Some(e) = self.records.get_mut(name).filter(|e| e.token <= token) else { return };
        if in_flight && !active(Mutant::PruneReleasedInFlight) {
            e.acked = true;
        } else {
            self.records.remove(name);
            self.shrink();
        }
    }

    /// The acquisition of `name` in flight ended (its result was taken, or it was given up): a
    /// record whose release was acknowledged meanwhile is forgotten.
    pub fn attempt_ended(&mut self, name: &str) {
        if self.records.get(name).is_some_and(|e| e.acked) {
            self.records.remove(name);
            self.shrink();
        }
    }

    /// Whether the release of `name`'s recorded token was acknowledged while an acquisition
    /// of the name was in flight (the record goes when that attempt ends).
    pub fn acknowledged(&self, name: &str) -> bool {
        self.records.get(name).is_some_and(|e| e.acked)
    }

    /// How many names have a record.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no name has a record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Gives memory back once the map holds far fewer records than it has room for (a burst
    /// of releases leaves a large table behind otherwise).
    fn shrink(&mut self) {
        if self.records.capacity() > 64 && self.records.len() * 4 < self.records.capacity() {
            self.records.shrink_to_fit();
        }
    }
}

/// What to do with a lease an acquisition won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It becomes a term of the session.
    Adopt,
    /// Nobody may use it: release it with its token.
    Release,
}

/// K4: a won lease is adopted as a term only if the reply answers the current attempt (asked
/// first, of [`answers_current_attempt`](super::attempt::answers_current_attempt): a reply that
/// does not never reaches here), arrived while the session is live on the local clock
/// (`session_live`), the client is not closed, and its token exceeds every token this session
/// released for the name (`max_released`). Otherwise it is released.
pub fn judge_win(token: u64, session_live: bool, client_closed: bool, max_released: u64) -> Verdict {
    let above = token > max_released || active(Mutant::AdoptReleasedToken);
    if session_live && !client_closed && above { Verdict::Adopt } else { Verdict::Release }
}

/// A term of the session as a reconcile sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldTerm<'a> {
    /// The lease name.
    pub name: &'a str,
    /// Its token.
    pub token: u64,
    /// Whether it was revoked already.
    pub revoked: bool,
}

/// What a reconcile does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled<'a> {
    /// Terms the backend no longer lists for the session: revoke them `TakenOver` (T6).
    pub taken: Vec<&'a str>,
    /// Leases the backend lists for the session that no term or acquisition of the client
    /// knows: orphans of abandoned attempts, released with their token (K4).
    pub orphans: Vec<(String, u64)>,
}

/// T6, K4: judges a listing of what the backend says the session `owned`, asked for after a
/// keep-alive digest mismatch. Only the terms held when the listing was asked for (`asked`) are
/// judged by it: a term adopted while it was under way may be missing from it, and revoking it
/// would let the election win the same token again as a new term (T2, T3). `held` are the
/// session's terms now; `known(name)` says whether the client holds or acquires `name`.
pub fn reconcile<'a>(
    asked: &HashSet<(&str, u64)>,
    held: &[HeldTerm<'a>],
    owned: &[(String, u64)],
    known: impl Fn(&str) -> bool,
) -> Reconciled<'a> {
    let listed: HashSet<(&str, u64)> = owned.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let taken = held
        .iter()
        .filter(|t| {
            let judged = asked.contains(&(t.name, t.token)) || active(Mutant::ReconcileStaleSnapshot);
            !t.revoked && judged && !listed.contains(&(t.name, t.token))
        })
        .map(|t| t.name)
        .collect();
    let orphans = owned.iter().filter(|(n, _)| !known(n)).cloned().collect();
    Reconciled { taken, orphans }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// K4 pruning: an acknowledged release forgets its record at once when
    /// no acquisition of the name is in flight.
    #[test]
    fn k4_acknowledged_release_forgets_the_record() {
        let mut c = ReleasedTokens::default();
        c.note_released("a", 3);
        assert_eq!(c.max_released("a"), 3);
        c.release_acknowledged("a", 3, false);
        assert_eq!(c.max_released("a"), 0);
        assert!(c.is_empty());
    }

    /// K4 pruning: while an acquisition of the name is in flight the record stays (its reply
    /// may carry the released token), and goes when that attempt ends; an acknowledgement of
    /// an older token, or a newer release noted since, keeps it.
    #[test]
    fn k4_release_acknowledged_during_an_attempt_waits_for_its_end() {
        let mut c = ReleasedTokens::default();
        c.note_released("a", 3);
        c.release_acknowledged("a", 3, true);
        assert_eq!(c.max_released("a"), 3, "the attempt in flight may still answer token 3");
        c.attempt_ended("a");
        assert_eq!(c.max_released("a"), 0);

        c.note_released("a", 5);
        c.release_acknowledged("a", 4, false);
        assert_eq!(c.max_released("a"), 5, "an older token's acknowledgement says nothing of token 5");

        c.release_acknowledged("a", 5, true);
        c.note_released("a", 5); // released again (a stale win of token 5 given back)
        c.attempt_ended("a");
        assert_eq!(c.max_released("a"), 5, "the second release of token 5 is not acknowledged yet");
        c.attempt_ended("b");
        c.release_acknowledged("a", 5, false);
        assert_eq!(c.len(), 0);
    }

    /// K4: adopted only when live, open and above every released token; otherwise released.
    #[test]
    fn k4_judge_win() {
        assert_eq!(judge_win(4, true, false, 3), Verdict::Adopt);
        assert_eq!(judge_win(3, true, false, 3), Verdict::Release, "a released token is never adopted again");
        assert_eq!(judge_win(4, false, false, 0), Verdict::Release, "a reply after the local deadline");
        assert_eq!(judge_win(4, true, true, 0), Verdict::Release, "the client closed meanwhile");
    }

    /// T6, K4: a reconcile revokes only terms held when the listing was asked for and missing
    /// from it; it releases only leases no term or attempt knows.
    #[test]
    fn t6_k4_reconcile() {
        let asked: HashSet<(&str, u64)> = [("a", 1), ("b", 2), ("c", 3)].into_iter().collect();
        let held = [
            HeldTerm { name: "a", token: 1, revoked: false }, // listed: kept
            HeldTerm { name: "b", token: 2, revoked: false }, // missing: taken over
            HeldTerm { name: "c", token: 3, revoked: true },  // missing but already revoked
            HeldTerm { name: "d", token: 4, revoked: false }, // adopted after the ask: not judged
        ];
        let owned = vec![("a".to_owned(), 1), ("e".to_owned(), 7), ("f".to_owned(), 8)];
        let r = reconcile(&asked, &held, &owned, |n| matches!(n, "a" | "b" | "c" | "d" | "f"));
        assert_eq!(r, Reconciled { taken: vec!["b"], orphans: vec![("e".to_owned(), 7)] });
    }
}
