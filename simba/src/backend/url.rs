//! One parsed backend URL: its scheme, its redacted text, its query parameters and the TLS
//! files they name, worked out once and handed to [`connect`](super::connect) and each
//! backend's own parser (ADR 0008: every place a URL can surface shows the redacted text).

use std::fmt;
use std::path::{Path, PathBuf};

/// A backend URL (`postgres://user:password@host/db?sslmode=verify-full`, `sqlite:file.db`,
/// `zk://host:2181/chroot`, ...), parsed once.
///
/// Its [`Display`](fmt::Display) and [`Debug`](fmt::Debug) show the [redacted](Self::redacted)
/// text, never a password or a secret query parameter. Parsing never fails: whether the URL
/// suits its backend (a host, a database, known parameters) is that backend's to say when
/// [`connect`](super::connect) hands it over, so each error names what that backend expects.
#[derive(Clone, PartialEq, Eq)]
pub struct BackendUrl {
    /// The URL as given, secrets included: only drivers see it.
    text: String,
    /// Where the scheme ends in `text` (`postgres` of `postgres://...`, `sqlite` of `sqlite:x.db`).
    scheme_end: usize,
    /// `text` with every secret masked.
    shown: String,
    /// The query parameters, values percent-decoded.
    params: Vec<(String, String)>,
}

impl BackendUrl {
    /// Parses `url`.
    pub fn new(url: impl Into<String>) -> Self {
        let text = url.into();
        let scheme_end = text.find("://").or_else(|| text.find(':')).unwrap_or(text.len());
        let shown = crate::secret::redact_url(&text);
        let params = crate::secret::query_params(&text);
        BackendUrl { text, scheme_end, shown, params }
    }

    /// The scheme as written: `postgres` in `postgres://...`, `sqlite` in `sqlite:x.db`
    /// (the whole text when it has no `:`).
    pub fn scheme(&self) -> &str {
        &self.text[..self.scheme_end]
    }

    /// The URL with every secret replaced by `***`: the userinfo's password and the values of
    /// query parameters whose name says they are secret (`password=`, `auth=`, `token=`, ...).
    pub fn redacted(&self) -> &str {
        &self.shown
    }

    /// The query parameters, in order, values percent-decoded.
    pub fn params(&self) -> &[(String, String)] {
        &self.params
    }

    /// The value of the first query parameter named `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The TLS files the URL's parameters name, under the parameter names of its scheme:
    /// PostgreSQL's `sslrootcert`, `sslcert`, `sslkey`; MySQL's `ssl-ca`, `ssl-cert`,
    /// `ssl-key`; simba's own `ca_file`, `cert_file`, `key_file` for Redis, ZooKeeper and
    /// etcd. Names are matched without regard to case.
    pub fn tls_files(&self) -> TlsFiles {
        let [ca, cert, key] = match self.scheme() {
            "postgres" | "postgresql" => ["sslrootcert", "sslcert", "sslkey"],
            "mysql" | "mariadb" => ["ssl-ca", "ssl-cert", "ssl-key"],
            _ => ["ca_file", "cert_file", "key_file"],
        };
        let file = |param: &'static str, what: &'static str| {
            self.params.iter().find(|(k, _)| k.eq_ignore_ascii_case(param)).map(|(_, v)| TlsFile {
                param,
                what,
                path: PathBuf::from(v),
            })
        };
        TlsFiles {
            ca: file(ca, "CA file"),
            cert: file(cert, "client certificate"),
            key: file(key, "client key"),
            params: [ca, cert, key],
        }
    }

