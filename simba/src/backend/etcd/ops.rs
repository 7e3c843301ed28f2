//! The transactions behind acquire, release, `owned`, `claim_slot` and `members`.

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::session::session_id;
use super::{EtcdBackend, lease_not_found};
use crate::backend::{Acquire, BackendError, BackendResult, SessionId};

/// Keys read per page when listing.
const PAGE: i64 = 1000;

/// What a listing reads of each key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    KeysOnly,
    Values,
}

/// The value a cron slot is stored as: 16 hexadecimal digits of the slot with its sign bit
/// flipped, so that etcd's byte-wise comparison of values orders slots as numbers.
pub(super) fn slot_value(slot: i64) -> String {
    format!("{:016x}", (slot as u64) ^ (1 << 63))
}

/// The token a key's create revision stands for (`None` for a key that does not exist).
fn token(kv: &KeyValue) -> Option<u64> {
    u64::try_from(kv.create_revision()).ok().filter(|t| *t > 0)
}

fn revision(r: &TxnResponse) -> i64 {
    r.header().map_or(0, |h| h.revision())
}

/// The key-values of the `i`-th read of a transaction's replies.
fn read(responses: &[TxnOpResponse], i: usize) -> Option<&KeyValue> {
    match responses.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs().first(),
        _ => None,
    }
}

impl EtcdBackend {
    fn protocol(&self, what: &str, detail: impl std::fmt::Debug) -> BackendError {
        BackendError::Protocol(format!("{}: unexpected reply to {what}: {detail:?}", self.inner.description))
    }

    /// One `Txn`: when lease key `name` does not exist (create revision 0), put it with the
    /// session's lease; otherwise read it. The token is the new key's create revision, which
    /// is the transaction's revision.
    pub(super) async fn try_acquire(&self, session: &SessionId, lease: i64, name: &str) -> BackendResult<Acquire> {
        let key = self.inner.keys.lease(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), session.as_str(), Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let reply = match self.kv().txn(txn).await {
            Ok(r) => r,
            // The session's lease is gone: nothing was written (S3).
            Err(e) if lease_not_found(&e) => {
                self.forget(lease);
                return Ok(Acquire::Expired);
            }
            Err(e) => return Err(self.err(&format!("acquire `{name}`"), &e)),
        };
        let rev = revision(&reply);
        if reply.succeeded() {
            let token = u64::try_from(rev).ok().filter(|t| *t > 0).ok_or_else(|| self.protocol("acquire", rev))?;
            self.inner.mirror.replied(name, rev, Some((lease, token)));
            return Ok(Acquire::Won(token));
        }
        let responses = reply.op_responses();
        let Some(kv) = read(&responses, 0) else { return Err(self.protocol("acquire", "no key read")) };
        match token(kv) {
            // Ours already: a retry after a lost reply.
            Some(t) if kv.lease() == lease => {
                self.inner.mirror.replied(name, kv.mod_revision(), Some((lease, t)));
                Ok(Acquire::Won(t))
            }
            Some(_) => Ok(Acquire::Held),
            None => Err(self.protocol("acquire", "the key exists with create revision 0")),
        }
    }

    /// One `Txn`: delete lease key `name` if its create revision is `token` and it is attached
    /// to the session's lease (T7).
    pub(super) async fn try_release(&self, lease: i64, name: &str, token: u64) -> BackendResult<bool> {
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let key = self.inner.keys.lease(name);
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.as_str(), CompareOp::Equal, token),
                Compare::lease(key.as_str(), CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let reply = self.kv().txn(txn).await.map_err(|e| self.err(&format!("release `{name}` (token {token})"), &e))?;
        if reply.succeeded() {
            self.inner.mirror.replied(name, revision(&reply), None);
        }
        Ok(reply.succeeded())
    }

    /// Every lease key attached to `lease`, read page by page at one revision (a consistent
    /// snapshot); installs the listing in the mirror.
    pub(super) async fn list_owned(&self, lease: i64) -> BackendResult<Vec<(String, u64)>> {
        let prefix = self.inner.keys.lease.as_str();
        let (kvs, at) = self.read_prefix(prefix, Read::KeysOnly, 0, "list a session's leases").await?;
        let mut owned: Vec<(String, u64)> = kvs
            .iter()
            .filter(|kv| kv.lease() == lease)
            .filter_map(|kv| {
                let name = std::str::from_utf8(kv.key()).ok()?.strip_prefix(prefix)?;
                Some((name.to_owned(), token(kv)?))
            })
            .collect();
        owned.sort();
        if !self.inner.mirror.resync(lease, &owned, at) {
            tracing::debug!(backend = %self.inner.description, "a session's leases changed while listing them");
        }
        Ok(owned)
    }

