//! The node's job registry: published with the node's session, again after
//! every job added or removed and with every new session; compared with the other live nodes'
//! at once after each publish and every [`REGISTRY_CHECK_PERIOD`] (or renewal interval, if
//! longer). A
//! difference is logged as a warning once (until it changes), its count is the gauge
//! `simba_job_registry_differences`, and [`RegistryWatch`] shows the last report.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::JobsHandle;
use crate::Simba;
use crate::backend::SessionId;
use crate::job::{NodeRegistry, RegistryReport};
use crate::job_store::SharedJobStore;

/// How often a node reads the other nodes' registries (one read of the store; at least once
/// per renewal interval apart).
pub const REGISTRY_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// The last comparison this node made of the live nodes' registries.
#[derive(Clone, Default)]
pub(super) struct RegistryWatch {
    last: Arc<Mutex<Option<RegistryReport>>>,
}

impl RegistryWatch {
    pub(super) fn get(&self) -> Option<RegistryReport> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set(&self, report: RegistryReport) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(report);
    }
}

/// Starts the publish-and-compare loop (nothing without a jobs store).
pub(super) fn start(
    simba: &Simba,
    store: Option<&SharedJobStore>,
    jobs: &JobsHandle,
    stop: CancellationToken,
) -> RegistryWatch {
    let watch = RegistryWatch::default();
    if let Some(store) = store {
        tokio::spawn(run(simba.clone(), store.clone(), jobs.clone(), watch.clone(), stop));
    }
    watch
}

async fn run(simba: Simba, store: SharedJobStore, jobs: JobsHandle, watch: RegistryWatch, stop: CancellationToken) {
    let renew = simba.config().renew_interval();
    let every = REGISTRY_CHECK_PERIOD.max(renew);
    let mut changes = jobs.changes();
    let mut events = Some(simba.events());
    let mut published: Option<(SessionId, u64)> = None;
    let mut warned: Vec<String> = Vec::new();
    let mut next_check = Instant::now();
    loop {
        let generation = *changes.borrow_and_update();
        let due = simba.session_id().filter(|id| published.as_ref().is_none_or(|(p, g)| p != id || *g != generation));
        let mut retry_soon = false;
        if let Some(id) = due {
            let body = NodeRegistry::new(&*jobs.node(), jobs.settings()).with_handlers(jobs.handler_names()).encode();
            match store.publish_registry(&id, &body).await {
                Ok(true) => {
                    tracing::debug!(session = %id, bytes = body.len(), "job registry published");
                    published = Some((id, generation));
                    next_check = Instant::now();
                }
                // The session ended meanwhile: the next one publishes.
                Ok(false) => retry_soon = true,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot publish the job registry; trying again");
                    retry_soon = true;
                }
            }
        }
        if Instant::now() >= next_check {
            match store.registries().await {
                Ok(list) => {
                    let report = RegistryReport::from_published(&list);
                    warned = tell(&report, warned);
                    watch.set(report);
                }
                Err(e) => tracing::debug!(error = %e, "cannot read the job registries; trying again"),
            }
            next_check = Instant::now() + every;
        }
        let wake = if retry_soon { next_check.min(Instant::now() + renew) } else { next_check };
        let event = async {
            match events.as_mut() {
                Some(rx) => rx.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = changes.changed() => {}
            // Any event may be a new session (SessionOpened): look again.
            r = event => if let Err(RecvError::Closed) = r { events = None },
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// Logs the report's differences once (again only when they change) and sets the gauge;
/// returns what was told.
fn tell(report: &RegistryReport, told: Vec<String>) -> Vec<String> {
    let mut now: Vec<String> = report.differences.clone();
    now.extend(report.unreadable.iter().cloned());
    crate::metrics::registry_differences(now.len());
    if now.is_empty() {
        if !told.is_empty() {
            tracing::info!(nodes = report.nodes.len(), "the live nodes' job registries agree again");
        }
        return now;
    }
    if now != told {
        tracing::warn!(
            nodes = report.nodes.len(),
            differences = now.len(),
            "the live nodes do not run the same jobs with the same settings (a rolling deploy in progress, or a \
             node on old code or another configuration): {}",
            now.join("; ")
        );
    }
    now
}
