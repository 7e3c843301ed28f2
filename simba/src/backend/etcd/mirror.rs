//! The leases this backend's sessions hold, mirrored from the store, so that a keep-alive can
//! compare the engine's digest without reading them (rule S1; ADR 0011).
//!
//! Two sources feed it: the replies of this backend's own acquisitions and releases, and the
//! watch on the lease prefix, which delivers every change of every lease key in revision
//! order (other nodes' acquisitions, expiries, a key deleted or overwritten by hand). Each
//! change carries the store revision at which it happened, and a change is applied only if it
//! is newer than what the mirror already has for that key, so the two sources can arrive in
//! any order: a reply ahead of the watch is remembered until the watch has passed it.
//!
//! The mirror is exact for every revision the watch has delivered. It is trusted only while
//! the watch is established and has missed nothing since it began; after a gap (history
//! compacted while the watch was away) every session is marked unsynced and its keep-alive
//! answers "digest differs" until [`Mirror::resync`] installs an authoritative listing.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::backend::HeldDigest;

/// The mirrored leases of every session this backend opened.
#[derive(Default)]
pub(super) struct Mirror(Mutex<State>);

#[derive(Default)]
struct State {
    /// By etcd lease id (one per session).
    sessions: HashMap<i64, Held>,
    /// Changes applied from replies and not yet passed by the watch: key name -> revision.
    ahead: HashMap<String, i64>,
    /// Every change up to this revision has been delivered by the watch.
    watched_to: i64,
    /// The watch is established and continuous since it began.
    live: bool,
}

#[derive(Default)]
struct Held {
    leases: HashMap<String, u64>,
    /// The record is complete (no watch gap since it was last listed).
    synced: bool,
    /// Changes at or before this revision are already in the record (from a listing).
    floor: i64,
}

impl Mirror {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A session opened: it holds nothing yet.
    pub(super) fn open(&self, lease: i64) {
        self.state().sessions.insert(lease, Held { synced: true, ..Held::default() });
    }

    /// A session closed or expired.
    pub(super) fn close(&self, lease: i64) {
        self.state().sessions.remove(&lease);
    }

    /// Lease key `name` changed at revision `rev`, as a reply of this backend told: now held
    /// by `holder` (`(etcd lease, token)`), or by nobody of ours (`None`: deleted, or another
    /// session's). Replies are for transactions that change one lease key, so a revision the
    /// watch has reached already holds this very change.
    pub(super) fn replied(&self, name: &str, rev: i64, holder: Option<(i64, u64)>) {
        let mut st = self.state();
        if rev <= st.watched_to || st.ahead.get(name).is_some_and(|&r| rev <= r) {
            return;
        }
        st.ahead.insert(name.to_owned(), rev);
        st.apply(name, rev, holder);
    }

    /// Lease key `name` changed at revision `rev`, as the watch told (in revision order; one
    /// revision may change several keys, as a revoked lease deletes all of its keys at once).
    pub(super) fn watched(&self, name: &str, rev: i64, holder: Option<(i64, u64)>) {
        let mut st = self.state();
        if rev < st.watched_to {
            return;
        }
        if st.ahead.get(name).is_none_or(|&r| rev > r) {
            st.apply(name, rev, holder);
        }
        st.watched_to = rev;
        st.ahead.retain(|_, r| *r > rev);
    }

    /// The watch was (re)established. `fresh_from`: it starts at this revision without the
    /// history before it (first start, or after a gap: `gap` says which), rather than resuming
    /// after the last revision it delivered.
    pub(super) fn watching(&self, fresh_from: Option<i64>, gap: bool) {
        let mut st = self.state();
        if let Some(rev) = fresh_from {
            st.watched_to = st.watched_to.max(rev);
        }
        if gap {
            for held in st.sessions.values_mut() {
                held.synced = false;
            }
        }
        st.live = true;
    }

    /// The watch is down (reconnecting): the record may miss changes meanwhile.
    pub(super) fn not_watching(&self) {
        self.state().live = false;
    }

    /// The last revision the watch delivered, where it resumes.
    pub(super) fn watched_to(&self) -> i64 {
        self.state().watched_to
    }

    /// Installs `owned`, the session's leases as listed at revision `at`. Refused (`false`)
    /// when the watch already delivered later changes, which the listing would undo.
    pub(super) fn resync(&self, lease: i64, owned: &[(String, u64)], at: i64) -> bool {
        let mut st = self.state();
        if st.watched_to > at {
            return false;
        }
        for (name, _) in owned {
            let r = st.ahead.entry(name.clone()).or_insert(at);
            *r = (*r).max(at);
        }
        let Some(held) = st.sessions.get_mut(&lease) else { return false };
        held.leases = owned.iter().cloned().collect();
        held.floor = at;
        held.synced = true;
        true
    }

