//! Connecting: URL checks and redaction, the eviction-policy check, and error mapping.

use std::collections::HashMap;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::time::timeout;

use crate::backend::{BackendError, BackendResult, BackendUrl};

/// Reads `maxmemory-policy` and refuses an evicting server unless `allow` (see the module
/// documentation).
pub(super) async fn check_eviction_policy(
    conn: &mut redis::aio::MultiplexedConnection,
    description: &str,
    allow: bool,
    ct: Duration,
) -> BackendResult<()> {
    let reply = timeout(
        ct,
        redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async::<HashMap<String, String>>(conn),
    )
    .await
    .map_err(|_| no_answer(description, ct))?;
    let policy = match reply {
        Ok(map) => map.get("maxmemory-policy").cloned(),
        Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(connect_error(description, &e)),
        Err(e) => {
            tracing::warn!(
                backend = %description,
                error = %e,
                "cannot read maxmemory-policy (CONFIG is disabled or not permitted, as on many managed services): \
                 make sure the server's policy is noeviction, or fencing tokens may restart from 1 after an eviction"
            );
            return Ok(());
        }
    };
    match policy.as_deref() {
        Some("noeviction") => Ok(()),
        Some(policy) if allow => {
            tracing::warn!(
                backend = %description,
                policy,
                "Redis may EVICT simba's keys (maxmemory-policy is not noeviction) and allow_eviction is set: an \
                 evicted lease restarts its fencing tokens from 1 and an evicted session frees its leases early; \
                 use noeviction or a dedicated instance"
            );
            Ok(())
        }
        Some(policy) => Err(BackendError::Misconfigured(format!(
            "Redis at {description} has maxmemory-policy `{policy}`, so it may evict simba's keys: an evicted lease \
             hash restarts its fencing tokens from 1 and an evicted session key frees its leases while their holder \
             still believes them valid, which breaks fencing. Set `maxmemory-policy noeviction` (e.g. \
             `CONFIG SET maxmemory-policy noeviction`) or use a dedicated Redis instance; to accept the risk, set \
             RedisOptions::allow_eviction"
        ))),
        None => {
            tracing::warn!(backend = %description, "the server did not report maxmemory-policy: make sure it is noeviction");
            Ok(())
        }
    }
}

/// The oldest server the scripts run on: the keep-alive's audit uses `HRANDFIELD` (6.2).
const MIN_VERSION: (u64, u64) = (6, 2);

/// Reads `redis_version` from `INFO server` and refuses a server older than
/// [`MIN_VERSION`], whose keep-alive script would fail at every renewal. A server that does not
/// report a version (a proxy, a compatible store) or does not permit `INFO` is let through with
/// a warning.
pub(super) async fn check_version(
    conn: &mut redis::aio::MultiplexedConnection,
    description: &str,
    ct: Duration,
) -> BackendResult<()> {
    let reply = timeout(ct, redis::cmd("INFO").arg("server").query_async::<String>(conn))
        .await
        .map_err(|_| no_answer(description, ct))?;
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(connect_error(description, &e)),
        Err(e) => {
            tracing::warn!(backend = %description, error = %e, "cannot read the server's version (INFO is not permitted): simba needs Redis 6.2 or later");
            return Ok(());
        }
    };
    match server_version(&reply) {
        Some(v) if v < MIN_VERSION => Err(BackendError::Misconfigured(format!(
            "Redis at {description} is version {}.{}: simba needs {}.{} or later (its keep-alive script uses              HRANDFIELD); upgrade the server",
            v.0, v.1, MIN_VERSION.0, MIN_VERSION.1
        ))),
        Some(_) => Ok(()),
        None => {
            tracing::warn!(backend = %description, "the server did not report redis_version: simba needs Redis 6.2 or later");
            Ok(())
        }
    }
}

/// `(major, minor)` of the `redis_version:` line of an `INFO server` reply.
fn server_version(info: &str) -> Option<(u64, u64)> {
    let v = info.lines().find_map(|l| l.trim().strip_prefix("redis_version:"))?;
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Checks the scheme and host before the driver parses the URL, for clearer messages.
pub(super) fn check_url(url: &BackendUrl) -> BackendResult<()> {
    let (shown, url) = (url.redacted(), url.secret_text());
    let expected = "expected redis://[user[:password]@]host[:port][/db] or rediss://... (TLS)";
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(BackendError::Misconfigured(format!("invalid Redis URL {shown}: no scheme; {expected}")));
    };
    if !scheme.eq_ignore_ascii_case("redis") && !scheme.eq_ignore_ascii_case("rediss") {
        return Err(BackendError::Misconfigured(format!(
            "invalid Redis URL {shown}: unsupported scheme `{scheme}`; {expected}"
        )));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if host_port.starts_with('[') {
        host_port.split(']').next().unwrap_or_default().trim_start_matches('[')
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err(BackendError::Misconfigured(format!("invalid Redis URL {shown}: missing host; {expected}")));
    }
    Ok(())
}

/// Simba's TLS parameters of a `rediss://` URL: `ca_file`, `cert_file`, `key_file`.
const TLS_PARAMS: [&str; 3] = ["ca_file", "cert_file", "key_file"];

/// Splits simba's TLS parameters off `url` and reads their files: the URL for the driver,
/// and the certificates if any parameter was given. A file that cannot be read, or that is
/// not PEM, is an error naming it.
pub(super) fn tls_files(url: &BackendUrl) -> BackendResult<(String, Option<redis::TlsCertificates>)> {
    let (text, shown) = (url.secret_text(), url.redacted());
    let files = url.tls_files();
    if files.is_empty() {
        return Ok((text.to_owned(), None));
    }
    if !url.scheme().eq_ignore_ascii_case("rediss") {
        return Err(BackendError::Misconfigured(format!(
            "Redis URL {shown}: ca_file, cert_file and key_file need TLS: use rediss://"
        )));
    }
    let read = files.read().map_err(|m| BackendError::Misconfigured(format!("Redis URL {shown}: {m}")))?;
    let client_tls = read.identity.map(|(client_cert, client_key)| redis::ClientTlsConfig { client_cert, client_key });
    let certificates = redis::TlsCertificates { client_tls, root_cert: read.ca };
    Ok((crate::secret::strip_params(text, &TLS_PARAMS), Some(certificates)))
}

/// The server as `redis://[user@]host:port/db` (or `rediss://`), without the password.
pub(super) fn describe_info(info: &redis::ConnectionInfo) -> Option<String> {
    let settings = info.redis_settings();
    let user = settings.username().map(|u| format!("{u}@")).unwrap_or_default();
    let db = settings.db();
    let bracket = |h: &str| if h.contains(':') { format!("[{h}]") } else { h.to_owned() };
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => Some(format!("redis://{user}{}:{port}/{db}", bracket(host))),
        redis::ConnectionAddr::TcpTls { host, port, .. } => {
            Some(format!("rediss://{user}{}:{port}/{db}", bracket(host)))
        }
        _ => None,
    }
}

