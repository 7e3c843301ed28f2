//! `etcd://[user:password@]host:port[,host:port...][/prefix][?tls=true&ca_file=...]` URLs,
//! connecting to them, and what etcd's errors mean.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use crate::backend::{BackendError, BackendResult, BackendUrl};

/// The longest connecting takes (TCP, TLS, authentication and a first read) before it fails
/// with a clear error.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bound on any one request made outside the engine (the engine times its own calls out
/// after at most one renewal period, rule D2).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings: sent only after this long without anything read on the connection (a node
/// renewing every 5 s never sends one), so that a connection to a server that vanished
/// without closing it is dropped and made again.
const PING_AFTER: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(5));

/// The key prefix when the URL names none.
pub const DEFAULT_PREFIX: &str = "simba";

const SCHEME: &str = "etcd://";

/// A parsed `etcd://` URL.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct ConnectSpec {
    /// `host:port` of every endpoint.
    hosts: Vec<String>,
    /// The key prefix (`simba`, or the URL's path without its leading `/`).
    pub(super) prefix: String,
    /// Whether the URL named the prefix (it is then shown in descriptions).
    prefix_given: bool,
    /// User and password (decoded).
    auth: Option<(String, String)>,
    /// TLS: the CA and the optional client identity, as PEM.
    tls: Option<TlsFiles>,
}

#[derive(Clone, PartialEq, Eq)]
struct TlsFiles {
    ca: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ConnectSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSpec").field("url", &self.describe()).finish_non_exhaustive()
    }
}

