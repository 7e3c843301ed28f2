//! One session = one etcd lease, renewed through one long-lived `LeaseKeepAlive` stream: a
//! renewal is one request message and one reply on that stream (rule S1), whatever the
//! session holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};

use crate::backend::SessionId;

/// The session id of etcd lease `lease`: its id as 16 hexadecimal digits, as etcdctl shows it.
pub(super) fn session_id(lease: i64) -> SessionId {
    SessionId::new(format!("{lease:016x}"))
}

/// The etcd lease of a session id this backend made; `None` for any other text.
pub(super) fn lease_of(id: &SessionId) -> Option<i64> {
    let s = id.as_str();
    (s.len() == 16).then(|| i64::from_str_radix(s, 16).ok()).flatten().filter(|l| *l > 0)
}

/// What this backend keeps about a session it opened or renewed.
pub(super) struct EtcdSession {
    pub(super) lease: i64,
    /// The TTL the server granted (whole seconds): what every renewal renews it to.
    pub(super) granted: Duration,
    /// The keep-alive stream, between renewals. Taken out during a renewal, so that a renewal
    /// dropped midway (the engine's timeout) leaves no stream whose next reply would answer
    /// the wrong request: the next renewal opens a new one.
    stream: tokio::sync::Mutex<Option<(LeaseKeeper, LeaseKeepAliveStream)>>,
}

/// The answer of one renewal.
pub(super) enum Renewed {
    /// Renewed for this long (the lease's TTL, measured by the server).
    Alive(Duration),
    /// The lease is gone (expired or revoked).
    Gone,
}

impl EtcdSession {
    pub(super) fn new(lease: i64, granted: Duration) -> Arc<Self> {
        Arc::new(EtcdSession { lease, granted, stream: tokio::sync::Mutex::new(None) })
    }

    /// Renews the lease: one message on the session's stream, or on a new stream if there is
    /// none or the old one broke (a server restart ends every stream).
    pub(super) async fn renew(&self, client: &Client) -> Result<Renewed, etcd_client::Error> {
        let mut slot = self.stream.lock().await;
        if let Some((mut keeper, mut stream)) = slot.take() {
            let answer = match keeper.keep_alive().await {
                Ok(()) => stream.message().await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(Some(reply)) if reply.ttl() > 0 => {
                    *slot = Some((keeper, stream));
                    return Ok(Renewed::Alive(Duration::from_secs(reply.ttl().unsigned_abs())));
                }
                Ok(Some(_)) => return Ok(Renewed::Gone),
                // A broken stream: try once on a new one.
                Ok(None) | Err(_) => {}
            }
        }
        // Opening a stream sends the first renewal and reads its reply; the driver keeps the
        // reply's TTL to itself, which is the lease's TTL as granted.
        match client.lease_client().keep_alive(self.lease).await {
            Ok(opened) => {
                *slot = Some(opened);
                Ok(Renewed::Alive(self.granted))
            }
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => Ok(Renewed::Gone),
            Err(e) => Err(e),
        }
    }
}

/// The sessions a backend knows, by etcd lease id.
#[derive(Default)]
pub(super) struct Sessions(Mutex<HashMap<i64, Arc<EtcdSession>>>);

impl Sessions {
    pub(super) fn get(&self, lease: i64) -> Option<Arc<EtcdSession>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(&lease).cloned()
    }

    pub(super) fn insert(&self, s: Arc<EtcdSession>) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(s.lease, s);
    }

    pub(super) fn remove(&self, lease: i64) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_round_trip() {
        for lease in [1, 0x0f39_a231_1d3b_5106, i64::MAX] {
            assert_eq!(lease_of(&session_id(lease)), Some(lease));
        }
        assert_eq!(session_id(0x0f39_a231_1d3b_5106).as_str(), "0f39a2311d3b5106");
        for other in ["", "0", "00000000000000000", "zzzzzzzzzzzzzzzz", "0000000000000000", "ffffffffffffffff"] {
            assert_eq!(lease_of(&SessionId::new(other)), None, "{other}");
        }
    }
}
