//! `[backend]` credentials and `[backend.tls]`: merged into the backend URL in each driver's
//! own terms (ADR 0008).
//!
//! ```toml
//! [backend]
//! url = "postgres://db.internal:5432/simba"
//! user = "simba"
//! password_file = "/run/secrets/simba-db"   # or SIMBA_BACKEND__PASSWORD
//!
//! [backend.tls]
//! ca_file = "/etc/simba/ca.pem"
//! cert_file = "/etc/simba/client.pem"       # optional: client certificate
//! key_file = "/etc/simba/client.key"        # optional: its key
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::secret::{encode_userinfo, read_pem};

/// `[backend.tls]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsTable {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

/// The password in `path`, without a trailing newline. The error names the file, never its
/// content.
pub(super) fn read_password_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "[backend] password_file: cannot read {}: {e} (give a readable file that holds only the password)",
            path.display()
        )
    })?;
    let password = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if password.is_empty() {
        return Err(format!("[backend] password_file: {} is empty", path.display()));
    }
    Ok(password.to_owned())
}

/// The schemes whose servers take a user and password.
const WITH_CREDENTIALS: [&str; 8] = ["postgres", "postgresql", "mysql", "mariadb", "redis", "rediss", "zk", "etcd"];

/// `url` with `user`, `password` and the TLS files merged in, in the parameters each driver
/// reads: PostgreSQL `sslmode=verify-full&sslrootcert=...&sslcert=...&sslkey=...`, MySQL
/// `ssl-mode=VERIFY_IDENTITY&ssl-ca=...&ssl-cert=...&ssl-key=...`, Redis `rediss://` and
/// simba's `ca_file`/`cert_file`/`key_file`, ZooKeeper and etcd `tls=true` with those, and
/// the userinfo for digest auth or etcd users (ADR 0008). Errors never hold the password.
pub(super) fn secure_url(
    url: &str,
    user: Option<&str>,
    password: Option<&str>,
    tls: Option<&TlsTable>,
) -> Result<String, String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    if let Some(t) = tls {
        check_tls_files(t)?;
    }
    let tls_params = match tls {
        Some(t) => tls_params(&scheme, t)?,
        None => Vec::new(),
    };
    if (user.is_some() || password.is_some()) && !WITH_CREDENTIALS.contains(&scheme.as_str()) {
        return Err(format!("user and password do not apply to the `{scheme}` backend (it has no server)"));
    }
    let mut out = url.to_owned();
    if user.is_some() || password.is_some() {
        out = with_userinfo(&out, user, password)?;
    }
    if scheme == "redis" && tls.is_some() {
        out = format!("rediss{}", &out["redis".len()..]);
    }
    if !tls_params.is_empty() {
        let existing = crate::secret::query_params(&out);
        let mut sep = if out.contains('?') { '&' } else { '?' };
        for (k, v) in tls_params {
            if existing.iter().any(|(e, _)| e.eq_ignore_ascii_case(k)) {
                return Err(format!(
                    "the URL already sets `{k}`: configure TLS in the URL or in [backend.tls], not both"
                ));
            }
            out.push(sep);
            out.push_str(k);
            out.push('=');
            out.push_str(&encode_userinfo(&v));
            sep = '&';
        }
    }
    Ok(out)
}

/// The files of `[backend.tls]` exist and hold PEM; a certificate comes with its key.
fn check_tls_files(t: &TlsTable) -> Result<(), String> {
    for (key, what, file) in [
        ("ca_file", "CA file", &t.ca_file),
        ("cert_file", "client certificate", &t.cert_file),
        ("key_file", "client key", &t.key_file),
    ] {
        if let Some(f) = file {
            read_pem(what, f).map_err(|m| format!("[backend.tls] {key}: {m}"))?;
        }
    }
    if t.cert_file.is_some() != t.key_file.is_some() {
        return Err("[backend.tls]: set both cert_file and key_file (a client certificate needs its key)".into());
    }
    Ok(())
}

/// The URL parameters that carry `[backend.tls]` for `scheme`'s driver.
fn tls_params(scheme: &str, t: &TlsTable) -> Result<Vec<(&'static str, String)>, String> {
    let (mut p, names) = match scheme {
        "postgres" | "postgresql" => {
            (vec![("sslmode", "verify-full".to_owned())], ["sslrootcert", "sslcert", "sslkey"])
        }
        "mysql" | "mariadb" => (vec![("ssl-mode", "VERIFY_IDENTITY".to_owned())], ["ssl-ca", "ssl-cert", "ssl-key"]),
        "zk" | "etcd" => (vec![("tls", "true".to_owned())], ["ca_file", "cert_file", "key_file"]),
        "redis" | "rediss" => (Vec::new(), ["ca_file", "cert_file", "key_file"]),
        other => {
            return Err(format!("[backend.tls] does not apply to the `{other}` backend (it has no server to talk to)"));
        }
    };
    for (key, file) in names.into_iter().zip([&t.ca_file, &t.cert_file, &t.key_file]) {
        push(&mut p, key, file);
    }
    Ok(p)
}

