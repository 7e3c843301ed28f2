//! What a backend URL leaves in plain text or unverified (rule B7): a URL-only configuration
//! inherits each driver's defaults, and some of them are not safe beyond this machine.
//! PostgreSQL and MySQL try TLS without verifying the server and fall back to plain text;
//! `redis://`, `zk://` and `etcd://` without TLS send every command, and their credentials, in
//! clear. The runtime logs each finding as a warning when it starts, and `simba check` prints
//! it; neither refuses to run (a private network may be the operator's choice).
//!
//! A URL whose every host is this machine (`localhost`, `127.0.0.0/8`, `::1`, a Unix socket)
//! gets no finding: nothing crosses a network.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::BackendUrl;

/// One finding: which setting of the URL, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportWarning {
    /// The setting concerned (`sslmode`, `ssl-mode`, `scheme`, `tls`).
    pub setting: &'static str,
    /// What travels unprotected, and the fix.
    pub detail: String,
}

impl fmt::Display for TransportWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.setting, self.detail)
    }
}

/// What `url` leaves unprotected on the network, if anything (rule B7).
pub fn transport_warnings(url: &BackendUrl) -> Vec<TransportWarning> {
    let scheme = url.scheme().to_ascii_lowercase();
    if local_only(url) {
        return Vec::new();
    }
    let warning = |setting: &'static str, detail: String| vec![TransportWarning { setting, detail }];
    match scheme.as_str() {
        "postgres" | "postgresql" => {
            let mode = param_ci(url, "sslmode").map(str::to_ascii_lowercase);
            match mode.as_deref() {
                Some("verify-full" | "verify-ca") => Vec::new(),
                Some("disable") => warning("sslmode", "sslmode=disable: the password and every statement travel in plain text; write sslmode=verify-full with sslrootcert=CA".into()),
                Some("require") => warning("sslmode", "sslmode=require encrypts without verifying the server: a host in the middle can read the password; write sslmode=verify-full with sslrootcert=CA".into()),
                Some(other) => warning("sslmode", format!("sslmode={other} tries TLS without verifying the server and falls back to plain text; write sslmode=verify-full with sslrootcert=CA")),
                None => warning("sslmode", "no sslmode: the driver tries TLS without verifying the server and falls back to plain text; write sslmode=verify-full with sslrootcert=CA".into()),
            }
        }
        "mysql" | "mariadb" => {
            let mode = param_ci(url, "ssl-mode").map(str::to_ascii_lowercase);
            match mode.as_deref() {
                Some("verify_identity" | "verify_ca") => Vec::new(),
                Some("disabled") => warning("ssl-mode", "ssl-mode=DISABLED: the password and every statement travel in plain text; write ssl-mode=VERIFY_IDENTITY with ssl-ca=CA".into()),
                Some("required") => warning("ssl-mode", "ssl-mode=REQUIRED encrypts without verifying the server: a host in the middle can read the password; write ssl-mode=VERIFY_IDENTITY with ssl-ca=CA".into()),
                Some(other) => warning("ssl-mode", format!("ssl-mode={other} tries TLS without verifying the server and falls back to plain text; write ssl-mode=VERIFY_IDENTITY with ssl-ca=CA")),
                None => warning("ssl-mode", "no ssl-mode: the driver tries TLS without verifying the server and falls back to plain text; write ssl-mode=VERIFY_IDENTITY with ssl-ca=CA".into()),
            }
        }
        "redis" => warning(
            "scheme",
            format!(
                "redis:// sends every command{} in plain text; write rediss:// (with ca_file=CA for a private CA)",
                if has_password(url) { ", and the password," } else { "" }
            ),
        ),
        "redis+sentinel" => warning(
            "scheme",
            format!(
                "redis+sentinel:// sends every command{} in plain text (simba reaches Sentinels without TLS): keep \
                 the Sentinels and their servers on a private network",
                if has_password(url) { ", and the password," } else { "" }
            ),
        ),
        "zk" | "zookeeper" | "etcd" if !tls_on(url) => warning(
            "tls",
            format!(
                "without tls=true every request{} travels in plain text; add tls=true&ca_file=CA",
                if has_password(url) { ", and the user:password credentials," } else { "" }
            ),
        ),
        _ => Vec::new(),
    }
}

/// A warning for a dashboard or metrics listener that `addr` opens beyond this machine
/// (rule B7): they serve plain HTTP, so a TLS proxy belongs in front. `what` names it
/// (`[dashboard] listen`).
pub fn listener_warning(what: &str, addr: SocketAddr) -> Option<String> {
    (!addr.ip().is_loopback()).then(|| {
        format!(
            "{what} = {addr} serves plain HTTP beyond this machine: put a TLS proxy in front of it, or listen on 127.0.0.1"
        )
    })
}

fn param_ci<'a>(url: &'a BackendUrl, key: &str) -> Option<&'a str> {
    url.params().iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
}

