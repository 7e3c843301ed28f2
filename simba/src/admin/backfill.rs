//! Backfill from the operator's side (rule J16): [`Jobs::backfill`] checks a backfill of a
//! code-defined job (the range, the budget, the slot count and the time on the job's cron grid
//! as its live nodes publish it), prints as a plan, and makes it as a run-now request whose key
//! carries the plan; the job's holder runs it.

use chrono::{DateTime, Utc};
use simba_core::backfill::{BackfillPlan, MAX_BACKFILL_SLOTS};

use super::{AdminError, Jobs, Requested};
use crate::job::{NodeRegistry, Schedule};
use crate::job_store::group_of;

/// How far [`Jobs::backfill`] counts a range's slots before it stops: far past
/// [`MAX_BACKFILL_SLOTS`], so a refusal names the real count for any range an operator means.
const COUNT_LIMIT: u64 = 100 * MAX_BACKFILL_SLOTS;

/// What a backfill asks ([`Jobs::backfill`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackfillAsk {
    /// The range's first instant.
    pub from: DateTime<Utc>,
    /// The range's last instant (included).
    pub to: DateTime<Utc>,
    /// At most this many runs per second.
    pub rate: f64,
    /// Who asks (the tool's `--as`, else the OS user), for the log line.
    pub who: String,
    /// Why, for the log line.
    pub note: Option<String>,
    /// Check and plan only: nothing is stored.
    pub dry_run: bool,
}

impl BackfillAsk {
    /// A backfill of `[from, to]` at `rate` runs per second, asked by nobody in particular.
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>, rate: f64) -> Self {
        BackfillAsk { from, to, rate, who: "api".to_owned(), note: None, dry_run: false }
    }

    /// Asked by `who`.
    #[must_use]
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.who = who.into();
        self
    }

    /// With a note saying why.
    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Checks and plans only; nothing is stored.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

/// A backfill as checked: its plan, and its request when it was made.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Backfill {
    /// The job.
    pub job: String,
    /// The checked plan (range, budget).
    pub plan: BackfillPlan,
    /// How many slots of the job the range holds.
    pub slots: u64,
    /// The range's first and last slot, unix milliseconds.
    pub first_ms: i64,
    /// The range's last slot, unix milliseconds.
    pub last_ms: i64,
    /// How long the backfill takes at its budget if every slot runs.
    pub takes: std::time::Duration,
    /// The request made (`None` for a dry run).
    pub requested: Option<Requested>,
}

impl Backfill {
    /// The backfill of `job` whose range holds `slots` (ascending, at least one), not asked yet.
    pub(crate) fn planned(job: String, plan: BackfillPlan, slots: &[i64]) -> Self {
        let count = slots.len() as u64;
        let first_ms = slots.first().copied().unwrap_or(plan.from_ms);
        let last_ms = slots.last().copied().unwrap_or(plan.to_ms);
        Backfill { job, plan, slots: count, first_ms, last_ms, takes: plan.takes(count), requested: None }
    }

    /// A fresh key for its request: the plan and a random nonce, so that asking the same
    /// range twice makes two requests.
    pub(crate) fn request_key(&self) -> String {
        self.plan.key(&format!("{:08x}", rand::random::<u32>()))
    }

    /// The plan as the tool prints it first.
    pub fn plan_text(&self) -> String {
        let at = |ms| crate::job_store::rfc3339_ms(Some(ms)).unwrap_or_default();
        format!(
            "backfill of `{}`: {} slots from {} to {}, at most {} runs/s, at most {} if every slot runs; slots that \
             already ran are skipped, never run again",
            self.job,
            self.slots,
            at(self.first_ms),
            at(self.last_ms),
            self.plan.rate(),
            humantime::format_duration(std::time::Duration::from_secs(self.takes.as_secs())),
        )
    }
}