    /// The file a `sqlite:` URL names, if it names one (not `sqlite::memory:`).
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        if self.scheme() != "sqlite" {
            return None;
        }
        let rest = &self.text[self.scheme_end..];
        let rest = rest.strip_prefix("://").or_else(|| rest.strip_prefix(':')).unwrap_or(rest);
        let path = rest.split('?').next().unwrap_or(rest);
        (!path.is_empty() && !path.starts_with(":memory:")).then(|| PathBuf::from(path))
    }

    /// The TLS files of a URL that turns TLS on with `tls=true` (ZooKeeper, etcd): `None`
    /// without it; with it, the CA (required) and the optional client identity, read and
    /// checked to be PEM. Errors say what to write.
    #[cfg(any(feature = "zookeeper", feature = "etcd"))]
    pub(crate) fn flagged_tls(&self) -> Result<Option<FlaggedTls>, String> {
        let on = match self.param("tls") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(format!("tls={other}: write tls=true or tls=false")),
        };
        let TlsPem { ca, identity } = self.tls_files().read()?;
        if !on {
            if ca.is_some() || identity.is_some() {
                return Err("ca_file, cert_file and key_file need tls=true".into());
            }
            return Ok(None);
        }
        let ca = ca.ok_or("tls=true needs ca_file, the CA that signed the servers' certificates")?;
        Ok(Some(FlaggedTls { ca, identity }))
    }

    /// The secret parts of the URL: the userinfo's password and the values of secret query
    /// parameters, raw and percent-decoded, longest first; masked wherever a driver's error
    /// text might quote them.
    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub(crate) fn secrets(&self) -> Vec<String> {
        let text = self.text.as_str();
        let mut out = Vec::new();
        let rest = text.split_once("://").map_or(text, |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            out.push(password.to_owned());
            out.push(crate::secret::decode_percent(password));
        }
        out.extend(self.params.iter().filter(|(k, _)| crate::secret::is_secret_key(k)).map(|(_, v)| v.clone()));
        out.retain(|s| !s.is_empty());
        out.sort_by_key(|s| std::cmp::Reverse(s.len()));
        out.dedup();
        out
    }

    /// The URL as given, secrets included, for the driver that connects with it. Never show it.
    #[cfg_attr(
        not(any(
            feature = "sqlite",
            feature = "postgres",
            feature = "mysql",
            feature = "redis",
            feature = "zookeeper",
            feature = "etcd"
        )),
        allow(dead_code)
    )]
    pub(crate) fn secret_text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BackendUrl").field(&self.shown).finish()
    }
}

impl From<&str> for BackendUrl {
    fn from(url: &str) -> Self {
        BackendUrl::new(url)
    }
}

impl From<String> for BackendUrl {
    fn from(url: String) -> Self {
        BackendUrl::new(url)
    }
}

impl std::str::FromStr for BackendUrl {
    type Err = std::convert::Infallible;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Ok(BackendUrl::new(url))
    }
}

/// The TLS files a [`BackendUrl`] names; see [`BackendUrl::tls_files`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed the server's certificate.
    pub ca: Option<TlsFile>,
    /// The client certificate.
    pub cert: Option<TlsFile>,
    /// The client certificate's key.
    pub key: Option<TlsFile>,
    /// The scheme's names of the three parameters, for messages about a missing one.
    params: [&'static str; 3],
}

/// One TLS file a URL parameter names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFile {
    /// The parameter that names it (`sslrootcert`, `ca_file`, ...).
    pub param: &'static str,
    /// What it is, for messages: "CA file", "client certificate" or "client key".
    pub what: &'static str,
    /// The path the parameter gives.
    pub path: PathBuf,
}

/// The TLS files of a URL with `tls=true`: the CA is required there.
#[cfg(any(feature = "zookeeper", feature = "etcd"))]
pub(crate) struct FlaggedTls {
    /// The CA file's contents.
    pub(crate) ca: Vec<u8>,
    /// The client certificate and its key.
    pub(crate) identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// The contents of a URL's TLS files, checked to be PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPem {
    /// The CA file's contents.
    pub ca: Option<Vec<u8>>,
    /// The client certificate and its key, given together.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsPem {
    // A client key is a secret: show only which files were read.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem").field("ca", &self.ca.is_some()).field("identity", &self.identity.is_some()).finish()
    }
}

