//! Parsing and validation: the attribute's options into a [`Configuration`] (one setter per
//! option, each refusing a repeat through [`set_once`]), checked together in
//! [`Configuration::build`] into an immutable [`JobConfig`]; and the checks of the function's
//! signature. Every user error is a `syn::Error` spanned at the offending token.

use std::time::Duration;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ItemFn, Lit, Meta, Token};

use crate::kind::Kind;
use crate::signature;

use simba_rules::lease::{MAX_NAME_LEN, name_problem};

/// The most retries a job may ask for (the same as the runtime's `MAX_RETRY`).
const MAX_RETRY: u32 = 100;

/// The most partitions a group may have.
const MAX_PARTITIONS: u32 = 100_000;

/// How a scheduled slot runs, in both macros: `misfire`, `retry`, `backoff`, `timeout`.
const RUN_OPTIONS: &[&str] = &["misfire", "retry", "backoff", "timeout"];

/// The slot policies (J11-J14), in both macros.
const POLICY_OPTIONS: &[&str] = &["overlap", "catch_up_window", "jitter", "start", "end"];

impl Kind {
    fn attr(self) -> &'static str {
        match self {
            Kind::Scheduled => "#[simba_scheduled]",
            Kind::Partitioned => "#[simba_partitioned]",
            Kind::Handler => "#[simba_handler]",
        }
    }

    /// Every option of the macro, as error messages list them: its own, then the run options
    /// and the slot policies the two job macros share (one list each).
    fn options(self) -> Vec<&'static str> {
        let (own, shared): (&[&'static str], &[&[&'static str]]) = match self {
            Kind::Scheduled => (&["cron", "fixed_rate", "time_zone", "lease"], &[RUN_OPTIONS, POLICY_OPTIONS]),
            Kind::Partitioned => {
                (&["group", "partitions", "cron", "fixed_rate", "time_zone"], &[RUN_OPTIONS, POLICY_OPTIONS])
            }
            // A handler has no schedule: its schedules are data, with their own policies.
            Kind::Handler => (&["name"], &[]),
        };
        own.iter().chain(shared.iter().flat_map(|list| list.iter())).copied().collect()
    }

    /// A hint for an option that belongs to the other macro.
    fn hint(self, option: &str) -> &'static str {
        match (self, option) {
            (Kind::Scheduled, "group" | "partitions") => "; `group` and `partitions` belong to `#[simba_partitioned]`",
            (Kind::Partitioned, "lease") => {
                "; a partitioned job has no `lease`: partition `i` is guarded by the lease `{group}.{i}`"
            }
            (Kind::Handler, _) if Kind::Scheduled.options().contains(&option) => {
                "; a handler has no schedule of its own: schedules naming it are data, created with their spec and \
                 policies (`simba::admin::Schedules`, `simba schedules create`)"
            }
            _ => "",
        }
    }
}

/// When a job runs, as the attribute said it, after the compile-time checks: the macro's
/// parse result, turned into tokens that build the runtime's one schedule type
/// (`simba::job::Schedule`, ADR 0003). A proc-macro crate cannot use simba's type itself (simba
/// depends on this crate), and it needs none of its runtime parts.
#[derive(Debug, Clone)]
pub(crate) enum Schedule {
    Cron { expr: String, time_zone: Option<String> },
    FixedRate(Duration),
}

/// What to do with missed cron slots: the rules crate's one type.
pub(crate) use simba_rules::misfire::Policy as Misfire;

/// What a slot that comes due does while a run is in flight (J11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    Skip,
    BufferOne,
    AllowAll,
    CancelRunning,
}

/// The slot policies (J11-J14), checked together with the schedule and misfire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Policies {
    pub(crate) overlap: Option<Overlap>,
    pub(crate) catch_up_window: Option<Duration>,
    pub(crate) jitter: Option<Duration>,
    /// Unix milliseconds.
    pub(crate) start_ms: Option<i64>,
    pub(crate) end_ms: Option<i64>,
}

/// The validated, final configuration the expansion works from.
#[derive(Debug, Clone)]
pub(crate) struct JobConfig {
    /// The job's name: the function's name, without `r#`.
    pub(crate) name: String,
    pub(crate) misfire: Misfire,
    pub(crate) job: JobKind,
    /// `retry = N`.
    pub(crate) retry: Option<u32>,
    /// `backoff = "1s"`.
    pub(crate) backoff: Option<Duration>,
    /// `timeout = "30s"`.
    pub(crate) timeout: Option<Duration>,
    /// `overlap`, `catch_up_window`, `jitter`, `start`, `end`.
    pub(crate) policies: Policies,
    /// What the function takes after the term (and the partition): the run context and
    /// `State<T>` parameters, in order.
    pub(crate) extras: Vec<signature::Extra>,
    /// The path the generated code names the `simba` crate by: `::simba`, or what
    /// `crate = "..."` says (a renamed dependency, or a facade crate re-exporting simba).
    pub(crate) krate: syn::Path,
}

