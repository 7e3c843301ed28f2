//! `zk://[user:password@]host:port[,host:port...][/chroot]` URLs and connecting to them.

use std::time::Duration;

use zookeeper_client as zk;

use crate::backend::{BackendError, BackendResult, BackendUrl};

/// The longest a connection attempt takes before it fails with a clear error, whatever the
/// session timeout (a black-holed server otherwise keeps the handshake waiting).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause between two passes over the servers of a TLS connect whose handshake is fine.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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
    /// TLS (`?tls=true&ca_file=...`): the CA and the optional client identity, as PEM.
    tls: Option<TlsFiles>,
}

/// The PEM contents of the TLS files of a `zk://` URL.
#[derive(Clone, PartialEq, Eq)]
struct TlsFiles {
    ca: String,
    identity: Option<(String, String)>,
}

impl std::fmt::Debug for ConnectSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSpec").field("url", &self.describe()).finish_non_exhaustive()
    }
}

impl ConnectSpec {
    /// Parses `zk://[user:password@]host:port[,host:port...][/chroot]`.
    pub(super) fn parse(url: &BackendUrl) -> BackendResult<Self> {
        let shown = url.redacted();
        let bad = |why: &str| {
            BackendError::Misconfigured(format!(
                "invalid ZooKeeper URL {shown:?}: {why} (expected zk://[user:password@]host:port[,host:port...][/chroot])"
            ))
        };
        if let Some((k, _)) =
            url.params().iter().find(|(k, _)| !matches!(k.as_str(), "tls" | "ca_file" | "cert_file" | "key_file"))
        {
            return Err(bad(&format!("unknown parameter `{k}` (known: tls, ca_file, cert_file, key_file)")));
        }
        let tls = url.flagged_tls().map_err(|m| bad(&m))?.map(|crate::backend::url::FlaggedTls { ca, identity }| {
            let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            TlsFiles { ca: text(ca), identity: identity.map(|(c, k)| (text(c), text(k))) }
        });
        let url = url.secret_text().split('?').next().unwrap_or_default();
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
        Ok(ConnectSpec { hosts: hosts.to_owned(), chroot: chroot.to_owned(), auth, tls })
    }

    /// The chroot path (`/a/b`), if any.
    pub(super) fn chroot(&self) -> Option<&str> {
        (!self.chroot.is_empty()).then_some(self.chroot.as_str())
    }

