//! `zk://host:port[,host:port...][/chroot]` URLs and connecting to them.

use std::time::Duration;

use zookeeper_client as zk;

use crate::backend::{BackendError, BackendResult};

/// The longest a connection attempt takes before it fails with a clear error, whatever the
/// session timeout (a black-holed server otherwise keeps the handshake waiting).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEME: &str = "zk://";

/// A parsed `zk://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ConnectSpec {
    /// `host:port,host:port`.
    hosts: String,
    /// `/a/b`, or empty for the server's root.
    chroot: String,
}

impl ConnectSpec {
    /// Parses `zk://host:port[,host:port...][/chroot]`.
    pub(super) fn parse(url: &str) -> BackendResult<Self> {
        let bad = |why: &str| {
            BackendError::Misconfigured(format!(
                "invalid ZooKeeper URL {url:?}: {why} (expected zk://host:port[,host:port...][/chroot])"
            ))
        };
        let rest = url.strip_prefix(SCHEME).ok_or_else(|| bad("it must start with zk://"))?;
        let (hosts, chroot) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        if hosts.is_empty() || hosts.split(',').any(|h| h.rsplit_once(':').is_none_or(|(host, _)| host.is_empty())) {
            return Err(bad("every server needs a host and a port"));
        }
        for h in hosts.split(',') {
            let port = h.rsplit_once(':').map_or("", |(_, p)| p);
            if port.parse::<u16>().is_err() {
                return Err(bad("a port is not a number from 0 to 65535"));
            }
        }
        let chroot = chroot.trim_end_matches('/');
        if chroot.split('/').skip(1).any(|c| c.is_empty() || c == "." || c == "..") {
            return Err(bad("the chroot has an empty, `.` or `..` component"));
        }
        Ok(ConnectSpec { hosts: hosts.to_owned(), chroot: chroot.to_owned() })
    }

    /// The chroot path (`/a/b`), if any.
    pub(super) fn chroot(&self) -> Option<&str> {
        (!self.chroot.is_empty()).then_some(self.chroot.as_str())
    }

    /// The URL again, normalised, for logs and errors.
    pub(super) fn describe(&self) -> String {
        format!("{SCHEME}{}{}", self.hosts, self.chroot)
    }

    /// The driver's connect string: `host:port,host:port/chroot`.
    pub(super) fn cluster(&self) -> String {
        format!("{}{}", self.hosts, self.chroot)
    }

    /// A new ZooKeeper session under the chroot, asking for `session_timeout`.
    pub(super) async fn connect(&self, session_timeout: Duration) -> BackendResult<zk::Client> {
        self.connect_to(&self.cluster(), session_timeout).await
    }

    /// A new ZooKeeper session at the server's root (to create the chroot).
    pub(super) async fn connect_unrooted(&self, session_timeout: Duration) -> BackendResult<zk::Client> {
        self.connect_to(&self.hosts, session_timeout).await
    }

    async fn connect_to(&self, cluster: &str, session_timeout: Duration) -> BackendResult<zk::Client> {
        // Fail after one pass over the servers instead of cycling until the session timeout:
        // the engine retries with its own backoff.
        let connector = zk::Client::connector().with_session_timeout(session_timeout).with_fail_eagerly();
        match tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(cluster)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(BackendError::unavailable(
                format!(
                    "cannot connect to ZooKeeper at {}: check that the server runs and is reachable",
                    self.describe()
                ),
                e,
            )),
            Err(_) => Err(BackendError::Unavailable {
                message: format!(
                    "cannot connect to ZooKeeper at {}: no session established within {CONNECT_TIMEOUT:?}; check that the server runs and is reachable",
                    self.describe()
                ),
                source: None,
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_and_chroot() {
        let s = ConnectSpec::parse("zk://127.0.0.1:2181").unwrap();
        assert_eq!((s.hosts.as_str(), s.chroot()), ("127.0.0.1:2181", None));
        assert_eq!(s.describe(), "zk://127.0.0.1:2181");
        let s = ConnectSpec::parse("zk://a:1,b:2/apps/simba/").unwrap();
        assert_eq!((s.hosts.as_str(), s.chroot()), ("a:1,b:2", Some("/apps/simba")));
        assert_eq!(s.describe(), "zk://a:1,b:2/apps/simba");
        assert_eq!(ConnectSpec::parse("zk://a:1/").unwrap().chroot(), None);
    }

    #[test]
    fn refuses_bad_urls() {
        for url in
            ["redis://a:1", "zk://", "zk://a", "zk://:1", "zk://a:x", "zk://a:1,/c", "zk://a:1//c", "zk://a:1/c/../d"]
        {
            let e = ConnectSpec::parse(url).unwrap_err();
            assert!(matches!(e, BackendError::Misconfigured(_)), "{url}: {e:?}");
            assert!(e.to_string().contains(url), "{e}");
        }
    }
}
