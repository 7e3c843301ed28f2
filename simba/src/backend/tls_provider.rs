//! The process's rustls crypto provider. simba never installs one: rustls leaves that choice
//! to the application, and an application whose own `install_default` comes after a library's
//! gets an error (or panics on it). simba's own TLS code (the handshake checks of ZooKeeper and
//! etcd) names ring for each configuration; etcd's driver (tonic, `tls-ring`) uses the
//! process's provider when there is one and ring otherwise, without installing it.
//!
//! Two drivers build their TLS configuration from the process's provider and take no provider
//! and no configuration: redis 1.x (`create_rustls_config` calls `ClientConfig::builder()` for
//! every TLS connection; `Client::build_with_tls` takes only certificates) and
//! zookeeper-client 0.11 (`TlsClient::create_config` calls `ClientConfig::builder()`; its only
//! other path is the FIPS provider). With both ring and aws-lc-rs compiled into rustls (the
//! `zookeeper` feature brings aws-lc-rs: zookeeper-client depends on rustls with its default
//! features) `ClientConfig::builder()` panics when the process has no provider, and with one
//! of them alone it installs that one for the whole process. So those two backends check
//! first, and without a process provider refuse with [`missing`]'s error, which names the one
//! line an application adds ([`install_tls_provider`]).

/// Installs ring as this process's rustls crypto provider, unless the process has one
/// already; returns whether this call installed it. For an application's `main` (before simba
/// connects to `rediss://` or to ZooKeeper with `tls=true`, whose drivers read the process's
/// provider): simba itself never calls it. An application that prefers another provider
/// installs it with rustls instead (`CryptoProvider::install_default`).
///
/// ```
/// // At the start of main, before simba::run() or Simba::connect(..).
/// simba::backend::install_tls_provider();
/// ```
pub fn install_tls_provider() -> bool {
    rustls::crypto::ring::default_provider().install_default().is_ok()
}

/// `Ok` when the process has a rustls crypto provider for `driver` (which builds its TLS
/// configuration from it) to use; otherwise the error saying why and what to add. `server`
/// names the server, without secrets.
#[cfg(any(feature = "redis", feature = "zookeeper"))]
pub(crate) fn require_process_provider(driver: &str, server: &str) -> Result<(), super::BackendError> {
    match rustls::crypto::CryptoProvider::get_default() {
        Some(_) => Ok(()),
        None => Err(missing(driver, server)),
    }
}

/// The error for a TLS connection to `server` whose `driver` needs the process's rustls
/// provider when the process has none.
#[cfg(any(feature = "redis", feature = "zookeeper"))]
fn missing(driver: &str, server: &str) -> super::BackendError {
    super::BackendError::Misconfigured(format!(
        "cannot connect to {server}: the {driver} driver builds its TLS configuration from the process's \
         rustls crypto provider, and this process has none (simba does not install one: that choice is the \
         application's); call simba::backend::install_tls_provider() at the start of main, or install the provider \
         of your choice with rustls::crypto::CryptoProvider::install_default, before simba connects"
    ))
}

#[cfg(all(test, any(feature = "redis", feature = "zookeeper")))]
mod tests {
    use super::*;
    use crate::backend::BackendError;

    /// The message says what is missing, that simba installs nothing, and the line to add.
    #[test]
    fn the_missing_provider_error_names_the_fix() {
        let BackendError::Misconfigured(m) = missing("redis", "Redis at rediss://db:6380") else {
            panic!("not a configuration error")
        };
        for part in
            ["Redis at rediss://db:6380", "redis driver", "simba::backend::install_tls_provider()", "install_default"]
        {
            assert!(m.contains(part), "{part}: {m}");
        }
    }
}