    /// Every key under `prefix`, read in pages of [`PAGE`] at revision `at` (0: the revision
    /// of the first page); returns them with that revision.
    pub(super) async fn read_prefix(
        &self,
        prefix: &str,
        read: Read,
        mut at: i64,
        what: &str,
    ) -> BackendResult<(Vec<KeyValue>, i64)> {
        let mut kv = self.kv();
        let mut all = Vec::new();
        let mut from = prefix.as_bytes().to_vec();
        let end = prefix_end(prefix);
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if read == Read::KeysOnly {
                options = options.with_keys_only();
            }
            if at > 0 {
                options = options.with_revision(at);
            }
            let mut page = kv.get(from.clone(), Some(options)).await.map_err(|e| self.err(what, &e))?;
            if at == 0 {
                at = page.header().map_or(0, |h| h.revision());
            }
            let more = page.more();
            let kvs = page.take_kvs();
            let Some(last) = kvs.last() else { break };
            // The next page starts right after the last key read.
            from = last.key().to_vec();
            from.push(0);
            all.extend(kvs);
            if !more {
                break;
            }
        }
        Ok((all, at))
    }

    /// One nested `Txn`: if `session` holds `name` with `token`, record `slot` when no slot is
    /// recorded yet, or when the recorded one is earlier.
    pub(super) async fn try_claim_slot(&self, lease: i64, name: &str, token: u64, slot: i64) -> BackendResult<bool> {
        let Ok(token) = i64::try_from(token) else { return Ok(false) };
        let (lease_key, slot_key) = (self.inner.keys.lease(name), self.inner.keys.slot(name));
        let value = slot_value(slot);
        let put = || TxnOp::put(slot_key.as_str(), value.as_str(), None);
        let if_earlier =
            Txn::new().when([Compare::value(slot_key.as_str(), CompareOp::Less, value.as_str())]).and_then([put()]);
        let if_absent = Txn::new()
            .when([Compare::version(slot_key.as_str(), CompareOp::Equal, 0)])
            .and_then([put()])
            .or_else([TxnOp::txn(if_earlier)]);
        let txn = Txn::new()
            .when([
                Compare::create_revision(lease_key.as_str(), CompareOp::Equal, token),
                Compare::lease(lease_key.as_str(), CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::txn(if_absent)]);
        let what = format!("claim slot {slot} of `{name}`");
        let reply = self.kv().txn(txn).await.map_err(|e| self.err(&what, &e))?;
        if !reply.succeeded() {
            return Ok(false);
        }
        match reply.op_responses().first() {
            Some(TxnOpResponse::Txn(absent)) if absent.succeeded() => Ok(true),
            Some(TxnOpResponse::Txn(absent)) => match absent.op_responses().first() {
                Some(TxnOpResponse::Txn(earlier)) => Ok(earlier.succeeded()),
                other => Err(self.protocol(&what, other)),
            },
            other => Err(self.protocol(&what, other)),
        }
    }

    /// The sessions whose membership keys of `group` exist.
    pub(super) async fn list_members(&self, group: &str) -> BackendResult<Vec<SessionId>> {
        let prefix = self.inner.keys.group(group);
        let what = format!("list the members of group `{group}`");
        let (kvs, _) = self.read_prefix(&prefix, Read::KeysOnly, 0, &what).await?;
        let mut members: Vec<SessionId> = kvs
            .iter()
            .filter_map(|kv| std::str::from_utf8(kv.key()).ok()?.strip_prefix(prefix.as_str()).map(SessionId::new))
            .collect();
        members.sort();
        Ok(members)
    }
}

/// The end of the key range of every key that starts with `prefix` (etcd's `WithPrefix`).
pub(super) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The session a lease key's holder is: the key's lease, or (for a key put by hand without
/// one) its value.
pub(super) fn holder(kv: &KeyValue) -> SessionId {
    if kv.lease() != 0 {
        session_id(kv.lease())
    } else {
        SessionId::new(String::from_utf8_lossy(kv.value()).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_values_order_as_numbers() {
        let slots = [i64::MIN, -1_000_000, -1, 0, 1, 59, 60, 1_700_000_000, i64::MAX];
        for w in slots.windows(2) {
            assert!(slot_value(w[0]) < slot_value(w[1]), "{} vs {}", w[0], w[1]);
        }
        assert_eq!(slot_value(0), "8000000000000000");
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("simba/lease/"), b"simba/lease0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
