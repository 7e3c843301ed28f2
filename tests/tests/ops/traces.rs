//! Traces (rule O9): each run of a scheduled job is the root of its own span tree, linked by
//! `follows_from` to its term's span, so an exported trace lasts one run, not the term.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use simba::backend::memory::MemoryBackend;
use simba::job::{Schedule, ScheduledJob};
use simba::{Runtime, Term};
use tracing::span::{Attributes, Id};
use tracing::{Subscriber, info_span};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span's name and its parent's.
type Created = (String, Option<String>);

/// Every span created and every `follows_from` link (the span's name, the followed one's).
#[derive(Clone, Default)]
struct Spans {
    created: Arc<Mutex<Vec<Created>>>,
    follows: Arc<Mutex<Vec<(String, String)>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name().to_owned());
        self.created.lock().unwrap_or_else(PoisonError::into_inner).push((attrs.metadata().name().to_owned(), parent));
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        if let (Some(s), Some(f)) = (ctx.span(span), ctx.span(follows)) {
            self.follows
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((s.name().to_owned(), f.name().to_owned()));
        }
    }
}

fn traced(_: Term) -> simba::job::JobFuture {
    simba::job::job_future(async {
        // A span the job opens itself: a child of its run.
        let _inner = info_span!("app_step").entered();
        Ok::<(), std::io::Error>(())
    })
}

const TRACED: ScheduledJob = ScheduledJob::new("traced", Schedule::FixedRate(Duration::from_secs(1)), &traced);

#[tokio::test(start_paused = true)]
async fn o9_a_run_is_its_own_root_linked_to_its_term() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let running =
        Runtime::builder().without_registry().backend(MemoryBackend::new()).job(TRACED).start().await.expect("start");
    tokio::time::sleep(Duration::from_millis(3500)).await;
    running.shutdown().await;

    let created = spans.created.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let runs: Vec<_> = created.iter().filter(|(name, _)| name == "job").collect();
    assert!(runs.len() >= 3, "a few runs: {created:?}");
    assert!(runs.iter().all(|(_, parent)| parent.is_none()), "every run is a root: {created:?}");
    let steps: Vec<_> = created.iter().filter(|(name, _)| name == "app_step").collect();
    assert!(
        !steps.is_empty() && steps.iter().all(|(_, parent)| parent.as_deref() == Some("job")),
        "the job's own spans are children of its run: {created:?}"
    );
    // The term's span exists and lasts the term; each run follows from it.
    assert!(created.iter().any(|(name, _)| name == "leader"), "{created:?}");
    let follows = spans.follows.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let linked = follows.iter().filter(|(s, f)| s == "job" && f == "leader").count();
    assert_eq!(linked, runs.len(), "each run follows from its term's span: {follows:?}");
}
