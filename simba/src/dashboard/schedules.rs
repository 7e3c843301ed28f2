//! The schedules part of the dashboard (schedules stored as data, ADR 0020): what the pages
//! `/schedules` and `/schedules/{id}` show, read from the backend's schedule store when a page
//! is requested (not by the refresh loop: a namespace may hold 100,000 schedules, and the pages
//! take one page of them at a time), and the actions pause, resume and run now through
//! [`crate::admin::Schedules`]. The markup is `super::schedule_pages`.

use super::auth::Action;
use super::source::scrub;
use crate::admin::{ScheduleError, Schedules, TriggerOptions};
use crate::job_store::{RunRecord, SharedJobStore};
use crate::schedule_store::{AuditRecord, ListQuery, Schedule, job_name};

/// Schedules per page of the listing.
pub(crate) const PAGE_SIZE: usize = 50;
/// Next fires shown on a schedule's page.
pub(crate) const FIRES: usize = 5;
/// Audit records shown on a schedule's page.
pub(crate) const AUDIT: usize = 20;
/// Who the dashboard's actions are recorded as in the audit trail: the actions token is one
/// shared secret without a name, and the job actions record no one.
pub(crate) const ACTOR: &str = "dashboard";

/// The schedule store of the dashboard's backend, with its jobs store (history, run now).
pub(crate) struct ScheduleOps {
    /// `Err`: the backend keeps no schedules (the text says so).
    api: Result<Schedules, String>,
    jobs: Option<SharedJobStore>,
    /// Secrets to mask in error texts.
    scrub: Vec<String>,
}

/// Why a schedules page or action has nothing to show: each is a page that says so (or, for
/// an action, a JSON answer), never an internal error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Problem {
    /// The backend has no schedule store.
    NoStore(String),
    /// The request's input is refused (an invalid prefix, id, note ...): what to do.
    Invalid(String),
    /// No schedule has this id; the nearest existing id, if any.
    NotFound { id: String, nearest: Option<String> },
    /// The store failed (secrets masked).
    Failed(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NoStore(why) | Problem::Invalid(why) | Problem::Failed(why) => f.write_str(why),
            Problem::NotFound { id, nearest: Some(n) } => write!(f, "no schedule `{id}`: did you mean `{n}`?"),
            Problem::NotFound { id, nearest: None } => write!(f, "no schedule `{id}`"),
        }
    }
}

/// The listing's query parameters (`GET /schedules?prefix=&handler=&after=`); empty ones are
/// no filter, unknown ones are ignored.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ListParams {
    pub(crate) prefix: Option<String>,
    pub(crate) handler: Option<String>,
    pub(crate) after: Option<String>,
}

impl ListParams {
    /// Reads `prefix`, `handler` and `after` from a URL query as the search form sends it
    /// (`application/x-www-form-urlencoded`); other parameters are ignored and a repeated one
    /// keeps its last value. A bad escape or one that is not UTF-8 is refused.
    pub(crate) fn parse(query: Option<&str>) -> Result<ListParams, Problem> {
        let mut params = ListParams::default();
        for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match key {
                "prefix" => &mut params.prefix,
                "handler" => &mut params.handler,
                "after" => &mut params.after,
                _ => continue,
            };
            *slot = Some(decode(value).map_err(|e| Problem::Invalid(format!("the query parameter `{key}`: {e}")))?);
        }
        Ok(params)
    }

    /// A parameter when given and not blank.
    fn given(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }

    pub(crate) fn prefix(&self) -> Option<&str> {
        Self::given(&self.prefix)
    }

    pub(crate) fn handler(&self) -> Option<&str> {
        Self::given(&self.handler)
    }

    pub(crate) fn after(&self) -> Option<&str> {
        Self::given(&self.after)
    }

    /// The query checked and built, or what is wrong with it.
    fn query(&self) -> Result<ListQuery, Problem> {
        let mut q = ListQuery::first(PAGE_SIZE);
        if let Some(p) = self.prefix() {
            q = q.prefix(p);
        }
        if let Some(h) = self.handler() {
            if let Some(problem) = crate::name_problem(h) {
                return Err(Problem::Invalid(format!(
                    "invalid handler {h:?}: handler names follow the lease-name rule, and here {problem}"
                )));
            }
            q = q.handler(h);
        }
        if let Some(a) = self.after() {
            simba_core::schedules::check_id(a)
                .map_err(|e| Problem::Invalid(format!("as the page cursor `after`, {e}")))?;
            q = q.after(a);
        }
        Ok(q)
    }
}