/// What differs between the macros.
#[derive(Debug, Clone)]
pub(crate) enum JobKind {
    Scheduled {
        lease: String,
        schedule: Schedule,
    },
    Partitioned {
        group: String,
        partitions: u32,
        schedule: Option<Schedule>,
    },
    /// `#[simba_handler]`: the name schedules refer to, and the payload's type as written.
    Handler {
        name: String,
        payload: Box<syn::Type>,
    },
}

/// A value together with the span of the option that set it.
#[derive(Debug, Clone)]
struct Set<T> {
    value: T,
    /// The option's name (for errors about combinations).
    key: Span,
    /// The option's position in the attribute.
    position: usize,
}

/// The options as written, each set at most once.
#[derive(Debug)]
struct Configuration {
    kind: Kind,
    /// How many options were applied so far.
    seen: usize,
    cron: Option<Set<String>>,
    fixed_rate: Option<Set<Duration>>,
    time_zone: Option<Set<String>>,
    lease: Option<Set<String>>,
    misfire: Option<Set<Misfire>>,
    group: Option<Set<(String, Span)>>,
    partitions: Option<Set<u32>>,
    retry: Option<Set<u32>>,
    backoff: Option<Set<Duration>>,
    timeout: Option<Set<Duration>>,
    overlap: Option<Set<Overlap>>,
    catch_up_window: Option<Set<Duration>>,
    jitter: Option<Set<Duration>>,
    start: Option<Set<i64>>,
    end: Option<Set<i64>>,
    krate: Option<Set<syn::Path>>,
    /// `#[simba_handler(name = "...")]`.
    handler_name: Option<Set<String>>,
}

/// The one helper that refuses a repeated option.
fn set_once<T>(slot: &mut Option<Set<T>>, value: T, key: &syn::Ident, position: usize) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(key.span(), format!("`{key}` is set more than once; keep one")));
    }
    *slot = Some(Set { value, key: key.span(), position });
    Ok(())
}

impl Configuration {
    fn new(kind: Kind) -> Self {
        Configuration {
            kind,
            seen: 0,
            cron: None,
            fixed_rate: None,
            time_zone: None,
            lease: None,
            misfire: None,
            group: None,
            partitions: None,
            retry: None,
            backoff: None,
            timeout: None,
            overlap: None,
            catch_up_window: None,
            jitter: None,
            start: None,
            end: None,
            krate: None,
            handler_name: None,
        }
    }

    /// Applies one `name = value` option.
    fn set(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        self.seen += 1;
        let name = key.to_string();
        if self.kind == Kind::Handler && !matches!(name.as_str(), "name" | "crate") {
            return Err(unknown_option(self.kind, key.span(), &name));
        }
        match name.as_str() {
            "cron" => self.set_cron(key, value),
            "fixed_rate" => self.set_fixed_rate(key, value),
            "time_zone" => self.set_time_zone(key, value),
            "misfire" => self.set_misfire(key, value),
            "retry" => self.set_retry(key, value),
            "backoff" => {
                let d = duration_lit(key, value, "\"1s\"")?;
                set_once(&mut self.backoff, d, key, self.seen)
            }
            "timeout" => {
                let d = duration_lit(key, value, "\"30s\"")?;
                set_once(&mut self.timeout, d, key, self.seen)
            }
            "overlap" => self.set_overlap(key, value),
            "catch_up_window" => {
                let d = duration_lit(key, value, "\"10m\"")?;
                set_once(&mut self.catch_up_window, d, key, self.seen)
            }
            "jitter" => {
                let d = duration_lit(key, value, "\"30s\"")?;
                set_once(&mut self.jitter, d, key, self.seen)
            }
            "start" => {
                let ms = instant_lit(key, value)?;
                set_once(&mut self.start, ms, key, self.seen)
            }
            "end" => {
                let ms = instant_lit(key, value)?;
                set_once(&mut self.end, ms, key, self.seen)
            }
            "crate" => self.set_crate(key, value),
            "lease" if self.kind == Kind::Scheduled => self.set_lease(key, value),
            "group" if self.kind == Kind::Partitioned => self.set_group(key, value),
            "partitions" if self.kind == Kind::Partitioned => self.set_partitions(key, value),
            "name" if self.kind == Kind::Handler => self.set_handler_name(key, value),
            other => Err(unknown_option(self.kind, key.span(), other)),
        }
    }

