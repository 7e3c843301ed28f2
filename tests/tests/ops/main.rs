//! Operations: the `simba` tool, metrics and `/healthz`, the start (with no configuration,
//! with a backend not up yet), traces, and security (TLS, credentials,
//! redaction).

mod cli;
mod config_example;
mod jobs_cli;
mod metrics;
mod mtls;
mod namespaces_cli;
mod no_config;
mod security;
mod start;
mod traces;
mod webhook;
