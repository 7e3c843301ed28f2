//! Backfill of a schedule stored as data (rule A16): [`Schedules::backfill`] checks the range
//! and the budget, counts the range's slots on the schedule's own cron and time zone within
//! its bounds, and makes the run-now request of `schedule/<id>` whose key carries the plan; the
//! partition's holder walks it (`job/shard.rs`).

use simba_core::backfill::{BackfillPlan, MAX_BACKFILL_SLOTS};
use simba_core::policy::Bounds;
use simba_core::schedules::Fires;

use super::{ScheduleError, Schedules, actor, invalid};
use crate::admin::{Backfill, BackfillAsk};
use crate::schedule_store::{AuditAction, Schedule, job_name};

/// How far [`Schedules::backfill`] counts a range's slots before it stops: far past
/// [`MAX_BACKFILL_SLOTS`], so a refusal names the real count for any range an operator means.
const COUNT_LIMIT: u64 = 100 * MAX_BACKFILL_SLOTS;

impl Schedules {
    /// Checks a backfill of schedule `id` (rule A16, as [`Jobs::backfill`](crate::admin::Jobs::backfill)
    /// for a code-defined job) and, unless it is a dry run, asks the partition's holder to run
    /// it: the range in order, a budget of at least 0.001 runs/s, a cron schedule (a fixed-rate
    /// one is refused, saying why), the range's slots on the schedule's cron and time zone
    /// within its start and end bounds at least one, at most 10,000 and one day at the budget.
    /// A refusal says what is wrong and what to do; nothing is stored. The request is a
    /// run-now request of `schedule/<id>` whose key carries the plan, recorded in the audit
    /// trail as [`AuditAction::Backfill`] by `ask.who`.
    pub async fn backfill(&self, id: &str, ask: &BackfillAsk) -> Result<Backfill, ScheduleError> {
        simba_core::schedules::check_id(id).map_err(invalid)?;
        actor(&ask.who, ask.note.as_deref(), 0)?;
        let refused = |reason: String| invalid(format!("cannot backfill schedule `{id}`: {reason}"));
        let (from_ms, to_ms) = (ask.from.timestamp_millis(), ask.to.timestamp_millis());
        // The range and the budget first: they need no store.
        BackfillPlan::new(from_ms, to_ms, ask.rate, 1).map_err(|e| refused(e.to_string()))?;
        let Some(jobs) = &self.jobs else { return Err(ScheduleError::NoJobStore { store: self.store.describe() }) };
        let schedule = self.get(id).await?;
        let slots = range_slots(&schedule, from_ms, to_ms).map_err(refused)?;
        let count = slots.len() as u64;
        let plan = BackfillPlan::new(from_ms, to_ms, ask.rate, count).map_err(|e| refused(e.to_string()))?;
        let job = job_name(id);
        let mut done = Backfill::planned(job.clone(), plan, &slots);
        if ask.dry_run {
            return Ok(done);
        }
        let requested = jobs.request(&job, Some(&done.request_key()), None, self.clock.now()).await?;
        let what = format!("request {}: {count} slots, at most {} runs/s", requested.key, plan.rate());
        self.audit_request(id, AuditAction::Backfill, &ask.who, what, ask.note.as_deref(), &requested.key).await?;
        tracing::info!(
            schedule = id, who = %ask.who, key = %requested.key, slots = count, rate = plan.rate(), "backfill requested"
        );
        done.requested = Some(requested);
        Ok(done)
    }
}

/// The slots of `schedule` in `[from_ms, to_ms]` on its cron and time zone, within its bounds
/// (J14), oldest first, at most [`COUNT_LIMIT`]; a fixed-rate schedule or a spec that no longer
/// checks is refused with the reason.
fn range_slots(schedule: &Schedule, from_ms: i64, to_ms: i64) -> Result<Vec<i64>, String> {
    let fires = schedule.spec.check().map_err(|e| format!("its spec does not check ({e}): fix it first"))?;
    let Fires::Cron { .. } = fires else {
        return Err("it runs at a fixed rate; a backfill runs a cron schedule's past slots again, and a fixed-rate \
                    schedule's runs are not tied to instants an operator names: trigger it instead"
            .to_owned());
    };
    let p = schedule.policies;
    let bounds = Bounds {
        start: p.start_ms.and_then(chrono::DateTime::from_timestamp_millis),
        end: p.end_ms.and_then(chrono::DateTime::from_timestamp_millis),
    };
    let mut slots = Vec::new();
    let mut after = from_ms.saturating_sub(1);
    while let Some(ms) = fires.next_after(after) {
        if ms > to_ms || slots.len() as u64 >= COUNT_LIMIT {
            break;
        }
        if chrono::DateTime::from_timestamp_millis(ms).is_some_and(|t| bounds.contains(t)) {
            slots.push(ms);
        }
        after = ms;
    }
    Ok(slots)
}
