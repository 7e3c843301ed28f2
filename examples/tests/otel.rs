//! `cargo run --example otel --features otel` exports Simba's spans: a gRPC collector of the
//! test's own (the OTLP trace service of `opentelemetry-proto`) receives, from the example's
//! run, the job's `job` span with its job name and fencing token, and the `charge` span the job
//! opened, as its child in the same trace.
#![cfg(feature = "otel")]

use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

mod common;

/// The collector: keeps every span it receives.
#[derive(Default, Clone)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap_or_else(PoisonError::into_inner);
        for resource in request.into_inner().resource_spans {
            spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A span's attribute as text (strings as they are, numbers printed).
fn attr(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_spans_reach_the_collector() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(collector.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let out = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        move || {
            Command::new(common::example("otel"))
                .current_dir(dir)
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
                .env("OTEL_EXAMPLE_SECS", "3")
                .env("RUST_LOG", "info")
                .env_remove("SIMBA_BACKEND__URL")
                .output()
        }
    })
    .await
    .expect("join")
    .expect("run the example");
    assert!(out.status.success(), "the example failed: {}", String::from_utf8_lossy(&out.stderr));
    server.abort();

    let spans = collector.spans.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let runs: Vec<&Span> =
        spans.iter().filter(|s| s.name == "job" && attr(s, "job").as_deref() == Some("charge_cards")).collect();
    assert!(!runs.is_empty(), "no run of charge_cards exported; spans: {names:?}");
    for run in &runs {
        assert_eq!(attr(run, "lease").as_deref(), Some("charge_cards"), "{run:?}");
        assert!(attr(run, "token").is_some_and(|t| t.parse::<u64>().is_ok_and(|t| t >= 1)), "{run:?}");
    }
    // Each `charge` span is a child of one of the runs, in its trace.
    let charges: Vec<&Span> = spans.iter().filter(|s| s.name == "charge").collect();
    assert!(!charges.is_empty(), "no charge span exported; spans: {names:?}");
    for charge in charges {
        assert!(
            runs.iter().any(|r| r.span_id == charge.parent_span_id && r.trace_id == charge.trace_id),
            "a charge span outside the runs: {charge:?}"
        );
    }
    assert!(names.contains(&"simba") && names.contains(&"election"), "{names:?}");
}