/// `url` with `user` and `password` in its userinfo (percent-encoded), refusing a second
/// password or a different user.
fn with_userinfo(url: &str, user: Option<&str>, password: Option<&str>) -> Result<String, String> {
    let (prefix, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (old_user, old_password, host) = match authority.rsplit_once('@') {
        Some((ui, h)) => match ui.split_once(':') {
            Some((u, p)) => (Some(u), Some(p), h),
            None => (Some(ui), None, h),
        },
        None => (None, None, authority),
    };
    if password.is_some() && old_password.is_some() {
        return Err("the URL already holds a password: set it in one place only".into());
    }
    if let (Some(u), Some(old)) = (user, old_user)
        && !old.is_empty()
        && old != encode_userinfo(u)
    {
        return Err(format!("the URL names user {old:?} and [backend] user is {u:?}: set the user in one place only"));
    }
    let u = user.map(encode_userinfo).or(old_user.map(str::to_owned)).unwrap_or_default();
    let p = password.map(encode_userinfo).or(old_password.map(str::to_owned));
    let userinfo = match p {
        Some(p) => format!("{u}:{p}@"),
        None => format!("{u}@"),
    };
    Ok(format!("{prefix}://{userinfo}{host}{tail}"))
}

fn push(p: &mut Vec<(&'static str, String)>, key: &'static str, file: &Option<PathBuf>) {
    if let Some(f) = file {
        p.push((key, f.display().to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(ca: &Path) -> TlsTable {
        TlsTable { ca_file: Some(ca.to_owned()), cert_file: None, key_file: None }
    }

    #[test]
    fn credentials_go_into_the_userinfo() {
        let u = secure_url("postgres://h:1/db", Some("simba"), Some("p@ss/w:rd"), None).expect("valid");
        assert_eq!(u, "postgres://simba:p%40ss%2Fw%3Ard@h:1/db");
        let u = secure_url("redis://alice@h:1", None, Some("x"), None).expect("valid");
        assert_eq!(u, "redis://alice:x@h:1");
        let e = secure_url("redis://a:b@h", None, Some("hunter2"), None).expect_err("must fail");
        assert!(e.contains("one place") && !e.contains("hunter2"), "{e}");
        let e = secure_url("sqlite://x.db", None, Some("hunter2"), None).expect_err("must fail");
        assert!(e.contains("sqlite") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn tls_files_are_checked_and_merged() {
        let dir = std::env::temp_dir().join(format!("simba-sec-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let ca = dir.join("ca.pem");
        let _ = std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n");
        let shown = ca.display().to_string().replace('/', "%2F");
        let u = secure_url("postgres://h/db", None, None, Some(&tls(&ca))).expect("valid");
        assert_eq!(u, format!("postgres://h/db?sslmode=verify-full&sslrootcert={shown}"));
        let u = secure_url("mysql://h/db?x=1", None, None, Some(&tls(&ca))).expect("valid");
        assert_eq!(u, format!("mysql://h/db?x=1&ssl-mode=VERIFY_IDENTITY&ssl-ca={shown}"));
        let u = secure_url("redis://h:1", None, None, Some(&tls(&ca))).expect("valid");
        assert_eq!(u, format!("rediss://h:1?ca_file={shown}"));
        let u = secure_url("etcd://h:1,g:2/p", Some("simba"), Some("pw"), Some(&tls(&ca))).expect("valid");
        assert_eq!(u, format!("etcd://simba:pw@h:1,g:2/p?tls=true&ca_file={shown}"));
        let missing = dir.join("nope.pem");
        let e = secure_url("redis://h:1", None, None, Some(&tls(&missing))).expect_err("must fail");
        assert!(e.contains("ca_file") && e.contains("nope.pem") && e.contains("cannot read"), "{e}");
        let not_pem = dir.join("x.txt");
        let _ = std::fs::write(&not_pem, "hello");
        let e = secure_url("redis://h:1", None, None, Some(&tls(&not_pem))).expect_err("must fail");
        assert!(e.contains("x.txt") && e.contains("no PEM"), "{e}");
        let e = secure_url("sqlite://a.db", None, None, Some(&tls(&ca))).expect_err("must fail");
        assert!(e.contains("sqlite"), "{e}");
        let e = secure_url("postgres://h/db?sslmode=require", None, None, Some(&tls(&ca))).expect_err("must fail");
        assert!(e.contains("sslmode"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