pub(super) fn no_answer(description: &str, ct: Duration) -> BackendError {
    BackendError::Unavailable {
        message: format!(
            "cannot connect to Redis at {description}: no answer within {ct:?}; check that the server runs and that \
             the host and port are right (or raise RedisOptions::connect_timeout)"
        ),
        source: None,
    }
}

/// A failure to connect, with its cause in the message (connect errors are usually printed
/// without their source chain).
pub(super) fn connect_error(description: &str, e: &RedisError) -> BackendError {
    if is_auth_error(e) {
        return BackendError::Misconfigured(format!(
            "Redis at {description} refused the credentials: {e}; check the user name and password in the URL"
        ));
    }
    if description.starts_with("rediss://")
        && let Some(hint) = crate::secret::tls_hint(&format!("{e:?} {e}"))
    {
        return BackendError::Misconfigured(format!("cannot connect to Redis at {description}: {hint} ({e})"));
    }
    BackendError::Unavailable {
        message: format!(
            "cannot connect to Redis at {description}: {e}; check that the server runs and that the host and port \
             are right"
        ),
        source: None,
    }
}

fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// Maps a failed call. Errors that a retry cannot fix say what to change.
pub(super) fn call_error(description: &str, what: &str, e: RedisError) -> BackendError {
    let hint = match (e.kind(), e.code()) {
        (ErrorKind::Server(ServerErrorKind::ReadOnly), _) => {
            Some("the server is a read-only replica: point simba at the primary")
        }
        (ErrorKind::Server(ServerErrorKind::NoPerm), _) => Some(
            "the Redis user lacks a permission: grant it EVALSHA, EVAL, SCRIPT LOAD, SUBSCRIBE and PUBLISH \
             (+@scripting +@pubsub) on simba's keys and channel",
        ),
        (_, Some("OOM")) => Some("Redis reached maxmemory: raise maxmemory or give simba a dedicated instance"),
        _ => None,
    };
    match hint {
        Some(hint) => BackendError::Misconfigured(format!("{description}: {what} failed: {e}; {hint}")),
        None => BackendError::unavailable(format!("{description}: {what} failed"), e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn redact(url: &str) -> String {
        BackendUrl::new(url).redacted().to_owned()
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(redact("redis://u:s3cret@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact("rediss://:s3cret@h"), "rediss://:***@h");
        assert_eq!(redact("redis://u@h"), "redis://u@h");
        assert_eq!(redact("u:s3cret@h:1"), "u:***@h:1");
        assert_eq!(redact("s3cret@h:1"), "***@h:1");
        assert_eq!(redact("redis://u:p@ss@h/0"), "redis://u:***@h/0");
    }

    #[test]
    fn urls_are_checked() {
        for bad in ["http://h:6379", "h:6379", "redis://", "redis:///0", "redis://u:p@:6379", "redis://:6379"] {
            let err = check_url(&BackendUrl::new(bad)).unwrap_err();
            assert!(matches!(err, BackendError::Misconfigured(_)), "{bad}: {err}");
            assert!(!err.to_string().contains("p@"), "{err}");
        }
        for good in ["redis://h", "REDIS://h:1/0", "rediss://u:p@h:6380", "redis://[::1]:6379"] {
            assert!(check_url(&BackendUrl::new(good)).is_ok(), "{good}");
        }
    }

    #[test]
    fn descriptions_hide_passwords() {
        let client = redis::Client::open("redis://alice:s3cret@127.0.0.1:6390/3").unwrap();
        assert_eq!(describe_info(client.get_connection_info()).unwrap(), "redis://alice@127.0.0.1:6390/3");
        let client = redis::Client::open("redis://[::1]:6390").unwrap();
        assert_eq!(describe_info(client.get_connection_info()).unwrap(), "redis://[::1]:6390/0");
    }

    #[test]
    fn server_versions_are_read_from_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        assert_eq!(server_version(info), Some((7, 0)));
        assert_eq!(server_version("redis_version:6.2.0"), Some((6, 2)));
        assert!(server_version("redis_version:6.0.16").is_some_and(|v| v < MIN_VERSION));
        assert!(server_version("redis_version:6.2.0").is_some_and(|v| v >= MIN_VERSION));
        assert_eq!(server_version("# Server\nno version here"), None);
    }
}
