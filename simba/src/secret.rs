//! Secrets: URL redaction and the TLS and credential checks every backend shares (ADR 0008).
//!
//! Every place a backend URL can surface (errors, `Debug`, logs, the runtime's messages)
//! goes through [`redact_url`], which masks the password of the userinfo and the value of any
//! query parameter whose name says it is a secret.

use std::path::Path;

/// The mask put in place of a secret.
pub(crate) const MASK: &str = "***";

/// `url` with every secret replaced by `***`: the password of the userinfo (`user:***@host`;
/// a userinfo without a scheme or a colon, as `secret@host`, is masked whole), and the value
/// of query parameters such as `password=`, `sslpassword=`, `auth=`, `token=`, `secret=`.
///
/// Errs on the side of masking: a password that holds an unencoded `/`, `?` or `#` still
/// disappears, and so may a little more than the secret.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let prefix = scheme.map(|s| format!("{s}://")).unwrap_or_default();
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, _) = rest.split_at(end);
    // The last `@` after a `user:` ends the userinfo, also when the password holds an
    // unencoded `@`, `/`, `?` or `#` (`user:p@ss/w?rd@host`: the authority's own `@` would cut
    // the password short and show the rest; found by the property tests, issue 16).
    let (userinfo, after) = if let Some(at) = rest.rfind('@')
        && let Some((user, _)) = rest[..at].split_once(':')
        && !user.contains(['/', '?', '#'])
    {
        (Some(&rest[..at]), at + 1)
    } else if let Some(at) = authority.rfind('@') {
        (Some(&rest[..at]), at + 1)
    } else {
        (None, 0)
    };
    // The byte ranges of `rest` to mask: the userinfo's password, and the values of secret
    // query parameters, both where the query starts after the userinfo and where it starts at
    // the first `?`: that last `@` may lie inside the query (`h:1/db?to=a@b&password=x`),
    // and then the parameters after it are the query's too (found by the fuzz target `url_redaction`, issue 16).
    let mut spans = Vec::new();
    if let Some(u) = userinfo {
        match u.split_once(':') {
            Some((user, _)) => spans.push(user.len() + 1..u.len()),
            None if scheme.is_none() => spans.push(0..u.len()),
            None => {}
        }
    }
    secret_param_spans(rest, after, &mut spans);
    secret_param_spans(rest, 0, &mut spans);
    format!("{prefix}{}", mask(rest, spans))
}

/// Pushes the byte ranges of the values of secret query parameters in `rest`, the query being
/// what follows the first `?` at or after `from` (up to a `#`).
fn secret_param_spans(rest: &str, from: usize, spans: &mut Vec<std::ops::Range<usize>>) {
    let Some(q) = rest[from..].find('?') else { return };
    let q = from + q + 1;
    let end = rest[q..].find('#').map_or(rest.len(), |f| q + f);
    let mut start = q;
    for param in rest[q..end].split('&') {
        if let Some((k, _)) = param.split_once('=')
            && is_secret_key(k)
        {
            spans.push(start + k.len() + 1..start + param.len());
        }
        start += param.len() + 1;
    }
}

/// `s` with each run of the byte ranges `spans` (overlapping or touching ones merged; an
/// empty one too: `password=` shows as `password=***`) replaced by the mask.
fn mask(s: &str, mut spans: Vec<std::ops::Range<usize>>) -> String {
    spans.sort_by_key(|r| (r.start, r.end));
    let mut out = String::with_capacity(s.len());
    let mut shown = 0;
    let mut current: Option<std::ops::Range<usize>> = None;
    for r in spans {
        match &mut current {
            Some(c) if r.start <= c.end => c.end = c.end.max(r.end),
            _ => {
                if let Some(c) = current.take() {
                    out.push_str(&s[shown..c.start]);
                    out.push_str(MASK);
                    shown = c.end;
                }
                current = Some(r);
            }
        }
    }
    if let Some(c) = current {
        out.push_str(&s[shown..c.start]);
        out.push_str(MASK);
        shown = c.end;
    }
    out.push_str(&s[shown..]);
    out
}

/// Whether a query parameter or configuration key holds a secret.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let k: String = key.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    // `password_file` names where the secret is, which is no secret.
    if k.ends_with("file") {
        return false;
    }
    ["password", "passwd", "secret", "token", "credential", "apikey"].iter().any(|w| k.contains(w))
        || matches!(k.as_str(), "pass" | "pwd" | "auth" | "digest" | "userinfo" | "webhook")
}