    fn set_cron(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"0 */5 * * * *\"")?;
        let expr = lit.value();
        check_cron(&expr).map_err(|msg| syn::Error::new(lit.span(), msg))?;
        set_once(&mut self.cron, expr, key, self.seen)
    }

    fn set_fixed_rate(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"30s\"")?;
        let text = lit.value();
        let period = match humantime::parse_duration(&text) {
            Ok(period) => period,
            Err(e) => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "invalid duration `{text}`: {e}; write a duration such as \"30s\", \"5m\", \"1h 30m\" or \"250ms\""
                    ),
                ));
            }
        };
        if period.is_zero() {
            return Err(syn::Error::new(lit.span(), "`fixed_rate` must be longer than zero, e.g. \"30s\""));
        }
        set_once(&mut self.fixed_rate, period, key, self.seen)
    }

    fn set_time_zone(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"Europe/Berlin\"")?;
        let zone = lit.value();
        if zone.parse::<chrono_tz::Tz>().is_err() {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "unknown time zone `{zone}`; use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
                ),
            ));
        }
        set_once(&mut self.time_zone, zone, key, self.seen)
    }

    fn set_lease(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"reports\"")?;
        let lease = lit.value();
        if let Some(reason) = name_problem(&lease) {
            return Err(syn::Error::new(lit.span(), format!("invalid lease name `{lease}`: {reason}")));
        }
        set_once(&mut self.lease, lease, key, self.seen)
    }

    fn set_misfire(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"skip\"")?;
        let misfire = match simba_rules::misfire::parse(&lit.value()) {
            Some(policy) => policy,
            None => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown misfire policy `{}`; valid policies: {}",
                        lit.value(),
                        simba_rules::misfire::VALID
                    ),
                ));
            }
        };
        set_once(&mut self.misfire, misfire, key, self.seen)
    }

    fn set_overlap(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        use simba_rules::overlap::Policy;
        let lit = string_lit(key, value, "\"buffer_one\"")?;
        let overlap = match simba_rules::overlap::parse(&lit.value()) {
            Some(Policy::Skip) => Overlap::Skip,
            Some(Policy::BufferOne) => Overlap::BufferOne,
            Some(Policy::AllowAll) => Overlap::AllowAll,
            Some(Policy::CancelRunning) => Overlap::CancelRunning,
            None => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown overlap policy `{}`; valid policies: {}",
                        lit.value(),
                        simba_rules::overlap::VALID
                    ),
                ));
            }
        };
        set_once(&mut self.overlap, overlap, key, self.seen)
    }

    fn set_retry(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let Expr::Lit(syn::ExprLit { lit: Lit::Int(lit), .. }) = value else {
            return Err(syn::Error::new(
                value.span(),
                format!("`{key}` expects an integer literal from 0 to {MAX_RETRY}, e.g. `retry = 3`"),
            ));
        };
        let retry = lit.base10_parse::<u32>().ok().filter(|r| *r <= MAX_RETRY).ok_or_else(|| {
            syn::Error::new(lit.span(), format!("`retry` must be from 0 to {MAX_RETRY}, found {}", lit.base10_digits()))
        })?;
        set_once(&mut self.retry, retry, key, self.seen)
    }

    /// `crate = "path"`: the path of the simba crate in the generated code, as `#[tokio::main]`
    /// takes one (a renamed dependency, or a facade crate that re-exports simba).
    fn set_crate(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"my_simba\"")?;
        let path = lit.parse::<syn::Path>().map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!(
                    "`crate` expects the path of the simba crate, e.g. `crate = \"my_simba\"` or `crate = \"facade::simba\"`, found `{}`",
                    lit.value()
                ),
            )
        })?;
        set_once(&mut self.krate, path, key, self.seen)
    }

    fn set_handler_name(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"send_report\"")?;
        let name = lit.value();
        if let Some(reason) = name_problem(&name) {
            let reason = reason.replace("a lease name", "a handler name");
            return Err(syn::Error::new(lit.span(), format!("invalid handler name `{name}`: {reason}")));
        }
        set_once(&mut self.handler_name, name, key, self.seen)
    }

    fn set_group(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let lit = string_lit(key, value, "\"billing\"")?;
        let group = lit.value();
        if let Some(reason) = name_problem(&group) {
            let reason = reason.replace("a lease name", "a group name");
            return Err(syn::Error::new(lit.span(), format!("invalid group name `{group}`: {reason}")));
        }
        set_once(&mut self.group, (group, lit.span()), key, self.seen)
    }

    fn set_partitions(&mut self, key: &syn::Ident, value: &Expr) -> syn::Result<()> {
        let Expr::Lit(syn::ExprLit { lit: Lit::Int(lit), .. }) = value else {
            return Err(syn::Error::new(
                value.span(),
                format!("`{key}` expects an integer literal from 1 to {MAX_PARTITIONS}, e.g. `partitions = 16`"),
            ));
        };
        let out_of_range = || {
            syn::Error::new(
                lit.span(),
                format!("`partitions` must be from 1 to {MAX_PARTITIONS}, found {}", lit.base10_digits()),
            )
        };
        let partitions = lit.base10_parse::<u32>().map_err(|_| out_of_range())?;
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(out_of_range());
        }
        set_once(&mut self.partitions, partitions, key, self.seen)
    }

    /// Checks the options together and produces the final configuration. `func` is the
    /// annotated function (its name is the job's name and the default lease).
    fn build(mut self, func: &ItemFn) -> syn::Result<JobConfig> {
        let name = func.sig.ident.unraw().to_string();
        let schedule = self.schedule()?;
        let misfire = self.misfire.as_ref().map_or(Misfire::Skip, |m| m.value);
        self.check_run_options(schedule.is_some())?;
        let policies = self.policies(schedule.as_ref(), misfire)?;
        let (retry, backoff, timeout) = (
            self.retry.take().map(|s| s.value),
            self.backoff.take().map(|s| s.value),
            self.timeout.take().map(|s| s.value),
        );
        let extras = signature::extras(self.kind, func);
        let krate = self.krate.take().map_or_else(|| syn::parse_quote!(::simba), |k| k.value);
        let job = match self.kind {
            Kind::Scheduled => self.scheduled(func, &name, schedule)?,
            Kind::Partitioned => self.partitioned(schedule)?,
            Kind::Handler => self.handler(func, &name)?,
        };
        Ok(JobConfig { name, misfire, job, retry, backoff, timeout, policies, extras, krate })
    }

    /// `cron` (with its `time_zone`) or `fixed_rate`, not both; `time_zone` only with `cron`.
    fn schedule(&mut self) -> syn::Result<Option<Schedule>> {
        match (self.cron.take(), self.fixed_rate.take()) {
            (Some(cron), Some(rate)) => {
                let later = if cron.position < rate.position { rate.key } else { cron.key };
                Err(syn::Error::new(later, "set either `cron` or `fixed_rate`, not both"))
            }
            (Some(cron), None) => {
                Ok(Some(Schedule::Cron { expr: cron.value, time_zone: self.time_zone.take().map(|zone| zone.value) }))
            }
            (None, Some(rate)) => match &self.time_zone {
                Some(zone) => Err(syn::Error::new(
                    zone.key,
                    "`time_zone` only applies to `cron` schedules; a `fixed_rate` runs on the monotonic clock",
                )),
                None => Ok(Some(Schedule::FixedRate(rate.value))),
            },
            (None, None) => match &self.time_zone {
                Some(zone) => Err(syn::Error::new(zone.key, "`time_zone` needs a `cron` schedule beside it")),
                None => Ok(None),
            },
        }
    }

    /// `retry`, `backoff` and `timeout` need a schedule; `backoff` needs `retry`.
    fn check_run_options(&self, scheduled: bool) -> syn::Result<()> {
        if !scheduled {
            let first = [
                self.retry.as_ref().map(|s| s.key),
                self.backoff.as_ref().map(|s| s.key),
                self.timeout.as_ref().map(|s| s.key),
            ]
            .into_iter()
            .flatten()
            .next();
            if let Some(opt) = first {
                return Err(syn::Error::new(
                    opt,
                    "`retry`, `backoff` and `timeout` apply to scheduled runs: add `cron` or `fixed_rate`, or remove them",
                ));
            }
        }
        if let (Some(backoff), None) = (&self.backoff, &self.retry) {
            return Err(syn::Error::new(backoff.key, "`backoff` needs `retry = N` beside it (how many retries)"));
        }
        Ok(())
    }

    /// The slot policies (J11-J14), checked together: they need a schedule; a catch-up window
    /// needs cron and `misfire = "run_once"`; a fixed rate's jitter is shorter than its
    /// period; the end is not before the start.
    fn policies(&mut self, schedule: Option<&Schedule>, misfire: Misfire) -> syn::Result<Policies> {
        use simba_rules::policies::{WINDOW_NEEDS_CRON, WINDOW_NEEDS_RUN_ONCE, bounds_problem, jitter_problem};
        let keys = [
            self.overlap.as_ref().map(|s| s.key),
            self.catch_up_window.as_ref().map(|s| s.key),
            self.jitter.as_ref().map(|s| s.key),
            self.start.as_ref().map(|s| s.key),
            self.end.as_ref().map(|s| s.key),
        ];
        let Some(schedule) = schedule else {
            return match keys.into_iter().flatten().next() {
                Some(key) => Err(syn::Error::new(
                    key,
                    "`overlap`, `catch_up_window`, `jitter`, `start` and `end` apply to scheduled slots: add `cron` \
                     or `fixed_rate`, or remove them",
                )),
                None => Ok(Policies::default()),
            };
        };
        if let Some(window) = &self.catch_up_window {
            if matches!(schedule, Schedule::FixedRate(_)) {
                return Err(syn::Error::new(window.key, WINDOW_NEEDS_CRON));
            }
            if misfire != Misfire::RunOnce {
                return Err(syn::Error::new(window.key, WINDOW_NEEDS_RUN_ONCE));
            }
        }
        if let (Some(jitter), Schedule::FixedRate(period)) = (&self.jitter, schedule)
            && let Some(m) = jitter_problem(jitter.value.as_millis(), Some(period.as_millis()))
        {
            return Err(syn::Error::new(jitter.key, m));
        }
        let (start, end) = (self.start.take().map(|s| s.value), self.end.take());
        if let Some(end) = &end
            && let Some(m) = bounds_problem(start, Some(end.value))
        {
            return Err(syn::Error::new(end.key, m));
        }
        Ok(Policies {
            overlap: self.overlap.take().map(|s| s.value),
            catch_up_window: self.catch_up_window.take().map(|s| s.value),
            jitter: self.jitter.take().map(|s| s.value),
            start_ms: start,
            end_ms: end.map(|s| s.value),
        })
    }

    /// `#[simba_scheduled]`: a schedule, and a lease (the function's name by default, which
    /// must then be a valid lease name).
    fn scheduled(self, func: &ItemFn, name: &str, schedule: Option<Schedule>) -> syn::Result<JobKind> {
        let Some(schedule) = schedule else {
            return Err(syn::Error::new(
                Span::call_site(),
                "a scheduled job needs a schedule: add `cron = \"0 */5 * * * *\"` (6 fields, seconds first) \
                 or `fixed_rate = \"30s\"`",
            ));
        };
        let lease = match self.lease {
            Some(lease) => lease.value,
            None => {
                if let Some(reason) = name_problem(name) {
                    return Err(syn::Error::new(
                        func.sig.ident.span(),
                        format!(
                            "the function name `{name}` is the default lease name, but it is not a valid \
                             lease name ({reason}); set one with `lease = \"...\"`"
                        ),
                    ));
                }
                name.to_owned()
            }
        };
        Ok(JobKind::Scheduled { lease, schedule })
    }

    /// `#[simba_handler]`: a name (the function's by default, which must then be a valid
    /// handler name: the lease-name rule, as schedules store it) and the payload's type.
    fn handler(self, func: &ItemFn, name: &str) -> syn::Result<JobKind> {
        let name = match self.handler_name {
            Some(set) => set.value,
            None => {
                if let Some(reason) = name_problem(name) {
                    return Err(syn::Error::new(
                        func.sig.ident.span(),
                        format!(
                            "the function name `{name}` is the default handler name, but it is not a valid \
                             handler name ({}); set one with `name = \"...\"`",
                            reason.replace("a lease name", "a handler name")
                        ),
                    ));
                }
                name.to_owned()
            }
        };
        let payload = signature::payload(func)
            .ok_or_else(|| syn::Error::new(func.sig.paren_token.span.join(), "a handler takes a payload"))?;
        Ok(JobKind::Handler { name, payload: Box::new(payload.clone()) })
    }

    /// `#[simba_partitioned]`: a group and a partition count whose last lease name fits T1;
    /// `misfire` only with a schedule.
    fn partitioned(self, schedule: Option<Schedule>) -> syn::Result<JobKind> {
        let Some(group) = self.group else {
            return Err(syn::Error::new(
                Span::call_site(),
                "a partitioned job needs a group: add `group = \"billing\"` (partition `i` is the lease `billing.i`)",
            ));
        };
        let Some(partitions) = self.partitions else {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("a partitioned job needs `partitions = N`, with N from 1 to {MAX_PARTITIONS}"),
            ));
        };
        let (group, group_span) = group.value;
        let partitions = partitions.value;
        let last = format!("{group}.{}", partitions - 1);
        let len = last.chars().count();
        if len > MAX_NAME_LEN {
            return Err(syn::Error::new(
                group_span,
                format!(
                    "group name too long for {partitions} partitions: the last partition's lease `{last}` \
                     has {len} characters, more than {MAX_NAME_LEN}; use a shorter group name"
                ),
            ));
        }
        if schedule.is_none()
            && let Some(misfire) = &self.misfire
        {
            return Err(syn::Error::new(
                misfire.key,
                "`misfire` only applies to a scheduled worker: add `cron` or `fixed_rate`, or remove `misfire`",
            ));
        }
        Ok(JobKind::Partitioned { group, partitions, schedule })
    }
}

