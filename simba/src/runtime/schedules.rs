//! The runtime's part of schedules stored as data (ADR 0020): the handlers this node has (the
//! link-time registry's and those given to the builder), checked before anything starts, and
//! the built-in group `simba.schedules` that runs the schedules of the partitions the node
//! holds, started when the node has at least one handler and its store keeps schedules.

use std::collections::BTreeSet;

use super::jobs::JobsHandle;
use crate::job::{HANDLERS, Handler, StateMap};
use crate::{ConfigError, Error};

/// The handlers this node runs: `added` (the builder's), then the link-time registry's when
/// `registry`; refused when two share a name or a name breaks the lease-name rule (A3: a
/// schedule could not name it).
pub(super) fn collect(registry: bool, added: Vec<Handler>) -> Result<Vec<Handler>, Error> {
    let linked = registry.then(|| HANDLERS.iter().cloned()).into_iter().flatten();
    let handlers: Vec<Handler> = added.into_iter().chain(linked).collect();
    let mut names = BTreeSet::new();
    for h in &handlers {
        if let Some(problem) = crate::name_problem(&h.name) {
            let problem = problem.replace("a lease name", "a handler name");
            return Err(ConfigError::new(format!("invalid handler name `{}`: {problem}", h.name)).into());
        }
        if !names.insert(&*h.name) {
            return Err(ConfigError::new(format!(
                "two handlers are named `{}`: handler names must be unique in a binary (rename one, or give it \
                 another `name`)",
                h.name
            ))
            .into());
        }
    }
    Ok(handlers)
}

/// Refuses to start when a handler takes a [`State<T>`](crate::State) whose type was not given.
pub(super) fn check_state(state: &StateMap, handlers: &[Handler]) -> Result<(), Error> {
    for h in handlers {
        state.check(&h.name, h.needs).map_err(Error::invalid_config)?;
    }
    Ok(())
}

/// Starts `simba.schedules` on this node when it has handlers: refused when the namespace's
/// schedules were created with another partition count than `[schedules] partitions` (A9,
/// both numbers named); a warning and nothing started when the store keeps no schedules
/// (a backend written outside this crate: A8).
pub(super) async fn start(jobs: &JobsHandle, handlers: Vec<Handler>) -> Result<(), Error> {
    if handlers.is_empty() {
        return Ok(());
    }
    let (simba, config) = (jobs.simba(), jobs.config());
    let Some(store) = simba.schedule_store() else {
        tracing::warn!(
            handlers = handlers.len(),
            backend = %simba.backend_description(),
            "handlers are registered but the store keeps no schedules: {}",
            crate::schedule_store::unsupported(&simba.backend_description())
        );
        return Ok(());
    };
    let partitions = config.schedule_partitions;
    let stored = store.partitions().await.map_err(|source| Error::Backend {
        op: "read the schedules' partition count",
        name: Some(crate::job::SCHEDULES_GROUP.to_owned()),
        source,
    })?;
    if let Some(stored) = stored.filter(|s| *s != partitions) {
        let e = ConfigError::at_key(
            "schedules.partitions",
            format!(
                "the namespace's schedules were created with {stored} partitions, this node is configured with \
                 {partitions}: set `[schedules] partitions = {stored}` (the count is fixed per namespace)"
            ),
        )
        .with_file(config.source.as_str());
        return Err(e.into());
    }
    tracing::info!(handlers = handlers.len(), partitions, "running schedules stored as data");
    jobs.start_schedules(store, handlers, partitions);
    Ok(())
}
