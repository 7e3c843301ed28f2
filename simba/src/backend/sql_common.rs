//! What the PostgreSQL and MySQL backends share: limits, URL checks, conversions, and the
//! error that prints the schema for an administrator when the database user may not create
//! it (ADR 0002).

use std::time::Duration;

use super::{BackendError, BackendResult};

/// How long connecting may take, and how long a call waits for a pooled connection. A
/// server that does not answer within it is reported as unreachable instead of hanging.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a session's row (and its memberships) outlives its expiry before
/// `open_session` collects it. Only for tidiness and post-mortem reading: an expired row and
/// a missing row mean the same thing to every call.
pub(crate) const GC_GRACE_MS: i64 = 60_000;

/// The longest session lifetime stored, about 34 years, so that `now + ttl` stays far from
/// `i64::MAX`.
pub(crate) const MAX_TTL_MS: i64 = 1 << 40;

/// Server-side bound on waiting for a row lock, in milliseconds. A call whose client is
/// paused or cut off mid-transaction keeps its row locks until the server notices; other
/// callers then fail after this long instead of holding pooled connections indefinitely.
pub(crate) const LOCK_WAIT_MS: u64 = 5_000;

/// A session lifetime in whole milliseconds (rounded down, so never more than asked),
/// capped at [`MAX_TTL_MS`].
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).map_or(MAX_TTL_MS, |ms| ms.min(MAX_TTL_MS))
}

/// A stored non-negative integer (token, count, remaining time) as `u64`.
pub(crate) fn non_negative(database: &str, what: &str, v: i64) -> BackendResult<u64> {
    u64::try_from(v).map_err(|_| BackendError::Protocol(format!("{database}: negative {what} in the database: {v}")))
}

/// The digest of a session's leases from the count and the sums of the low and high 32-bit
/// halves of their tokens, recombined with wrapping arithmetic exactly as
/// [`HeldDigest::add`] does. Summing halves keeps the database's sums exact and far from
/// overflow (each half sum fits in 63 bits for up to 2^31 leases).
#[cfg(feature = "postgres")]
pub(crate) fn digest(database: &str, count: i64, low: i64, high: i64) -> BackendResult<super::HeldDigest> {
    Ok(super::HeldDigest {
        count: non_negative(database, "lease count", count)?,
        token_sum: non_negative(database, "token sum", low)?
            .wrapping_add(non_negative(database, "token sum", high)?.wrapping_shl(32)),
    })
}

/// Closes every idle pooled connection after `e`, when `e` says a connection broke.
///
/// Pools do not ping a connection before handing it out (a renewal is one round trip, S1),
/// so after a server restart every pooled connection is dead and would fail one call each.
/// A broken connection usually means all of them broke (restart, failover, network cut):
/// closing the idle ones at the first failure makes the next calls open fresh connections.
pub(crate) fn discard_idle_after<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, e: &sqlx::Error, database: &str) {
    if !matches!(e, sqlx::Error::Io(_)) {
        return;
    }
    let mut idle = Vec::new();
    while let Some(mut conn) = pool.try_acquire() {
        conn.close_on_drop();
        idle.push(conn);
    }
    if !idle.is_empty() {
        tracing::debug!(backend = database, closed = idle.len(), "a connection broke; closing the idle ones too");
    }
}

/// `url` with its password (if any) replaced by `***`, for error messages.
pub(crate) fn redact(url: &str) -> String {
    crate::secret::redact_url(url)
}

/// Checks the parts of a server URL that the driver would otherwise fill in silently: the
/// scheme, a host (in the authority or as a `host=` / `socket=` parameter) and a database.
/// Returns the URL normalised to the driver's scheme.
pub(crate) fn check_url(url: &str, schemes: &[&str], driver_scheme: &str, example: &str) -> BackendResult<String> {
    let shown = redact(url);
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

/// Reads the TLS files named by the URL's parameters (`keys`: parameter and what it is), so
/// that a missing, unreadable or non-PEM file fails before connecting, with its name.
pub(crate) fn check_tls_files(url: &str, keys: &[(&str, &str)]) -> BackendResult<()> {
    for (k, v) in crate::secret::query_params(url) {
        if let Some((key, what)) = keys.iter().find(|(key, _)| key.eq_ignore_ascii_case(&k)) {
            crate::secret::read_pem(what, std::path::Path::new(&v))
                .map_err(|m| BackendError::Misconfigured(format!("URL {:?}, parameter {key}: {m}", redact(url))))?;
        }
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
        let ok = |u: &str| check_url(u, &["postgres", "postgresql"], "postgres", ex);
        assert_eq!(ok("postgresql://u@h:5/db").ok().as_deref(), Some("postgres://u@h:5/db"));
        assert!(ok("postgres:///db?host=/run/postgresql").is_ok());
        for bad in ["mysql://u@h/db", "postgres://u@h", "postgres://u@h/", "postgres:///db", "h/db"] {
            let e = ok(bad).unwrap_err();
            assert!(matches!(e, BackendError::Misconfigured(_)), "{bad}: {e}");
        }
        let e = ok("postgres://u:secret@h").unwrap_err().to_string();
        assert!(e.contains("no database") && !e.contains("secret"), "{e}");
    }

    #[test]
    #[cfg(feature = "postgres")]
    fn digest_wraps_like_held_digest() {
        let t = (i64::MAX - 1) as u64;
        let mut expected = crate::backend::HeldDigest::default();
        for _ in 0..3 {
            expected.add(t);
        }
        let low = 3 * (t & 0xffff_ffff) as i64;
        let high = 3 * (t >> 32) as i64;
        assert_eq!(digest("db", 3, low, high).unwrap(), expected);
        assert!(digest("db", -1, 0, 0).is_err());
    }
}