/// A query value decoded: `+` is a space, `%XX` a byte, and the bytes UTF-8.
fn decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(byte.ok_or("a `%` not followed by two hex digits: encode it as `%25`")?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "its escapes are not UTF-8 text".to_owned())
}

/// One row of the listing: the schedule and the newest record of `schedule/<id>`.
#[derive(Debug, Clone)]
pub(crate) struct ListRow {
    pub(crate) schedule: Schedule,
    pub(crate) last: Option<RunRecord>,
}

/// One page of the listing.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub(crate) rows: Vec<ListRow>,
    /// The id to ask after for the next page, when one follows.
    pub(crate) next: Option<String>,
}

/// A schedule's page: its definition, and each part read on its own (one failing does not
/// hide the others).
#[derive(Debug, Clone)]
pub(crate) struct Detail {
    pub(crate) schedule: Schedule,
    pub(crate) fires: Result<Vec<i64>, String>,
    /// The records of `schedule/<id>`, newest first; `Err` also when there is no jobs store.
    pub(crate) history: Result<Vec<RunRecord>, String>,
    pub(crate) audit: Result<Vec<AuditRecord>, String>,
}

impl ScheduleOps {
    /// The operations of `api` (`Err`: the backend has none), `jobs` for history and last
    /// outcomes; `scrub` are the secrets to mask in error texts.
    pub(crate) fn new(api: Result<Schedules, ScheduleError>, jobs: Option<SharedJobStore>, scrub: Vec<String>) -> Self {
        let api = api.map_err(|e| super::source::scrub(&e.to_string(), &scrub));
        ScheduleOps { api, jobs, scrub }
    }

