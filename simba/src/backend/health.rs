//! What `simba check` asks of a backend beyond the calls every backend answers: the checks of
//! its own safety settings (Redis's eviction policy, etcd's leader and alarms) and what the
//! common checks are called and advise on it. A capability each backend implements, so the
//! tool holds no list of schemes (ADR 0007).

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckOutcome {
    /// The setting is safe.
    Pass,
    /// The setting breaks a guarantee or will: the detail says what to change.
    Fail,
    /// Not checked here (the server does not tell, or the check does not apply).
    Skip,
    /// Works, but is unsafe in a setting the check cannot see (rule B7: plain text beyond
    /// this machine); the detail says what to change. Not a failure.
    Warn,
}

/// One checked setting: a name, how it came out, and what was found (or what to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// What was checked (`redis maxmemory-policy`).
    pub name: Cow<'static, str>,
    /// How it came out.
    pub outcome: CheckOutcome,
    /// What was found, and on a failure what to do.
    pub detail: String,
}

impl HealthCheck {
    /// A check named `name` that came out as `outcome`.
    pub fn new(name: impl Into<Cow<'static, str>>, outcome: CheckOutcome, detail: impl Into<String>) -> Self {
        HealthCheck { name: name.into(), outcome, detail: detail.into() }
    }
}

/// What the checks every backend gets are called on one backend, and what they advise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthNotes {
    /// For stores with a schema (SQL), what a successful read proves, reported as `schema`;
    /// `None`: reported as `read access` with what was listed.
    pub schema: Option<&'static str>,
    /// The name of the check that the store grants sessions as long as `lease_duration`
    /// (named after the server setting that caps it).
    pub session_lifetime: &'static str,
    /// What to do when it grants less.
    pub session_lifetime_fix: &'static str,
    /// Why the clock is not compared, on a store that does not tell its clock.
    pub no_clock: &'static str,
}

impl Default for HealthNotes {
    fn default() -> Self {
        HealthNotes {
            schema: None,
            session_lifetime: "session lifetime",
            session_lifetime_fix: "raise the server's cap (ZooKeeper: maxSessionTimeout) or lower [session] \
                                   lease_duration",
            no_clock: "this backend does not tell its clock (expiry is its own timer)",
        }
    }
}

/// A boxed future, as the object-safe [`Health`] returns.
pub type HealthFuture<'a> = Pin<Box<dyn Future<Output = Vec<HealthCheck>> + Send + 'a>>;

/// The health checks of one backend's own settings (what `simba check` reports per backend).
///
/// Every backend implements it; the defaults suit a store with nothing of its own to check.
pub trait Health: Send + Sync {
    /// Checks of this backend's own safety settings, each bounded by `timeout`.
    fn health_checks(&self, timeout: Duration) -> HealthFuture<'_> {
        let _ = timeout;
        Box::pin(async { Vec::new() })
    }

    /// What the common checks are called and advise on this backend.
    fn health_notes(&self) -> HealthNotes {
        HealthNotes::default()
    }
}

impl Health for super::memory::MemoryBackend {}

/// The notes of the SQL stores, whose three tables a read proves readable.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn sql() -> HealthNotes {
    HealthNotes { schema: Some("simba_session, simba_lease and simba_member are readable"), ..HealthNotes::default() }
}

#[cfg(feature = "sqlite")]
impl Health for super::sqlite::SqliteBackend {
    fn health_notes(&self) -> HealthNotes {
        sql()
    }
}

#[cfg(feature = "postgres")]
impl Health for super::postgres::PostgresBackend {
    fn health_notes(&self) -> HealthNotes {
        sql()
    }
}

#[cfg(feature = "mysql")]
impl Health for super::mysql::MySqlBackend {
    fn health_notes(&self) -> HealthNotes {
        sql()
    }
}

/// Runs `check` within `timeout`; on no answer, a failed check named `name` that says so.
#[cfg(any(feature = "redis", feature = "etcd"))]
pub(crate) async fn within<F>(name: &'static str, timeout: Duration, check: F) -> HealthCheck
where
    F: Future<Output = HealthCheck>,
{
    tokio::time::timeout(timeout, check)
        .await
        .unwrap_or_else(|_| HealthCheck::new(name, CheckOutcome::Fail, format!("no answer within {timeout:?}")))
}

/// An error with its sources, on one line, each cause once (drivers often repeat their
/// source in their own message): how the `simba` tool and the dashboard show a backend's
/// failure, where `Display` alone would drop the driver's cause.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s = format!("{s}: {c}");
        }
        source = cause.source();
    }
    s
}
