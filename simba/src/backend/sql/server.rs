//! What the PostgreSQL and MySQL backends share beyond the statements: limits, URL checks,
//! connection errors, and the error that prints the schema for an administrator when the
//! database user may not create it (ADR 0002).

use std::time::Duration;

use crate::backend::{BackendError, BackendResult, BackendUrl};

/// How long connecting may take, and how long a call waits for a pooled connection. A
/// server that does not answer within it is reported as unreachable instead of hanging.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-side bound on waiting for a row lock, in milliseconds. A call whose client is
/// paused or cut off mid-transaction keeps its row locks until the server notices; other
/// callers then fail after this long instead of holding pooled connections indefinitely.
pub(crate) const LOCK_WAIT_MS: u64 = 5_000;

/// Checks the parts of a server URL that the driver would otherwise fill in silently: the
/// scheme, a host (in the authority or as a `host=` / `socket=` parameter) and a database.
/// Returns the URL normalised to the driver's scheme.
pub(crate) fn check_url(
    url: &BackendUrl,
    schemes: &[&str],
    driver_scheme: &str,
    example: &str,
) -> BackendResult<String> {
    let (shown, url) = (url.redacted(), url.secret_text());
    let rest =
        schemes.iter().find_map(|s| url.strip_prefix(s).and_then(|r| r.strip_prefix("://"))).ok_or_else(|| {
            BackendError::Misconfigured(format!(
                "unsupported URL {shown:?}: expected {example} (scheme {})",
                schemes.iter().map(|s| format!("{s}://")).collect::<Vec<_>>().join(" or ")
            ))
        })?;
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_param = query.split('&').any(|kv| kv.starts_with("host=") || kv.starts_with("socket="));
    if host.is_empty() && !host_param {
        return Err(BackendError::Misconfigured(format!("URL {shown:?} names no host: expected {example}")));
    }
    if path.trim_matches('/').is_empty() {
        return Err(BackendError::Misconfigured(format!(
            "URL {shown:?} names no database: expected {example} (simba creates its tables in that database)"
        )));
    }
    Ok(format!("{driver_scheme}://{rest}"))
}

/// Reads the TLS files named by the URL's parameters, so that a missing, unreadable or
/// non-PEM file fails before connecting, with its name.
pub(crate) fn check_tls_files(url: &BackendUrl) -> BackendResult<()> {
    let files = url.tls_files();
    for file in [&files.ca, &files.cert, &files.key].into_iter().flatten() {
        file.read().map_err(|m| BackendError::Misconfigured(format!("URL {:?}, parameter {m}", url.redacted())))?;
    }
    Ok(())
}

/// The message of a failed connection, with what to do when TLS was the cause.
pub(crate) fn connect_message(description: &str, e: &sqlx::Error) -> (String, bool) {
    let text = format!("{e}");
    let tls = matches!(e, sqlx::Error::Tls(_))
        || (matches!(e, sqlx::Error::Io(_)) && crate::secret::tls_hint(&text).is_some());
    match crate::secret::tls_hint(&format!("{e:?} {text}")).filter(|_| tls) {
        Some(hint) => (format!("cannot connect to {description}: {hint} ({text})"), true),
        None => (format!("cannot connect to {description}: {text}"), false),
    }
}

/// `scheme://user@host:port/database`, without the password, for logs and errors.
pub(crate) fn describe(scheme: &str, user: &str, host: &str, port: u16, database: &str) -> String {
    if user.is_empty() {
        format!("{scheme}://{host}:{port}/{database}")
    } else {
        format!("{scheme}://{user}@{host}:{port}/{database}")
    }
}

/// The schema as a script an administrator can run, one statement per paragraph.
pub(crate) fn schema_script(statements: &[&str]) -> String {
    let mut script = String::new();
    for s in statements {
        script.push_str(s.trim());
        script.push_str(";\n\n");
    }
    script
}

/// The error for a database user that may not create the missing tables: it prints the
/// schema and the grants to run by hand, once, as a user that may.
pub(crate) fn schema_missing(description: &str, user: &str, cause: &str, script: &str, grants: &str) -> BackendError {
    BackendError::Misconfigured(format!(
        "{description}: simba's tables are missing and user {user:?} may not create them ({cause}); \
         run this once as a user that may, then start again:\n\n{script}{grants}\n"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn redact(url: &str) -> String {
        BackendUrl::new(url).redacted().to_owned()
    }

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(redact("postgres://u:secret@h:1/db"), "postgres://u:***@h:1/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("mysql://u:p%40ss@h/db?x=1"), "mysql://u:***@h/db?x=1");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn check_url_wants_scheme_host_and_database() {
        let ex = "postgres://user@host/db";
        let ok = |u: &str| check_url(&BackendUrl::new(u), &["postgres", "postgresql"], "postgres", ex);
        assert_eq!(ok("postgresql://u@h:5/db").ok().as_deref(), Some("postgres://u@h:5/db"));
        assert!(ok("postgres:///db?host=/run/postgresql").is_ok());
        for bad in ["mysql://u@h/db", "postgres://u@h", "postgres://u@h/", "postgres:///db", "h/db"] {
            let e = ok(bad).unwrap_err();
            assert!(matches!(e, BackendError::Misconfigured(_)), "{bad}: {e}");
        }
        let e = ok("postgres://u:secret@h").unwrap_err().to_string();
        assert!(e.contains("no database") && !e.contains("secret"), "{e}");
    }
}
