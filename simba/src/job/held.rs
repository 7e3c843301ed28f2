//! A schedule as a partition's holder keeps it between reads (ADR 0020): only what firing
//! needs (handler, payload, parsed spec, policies, revision), with the handler names and the
//! parsed specs shared by every schedule of the node that has the same one ([`Shared`]), so
//! that a node holding 100,000 schedules keeps a few hundred bytes for each (P14).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use chrono::DateTime;
use simba_core::policy::Bounds;
use simba_core::schedules::{Fires, job_name};

use crate::schedule_store::{Policies, Schedule, ScheduleSpec};

/// The most slots of one schedule a write can leave unfired that are recorded `missed` (as
/// for a term's start gap, A14).
const MAX_UNFIRED: usize = 100;

/// One held schedule (its id is its key in the partition's map).
pub(super) struct Entry {
    /// The name of the handler that runs it (shared).
    pub(super) handler: Arc<str>,
    /// Its payload, JSON text, handed to each run as it is.
    pub(super) payload: Arc<str>,
    /// Its parsed spec (shared).
    pub(super) fires: Arc<Fires>,
    pub(super) policies: Policies,
    /// When it was last written, unix milliseconds: slots before belong to the write before.
    pub(super) updated_ms: i64,
    pub(super) revision: u64,
    /// Its next slot not yet taken.
    pub(super) next_ms: Option<i64>,
}

impl Entry {
    /// The entry of `schedule` (run by `handler`; its spec parsed as `fires`), next firing
    /// after `now_ms`.
    pub(super) fn new(handler: Arc<str>, fires: Arc<Fires>, schedule: Schedule, now_ms: i64) -> Self {
        let mut e = Entry {
            handler,
            payload: Arc::from(schedule.payload),
            fires,
            policies: schedule.policies,
            updated_ms: schedule.updated_ms,
            revision: schedule.revision,
            next_ms: None,
        };
        e.next_ms = e.next_after(now_ms);
        e
    }

    /// Its bounds (J14): no slot outside them.
    pub(super) fn bounds(&self) -> Bounds {
        Bounds {
            start: self.policies.start_ms.and_then(DateTime::from_timestamp_millis),
            end: self.policies.end_ms.and_then(DateTime::from_timestamp_millis),
        }
    }

    /// The first slot after `after_ms` within the bounds (J14).
    pub(super) fn next_after(&self, after_ms: i64) -> Option<i64> {
        let from = match self.policies.start_ms {
            Some(start) => after_ms.max(start - 1),
            None => after_ms,
        };
        let next = self.fires.next_after(from)?;
        self.policies.end_ms.is_none_or(|end| next <= end).then_some(next)
    }

    /// The slots from its next one that were due (started) at `now_ms` and are before
    /// `before_ms`: the ones a late node had not fired when a write replaced the schedule (at
    /// most [`MAX_UNFIRED`]).
    pub(super) fn unfired(&self, id: &str, before_ms: i64, now_ms: i64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut next = self.next_ms;
        while let Some(ms) = next.filter(|ms| *ms < before_ms && self.starts_ms(id, *ms) <= now_ms) {
            if out.len() >= MAX_UNFIRED {
                break;
            }
            out.push(ms);
            next = self.next_after(ms);
        }
        out
    }

    /// When slot `ms` of schedule `id` starts: its instant plus its jitter (J13), the same on
    /// every node.
    pub(super) fn starts_ms(&self, id: &str, ms: i64) -> i64 {
        let Some(jitter) = self.policies.jitter_ms.filter(|j| *j > 0) else { return ms };
        let until_next = self.fires.next_after(ms).map(|n| Duration::from_millis(u64::try_from(n - ms).unwrap_or(0)));
        let delay = simba_core::policy::jitter(&job_name(id), ms, Duration::from_millis(jitter), until_next);
        ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(0))
    }
}

/// What the node's held schedules share: one parsed spec per distinct spec and one name per
/// handler, kept while some entry uses them.
#[derive(Default)]
pub(super) struct Shared {
    inner: Mutex<Interned>,
}

#[derive(Default)]
struct Interned {
    fires: HashMap<ScheduleSpec, Weak<Fires>>,
    handlers: HashMap<Box<str>, Weak<str>>,
    /// The maps' size when last swept of the values no entry uses any more.
    swept_at: usize,
}

impl Shared {
    /// The parsed `spec`, shared with every held schedule of the same spec; parsed (and
    /// checked) only when no held schedule has it.
    pub(super) fn fires(&self, spec: &ScheduleSpec) -> Result<Arc<Fires>, String> {
        let mut i = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = i.fires.get(spec).and_then(Weak::upgrade) {
            return Ok(f);
        }
        let f = Arc::new(spec.check()?);
        i.fires.insert(spec.clone(), Arc::downgrade(&f));
        i.sweep();
        Ok(f)
    }

    /// The handler name `name`, shared with every held schedule of the same handler.
    pub(super) fn handler(&self, name: &str) -> Arc<str> {
        let mut i = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = i.handlers.get(name).and_then(Weak::upgrade) {
            return h;
        }
        let h: Arc<str> = Arc::from(name);
        i.handlers.insert(name.into(), Arc::downgrade(&h));
        i.sweep();
        h
    }
}

impl Interned {
    /// Drops the values no entry uses any more, each time the maps doubled since the last
    /// sweep: amortised O(1) per insert, and the maps never hold more than twice the values
    /// in use (plus a few).
    fn sweep(&mut self) {
        let size = self.fires.len() + self.handlers.len();
        if size < 2 * self.swept_at.max(32) {
            return;
        }
        self.fires.retain(|_, f| f.strong_count() > 0);
        self.handlers.retain(|_, h| h.strong_count() > 0);
        self.swept_at = self.fires.len() + self.handlers.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec held by many schedules is parsed once and shared; once no schedule holds it, a
    /// sweep forgets it.
    #[test]
    fn held_schedules_share_one_parsed_spec_and_handler_name() {
        let shared = Shared::default();
        let spec = ScheduleSpec::cron("0 0 9 * * MON", "Europe/Berlin");
        let a = shared.fires(&spec).expect("checks");
        let b = shared.fires(&spec).expect("checks");
        assert!(Arc::ptr_eq(&a, &b), "one parse for one spec");
        assert!(Arc::ptr_eq(&shared.handler("report"), &shared.handler("report")));
        assert!(shared.fires(&ScheduleSpec::cron("0 0 9 * * MON", "Mars/Base")).is_err(), "checked");
        drop((a, b));
        for s in 0..200u64 {
            let _ = shared.fires(&ScheduleSpec::fixed_rate(Duration::from_secs(s + 1)));
        }
        let i = shared.inner.lock().expect("not poisoned");
        assert!(i.fires.len() < 100, "specs no entry holds are swept: {} kept", i.fires.len());
    }
}