/// Reads a PEM file named by a TLS setting (`what`: "CA file", "client certificate",
/// "client key") and checks that it holds a PEM block, so that a wrong path or a wrong file
/// fails before connecting, naming the file and the cause.
pub(crate) fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(format!(
            "the {what} {} holds no PEM block (expected a file that starts with `-----BEGIN`)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// What to tell the user when a driver's error says the TLS handshake failed, if it does.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "redis", feature = "zookeeper")),
    allow(dead_code)
)]
pub(crate) fn tls_hint(error: &str) -> Option<&'static str> {
    let e = error.to_ascii_lowercase();
    if e.contains("unknownissuer") || e.contains("unknown issuer") || e.contains("badsignature") {
        Some(
            "the server's TLS certificate is not trusted: it is not signed by the CA in the CA file \
             ([backend.tls] ca_file); give the CA that signed the server's certificate",
        )
    } else if e.contains("notvalidforname") || e.contains("not valid for name") {
        Some(
            "the server's TLS certificate does not match the host name in the URL: connect with a name the \
             certificate holds",
        )
    } else if e.contains("expired") && e.contains("certificate") {
        Some("the server's TLS certificate has expired")
    } else if e.contains("certificaterequired") || e.contains("certificate required") || e.contains("badcertificate") {
        // TLS 1.3 servers send certificate_required when a client gives none; Java's (ZooKeeper)
        // sends bad_certificate.
        Some(
            "the server requires a client certificate it trusts and refused the handshake: give one and its \
             key ([backend.tls] cert_file and key_file, or the URL's cert_file and key_file)",
        )
    } else if e.contains("certificate") || e.contains("tls") || e.contains("handshake") {
        Some("the TLS handshake failed: check the server's TLS settings and [backend.tls]")
    } else {
        None
    }
}

/// Percent-encodes `s` for the userinfo of a URL.
pub(crate) fn encode_userinfo(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (the userinfo of a URL); invalid escapes stay as they are.
pub(crate) fn decode_percent(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(v) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters of `url` as `(key, value)` pairs, in order.
pub(crate) fn query_params(url: &str) -> Vec<(String, String)> {
    let Some((_, q)) = url.split_once('?') else { return Vec::new() };
    let q = q.split('#').next().unwrap_or_default();
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_owned(), decode_percent(v))
        })
        .collect()
}

/// `url` without the query parameters named in `keys`.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn strip_params(url: &str, keys: &[&str]) -> String {
    let Some((head, q)) = url.split_once('?') else { return url.to_owned() };
    let kept: Vec<&str> =
        q.split('&').filter(|kv| !kv.is_empty() && !keys.contains(&kv.split('=').next().unwrap_or_default())).collect();
    if kept.is_empty() { head.to_owned() } else { format!("{head}?{}", kept.join("&")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_passwords_are_masked() {
        assert_eq!(redact_url("redis://:hunter2@db:6379"), "redis://:***@db:6379");
        assert_eq!(redact_url("postgres://u:p@h/d"), "postgres://u:***@h/d");
        assert_eq!(redact_url("sqlite://simba.db"), "sqlite://simba.db");
        assert_eq!(redact_url("redis://u:p@ss@h/0"), "redis://u:***@h/0");
        assert_eq!(redact_url("postgres://u:pa/ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u:pa?ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("zk://digest:alice:s3cret@h:2181/simba"), "zk://digest:***@h:2181/simba");
        assert_eq!(redact_url("u:s3cret@h:1"), "u:***@h:1");
        assert_eq!(redact_url("s3cret@h:1"), "***@h:1");
        assert_eq!(redact_url("redis://u@h"), "redis://u@h");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn secret_query_parameters_are_masked() {
        assert_eq!(
            redact_url("postgres://h/db?password=s3cret&sslmode=verify-full&sslpassword=k3y"),
            "postgres://h/db?password=***&sslmode=verify-full&sslpassword=***"
        );
        assert_eq!(redact_url("mysql://h/db?ssl-ca=/ca.pem#x"), "mysql://h/db?ssl-ca=/ca.pem#x");
        assert_eq!(redact_url("zk://h:1/c?auth=alice:pw&Token=t"), "zk://h:1/c?auth=***&Token=***");
        assert_eq!(redact_url("zk://u:p@h:1/c?digest=alice:pw"), "zk://u:***@h:1/c?digest=***");
        assert_eq!(redact_url("postgres://h/db?password="), "postgres://h/db?password=***");
    }

    /// Found by the fuzz target `url_redaction`: an unencoded `@` in the query
    /// after a host with a port was taken for the end of a userinfo, and the secret parameters
    /// after it lost their `?` and were shown.
    #[test]
    fn an_at_sign_in_the_query_hides_no_parameter() {
        assert_eq!(
            redact_url("postgres://db:5432/simba?user=ops@example.com&password=hunter2"),
            "postgres://db:***@example.com&password=***"
        );
        assert_eq!(redact_url("rediss://h:1?a=@p@=x&password=rr#f"), "rediss://h:***@=x&password=***#f");
        assert_eq!(redact_url("postgres://u:pw@h/db?password=a@b"), "postgres://u:***");
        assert_eq!(redact_url("postgres://u:pa?ss@h/db?sslmode=require"), "postgres://u:***@h/db?sslmode=require");
    }

    #[test]
    fn percent_round_trip() {
        let s = "p@ss:w/rd?#%é";
        assert_eq!(decode_percent(&encode_userinfo(s)), s);
        assert_eq!(decode_percent("%zz%4"), "%zz%4");
    }

    #[test]
    fn params() {
        assert_eq!(query_params("r://h?a=1&b=%2F"), vec![("a".into(), "1".into()), ("b".into(), "/".into())]);
        assert_eq!(strip_params("r://h?a=1&b=2", &["a"]), "r://h?b=2");
        assert_eq!(strip_params("r://h?a=1", &["a"]), "r://h");
    }
}
