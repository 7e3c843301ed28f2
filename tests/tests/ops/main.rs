//! Operations: the `simba` tool, metrics and `/healthz`, and security (TLS, credentials,
//! redaction).

mod cli;
mod config_example;
mod jobs_cli;
mod metrics;
mod mtls;
mod namespaces_cli;
mod security;
mod start;
