//! What runs: the jobs checked against the configuration before anything starts (J4, J7),
//! each with its timer, policy and the settings the node publishes. The same checks apply to a
//! job added while the runtime runs ([`JobsHandle`](super::JobsHandle)).

use std::collections::BTreeSet;

use super::config::{JobOverride, RuntimeConfig};
use crate::job::{
    GroupSpec, JobPolicy, JobSettings, Misfire, PartitionedJob, Policies, Recording, RunPolicy, Schedule, ScheduledJob,
    Timer,
};
use crate::{ConfigError, Error};

/// A scheduled job checked against the configuration: what its election and scheduler need,
/// with what the node publishes about it.
pub(super) struct PlannedJob {
    pub(super) name: String,
    pub(super) lease: String,
    pub(super) timer: Timer,
    pub(super) misfire: Misfire,
    pub(super) policy: RunPolicy,
    /// Overlap, catch-up window, jitter, bounds (J11-J14).
    pub(super) policies: Policies,
    pub(super) run: crate::job::ScheduledRun,
    /// What the node publishes about it (item 5).
    pub(super) settings: JobSettings,
}

/// A partitioned job checked against the configuration, with what the node publishes about it.
pub(super) struct PlannedGroup {
    pub(super) spec: GroupSpec,
    pub(super) settings: JobSettings,
}

/// What this node runs: every job and group that the configuration leaves enabled, checked,
/// with its effective settings. Computed once, before anything starts.
pub(super) struct Plan {
    pub(super) jobs: Vec<PlannedJob>,
    pub(super) groups: Vec<PlannedGroup>,
}

impl Plan {
    /// What the plan runs, as plain data: each job's name, kind, lease or group, schedule,
    /// partitions, misfire, retry and timeout (as the node publishes them, and as the
    /// dashboard shows them), scheduled jobs first, in the order they were given.
    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub(super) fn settings(&self) -> Vec<JobSettings> {
        let jobs = self.jobs.iter().map(|j| &j.settings);
        jobs.chain(self.groups.iter().map(|g| &g.settings)).cloned().collect()
    }
}

/// The job name schedules stored as data are recorded under (`schedule/<id>`), which no job
/// may take: its partitions' records would mix with the schedules'.
const RESERVED: &str = "schedule";