impl ConnectSpec {
    /// Parses an `etcd://` URL (see the module documentation). Errors show the URL without
    /// its password.
    pub(super) fn parse(url: &BackendUrl) -> BackendResult<Self> {
        let shown = url.redacted();
        let bad = |why: &str| {
            BackendError::Misconfigured(format!(
                "invalid etcd URL {shown:?}: {why} (expected \
                 etcd://[user:password@]host:port[,host:port...][/prefix][?tls=true&ca_file=CA])"
            ))
        };
        if let Some((k, _)) =
            url.params().iter().find(|(k, _)| !matches!(k.as_str(), "tls" | "ca_file" | "cert_file" | "key_file"))
        {
            return Err(bad(&format!("unknown parameter `{k}` (known: tls, ca_file, cert_file, key_file)")));
        }
        let tls = url
            .flagged_tls()
            .map_err(|m| bad(&m))?
            .map(|crate::backend::url::FlaggedTls { ca, identity }| TlsFiles { ca, identity });
        let url = url.secret_text().split(['?', '#']).next().unwrap_or_default();
        let rest = url.strip_prefix(SCHEME).ok_or_else(|| bad("it must start with etcd://"))?;
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let (auth, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                    (Some((crate::secret::decode_percent(user), crate::secret::decode_percent(password))), hosts)
                }
                _ => return Err(bad("credentials are written user:password@ (both non-empty)")),
            },
            None => (None, authority),
        };
        let mut list = Vec::new();
        for h in hosts.split(',') {
            let Some((host, port)) = h.rsplit_once(':') else { return Err(bad("every endpoint needs host:port")) };
            if host.is_empty() {
                return Err(bad("every endpoint needs host:port"));
            }
            if port.parse::<u16>().is_err() {
                return Err(bad("a port is not a number from 0 to 65535"));
            }
            list.push(h.to_owned());
        }
        let prefix = path.trim_matches('/');
        if prefix.split('/').any(|c| c == "." || c == "..") || prefix.contains("//") {
            return Err(bad("the key prefix has an empty, `.` or `..` component"));
        }
        let prefix_given = !prefix.is_empty();
        let prefix = if prefix_given { prefix.to_owned() } else { DEFAULT_PREFIX.to_owned() };
        Ok(ConnectSpec { hosts: list, prefix, prefix_given, auth, tls })
    }

    /// The URL again, normalised, for logs and errors: the user, never the password.
    pub(super) fn describe(&self) -> String {
        let user = self.auth.as_ref().map(|(u, _)| format!("{u}@")).unwrap_or_default();
        let prefix = if self.prefix_given { format!("/{}", self.prefix) } else { String::new() };
        let tls = if self.tls.is_some() { " (TLS)" } else { "" };
        format!("{SCHEME}{user}{}{prefix}{tls}", self.hosts.join(","))
    }

    /// The user the URL names, if any.
    pub(super) fn user(&self) -> Option<&str> {
        self.auth.as_ref().map(|(u, _)| u.as_str())
    }

    /// Every endpoint as a URL for the driver (`http://host:port`, `https://` with TLS).
    pub(super) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.hosts.iter().map(|h| format!("{scheme}://{h}")).collect()
    }

    /// A client for `endpoints` (requests are balanced over them). Does not contact the
    /// servers unless the URL holds credentials (the driver authenticates at once).
    pub(super) async fn client(&self, endpoints: &[String]) -> Result<Client, etcd_client::Error> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(PING_AFTER.0, PING_AFTER.1)
            .with_keep_alive_while_idle(false);
        if let Some((user, password)) = &self.auth {
            // A restarted server forgets its tokens: authenticate again when one is refused.
            options = options.with_user(user, password).with_auto_token_refresh(true);
        }
        if let Some(tls) = &self.tls {
            // tonic (`tls-ring`) uses the process's rustls provider when the application
            // installed one, and ring otherwise, for this configuration only: nothing to install.
            let mut config = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(config);
        }
        Client::connect(endpoints, Some(options)).await
    }

    /// What `e`, met while connecting or calling, means for the user.
    pub(super) fn error(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        let server = self.describe();
        let cause = chain(e);
        let lower = cause.to_ascii_lowercase();
        let user = self.user().unwrap_or("");
        if lower.contains("authentication failed") || lower.contains("invalid user id or password") {
            return BackendError::Misconfigured(format!(
                "etcd at {server} refused the credentials of user `{user}`: check the user name and password"
            ));
        }
        if lower.contains("user name is empty") || (lower.contains("invalid auth token") && self.auth.is_none()) {
            return BackendError::Misconfigured(format!(
                "etcd at {server} has authentication enabled: put user:password@ in the URL (or [backend] user and \
                 password), or connect with a client certificate (tls=true&cert_file=..&key_file=..)"
            ));
        }
        if lower.contains("permission denied") {
            return BackendError::Misconfigured(format!(
                "etcd at {server}: cannot {what}: permission denied; grant the user read and write on the key prefix \
                 `{}` (etcdctl role grant-permission ROLE --prefix=true readwrite {})",
                self.prefix, self.prefix
            ));
        }
        let no_identity = self.tls.as_ref().is_some_and(|t| t.identity.is_none());
        if no_identity && (lower.contains("badcertificate") || lower.contains("certificaterequired")) {
            return BackendError::Misconfigured(format!(
                "cannot connect to etcd at {server}: the server refused the TLS handshake without a client \
                 certificate (it runs with --client-cert-auth): give cert_file and key_file ({cause})"
            ));
        }
        if self.tls.is_some()
            && let Some(hint) = crate::secret::tls_hint(&cause)
        {
            return BackendError::Misconfigured(format!("cannot connect to etcd at {server}: {hint} ({cause})"));
        }
        BackendError::Unavailable { message: format!("etcd at {server}: cannot {what}: {cause}"), source: None }
    }
}

impl ConnectSpec {
    /// [`error`](Self::error) for a failure while connecting: where TLS is on without a client
    /// certificate and the server just closed the connection, shakes hands once more with
    /// rustls alone to learn whether the server asks for a certificate (with TLS 1.3 its
    /// refusal can arrive after the client's first request, which then only sees the
    /// connection close).
    pub(super) async fn connect_error(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        let error = self.error(what, e);
        let Some(tls) = self.tls.clone().filter(|t| t.identity.is_none()) else { return error };
        if !matches!(error, BackendError::Unavailable { .. }) {
            return error;
        }
        let Some(server) = self.hosts.first().cloned() else { return error };
        let probed = tokio::task::spawn_blocking(move || probe(&server, &tls.ca)).await;
        match probed {
            Ok(Err(alert)) if alert.contains("Certificate") => BackendError::Misconfigured(format!(
                "cannot connect to etcd at {}: the server refused the TLS handshake without a client certificate \
                 (it runs with --client-cert-auth): give cert_file and key_file ({alert})",
                self.describe()
            )),
            _ => error,
        }
    }
}

