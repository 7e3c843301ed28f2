//! `zk://[user:password@]host:port[,host:port...][/chroot]` URLs and connecting to them.

use std::time::Duration;

use zookeeper_client as zk;

use crate::backend::{BackendError, BackendResult};

/// The longest a connection attempt takes before it fails with a clear error, whatever the
/// session timeout (a black-holed server otherwise keeps the handshake waiting).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEME: &str = "zk://";

/// The ACL of every node simba creates when it authenticates: all permissions for the
/// authenticated identity that created it (`auth`), read for anyone. Deleting a node needs
/// DELETE on its parent, so other clients can neither delete nor create lease nodes.
static SECURED: [zk::Acl; 2] =
    [zk::Acl::new_const(zk::Permission::ALL, "auth", ""), zk::Acl::new_const(zk::Permission::READ, "world", "anyone")];

/// A parsed `zk://` URL.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct ConnectSpec {
    /// `host:port,host:port`.
    hosts: String,
    /// `/a/b`, or empty for the server's root.
    chroot: String,
    /// Digest credentials: user and password (decoded).
    auth: Option<(String, String)>,
}

impl std::fmt::Debug for ConnectSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSpec").field("url", &self.describe()).finish_non_exhaustive()
    }
}

impl ConnectSpec {
    /// Parses `zk://[user:password@]host:port[,host:port...][/chroot]`.
    pub(super) fn parse(url: &str) -> BackendResult<Self> {
        let shown = crate::secret::redact_url(url);
        let bad = |why: &str| {
            BackendError::Misconfigured(format!(
                "invalid ZooKeeper URL {shown:?}: {why} (expected zk://[user:password@]host:port[,host:port...][/chroot])"
            ))
        };
        if url.contains('?') {
            return Err(bad(
                "query parameters are not supported (TLS to ZooKeeper is not available in this build: see ADR 0008)",
            ));
        }
        let rest = url.strip_prefix(SCHEME).ok_or_else(|| bad("it must start with zk://"))?;
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                    (Some((crate::secret::decode_percent(user), crate::secret::decode_percent(password))), hosts)
                }
                _ => return Err(bad("digest credentials are written user:password@ (both non-empty)")),
            },
            None => (None, rest),
        };
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
        Ok(ConnectSpec { hosts: hosts.to_owned(), chroot: chroot.to_owned(), auth })
    }

    /// The chroot path (`/a/b`), if any.
    pub(super) fn chroot(&self) -> Option<&str> {
        (!self.chroot.is_empty()).then_some(self.chroot.as_str())
    }

    /// The URL again, normalised, for logs and errors (the user, never the password).
    pub(super) fn describe(&self) -> String {
        let user = self.auth.as_ref().map(|(u, _)| format!("{u}@")).unwrap_or_default();
        format!("{SCHEME}{user}{}{}", self.hosts, self.chroot)
    }

    /// Options for the persistent nodes simba creates: open to anyone without credentials,
    /// writable by the same user only with them.
    pub(super) fn persistent(&self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(self.acls())
    }

    /// Options for the ephemeral nodes (leases, members); see [`persistent`](Self::persistent).
    pub(super) fn ephemeral(&self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Ephemeral.with_acls(self.acls())
    }

    /// Whether the URL holds digest credentials.
    pub(super) fn secured(&self) -> bool {
        self.auth.is_some()
    }

    /// The ACL of the nodes simba creates.
    pub(super) fn secured_acl(&self) -> &'static [zk::Acl] {
        &SECURED
    }

    fn acls(&self) -> zk::Acls<'static> {
        if self.auth.is_some() { zk::Acls::new(&SECURED) } else { zk::Acls::anyone_all() }
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
        let mut connector = zk::Client::connector().with_session_timeout(session_timeout).with_fail_eagerly();
        if let Some((user, password)) = &self.auth {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(cluster)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(zk::Error::AuthFailed)) => Err(BackendError::Misconfigured(format!(
                "ZooKeeper at {} refused the digest credentials: check the user name and password in the URL",
                self.describe()
            ))),
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

    #[test]
    fn digest_credentials_never_show() {
        let s = ConnectSpec::parse("zk://alice:s3%40cret@a:1/c").unwrap();
        assert_eq!(s.auth, Some(("alice".into(), "s3@cret".into())));
        assert_eq!(s.describe(), "zk://alice@a:1/c");
        assert!(!format!("{s:?}").contains("s3"), "{s:?}");
        assert!(s.secured());
        for bad in ["zk://alice@a:1", "zk://:pw@a:1", "zk://alice:s3cret@a:1?tls=true"] {
            let e = ConnectSpec::parse(bad).unwrap_err().to_string();
            assert!(!e.contains("s3cret") && !e.contains(":pw@"), "{e}");
        }
    }
}