fn tls_on(url: &BackendUrl) -> bool {
    param_ci(url, "tls").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The authority of the URL: between `://` and the next `/` or `?`, without the userinfo.
fn authority(url: &BackendUrl) -> (&str, bool) {
    let text = url.secret_text();
    let rest = text.split_once("://").map_or("", |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let auth = &rest[..end];
    match auth.rsplit_once('@') {
        Some((userinfo, hosts)) => (hosts, userinfo.contains(':')),
        None => (auth, false),
    }
}

fn has_password(url: &BackendUrl) -> bool {
    authority(url).1 || param_ci(url, "password").is_some()
}

/// Every host of the URL is this machine (or a PostgreSQL Unix socket given as `host=/path`).
fn local_only(url: &BackendUrl) -> bool {
    if param_ci(url, "host").is_some_and(|h| h.starts_with('/')) {
        return true;
    }
    let (hosts, _) = authority(url);
    if hosts.is_empty() {
        // `postgres:///db` and the like: the driver's default, a local socket.
        return true;
    }
    hosts.split(',').all(|h| {
        let host = match h.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => h.rsplit_once(':').map_or(h, |(host, _)| host),
        };
        host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(url: &str) -> Vec<&'static str> {
        transport_warnings(&BackendUrl::new(url)).into_iter().map(|w| w.setting).collect()
    }

    /// Rule B7: the driver defaults and the plain-text schemes are found beyond this
    /// machine; verified TLS and loopback hosts are not.
    #[test]
    fn b7_plain_text_and_unverified_tls_are_found() {
        for url in [
            "postgres://u:p@db.internal/simba",
            "postgres://u:p@db.internal/simba?sslmode=prefer",
            "postgres://u:p@db.internal/simba?sslmode=require",
            "postgres://u:p@db.internal/simba?sslmode=disable",
            "mysql://u:p@10.0.0.5/simba",
            "mysql://u:p@10.0.0.5/simba?ssl-mode=REQUIRED",
            "redis://:secret@cache.internal:6379",
            "zk://user:pw@zk1:2181,zk2:2181/simba",
            "etcd://etcd.internal:2379",
        ] {
            assert_eq!(found(url).len(), 1, "{url}");
        }
        for url in [
            "postgres://u:p@db.internal/simba?sslmode=verify-full&sslrootcert=/ca.pem",
            "postgres://u:p@db.internal/simba?SSLMODE=Verify-CA",
            "mysql://u:p@10.0.0.5/simba?ssl-mode=VERIFY_IDENTITY",
            "rediss://:secret@cache.internal:6380",
            "zk://zk1:2181/simba?tls=true&ca_file=/ca.pem",
            "etcd://etcd.internal:2379?tls=true&ca_file=/ca.pem",
            "postgres://u:p@127.0.0.1:5432/simba",
            "postgres://u:p@localhost/simba",
            "postgres:///simba?host=/var/run/postgresql",
            "redis://[::1]:6379",
            "zk://127.0.0.1:2181,127.0.0.2:2182",
            "sqlite://simba.db",
            "memory://",
        ] {
            assert!(found(url).is_empty(), "{url}: {:?}", found(url));
        }
        // One remote host among loopback ones is enough to cross a network.
        assert_eq!(found("zk://127.0.0.1:2181,zk2.internal:2181"), ["tls"]);
    }

    /// Rule B7: what a warning says names the fix and whether credentials are exposed,
    /// never the password itself.
    #[test]
    fn b7_warnings_name_the_fix_never_the_secret() {
        let w = transport_warnings(&BackendUrl::new("redis://:hunter2@cache.internal:6379"));
        assert!(w[0].detail.contains("the password") && w[0].detail.contains("rediss://"), "{}", w[0]);
        assert!(!w[0].to_string().contains("hunter2"));
        let w = transport_warnings(&BackendUrl::new("etcd://root:hunter2@etcd.internal:2379"));
        assert!(w[0].detail.contains("user:password credentials") && w[0].detail.contains("tls=true"), "{}", w[0]);
        let w = transport_warnings(&BackendUrl::new("postgres://u:hunter2@db/simba"));
        assert!(w[0].detail.contains("sslmode=verify-full"), "{}", w[0]);
        assert!(!w[0].to_string().contains("hunter2"));
    }

    /// Rule B7: a listener beyond loopback is named with its fix; loopback ones are not.
    #[test]
    fn b7_listeners_beyond_loopback_are_found() {
        let w = listener_warning("[dashboard] listen", "0.0.0.0:9465".parse().expect("addr"));
        assert!(w.is_some_and(|w| w.contains("TLS proxy") && w.contains("0.0.0.0:9465")));
        assert!(listener_warning("[metrics] listen", "127.0.0.1:9464".parse().expect("addr")).is_none());
        assert!(listener_warning("[metrics] listen", "[::1]:9464".parse().expect("addr")).is_none());
    }
}