/// Checks jobs against the configuration before anything starts (J4, J7).
pub(super) fn plan(
    config: &RuntimeConfig,
    scheduled: &[ScheduledJob],
    partitioned: &[PartitionedJob],
    policies: &[JobPolicy],
) -> Result<Plan, Error> {
    let mut names = BTreeSet::new();
    for n in scheduled.iter().map(|j| &*j.name).chain(partitioned.iter().map(|j| &*j.name)) {
        if n == RESERVED {
            return Err(ConfigError::new(format!(
                "a job is named `{RESERVED}`, which schedules stored as data record under (`{RESERVED}/<id>`, ADR \
                 0020): rename the job"
            ))
            .into());
        }
        if !names.insert(n) {
            return Err(ConfigError::new(format!(
                "two jobs are named `{n}`: job names must be unique in a binary (rename one function, or give it another name)"
            ))
            .into());
        }
    }
    for name in config.jobs.keys() {
        if !names.contains(name.as_str()) {
            let known: Vec<&str> = names.iter().copied().collect();
            return Err(config_error(
                config,
                Some(&format!("jobs.{name}")),
                format!(
                    "[jobs.{name}] names no registered job; registered jobs: {} (is the crate that defines it linked? add `use that_crate as _;` to the binary)",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            ));
        }
    }
    let mut leases = BTreeSet::new();
    let mut jobs = Vec::new();
    for j in scheduled {
        let Some(job) = plan_scheduled(config, j, policies)? else { continue };
        if !leases.insert(j.lease.to_string()) {
            let key = format!("jobs.{}.lease", j.name);
            return Err(config_error(
                config,
                Some(&key),
                format!("two jobs use the lease `{}`: give one of them another `lease`", j.lease),
            ));
        }
        jobs.push(job);
    }
    let mut groups = Vec::new();
    for j in partitioned {
        groups.extend(plan_group(config, j, policies)?);
    }
    for p in policies {
        if !names.contains(p.name) {
            return Err(ConfigError::new(format!(
                "retry/timeout options are set for `{}`, which names no job: add the job, or fix the name",
                p.name
            ))
            .with_key(format!("jobs.{}", p.name))
            .into());
        }
    }
    Ok(Plan { jobs, groups })
}

/// Checks scheduled job `j` against the configuration: `None` when `[jobs.NAME] enabled =
/// false` disables it.
pub(super) fn plan_scheduled(
    config: &RuntimeConfig,
    j: &ScheduledJob,
    policies: &[JobPolicy],
) -> Result<Option<PlannedJob>, Error> {
    let key = |leaf: &str| format!("jobs.{}.{leaf}", &*j.name);
    let o = config.jobs.get(&*j.name).cloned().unwrap_or_default();
    if o.partitions.is_some() {
        let reason = format!("`{}` is a scheduled job, not a partitioned one", &*j.name);
        let e = ConfigError::at_key(key("partitions"), reason).with_file(config.source.as_str());
        return Err(config.locate(e, &key("partitions")).into());
    }
    if o.enabled == Some(false) {
        tracing::info!(job = &*j.name, "disabled by the configuration");
        return Ok(None);
    }
    crate::validate_name(&j.lease)?;
    fits_namespace(config, &j.name, &j.lease, &j.name)?;
    let spec = o.schedule.clone().unwrap_or_else(|| j.schedule.clone());
    let timer = Timer::new(&spec).map_err(|m| schedule_error(config, &j.name, &spec, m))?;
    let (misfire, policy) = (o.misfire.unwrap_or(j.misfire), policy_of(&j.name, policies, &o));
    let slot_policies = slot_policies(config, &j.name, &o, j.policies, &spec, misfire)?;
    Ok(Some(PlannedJob {
        name: j.name.to_string(),
        lease: j.lease.to_string(),
        timer,
        misfire,
        policy,
        policies: slot_policies,
        run: j.run.clone(),
        settings: JobSettings::scheduled(&j.name, &j.lease, &spec, misfire, &policy).with_policies(&slot_policies),
    }))
}

/// Checks partitioned job `j` against the configuration: `None` when disabled. Its
/// recording is completed by the runtime (store, node, clock).
pub(super) fn plan_group(
    config: &RuntimeConfig,
    j: &PartitionedJob,
    policies: &[JobPolicy],
) -> Result<Option<PlannedGroup>, Error> {
    let o = config.jobs.get(&*j.name).cloned().unwrap_or_default();
    if o.enabled == Some(false) {
        tracing::info!(job = &*j.name, "disabled by the configuration");
        return Ok(None);
    }
    let partitions = o.partitions.unwrap_or(j.partitions);
    if partitions == 0 {
        let key = format!("jobs.{}.partitions", &*j.name);
        return Err(config_error(config, Some(&key), format!("[jobs.{}] partitions must be at least 1", &*j.name)));
    }
    crate::validate_name(&format!("{}.{}", &*j.group, partitions - 1))?;
    fits_namespace(
        config,
        &j.name,
        &format!("{}.{}", &*j.group, partitions - 1),
        &format!("{}/{}", &*j.name, partitions - 1),
    )?;
    let spec = o.schedule.clone().or_else(|| j.schedule.clone());
    let timer = match &spec {
        Some(s) => Some(Timer::new(s).map_err(|m| schedule_error(config, &j.name, s, m))?),
        None => None,
    };
    let (misfire, policy) = (o.misfire.unwrap_or(j.misfire), policy_of(&j.name, policies, &o));
    let slot_policies = match &spec {
        Some(s) => slot_policies(config, &j.name, &o, j.policies, s, misfire)?,
        None if o.policies(j.policies) != Policies::new() => {
            let key = format!("jobs.{}", &*j.name);
            let msg = format!(
                "[jobs.{}]: overlap, catch_up_window, jitter, start and end apply to scheduled slots, and this \
                 worker runs once per term: add cron or fixed_rate, or remove them",
                &*j.name
            );
            return Err(config_error(config, Some(&key), msg));
        }
        None => Policies::new(),
    };
    let settings = JobSettings::partitioned(&j.name, &j.group, partitions, spec.as_ref(), misfire, &policy)
        .with_policies(&slot_policies);
    let spec = GroupSpec {
        job: j.name.as_ref().into(),
        group: j.group.as_ref().into(),
        partitions,
        timer,
        misfire,
        policies: slot_policies,
        run: j.run.clone(),
        recording: Recording {
            metric: j.name.as_ref().into(),
            job: j.name.as_ref().into(),
            store: None,
            node: "".into(),
            policy,
            control: None,
            clock: crate::job::WallClock::System,
            writer: Default::default(),
            state: Default::default(),
            claims: None,
        },
    };
    Ok(Some(PlannedGroup { spec, settings }))
}

/// In a namespace, the names the store keeps are longer (`namespace~name`): refuses a job
/// whose longest lease or job name would not fit, at start, rather than at its first call.
fn fits_namespace(config: &RuntimeConfig, job: &str, lease: &str, record: &str) -> Result<(), Error> {
    use crate::backend::namespace::{MAX_STORED_JOB_LEN, MAX_STORED_NAME_LEN};
    let Some(ns) = &config.namespace else { return Ok(()) };
    for (what, name, limit) in [("lease", lease, MAX_STORED_NAME_LEN), ("history name", record, MAX_STORED_JOB_LEN)] {
        let stored = ns.map(name);
        let len = stored.chars().count();
        if len > limit {
            return Err(config_error(
                config,
                Some("backend.namespace"),
                format!(
                    "job `{job}`: in namespace `{ns}` its {what} `{name}` is stored as `{stored}`, {len} characters, \
                     more than the {limit} every backend keeps: use a shorter namespace or job name"
                ),
            ));
        }
    }
    Ok(())
}

/// An error of the configuration `config` (named as its file) about `key`, where `msg` says
/// where itself; the key's line in the file, or the variable that set it, as fields.
fn config_error(config: &RuntimeConfig, key: Option<&str>, msg: String) -> Error {
    let e = ConfigError::new(msg).with_file(config.source.as_str());
    match key {
        Some(k) => config.locate(e.with_key(k), k).into(),
        None => e.into(),
    }
}

/// A schedule the scheduler refused (`simba.toml` checks its own; this one is the code's, or
/// one set in a [`RuntimeConfig`] built by hand): its key is `jobs.NAME.cron` or
/// `jobs.NAME.fixed_rate`.
fn schedule_error(config: &RuntimeConfig, job: &str, spec: &Schedule, msg: String) -> Error {
    let leaf = match spec {
        Schedule::Cron { .. } => "cron",
        Schedule::FixedRate(_) => "fixed_rate",
    };
    let key = format!("jobs.{job}.{leaf}");
    config_error(config, Some(&key), format!("[jobs.{job}]: {msg}"))
}

/// The slot policies of job `name` (J11-J14): the code's, then the `[jobs.NAME]` keys,
/// checked together with the effective schedule and misfire.
fn slot_policies(
    config: &RuntimeConfig,
    name: &str,
    o: &JobOverride,
    code: Policies,
    spec: &Schedule,
    misfire: Misfire,
) -> Result<Policies, Error> {
    let p = o.policies(code);
    match p.problem(spec, misfire) {
        None => Ok(p),
        Some((option, reason)) => {
            let key = format!("jobs.{name}.{option}");
            Err(config_error(config, Some(&key), format!("[jobs.{name}] {option}: {reason}")))
        }
    }
}

/// The retry and timeout options of job `name`: the macro's (or the builder's), then the
/// `[jobs.NAME]` keys.
fn policy_of(name: &str, policies: &[JobPolicy], o: &JobOverride) -> RunPolicy {
    let mut p = RunPolicy::default();
    if let Some(reg) = policies.iter().rev().find(|p| p.name == name) {
        p.attempts = reg.retry.saturating_add(1);
        p.backoff = reg.backoff.unwrap_or(p.backoff);
        p.timeout = reg.timeout;
    }
    if let Some(r) = o.retry {
        p.attempts = r.saturating_add(1);
    }
    p.backoff = o.backoff.unwrap_or(p.backoff);
    p.timeout = o.timeout.or(p.timeout);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    fn noop(_t: crate::Term) -> crate::job::JobFuture {
        crate::job::job_future(async {})
    }

    /// In a namespace, a job whose stored lease or history name would be too
    /// long for the store is refused at start (nothing starts), naming the stored name.
    #[test]
    fn item6_a_name_too_long_in_its_namespace_is_refused_at_start() {
        let ns = "n".repeat(100);
        let toml = format!("[backend]\nnamespace = \"{ns}\"\n");
        let config = RuntimeConfig::from_toml_str(&toml, "simba.toml", Vec::new()).expect("config");
        let job =
            |name: &'static str| ScheduledJob::new(name, Schedule::FixedRate(std::time::Duration::from_secs(1)), &noop);
        assert!(plan(&config, &[job("short")], &[], &[]).is_ok());
        let long =
            ScheduledJob::from_closure("l".repeat(30), Schedule::FixedRate(std::time::Duration::from_secs(1)), noop);
        let e = plan(&config, &[long], &[], &[]).err().expect("refused").to_string();
        assert!(e.contains("is stored as") && e.contains("131 characters, more than the 128"), "{e}");
        let group = PartitionedJob::new("g", 100, &|_t, _i| crate::job::job_future(async {}))
            .with_group("gggggggggggggggggggggggggggggg");
        assert!(
            plan(&config, &[], &[group], &[])
                .is_err_and(|e| e.to_string().contains("`gggggggggggggggggggggggggggggg.99`"))
        );
    }

    /// The errors found once the jobs are known carry the key's line in the
    /// file (or the variable that set it) as a field, like the errors of the file itself.
    #[test]
    fn item13_6_plan_errors_carry_the_line_of_their_key() {
        let fields = |e: Error| match e {
            Error::InvalidConfig(c) => c,
            other => panic!("not a configuration error: {other:?}"),
        };
        let job = ScheduledJob::new("report", Schedule::FixedRate(std::time::Duration::from_secs(1)), &noop);
        let text = "[session]\nlease_duration = \"15s\"\n\n[jobs.repotr]\nenabled = true\n";
        let config = RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new()).expect("config");
        let c = fields(plan(&config, std::slice::from_ref(&job), &[], &[]).err().expect("unknown job"));
        assert_eq!((c.file(), c.line(), c.key()), (Some("simba.toml"), Some(4), Some("jobs.repotr")), "{c}");
        assert!(c.reason().contains("names no registered job; registered jobs: report"), "{c}");
        let text = "[jobs.report]\n# a partitioned job's option\npartitions = 4\n";
        let config = RuntimeConfig::from_toml_str(text, "simba.toml", Vec::new()).expect("config");
        let c = fields(plan(&config, std::slice::from_ref(&job), &[], &[]).err().expect("not partitioned"));
        assert_eq!((c.line(), c.key()), (Some(3), Some("jobs.report.partitions")), "{c}");
        assert!(c.to_string().starts_with("simba.toml: line 3, [jobs.report] partitions: "), "{c}");
        // Set by a variable: the variable, not a line.
        let over = vec![("SIMBA_BACKEND__NAMESPACE".to_owned(), "n".repeat(100))];
        let config =
            RuntimeConfig::from_toml_str("[backend]\nnamespace = \"x\"\n", "simba.toml", over).expect("config");
        let long = ScheduledJob { name: "l".repeat(30).into(), lease: "l".repeat(30).into(), ..job.clone() };
        let c = fields(plan(&config, &[long], &[], &[]).err().expect("long"));
        assert_eq!(
            (c.line(), c.key(), c.env_var()),
            (None, Some("backend.namespace"), Some("SIMBA_BACKEND__NAMESPACE")),
            "{c}"
        );
        // A key the file does not have (the schedule is the code's): no line.
        let bad = ScheduledJob { schedule: Schedule::cron("not a cron"), ..job };
        let c = fields(plan(&RuntimeConfig::default(), &[bad], &[], &[]).err().expect("bad cron"));
        assert_eq!((c.line(), c.key(), c.env_var()), (None, Some("jobs.report.cron"), None), "{c}");
    }

    /// Rule J7 as the node runs and publishes it (and as its dashboard shows it): `simba.toml`
    /// overriding a schedule, a disabled job left out, a group's lease and partitions.
    #[test]
    fn the_plan_settings_follow_the_configuration() {
        fn part(_: crate::Term, _: u32) -> crate::job::JobFuture {
            crate::job::job_future(async {})
        }
        let every = Schedule::cron;
        let scheduled = [
            ScheduledJob::new("report", every("0 0 * * * *"), &noop).with_lease("report-lease"),
            ScheduledJob::new("off", every("0 0 * * * *"), &noop),
        ];
        let partitioned = [PartitionedJob::new("billing", 4, &part).with_group("bill")];
        let toml =
            "[jobs.report]\ncron = \"0 */10 * * * *\"\ntime_zone = \"Asia/Tokyo\"\n\n[jobs.off]\nenabled = false\n";
        let config = RuntimeConfig::from_toml_str(toml, "simba.toml", Vec::new()).expect("config");
        let settings = plan(&config, &scheduled, &partitioned, &[]).expect("plan").settings();
        let names: Vec<&str> = settings.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["report", "billing"], "disabled jobs are not planned");
        assert_eq!(settings[0].parsed_schedule(), Some(Schedule::cron_in("0 */10 * * * *", "Asia/Tokyo")));
        assert_eq!((settings[0].lease.as_str(), settings[0].partitions), ("report-lease", None));
        assert_eq!((settings[1].lease.as_str(), settings[1].partitions), ("bill", Some(4)));
        assert_eq!(settings[1].parsed_schedule(), None, "a worker without a schedule");
    }

    /// J11-J14: policies that contradict the effective schedule or misfire (the code's, the
    /// file's, or both) are refused before anything starts, naming the key.
    #[test]
    fn j11_j14_contradictions_are_refused_by_the_plan() {
        use crate::job::Policies;
        let every = |s: u64| Schedule::FixedRate(std::time::Duration::from_secs(s));
        let cron = ScheduledJob::new("report", Schedule::cron("0 * * * * *"), &noop);
        let refused = |toml: &str, job: &ScheduledJob| {
            let config = RuntimeConfig::from_toml_str(toml, "simba.toml", Vec::new()).expect("config");
            plan(&config, std::slice::from_ref(job), &[], &[]).err().map(|e| e.to_string())
        };
        let e = refused("[jobs.report]\ncatch_up_window = \"5m\"\n", &cron).expect("misfire skip");
        assert!(e.contains("jobs.report] catch_up_window") && e.contains("set misfire to run_once"), "{e}");
        assert_eq!(refused("[jobs.report]\ncatch_up_window = \"5m\"\nmisfire = \"run_once\"\n", &cron), None);
        let e = refused("[jobs.report]\nfixed_rate = \"10s\"\njitter = \"10s\"\n", &cron).expect("jitter");
        assert!(e.contains("jobs.report] jitter") && e.contains("shorter than the fixed rate"), "{e}");
        // The code's policy, made contradictory by the file's schedule.
        let rate = ScheduledJob::new("report", every(60), &noop)
            .with_policies(Policies::new().with_jitter(std::time::Duration::from_secs(30)));
        assert_eq!(refused("", &rate), None);
        let e = refused("[jobs.report]\nfixed_rate = \"20s\"\n", &rate).expect("the file's rate");
        assert!(
            e.contains("[jobs.report] jitter")
                && e.contains("(30000 ms) must be shorter than the fixed rate (20000 ms)"),
            "{e}"
        );
        let group = PartitionedJob::new("g", 2, &|_t, _i| crate::job::job_future(async {}));
        let config =
            RuntimeConfig::from_toml_str("[jobs.g]\noverlap = \"allow_all\"\n", "simba.toml", Vec::new()).expect("c");
        let e = plan(&config, &[], &[group], &[]).err().expect("no schedule").to_string();
        assert!(e.contains("runs once per term"), "{e}");
    }
}