    /// The URL again, normalised, for logs and errors (the user, never the password).
    pub(super) fn describe(&self) -> String {
        let user = self.auth.as_ref().map(|(u, _)| format!("{u}@")).unwrap_or_default();
        let tls = if self.tls.is_some() { " (TLS)" } else { "" };
        format!("{SCHEME}{user}{}{}{tls}", self.hosts, self.chroot)
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
        let mut connector = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(connection_timeout(session_timeout))
            .with_fail_eagerly();
        if let Some((user, password)) = &self.auth {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        if let Some(tls) = &self.tls {
            // zookeeper-client builds its TLS configuration from the process's rustls provider
            // and takes none; simba installs none (backend::tls_provider): say what to add.
            crate::backend::require_process_provider("zookeeper-client", &format!("ZooKeeper at {}", self.describe()))?;
            let bad_file = |what: &str, e: zk::Error| {
                BackendError::Misconfigured(format!("ZooKeeper at {}: the {what} is not usable: {e}", self.describe()))
            };
            let mut options = zk::TlsOptions::new().with_pem_ca(&tls.ca).map_err(|e| bad_file("CA file", e))?;
            if let Some((cert, key)) = &tls.identity {
                options = options.with_pem_identity(cert, key).map_err(|e| bad_file("client certificate or key", e))?;
            }
            connector = connector.with_tls(options);
        }
        let secure = self.tls.is_some();
        let started = tokio::time::Instant::now();
        let attempt = |c: zk::Connector| async move {
            let connecting = async { if secure { c.secure_connect(cluster).await } else { c.connect(cluster).await } };
            tokio::time::timeout_at(started + CONNECT_TIMEOUT, connecting).await
        };
        let mut result = attempt(connector.clone()).await;
        // The driver reports a failed handshake as "no host": find out why with a handshake of
        // our own, with the same CA and client identity. Where TLS is fine the server is up and
        // the session was slow to come (a server just started, or whose TLS path is still
        // cold, can take longer than the one-pass connection timeout): pass over the servers
        // again, within CONNECT_TIMEOUT.
        while secure
            && let Ok(Err(e)) = &result
            && !matches!(e, zk::Error::AuthFailed)
        {
            let e = e.to_string();
            match self.check_tls().await {
                TlsCheck::Wrong(why) => {
                    return Err(BackendError::Misconfigured(format!(
                        "cannot connect to ZooKeeper at {}: {why} ({e})",
                        self.describe()
                    )));
                }
                TlsCheck::Fine if started.elapsed() + RETRY_PAUSE < CONNECT_TIMEOUT => {
                    tracing::debug!(server = %self.describe(), error = %e, "no ZooKeeper session in one pass although TLS is fine; passing over the servers again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    result = attempt(connector.clone()).await;
                }
                TlsCheck::Fine | TlsCheck::Unknown => break,
            }
        }
        match result {
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

/// What a TLS handshake of our own says about a failed connect.
enum TlsCheck {
    /// The handshake succeeded: TLS is not what failed.
    Fine,
    /// TLS is what failed, and why (what to do, then the handshake's error).
    Wrong(String),
    /// The handshake failed for a reason that is not TLS's (e.g. the server is unreachable).
    Unknown,
}

impl ConnectSpec {
    /// Shakes hands with the first server with rustls alone, with the same CA and client
    /// identity as the driver, and tells whether TLS is what failed.
    async fn check_tls(&self) -> TlsCheck {
        let (Some(tls), Some(server)) = (self.tls.clone(), self.hosts.split(',').next().map(str::to_owned)) else {
            return TlsCheck::Unknown;
        };
        match tokio::task::spawn_blocking(move || probe(&server, &tls)).await {
            Ok(Ok(())) => TlsCheck::Fine,
            Ok(Err(failure)) => match crate::secret::tls_hint(&failure) {
                Some(hint) => TlsCheck::Wrong(format!("{hint} ({failure})")),
                None => TlsCheck::Unknown,
            },
            Err(_) => TlsCheck::Unknown,
        }
    }
}

/// A TLS handshake with `server` (`host:port`) trusting only `tls.ca` (PEM), presenting
/// `tls.identity` when there is one.
fn probe(server: &str, tls: &TlsFiles) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::net::ToSocketAddrs;
    let (host, _) = server.rsplit_once(':').ok_or("no port")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca.as_bytes()) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
    let config = match &tls.identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| e.to_string())?;
            builder.with_client_auth_cert(chain.map_err(|e| e.to_string())?, key).map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| e.to_string())?;
    let addr = server.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(2)));
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// How long one connection attempt may wait for the server's answer: the driver's own choice
/// (two fifths of the session timeout) up to one second. Without the cap the backend's shared
/// session (10 s) waited 4 s on a server that had just restarted and accepted the connection
/// before it served, which held the jobs store's reads back (found by the fault suite's
/// ServerKill on ZooKeeper); a session's own connection (its timeout is the lease's) keeps
/// the driver's value.
fn connection_timeout(session_timeout: Duration) -> Duration {
    (session_timeout * 2 / 5).min(Duration::from_secs(1))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_and_chroot() {
        let s = ConnectSpec::parse(&BackendUrl::new("zk://127.0.0.1:2181")).unwrap();
        assert_eq!((s.hosts.as_str(), s.chroot()), ("127.0.0.1:2181", None));
        assert_eq!(s.describe(), "zk://127.0.0.1:2181");
        let s = ConnectSpec::parse(&BackendUrl::new("zk://a:1,b:2/apps/simba/")).unwrap();
        assert_eq!((s.hosts.as_str(), s.chroot()), ("a:1,b:2", Some("/apps/simba")));
        assert_eq!(s.describe(), "zk://a:1,b:2/apps/simba");
        assert_eq!(ConnectSpec::parse(&BackendUrl::new("zk://a:1/")).unwrap().chroot(), None);
    }

    #[test]
    fn refuses_bad_urls() {
        for url in
            ["redis://a:1", "zk://", "zk://a", "zk://:1", "zk://a:x", "zk://a:1,/c", "zk://a:1//c", "zk://a:1/c/../d"]
        {
            let e = ConnectSpec::parse(&BackendUrl::new(url)).unwrap_err();
            assert!(matches!(e, BackendError::Misconfigured(_)), "{url}: {e:?}");
            assert!(e.to_string().contains(url), "{e}");
        }
    }

    #[test]
    fn digest_credentials_never_show() {
        let s = ConnectSpec::parse(&BackendUrl::new("zk://alice:s3%40cret@a:1/c")).unwrap();
        assert_eq!(s.auth, Some(("alice".into(), "s3@cret".into())));
        assert_eq!(s.describe(), "zk://alice@a:1/c");
        assert!(!format!("{s:?}").contains("s3"), "{s:?}");
        assert!(s.secured());
        for bad in ["zk://alice@a:1", "zk://:pw@a:1", "zk://alice:s3cret@a:1?tls=true", "zk://alice:s3cret@a:1?x=1"] {
            let e = ConnectSpec::parse(&BackendUrl::new(bad)).unwrap_err().to_string();
            assert!(!e.contains("s3cret") && !e.contains(":pw@"), "{e}");
        }
    }
}