    /// No schedule store (a dashboard built in a test with its own source).
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        ScheduleOps { api: Err("this source keeps no schedules".into()), jobs: None, scrub: Vec::new() }
    }

    fn api(&self) -> Result<&Schedules, Problem> {
        self.api.as_ref().map_err(|e| Problem::NoStore(e.clone()))
    }

    fn problem(&self, e: ScheduleError) -> Problem {
        let text = scrub(&e.to_string(), &self.scrub);
        match e {
            ScheduleError::Unsupported { .. } => Problem::NoStore(text),
            ScheduleError::Invalid { reason } => Problem::Invalid(scrub(&reason, &self.scrub)),
            ScheduleError::NotFound { id, nearest } => Problem::NotFound { id, nearest },
            _ => Problem::Failed(text),
        }
    }

    /// One page of the listing filtered by `params`, with each row's last record.
    pub(crate) async fn list(&self, params: &ListParams) -> Result<Listing, Problem> {
        let api = self.api()?;
        let page = api.list(params.query()?).await.map_err(|e| self.problem(e))?;
        let lasts = futures_util::future::join_all(page.schedules.iter().map(|s| self.last(&s.id))).await;
        let rows = page.schedules.into_iter().zip(lasts).map(|(schedule, last)| ListRow { schedule, last }).collect();
        Ok(Listing { rows, next: page.next })
    }

    /// The newest record of `schedule/<id>` (none when the store has none or fails: the
    /// listing still shows the schedule).
    async fn last(&self, id: &str) -> Option<RunRecord> {
        let jobs = self.jobs.as_ref()?;
        match jobs.job(&job_name(id)).await {
            Ok(state) => state.and_then(|s| s.last),
            Err(e) => {
                tracing::debug!(schedule = id, error = %e, "dashboard: cannot read the last run");
                None
            }
        }
    }

    /// Schedule `id` with its next fires, history and audit trail.
    pub(crate) async fn detail(&self, id: &str) -> Result<Detail, Problem> {
        let api = self.api()?;
        let schedule = api.get(id).await.map_err(|e| self.problem(e))?;
        let failed = |e: String| scrub(&e, &self.scrub);
        let fires = api.next_fires(id, FIRES).await.map_err(|e| failed(e.to_string()));
        let history = match &self.jobs {
            Some(jobs) => jobs.history(&job_name(id), super::source::HISTORY).await.map_err(|e| failed(e.to_string())),
            None => Err("this backend keeps no job history".to_owned()),
        };
        let audit = api.audit(Some(id), AUDIT).await.map_err(|e| failed(e.to_string()));
        Ok(Detail { schedule, fires, history, audit })
    }

    /// Does `action` on schedule `id`, as [`ACTOR`], with `note` (the pause's reason, or the
    /// audit trail's note); the text says what happened.
    pub(crate) async fn act(&self, id: &str, action: Action, note: Option<&str>) -> Result<String, Problem> {
        let api = self.api()?;
        let said = match action {
            Action::Pause => match api.pause(id, ACTOR, note).await {
                Ok(t) if t.changed => {
                    format!("paused schedule `{id}`: its slots pass without a run until it is resumed")
                }
                Ok(_) => format!("schedule `{id}` was already paused; nothing changed"),
                Err(e) => return Err(self.problem(e)),
            },
            Action::Resume => match api.resume(id, ACTOR, note).await {
                Ok(t) if t.changed => format!("resumed schedule `{id}`"),
                Ok(_) => format!("schedule `{id}` was not paused; nothing changed"),
                Err(e) => return Err(self.problem(e)),
            },
            Action::Trigger => {
                let options = match note {
                    Some(n) => TriggerOptions::new().note(n),
                    None => TriggerOptions::new(),
                };
                match api.trigger(id, ACTOR, options).await {
                    Ok(r) => r.message(&job_name(id)),
                    Err(e) => return Err(self.problem(e)),
                }
            }
        };
        Ok(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(prefix: &str, handler: &str, after: &str) -> ListParams {
        let some = |s: &str| Some(s.to_owned());
        ListParams { prefix: some(prefix), handler: some(handler), after: some(after) }
    }

    #[test]
    fn the_query_is_decoded_as_the_form_sends_it() {
        let p = ListParams::parse(Some("prefix=tenant-4%37&handler=a+b&x=1&after=")).expect("parsed");
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(p, ListParams { prefix: some("tenant-47"), handler: some("a b"), after: some("") });
        assert_eq!(ListParams::parse(None), Ok(ListParams::default()));
        assert_eq!(ListParams::parse(Some("prefix")).map(|p| p.prefix), Ok(some("")));
        for bad in ["prefix=%", "prefix=%4", "prefix=%zz", "handler=%FF"] {
            let Err(Problem::Invalid(m)) = ListParams::parse(Some(bad)) else { panic!("{bad} is refused") };
            assert!(m.starts_with("the query parameter `"), "{m}");
        }
    }

    #[test]
    fn blank_parameters_are_no_filter_and_bad_ones_say_what_is_wrong() {
        let q = params(" ", "", "").query().expect("no filter");
        assert_eq!((q.prefix, q.handler, q.after, q.limit), (None, None, None, PAGE_SIZE));
        let q = params("tenant-", "report", "tenant-1").query().expect("filters");
        assert_eq!(q.prefix.as_deref(), Some("tenant-"));
        assert_eq!(q.handler.as_deref(), Some("report"));
        assert_eq!(q.after.as_deref(), Some("tenant-1"));
        let Err(Problem::Invalid(m)) = params("", "re port", "").query() else { panic!("a bad handler") };
        assert!(m.contains("invalid handler \"re port\""), "{m}");
        let Err(Problem::Invalid(m)) = params("", "", "a<b").query() else { panic!("a bad cursor") };
        assert!(m.contains("as the page cursor `after`"), "{m}");
    }
}
