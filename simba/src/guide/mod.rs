//! The guide: Simba from first job to production, one chapter per module.
//!
//! Each chapter is a Markdown file beside this module (`simba/src/guide/*.md`), so it reads on
//! GitHub too, and its Rust examples are compiled and run as doctests.
//!
//! 1. [`concepts`]: sessions, terms, fencing tokens, timing.
//! 2. [`jobs`]: the macros, schedules, `simba.toml`, application state, the run context,
//!    retries, timeouts, misfire, jobs added at run time, partitioned jobs.
//! 3. `operating`: the `simba` tool, the dashboard, metrics, history, pause/resume/run now,
//!    registry agreement, namespaces, logs.
//! 4. [`backends`]: how to choose, per-backend notes, security and TLS.
//! 5. [`correctness`]: the local deadline, fencing, the failure table, what the verification
//!    covers.
//! 6. `testing`: testing your jobs with `simba::testing` (feature `testing`).
//! 7. `deployment`: replicas on one store, probes, stopping (SIGTERM, preStop, the grace period
//!    against the lease), a Kubernetes manifest and a docker-compose file (`deploy/`).
//! 8. [`telemetry`]: Simba's spans, and exporting them to OpenTelemetry over OTLP.
//!
//! The contract, rule by rule, is `docs/SPEC.md`; the figures are in `BENCHMARKS.md` and
//! `RELIABILITY.md`, each with the command that regenerates it and the commit it was measured
//! at (the dated runs behind them: `docs/log/`). The design records,
//! `docs/adr/`: 0001 the engine (the sans-I/O core crate `simba_core` and its async shell,
//! keep-alive digest), 0002 the SQL data model, 0003 jobs (registry, scheduler, fenced cron
//! slots, partition groups), 0004 Redis, 0005 ZooKeeper, 0006 the protocol model, 0007
//! operability (`Backend::inspect`, the CLI, metrics), 0008 security (TLS, credentials,
//! redaction), 0009 benchmarks, 0010 the web dashboard, 0011 etcd, 0012 job history and
//! control, 0013 namespaces, 0014 the job registry each node publishes, 0015 the job history
//! never starves the leases, 0016 no default backend, 0017 the rustls provider is the
//! application's.

#[doc = include_str!("concepts.md")]
pub mod concepts {}

#[doc = include_str!("jobs.md")]
pub mod jobs {}

// Its examples mount the dashboard's router (feature `dashboard`).
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
#[doc = include_str!("operating.md")]
pub mod operating {}

#[doc = include_str!("backends.md")]
pub mod backends {}

#[doc = include_str!("correctness.md")]
pub mod correctness {}

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc = include_str!("testing.md")]
pub mod testing {}

// Its example serves the dashboard's router (feature `dashboard`).
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
#[doc = include_str!("deployment.md")]
pub mod deployment {}

#[doc = include_str!("telemetry.md")]
pub mod telemetry {}