    /// Whether the mirror is trustworthy for `lease` and its leases have the digest `held`.
    pub(super) fn digest_matches(&self, lease: i64, held: HeldDigest) -> bool {
        let st = self.state();
        let Some(h) = st.sessions.get(&lease).filter(|h| st.live && h.synced) else { return false };
        let mut d = HeldDigest::default();
        for token in h.leases.values() {
            d.add(*token);
        }
        d == held
    }
}

impl State {
    fn apply(&mut self, name: &str, rev: i64, holder: Option<(i64, u64)>) {
        for held in self.sessions.values_mut() {
            held.leases.remove(name);
        }
        if let Some((lease, token)) = holder
            && let Some(held) = self.sessions.get_mut(&lease)
            && rev > held.floor
        {
            held.leases.insert(name.to_owned(), token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(tokens: &[u64]) -> HeldDigest {
        let mut d = HeldDigest::default();
        for t in tokens {
            d.add(*t);
        }
        d
    }

    fn mirror() -> Mirror {
        let m = Mirror::default();
        m.watching(Some(1), false);
        m.open(7);
        m
    }

    #[test]
    fn replies_and_the_watch_agree_in_any_order() {
        let m = mirror();
        // Reply first, then the watch delivers the same change: counted once.
        m.replied("a", 10, Some((7, 10)));
        assert!(m.digest_matches(7, digest(&[10])));
        m.watched("a", 10, Some((7, 10)));
        assert!(m.digest_matches(7, digest(&[10])));
        // The watch first, then a late reply: ignored.
        m.watched("b", 11, Some((7, 11)));
        m.replied("b", 11, Some((7, 11)));
        assert!(m.digest_matches(7, digest(&[10, 11])));
    }

    #[test]
    fn a_late_watch_event_does_not_undo_a_release() {
        let m = mirror();
        m.replied("a", 10, Some((7, 10)));
        m.replied("a", 12, None);
        assert!(m.digest_matches(7, digest(&[])));
        m.watched("a", 10, Some((7, 10)));
        assert!(m.digest_matches(7, digest(&[])), "the acquisition's event came back after the release");
        m.watched("a", 12, None);
        assert!(m.digest_matches(7, digest(&[])));
    }

    #[test]
    fn a_takeover_before_a_late_reply_is_kept() {
        let m = mirror();
        // Won at 10, deleted by hand at 11; the watch delivers both before the reply lands.
        m.watched("a", 10, Some((7, 10)));
        m.watched("a", 11, None);
        m.replied("a", 10, Some((7, 10)));
        assert!(m.digest_matches(7, digest(&[])), "a late reply brought a deleted lease back");
    }

    #[test]
    fn one_revision_may_change_several_keys_and_may_come_again() {
        let m = mirror();
        m.replied("a", 10, Some((7, 10)));
        m.replied("b", 11, Some((7, 11)));
        // A revoked lease deletes both keys in one revision.
        m.watched("a", 20, None);
        m.watched("b", 20, None);
        assert!(m.digest_matches(7, digest(&[])));
        // A resumed watch delivers the last revision again.
        m.watched("b", 20, None);
        m.watched("c", 21, Some((7, 21)));
        m.watched("c", 21, Some((7, 21)));
        assert!(m.digest_matches(7, digest(&[21])));
    }

    #[test]
    fn overwritten_keys_leave_the_record() {
        let m = mirror();
        m.replied("a", 10, Some((7, 10)));
        // Someone put the key again without our lease: not ours any more.
        m.watched("a", 13, Some((99, 10)));
        assert!(m.digest_matches(7, digest(&[])));
    }

    #[test]
    fn untrusted_without_the_watch_and_after_a_gap() {
        let m = mirror();
        m.not_watching();
        assert!(!m.digest_matches(7, digest(&[])));
        m.watching(None, false);
        assert!(m.digest_matches(7, digest(&[])));
        m.watching(Some(50), true);
        assert!(!m.digest_matches(7, digest(&[])), "trusted after a gap");
        assert!(!m.resync(7, &[], 40), "a listing older than the watch was installed");
        assert!(m.resync(7, &[("a".to_owned(), 45)], 60));
        assert!(m.digest_matches(7, digest(&[45])));
        // Events the listing already covers are not applied again.
        m.watched("a", 55, None);
        m.watched("c", 58, Some((7, 58)));
        assert!(m.digest_matches(7, digest(&[45])));
        m.watched("a", 61, None);
        assert!(m.digest_matches(7, digest(&[])));
        assert!(!m.digest_matches(8, digest(&[])), "an unknown session is never trusted");
    }
}