impl Jobs {
    /// Checks a backfill of `job` (rule J16) and, unless it is a dry run, asks the job's holder
    /// to run it: the range in order, a budget of at least 0.001 runs/s, the range's slots on
    /// the job's cron grid (as a live node publishes it) at least one, at most 10,000 and one
    /// day at the budget. A refusal says what is wrong and what to do; nothing is stored.
    /// The request is a run-now request whose key carries the plan (made and retried as
    /// [`trigger`](Self::trigger)'s): the holder takes it, claims each slot with a backfill
    /// claim (J15: a slot that ran is never run again) and logs each one as run or skipped.
    pub async fn backfill(&self, job: &str, ask: &BackfillAsk) -> Result<Backfill, AdminError> {
        let refused = |reason: String| AdminError::Backfill { job: job.to_owned(), reason };
        let (from_ms, to_ms) = (ask.from.timestamp_millis(), ask.to.timestamp_millis());
        // The range and the budget first: they need no store.
        BackfillPlan::new(from_ms, to_ms, ask.rate, 1).map_err(|e| refused(e.to_string()))?;
        self.check(job).await?;
        let (cron, tz) = self.grid(job).await?;
        let mut slots = Vec::new();
        let mut after = ask.from - chrono::Duration::milliseconds(1);
        while let Some(s) = simba_core::slots::next_slot(&cron, tz, after) {
            if s > ask.to || slots.len() as u64 >= COUNT_LIMIT {
                break;
            }
            slots.push(s.timestamp_millis());
            after = s;
        }
        let count = slots.len() as u64;
        let plan = BackfillPlan::new(from_ms, to_ms, ask.rate, count).map_err(|e| refused(e.to_string()))?;
        let mut done = Backfill::planned(job.to_owned(), plan, &slots);
        if ask.dry_run {
            return Ok(done);
        }
        let requested = self.request(job, Some(&done.request_key()), None, Utc::now()).await?;
        tracing::info!(
            job, who = %ask.who, note = ask.note.as_deref().unwrap_or_default(), key = %requested.key, slots = count,
            rate = plan.rate(), "backfill requested"
        );
        done.requested = Some(requested);
        Ok(done)
    }

    /// The cron grid of `job` (for a partition, its group's) as a live node publishes it.
    async fn grid(&self, job: &str) -> Result<(croner::Cron, chrono_tz::Tz), AdminError> {
        let refused = |reason: String| AdminError::Backfill { job: job.to_owned(), reason };
        let name = if self.is_partition(job) { group_of(job).unwrap_or(job) } else { job };
        let published = self.store.registries().await?;
        let settings = published
            .iter()
            .filter_map(|(session, text)| NodeRegistry::decode(session, text).ok())
            .flat_map(|r| r.jobs)
            .find(|j| j.name == name || Some(j.name.as_str()) == group_of(job));
        let Some(settings) = settings else {
            return Err(refused(
                "no live node publishes its schedule, so its slots cannot be counted: start a node that runs it"
                    .to_owned(),
            ));
        };
        match settings.parsed_schedule() {
            Some(Schedule::Cron { expr, time_zone }) => {
                let cron = crate::job::parse_cron(&expr).map_err(|e| refused(format!("its schedule `{expr}`: {e}")))?;
                let tz = match time_zone.as_deref() {
                    Some(z) => crate::job::parse_time_zone(z).map_err(|e| refused(e.to_string()))?,
                    None => chrono_tz::Tz::UTC,
                };
                Ok((cron, tz))
            }
            Some(Schedule::FixedRate(_)) => Err(refused(
                "a fixed-rate job has no past slots to backfill (its slots are named after the last one claimed)"
                    .to_owned(),
            )),
            None => Err(refused("it has no schedule (a partition worker runs once per term)".to_owned())),
        }
    }

    /// Whether `job` is a partition `g/i` (its schedule is its group's).
    fn is_partition(&self, job: &str) -> bool {
        group_of(job).is_some() && job.rsplit('/').next().is_some_and(|i| i.parse::<u32>().is_ok())
    }
}
