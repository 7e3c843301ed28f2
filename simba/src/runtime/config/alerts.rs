//! `[alerts]` of `simba.toml` (rules R12, R13): the lateness threshold of `late` alerts and the
//! webhook every alert is POSTed to.
//!
//! ```toml
//! [alerts]
//! webhook = "https://hooks.example.com/simba/T0KEN"   # feature `webhook`
//! webhook_timeout = "10s"                             # each try (default 10s)
//! webhook_ca_file = "/etc/ssl/private-ca.pem"         # trust this CA, not the Mozilla roots
//! late_after = "30s"                                  # a run starting later raises `late`
//! ```

use std::fmt;
use std::time::Duration;

pub use crate::job::WebhookUrl;

/// The default `[alerts] webhook_timeout`: how long one try of one alert may take.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// `[alerts]`: where alerts go beyond the application's own hook, and when a run is late.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlertSettings {
    /// `webhook`: the URL every alert is POSTed to as JSON (feature `webhook`, rule R13);
    /// `None` (the default): no webhook.
    pub webhook: Option<WebhookUrl>,
    /// `webhook_timeout` (default [`DEFAULT_WEBHOOK_TIMEOUT`]): the bound on each try.
    pub webhook_timeout: Duration,
    /// `webhook_ca_file`: a PEM file of the CA certificates an `https` receiver's certificate
    /// must chain to, instead of the Mozilla roots (a receiver behind a private CA); `None`
    /// (the default): the Mozilla roots.
    pub webhook_ca_file: Option<std::path::PathBuf>,
    /// `late_after`: a run whose first attempt starts more than this after its slot raises a
    /// `late` alert; `None` (the default): no `late` alerts, unless the code sets
    /// [`RuntimeBuilder::alert_late_after`](crate::runtime::RuntimeBuilder::alert_late_after),
    /// which wins.
    pub late_after: Option<Duration>,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            webhook: None,
            webhook_timeout: DEFAULT_WEBHOOK_TIMEOUT,
            webhook_ca_file: None,
            late_after: None,
        }
    }
}

impl fmt::Debug for AlertSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlertSettings")
            .field("webhook", &self.webhook)
            .field("webhook_timeout", &self.webhook_timeout)
            .field("webhook_ca_file", &self.webhook_ca_file)
            .field("late_after", &self.late_after)
            .finish()
    }
}
