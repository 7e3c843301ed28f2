//! Shared helpers for the examples.

/// Readable logs on stderr; `RUST_LOG` overrides the default filter (`info`, with the
/// library's own debug lines hidden). Each line carries simba's spans (`simba{session=..}`,
/// `election{lease=..}`, `leader{lease=.. token=..}`, `job{job=.. token=..}`,
/// `partition{group=.. partition=.. token=..}`); colours only on a terminal.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