/// A TLS handshake with `server` (`host:port`) trusting only `ca` (PEM), without a client
/// certificate, then one read: a server that requires a certificate answers with an alert.
fn probe(server: &str, ca: &[u8]) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::io::Read;
    use std::net::ToSocketAddrs;
    let (host, _) = server.rsplit_once(':').ok_or("no port")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| e.to_string())?;
    let addr = server.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(2)));
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
    }
    // The server's verdict on the (missing) certificate is the first thing it sends.
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let mut byte = [0u8; 1];
    tls.read(&mut byte).map(|_| ()).map_err(|e| e.to_string())
}

/// An error and its sources on one line, without repeats (a gRPC status as its message, not
/// its debug form).
pub(super) fn chain(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let mut s = status.message().to_owned();
            if let Some(source) = std::error::Error::source(status) {
                s = join(s, source);
            }
            s
        }
        e => join(String::new(), e),
    }
}

fn join(mut s: String, e: &(dyn std::error::Error + 'static)) -> String {
    let mut next = Some(e);
    while let Some(cause) = next {
        let c = cause.to_string();
        // tonic's wrapper says nothing its sources do not say better.
        if c != "transport error" && !s.contains(&c) {
            s = if s.is_empty() { c } else { format!("{s}: {c}") };
        }
        next = cause.source();
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints_and_prefix() {
        let s = ConnectSpec::parse(&BackendUrl::new("etcd://127.0.0.1:2379")).unwrap();
        assert_eq!((s.hosts.clone(), s.prefix.as_str()), (vec!["127.0.0.1:2379".to_owned()], "simba"));
        assert_eq!(s.describe(), "etcd://127.0.0.1:2379");
        let s = ConnectSpec::parse(&BackendUrl::new("etcd://a:1,b:2/apps/simba/")).unwrap();
        assert_eq!(s.hosts, vec!["a:1".to_owned(), "b:2".to_owned()]);
        assert_eq!(s.prefix, "apps/simba");
        assert_eq!(s.describe(), "etcd://a:1,b:2/apps/simba");
        assert_eq!(ConnectSpec::parse(&BackendUrl::new("etcd://a:1/")).unwrap().prefix, "simba");
    }

    #[test]
    fn refuses_bad_urls() {
        for url in ["zk://a:1", "etcd://", "etcd://a", "etcd://:1", "etcd://a:x", "etcd://a:1,/p", "etcd://a:1/p/../q"]
        {
            let e = ConnectSpec::parse(&BackendUrl::new(url)).unwrap_err();
            assert!(matches!(e, BackendError::Misconfigured(_)), "{url}: {e:?}");
            assert!(e.to_string().contains(url), "{e}");
        }
        let e = ConnectSpec::parse(&BackendUrl::new("etcd://a:1?tls=true")).unwrap_err().to_string();
        assert!(e.contains("ca_file"), "{e}");
        let e = ConnectSpec::parse(&BackendUrl::new("etcd://a:1?sslmode=x")).unwrap_err().to_string();
        assert!(e.contains("unknown parameter `sslmode`"), "{e}");
    }

    #[test]
    fn credentials_never_show() {
        let s = ConnectSpec::parse(&BackendUrl::new("etcd://alice:s3%40cret@a:1/c")).unwrap();
        assert_eq!(s.auth, Some(("alice".into(), "s3@cret".into())));
        assert_eq!(s.describe(), "etcd://alice@a:1/c");
        assert!(!format!("{s:?}").contains("s3"), "{s:?}");
        for bad in ["etcd://alice@a:1", "etcd://:pw@a:1", "etcd://alice:s3cret@a:1?tls=true", "etcd://alice:s3cret@a"] {
            let e = ConnectSpec::parse(&BackendUrl::new(bad)).unwrap_err().to_string();
            assert!(!e.contains("s3cret") && !e.contains(":pw@"), "{e}");
        }
    }
}
