//! Shared helpers for the examples.

/// Readable logs on stderr; `RUST_LOG` overrides the default filter (`info`, with the
/// library's own debug lines hidden).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_writer(std::io::stderr).init();
}
