//! Simba's tracing spans exported to an OpenTelemetry collector over OTLP/gRPC, beside the usual
//! log lines: the application installs a `tracing-opentelemetry` layer, and every span Simba
//! opens (`simba{session}`, `election{lease}`, `leader{lease, token}`, `job{job, token,
//! attempt}`, `partition{group, partition, token}`) and every span the job opens inside its run
//! becomes an OpenTelemetry span.
//!
//! ```text
//! docker run -p 4317:4317 -p 16686:16686 jaegertracing/all-in-one    # a collector with a UI
//! cargo run --example otel --features otel                            # then open localhost:16686
//! ```
//!
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names another collector (default `http://localhost:4317`);
//! `OTEL_EXAMPLE_SECS=N` stops the example after N seconds. It runs one job on SQLite
//! (`./otel-example.db`), as the quickstart does.

use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use simba::{JobContext, Runtime, Term, simba_scheduled};
use tracing::{Instrument, info, info_span};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Every 2 seconds, on one node: its run is the span `job{job="charge_cards", token, attempt}`,
/// and the span it opens for its own step is a child of it.
#[simba_scheduled(fixed_rate = "2s")]
async fn charge_cards(term: &Term, ctx: &JobContext) -> anyhow::Result<()> {
    term.ensure_valid(Duration::from_millis(500))?;
    async {
        tokio::time::sleep(Duration::from_millis(20)).await; // the job's own work
        info!(slot = %ctx.slot(), "charged the cards of this slot");
    }
    .instrument(info_span!("charge", batch = ctx.slot().timestamp()))
    .await;
    Ok(())
}

/// Logs on stderr and spans to the collector: one subscriber, two layers, one filter.
fn init_tracing() -> anyhow::Result<SdkTracerProvider> {
    // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4317).
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic().build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("simba-otel-example").build())
        .build();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_target(false)
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr),
        )
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("simba-otel-example")))
        .try_init()?;
    Ok(provider)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let provider = init_tracing()?;
    let secs = std::env::var("OTEL_EXAMPLE_SECS").ok().and_then(|s| s.parse::<u64>().ok());
    let stop = async move {
        match secs {
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    let result = Runtime::builder().default_backend_url("sqlite://otel-example.db").shutdown_on(stop).run().await;
    // Sends the spans still queued before the process exits.
    provider.shutdown()?;
    Ok(result?)
}
