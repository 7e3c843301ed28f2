//! Simba's recorder as the exporter renders it, on a local recorder (never the process's).

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::PrometheusRecorder;

use super::endpoint::{JOB_BUCKETS, builder};
use super::{LeaseLabel, MetricsSettings, build_info, job_finished, term_gained};

fn recorder(idle: Option<Duration>) -> PrometheusRecorder {
    builder(&MetricsSettings::default().idle_timeout(idle)).expect("valid settings").build_recorder()
}

fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(start))
}

#[test]
fn o6_job_histograms_reach_a_day_and_application_histograms_keep_the_defaults() {
    let r = recorder(None);
    metrics::with_local_recorder(&r, || {
        job_finished("nightly", Duration::from_secs(2 * 3600 + 60), false);
        histogram!("app_request_seconds").record(0.2);
        histogram!("app_batch_seconds", "queue" => "q").record(5000.0);
    });
    let text = r.handle().render();
    assert_eq!(JOB_BUCKETS.last(), Some(&86400.0));
    assert_eq!(
        line(&text, "simba_job_duration_seconds_bucket{job=\"nightly\",le=\"7200\"}"),
        Some("simba_job_duration_seconds_bucket{job=\"nightly\",le=\"7200\"} 0"),
        "{text}"
    );
    assert_eq!(
        line(&text, "simba_job_duration_seconds_bucket{job=\"nightly\",le=\"14400\"}"),
        Some("simba_job_duration_seconds_bucket{job=\"nightly\",le=\"14400\"} 1"),
        "{text}"
    );
    // The application's histograms are untouched: the exporter's default (a summary), no
    // bucket of Simba's.
    assert!(text.contains("app_request_seconds{quantile=\"0.5\"}"), "{text}");
    assert!(!text.contains("app_request_seconds_bucket") && !text.contains("app_batch_seconds_bucket"), "{text}");
}

#[test]
fn o5_idle_series_go_and_gauges_stay() {
    let r = recorder(Some(Duration::from_millis(300)));
    metrics::with_local_recorder(&r, || {
        counter!("app_orders_total", "order" => "81723").increment(1);
        term_gained(&LeaseLabel::default());
        gauge!("app_queue_depth").set(3.0);
    });
    let text = r.handle().render();
    assert!(
        text.contains("app_orders_total{order=\"81723\"} 1") && text.contains("simba_terms_gained_total"),
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(600));
    metrics::with_local_recorder(&r, || counter!("app_orders_total", "order" => "81724").increment(1));
    let text = r.handle().render();
    assert!(!text.contains("81723") && !text.contains("simba_terms_gained_total"), "idle series dropped: {text}");
    assert!(text.contains("app_orders_total{order=\"81724\"} 1"), "a fresh series stays: {text}");
    assert!(text.contains("app_queue_depth 3"), "gauges stay: {text}");

    let forever = recorder(None);
    metrics::with_local_recorder(&forever, || counter!("app_orders_total", "order" => "1").increment(1));
    std::thread::sleep(Duration::from_millis(50));
    assert!(forever.handle().render().contains("order=\"1\""));
}

#[test]
fn o7_build_info_names_the_version_and_the_backend_kind_only() {
    let r = recorder(None);
    metrics::with_local_recorder(&r, || build_info("postgres://simba@db-host:5432/simba"));
    let text = r.handle().render();
    let want = format!("simba_build_info{{version=\"{}\",backend=\"postgres\"}} 1", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&want), "{text}");
    assert!(!text.contains("db-host"), "no host in a label: {text}");
    assert_eq!(super::backend_kind("memory"), "memory");
    assert_eq!(super::backend_kind("sqlite::memory:"), "sqlite");
    assert_eq!(super::backend_kind("(custom)"), "other");
}