impl TlsFile {
    /// Reads the file and checks that it holds a PEM block, so that a wrong path or a wrong
    /// file fails before connecting; the error names the parameter, the file and the cause.
    pub fn read(&self) -> Result<Vec<u8>, String> {
        crate::secret::read_pem(self.what, Path::new(&self.path)).map_err(|m| format!("{}: {m}", self.param))
    }
}

impl TlsFiles {
    /// Whether no TLS file is named.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    /// Reads every named file (see [`TlsFile::read`]); a client certificate without its key,
    /// or a key without its certificate, is an error naming both parameters.
    pub fn read(&self) -> Result<TlsPem, String> {
        let read = |f: &Option<TlsFile>| f.as_ref().map(TlsFile::read).transpose();
        let ca = read(&self.ca)?;
        let identity = match (read(&self.cert)?, read(&self.key)?) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                let [_, cert, key] = self.params;
                return Err(format!("give both {cert} and {key} (a client certificate needs its key)"));
            }
        };
        Ok(TlsPem { ca, identity })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_a_url() {
        let u = BackendUrl::new("postgres://u:hunter2@h:5432/db?sslmode=verify-full&password=x&sslrootcert=/ca.pem");
        assert_eq!(u.scheme(), "postgres");
        assert_eq!(u.redacted(), "postgres://u:***@h:5432/db?sslmode=verify-full&password=***&sslrootcert=/ca.pem");
        assert_eq!(u.to_string(), u.redacted());
        assert!(!format!("{u:?}").contains("hunter2"));
        assert_eq!(u.param("sslmode"), Some("verify-full"));
        let tls = u.tls_files();
        assert_eq!(tls.ca.as_ref().map(|f| (f.param, f.path.clone())), Some(("sslrootcert", "/ca.pem".into())));
        assert!(tls.cert.is_none() && tls.key.is_none());
        assert_eq!(BackendUrl::new("sqlite:x.db").scheme(), "sqlite");
        assert_eq!(BackendUrl::new("nosuch").scheme(), "nosuch");
        assert_eq!(BackendUrl::new("rediss://h?ca_file=a").tls_files().ca.map(|f| f.param), Some("ca_file"));
        assert_eq!(BackendUrl::new("mysql://h/d?SSL-CA=a").tls_files().ca.map(|f| f.param), Some("ssl-ca"));
    }

    #[test]
    fn sqlite_files() {
        let file = |u: &str| BackendUrl::new(u).sqlite_file();
        assert_eq!(file("sqlite://simba.db?mode=rwc"), Some("simba.db".into()));
        assert_eq!(file("sqlite:x.db"), Some("x.db".into()));
        assert_eq!(file("sqlite::memory:"), None);
        assert_eq!(file("postgres://h/db"), None);
    }

    #[test]
    fn a_certificate_needs_its_key() {
        let e = BackendUrl::new("mysql://h/d?ssl-cert=/nonexistent").tls_files();
        assert!(e.read().unwrap_err().contains("ssl-cert: cannot read the client certificate /nonexistent"));
        let dir = std::env::temp_dir().join(format!("simba-url-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pem = dir.join("c.pem");
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let e = BackendUrl::new(format!("rediss://h?cert_file={}", pem.display())).tls_files().read().unwrap_err();
        assert_eq!(e, "give both cert_file and key_file (a client certificate needs its key)");
        let e = BackendUrl::new(format!("postgres://h/d?sslkey={}", pem.display())).tls_files().read().unwrap_err();
        assert_eq!(e, "give both sslcert and sslkey (a client certificate needs its key)");
        let ok = BackendUrl::new(format!("zk://h:1?ca_file={0}&cert_file={0}&key_file={0}", pem.display()));
        let read = ok.tls_files().read().unwrap();
        assert!(read.ca.is_some() && read.identity.is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