/// Parses the attribute's arguments and checks them against the function: the final
/// configuration, or every error found (option errors, then signature errors).
pub(crate) fn parse(kind: Kind, args: proc_macro2::TokenStream, func: &ItemFn) -> syn::Result<JobConfig> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let mut config = Configuration::new(kind);
    let mut options_ok = true;
    match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args) {
        Ok(metas) => {
            for meta in metas {
                if let Err(e) = apply(&mut config, &meta) {
                    options_ok = false;
                    push(e);
                }
            }
        }
        Err(e) => {
            options_ok = false;
            push(syn::Error::new(
                e.span(),
                format!("{e}; options are written `name = value`, separated by commas, e.g. {}", example(kind)),
            ));
        }
    }
    if let Err(e) = signature::check(kind, func) {
        push(e);
    }
    // A missing-schedule error after a refused `cron` would only repeat it: check the options
    // together only when each one was accepted.
    let built = if options_ok { config.build(func).map_err(&mut push).ok() } else { None };
    match (errors, built) {
        (None, Some(config)) => Ok(config),
        (Some(e), _) => Err(e),
        (None, None) => Err(syn::Error::new(Span::call_site(), "invalid job")),
    }
}

fn example(kind: Kind) -> &'static str {
    match kind {
        Kind::Scheduled => "`#[simba_scheduled(cron = \"0 */5 * * * *\", lease = \"reports\")]`",
        Kind::Partitioned => "`#[simba_partitioned(group = \"billing\", partitions = 16)]`",
        Kind::Handler => "`#[simba_handler(name = \"send_report\")]`",
    }
}

fn apply(config: &mut Configuration, meta: &Meta) -> syn::Result<()> {
    let kind = config.kind;
    let path = meta.path();
    let Some(key) = path.get_ident() else {
        let shown = quote::quote!(#path).to_string().replace(' ', "");
        return Err(unknown_option(kind, path.span(), &shown));
    };
    match meta {
        Meta::NameValue(nv) => config.set(key, &nv.value),
        Meta::Path(_) | Meta::List(_) => {
            let name = key.to_string();
            if kind.options().contains(&name.as_str()) {
                Err(syn::Error::new(meta.span(), format!("`{name}` needs a value: write `{name} = ...`")))
            } else {
                Err(unknown_option(kind, key.span(), &name))
            }
        }
    }
}

fn unknown_option(kind: Kind, span: Span, name: &str) -> syn::Error {
    let valid: Vec<String> = kind.options().iter().map(|o| format!("`{o}`")).collect();
    syn::Error::new(
        span,
        format!(
            "unknown option `{name}` for `{}`; valid options: {}{}",
            kind.attr(),
            valid.join(", "),
            kind.hint(name)
        ),
    )
}

/// A positive duration written as a string literal (`"30s"`), or an error at the token.
fn duration_lit(key: &syn::Ident, value: &Expr, example: &str) -> syn::Result<Duration> {
    let lit = string_lit(key, value, example)?;
    let text = lit.value();
    match humantime::parse_duration(&text) {
        Ok(d) if d.is_zero() => {
            Err(syn::Error::new(lit.span(), format!("`{key}` must be longer than zero, e.g. {example}")))
        }
        Ok(d) => Ok(d),
        Err(e) => Err(syn::Error::new(
            lit.span(),
            format!("invalid duration `{text}`: {e}; write a duration such as \"30s\", \"5m\" or \"250ms\""),
        )),
    }
}

/// An instant written as an RFC 3339 string literal with its offset, as unix milliseconds.
fn instant_lit(key: &syn::Ident, value: &Expr) -> syn::Result<i64> {
    let lit = string_lit(key, value, "\"2027-01-01T00:00:00Z\"")?;
    let text = lit.value();
    chrono::DateTime::parse_from_rfc3339(&text).map(|t| t.timestamp_millis()).map_err(|e| {
        syn::Error::new(
            lit.span(),
            format!("invalid instant `{text}`: {e}; write an RFC 3339 instant with its offset, e.g. \"2027-01-01T00:00:00Z\""),
        )
    })
}

/// The value as a string literal, or an error naming the option and an example.
fn string_lit<'a>(key: &syn::Ident, value: &'a Expr, example: &str) -> syn::Result<&'a syn::LitStr> {
    match value {
        Expr::Lit(syn::ExprLit { lit: Lit::Str(lit), .. }) => Ok(lit),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{key}` expects a string literal, e.g. `{key} = {example}` (the macro checks it at compile time)"),
        )),
    }
}

/// The croner parser with the settings of `simba_rules::cron`, the ones the runtime uses.
fn cron_parser() -> croner::parser::CronParser {
    use croner::parser::{CronParser, Seconds, Year};
    use simba_rules::cron::{Field, SECONDS, YEAR};

    let seconds = match SECONDS {
        Field::Required => Seconds::Required,
        Field::Optional => Seconds::Optional,
        Field::Disallowed => Seconds::Disallowed,
    };
    let year = match YEAR {
        Field::Required => Year::Required,
        Field::Optional => Year::Optional,
        Field::Disallowed => Year::Disallowed,
    };
    CronParser::builder().seconds(seconds).year(year).build()
}

/// Checks a cron expression the way the runtime parses it: croner with seconds required and
/// no year field, so exactly 6 fields (or a nickname such as `@hourly`).
fn check_cron(expr: &str) -> Result<(), String> {
    let parser = cron_parser();
    match parser.parse(expr) {
        Ok(_) => Ok(()),
        Err(e) => {
            let fields = expr.split_whitespace().count();
            let trimmed = expr.trim_start();
            if !trimmed.starts_with('@') && fields != simba_rules::cron::FIELDS {
                let fix =
                    if fields == 5 { format!("; for second 0 write \"0 {}\"", expr.trim()) } else { String::new() };
                Err(format!(
                    "a cron expression needs 6 fields with seconds first (`sec min hour day month weekday`, \
                     e.g. \"0 */5 * * * *\"), found {fields}{fix}"
                ))
            } else {
                Err(format!("invalid cron expression `{expr}`: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn scheduled_fn() -> ItemFn {
        syn::parse_quote!(
            async fn report(term: &Term) {}
        )
    }

    fn partitioned_fn() -> ItemFn {
        syn::parse_quote!(
            async fn bill(term: &Term, partition: u32) {}
        )
    }

    fn error(kind: Kind, args: proc_macro2::TokenStream, func: &ItemFn) -> String {
        parse(kind, args, func).expect_err("should be refused").to_string()
    }

    /// The croner configuration the runtime must share: seconds required, no year field.
    #[test]
    fn cron_needs_six_fields_with_seconds() {
        for ok in ["0 */5 * * * *", "*/10 * * * * *", "0 0 2 * * MON-FRI", "0 0 0 L * *", "@hourly", "@daily"] {
            assert_eq!(check_cron(ok), Ok(()), "{ok}");
        }
        let five = check_cron("*/5 * * * *").expect_err("5 fields");
        assert!(five.contains("6 fields with seconds first") && five.contains("\"0 */5 * * * *\""), "{five}");
        let seven = check_cron("0 0 0 1 1 * 2030").expect_err("7 fields");
        assert!(seven.contains("found 7"), "{seven}");
        let bad = check_cron("0 */5 25 * * *").expect_err("hour 25");
        assert!(bad.starts_with("invalid cron expression"), "{bad}");
        assert!(check_cron("").is_err());
    }

    /// T1, the same cases as `simba::name`'s tests.
    #[test]
    fn lease_names_follow_t1() {
        for ok in ["a", "report", "billing.3", "A-b_c:d.e", &"x".repeat(128), "..."] {
            assert_eq!(name_problem(ok), None, "{ok:?}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", "{x}", &"x".repeat(129), "a*"] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn scheduled_defaults() {
        let config = parse(Kind::Scheduled, quote!(cron = "0 */5 * * * *"), &scheduled_fn()).expect("valid");
        assert_eq!(config.name, "report");
        assert_eq!(config.misfire, Misfire::Skip);
        let JobKind::Scheduled { lease, schedule: Schedule::Cron { expr, time_zone } } = config.job else {
            panic!("a cron scheduled job: {:?}", config.job);
        };
        assert_eq!((lease.as_str(), expr.as_str(), time_zone), ("report", "0 */5 * * * *", None));
    }

    #[test]
    fn fixed_rate_keeps_sub_seconds() {
        let config = parse(Kind::Scheduled, quote!(fixed_rate = "1s 250ms", misfire = "run_once"), &scheduled_fn())
            .expect("valid");
        assert_eq!(config.misfire, Misfire::RunOnce);
        let JobKind::Scheduled { schedule: Schedule::FixedRate(period), .. } = config.job else {
            panic!("a fixed-rate job: {:?}", config.job);
        };
        assert_eq!(period, Duration::from_millis(1250));
    }

    #[test]
    fn partitioned_options() {
        let config =
            parse(Kind::Partitioned, quote!(group = "billing", partitions = 16), &partitioned_fn()).expect("valid");
        let JobKind::Partitioned { group, partitions, schedule: None } = config.job else {
            panic!("an unscheduled partitioned job: {:?}", config.job);
        };
        assert_eq!((group.as_str(), partitions), ("billing", 16));
    }

    /// The longest partition lease `{group}.{partitions - 1}` must fit in 128 characters.
    #[test]
    fn group_length_depends_on_partitions() {
        let group = "g".repeat(126);
        let fits = parse(Kind::Partitioned, quote!(group = #group, partitions = 10), &partitioned_fn());
        assert!(fits.is_ok(), "`{group}.9` has 128 characters");
        let err = error(Kind::Partitioned, quote!(group = #group, partitions = 11), &partitioned_fn());
        assert!(err.contains("129 characters"), "{err}");
    }

    #[test]
    fn repeats_are_refused_by_the_one_helper() {
        for args in [
            quote!(cron = "0 * * * * *", cron = "0 * * * * *"),
            quote!(fixed_rate = "1s", fixed_rate = "2s"),
            quote!(cron = "0 * * * * *", time_zone = "UTC", time_zone = "UTC"),
            quote!(cron = "0 * * * * *", lease = "a", lease = "b"),
            quote!(cron = "0 * * * * *", misfire = "skip", misfire = "skip"),
        ] {
            let err = error(Kind::Scheduled, args, &scheduled_fn());
            assert!(err.contains("is set more than once"), "{err}");
        }
        for args in
            [quote!(group = "a", group = "b", partitions = 1), quote!(group = "a", partitions = 1, partitions = 2)]
        {
            let err = error(Kind::Partitioned, args, &partitioned_fn());
            assert!(err.contains("is set more than once"), "{err}");
        }
    }

    #[test]
    fn combinations_are_checked_together() {
        let f = scheduled_fn();
        let both = error(Kind::Scheduled, quote!(fixed_rate = "1s", cron = "0 * * * * *"), &f);
        assert!(both.contains("not both"), "{both}");
        let neither = error(Kind::Scheduled, quote!(lease = "a"), &f);
        assert!(neither.contains("needs a schedule"), "{neither}");
        let zone = error(Kind::Scheduled, quote!(fixed_rate = "1s", time_zone = "UTC"), &f);
        assert!(zone.contains("only applies to `cron`"), "{zone}");
        let p = partitioned_fn();
        let no_group = error(Kind::Partitioned, quote!(partitions = 2), &p);
        assert!(no_group.contains("needs a group"), "{no_group}");
        let no_partitions = error(Kind::Partitioned, quote!(group = "g"), &p);
        assert!(no_partitions.contains("needs `partitions = N`"), "{no_partitions}");
    }

    /// J11-J14: the policy options parse into the configuration, and contradictions are
    /// refused at the option at fault.
    #[test]
    fn j11_j14_policy_options_are_checked_together() {
        let f = scheduled_fn();
        let config = parse(
            Kind::Scheduled,
            quote!(
                cron = "0 * * * * *",
                misfire = "run_once",
                overlap = "cancel_running",
                catch_up_window = "5m",
                jitter = "10s",
                start = "2027-01-01T00:00:00Z",
                end = "2027-01-02T00:00:00+01:00"
            ),
            &f,
        )
        .expect("valid");
        let p = config.policies;
        assert_eq!(p.overlap, Some(Overlap::CancelRunning));
        assert_eq!((p.catch_up_window, p.jitter), (Some(Duration::from_secs(300)), Some(Duration::from_secs(10))));
        assert_eq!((p.start_ms, p.end_ms), (Some(1_798_761_600_000), Some(1_798_844_400_000)));
        for (args, says) in [
            (quote!(cron = "0 * * * * *", overlap = "replace"), "unknown overlap policy `replace`"),
            (quote!(cron = "0 * * * * *", catch_up_window = "5m"), "set misfire to run_once"),
            (quote!(fixed_rate = "5s", misfire = "run_once", catch_up_window = "5m"), "a fixed rate has no missed"),
            (quote!(fixed_rate = "5s", jitter = "5s"), "must be shorter than the fixed rate"),
            (quote!(cron = "0 * * * * *", jitter = "0s"), "`jitter` must be longer than zero"),
            (quote!(cron = "0 * * * * *", start = "2027-02-01T00:00:00Z", end = "2027-01-01T00:00:00Z"), "end bound"),
            (quote!(cron = "0 * * * * *", end = "tomorrow"), "invalid instant `tomorrow`"),
            (quote!(cron = "0 * * * * *", overlap = "skip", overlap = "skip"), "is set more than once"),
        ] {
            let err = error(Kind::Scheduled, args, &f);
            assert!(err.contains(says), "{err}");
        }
        let err = error(Kind::Partitioned, quote!(group = "g", partitions = 2, jitter = "1s"), &partitioned_fn());
        assert!(err.contains("apply to scheduled slots"), "{err}");
    }

    /// A refused option does not also produce a "missing" error for the same option.
    #[test]
    fn a_refused_option_is_reported_once() {
        let err = parse(Kind::Scheduled, quote!(cron = "nope"), &scheduled_fn()).expect_err("refused");
        assert_eq!(err.into_iter().count(), 1);
    }

    #[test]
    fn signature_errors_come_with_option_errors() {
        let f: ItemFn = syn::parse_quote!(
            fn report(term: &Term) {}
        );
        let err = parse(Kind::Scheduled, quote!(misfire = "never", cron = "0 * * * * *"), &f).expect_err("refused");
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("unknown misfire policy"), "{messages:?}");
        assert!(messages[1].contains("`async` keyword is missing"), "{messages:?}");
    }

    #[test]
    fn signatures() {
        let ok: [ItemFn; 3] = [
            syn::parse_quote!(
                async fn f(term: &simba::Term, partition: u32) {}
            ),
            syn::parse_quote!(
                async fn f(_: &Term, p: core::primitive::u32) -> anyhow::Result<()> {}
            ),
            syn::parse_quote!(
                pub(crate) async fn f(t: &'static Term, p: (u32)) {}
            ),
        ];
        for f in &ok {
            assert!(signature::check(Kind::Partitioned, f).is_ok(), "{}", quote!(#f));
        }
        let bad: [(ItemFn, &str); 6] = [
            (
                syn::parse_quote!(
                    fn f(t: &Term, p: u32) {}
                ),
                "async",
            ),
            (
                syn::parse_quote!(
                    async fn f<T>(t: &Term, p: u32) {}
                ),
                "generic",
            ),
            (
                syn::parse_quote!(
                    async fn f(t: &Term, p: u32)
                    where
                        Self: Sized,
                    {
                    }
                ),
                "generic",
            ),
            (
                syn::parse_quote!(
                    async fn f(&self, p: u32) {}
                ),
                "self",
            ),
            (
                syn::parse_quote!(
                    async fn f(t: Term, p: u32) {}
                ),
                "by reference",
            ),
            (
                syn::parse_quote!(
                    async fn f(t: &Term, p: i64) {}
                ),
                "u32",
            ),
        ];
        for (f, wanted) in &bad {
            let err = signature::check(Kind::Partitioned, f).expect_err("refused").to_string();
            assert!(err.contains(wanted), "{}: {err}", quote!(#f));
        }
    }
}
