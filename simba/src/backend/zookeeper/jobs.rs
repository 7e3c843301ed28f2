//! The jobs store on ZooKeeper (ADR 0012): control nodes and record nodes beside the
//! lease nodes; a claim is the lease's claim (one batch of reads, then one `multi` whose
//! first operation checks the lease node's version), and control changes are broadcast by a
//! persistent watch on signal nodes that only control changes write (a claim rewrites the
//! control node, and a watch event does not say what changed).
//!
//! | node | what |
//! | --- | --- |
//! | `/simba/jobctl/{job}` | persistent: the job's control row (`paused`, `last_slot`, run-now requests; see `job_codec`) |
//! | `/simba/runs/{job}/{slot}{kind}` | persistent: one record; names sort by slot, then kind |
//! | `/simba/jobsignal/{job}` | persistent, empty: written with every pause, resume and run-now request of the job, never by a claim; the control watch's subject |
//! | `/simba/jobs-version` | persistent: its data version is the control version |
//!
//! Job names are escaped into one segment (`billing/3` is `billing%2F3`). Requests per call:
//! `claim_run` sends its reads together (lease node, the job's and its group's control, the
//! lease's slot node, the job's records) and then one `multi` (the same two round trips as
//! `claim_slot`); the `multi` also drops the records past retention. A store written by an
//! older build has none of these nodes: every job is simply unknown until written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use simba_core::claim::{self, Answer, ControlRow, Decision, Logs, RequestLog, SlotHistory, Trigger};
use tokio::sync::{OnceCell, broadcast};
use zookeeper_client as zk;

use super::{ZooKeeperBackend, lease_path, session_gone, slot_path};
use crate::backend::job_codec::{
    control_state, decode_control, decode_log, decode_record, encode_control_log, encode_record, escape_job, group,
    record_name, slot_prefix, unescape_job,
};
use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, RunRecord, Triggered, WatchReady, slot_history,
};
use crate::backend::{BackendError, BackendResult, SessionId};

const JOBCTL: &str = "/simba/jobctl";
/// `/simba/jobsignal/{job}`: what the control watch watches (R4). A claim writes the job's
/// control node (its last slot, a request taken); watching that node woke every job's
/// scheduler of every holder after every claim, as on etcd before `bd11963`.
const JOBSIGNAL: &str = "/simba/jobsignal";
const RUNS: &str = "/simba/runs";
const VERSION: &str = "/simba/jobs-version";
/// `/simba/registry/{session}`: ephemeral, created by the session itself, so it goes with it.
const REGISTRY: &str = "/simba/registry";

/// How many times a call reads again after losing a race on a node it writes.
const ATTEMPTS: usize = 5;

fn ctl_path(job: &str) -> String {
    format!("{JOBCTL}/{}", escape_job(job))
}

fn signal_path(job: &str) -> String {
    format!("{JOBSIGNAL}/{}", escape_job(job))
}

fn runs_path(job: &str) -> String {
    format!("{RUNS}/{}", escape_job(job))
}

/// A control node as read: its row, version (`None`: missing) and run-now request log.
type Read = (ControlRow, Option<i32>, RequestLog);

/// A job's record names, oldest first, and the `pzxid` of its record node when they were seen.
type Seen = (i64, Arc<Vec<String>>);

/// The jobs store of a [`ZooKeeperBackend`].
pub(crate) struct ZkJobStore {
    backend: ZooKeeperBackend,
    retention: usize,
    setup: OnceCell<()>,
    control: Mutex<Option<broadcast::Sender<String>>>,
    ready: WatchReady,
    watch_task: Mutex<Option<tokio::task::AbortHandle>>,
    /// Each job's record names as this store last saw them, with the `pzxid` of the job's
    /// record node then (the transaction that last added or removed one of its children).
    seen: Mutex<HashMap<String, Seen>>,
}

impl Drop for ZkJobStore {
    fn drop(&mut self) {
        if let Some(t) = self.watch_task.lock().unwrap_or_else(PoisonError::into_inner).take() {
            t.abort();
        }
    }
}

enum Failure {
    Zk(zk::Error),
    Backend(BackendError),
}

impl From<zk::Error> for Failure {
    fn from(e: zk::Error) -> Self {
        Failure::Zk(e)
    }
}

impl ZkJobStore {
    pub(crate) fn new(backend: ZooKeeperBackend) -> Self {
        ZkJobStore {
            backend,
            retention: DEFAULT_RETENTION,
            setup: OnceCell::new(),
            control: Mutex::new(None),
            ready: WatchReady::default(),
            watch_task: Mutex::new(None),
            seen: Mutex::default(),
        }
    }

    fn err(&self, what: &str, e: zk::Error) -> BackendError {
        self.backend.err(what, e)
    }

    fn protocol(&self, what: &str) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    /// The backend's own client, with the jobs directories created once.
    async fn client(&self) -> BackendResult<zk::Client> {
        let client = self.backend.inner.shared.get().await?;
        self.setup
            .get_or_try_init(|| async {
                let persistent = self.backend.inner.spec.persistent();
                for dir in [JOBCTL, JOBSIGNAL, RUNS, REGISTRY] {
                    client.mkdir(dir, &persistent).await.map_err(|e| self.err(&format!("create {dir}"), e))?;
                }
                match client.create(VERSION, b"", &persistent).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(self.err(&format!("create {VERSION}"), e)),
                }
            })
            .await?;
        Ok(client)
    }

    /// The backend's own client for a read, failing fast while its driver reconnects: a read
    /// queued on a disconnected client waits for the new connection, and the engine reads the
    /// last claimed slot at the start of a term (the fault suite saw a new leader's first run
    /// wait 3.8 s for the shared connection after a server restart). Writes of records keep
    /// waiting: they run in the background and should land once the connection is back.
    async fn reading_client(&self, what: &str) -> BackendResult<zk::Client> {
        let client = self.client().await?;
        self.backend.fail_if_disconnected(&client, what)?;
        Ok(client)
    }

    /// [`read_control`](Self::read_control) of a partition's group, `None` for a job of no group.
    async fn read_group_control(&self, client: &zk::Client, group: Option<&str>) -> Result<Option<Read>, Failure> {
        match group {
            Some(g) => self.read_control(client, g).await.map(Some),
            None => Ok(None),
        }
    }

    async fn read_control(&self, client: &zk::Client, job: &str) -> Result<Read, Failure> {
        self.backend.count(1);
        match client.get_data(&ctl_path(job)).await {
            Ok((data, stat)) => Ok((self.control_of(&data, job)?, Some(stat.version), decode_log(&data))),
            Err(zk::Error::NoNode) => Ok((ControlRow::default(), None, RequestLog::default())),
            Err(e) => Err(e.into()),
        }
    }

    fn control_of(&self, data: &[u8], job: &str) -> Result<ControlRow, Failure> {
        decode_control(data).ok_or_else(|| {
            Failure::Backend(
                self.protocol(&format!("{} is not a control row; delete it to reset the job", ctl_path(job))),
            )
        })
    }

    /// Adds the write of `job`'s control row and its request log to `w`: a versioned set, or
    /// a create.
    fn write_control(
        &self,
        w: &mut zk::MultiWriter<'_>,
        job: &str,
        (c, log): (&ControlRow, &RequestLog),
        version: Option<i32>,
    ) -> Result<(), zk::Error> {
        let data = encode_control_log(c, log);
        match version {
            Some(v) => w.add_set_data(&ctl_path(job), data.as_bytes(), Some(v)),
            None => w.add_create(&ctl_path(job), data.as_bytes(), &self.backend.inner.spec.persistent()),
        }
    }

    /// The record names of `job`, oldest first (`None`: no record directory yet).
    async fn names(&self, client: &zk::Client, job: &str) -> Result<Option<Vec<String>>, zk::Error> {
        self.backend.count(1);
        match client.list_children(&runs_path(job)).await {
            Ok(mut names) => {
                names.sort();
                Ok(Some(names))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`names`](Self::names) for a write: the names this store saw last when no child of
    /// the job's record node was added or removed since (its `pzxid` says so; one small read),
    /// else listed again. At full retention every write drops a record, and listing all
    /// `retention` names for each claim made it cost O(retention) on the connection that the
    /// session's renewals share.
    async fn names_to_write(&self, client: &zk::Client, job: &str) -> Result<Option<Arc<Vec<String>>>, zk::Error> {
        let dir = runs_path(job);
        self.backend.count(1);
        let Some(stat) = client.check_stat(&dir).await? else { return Ok(None) };
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(job).cloned();
        if let Some((_, names)) = seen.filter(|(pzxid, _)| *pzxid == stat.pzxid) {
            return Ok(Some(names));
        }
        self.backend.count(1);
        match client.get_children(&dir).await {
            Ok((mut names, stat)) => {
                names.sort();
                let names = Arc::new(names);
                self.remember(job, Some((stat.pzxid, Arc::clone(&names))));
                Ok(Some(names))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn remember(&self, job: &str, seen: Option<Seen>) {
        let mut map = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        match seen {
            Some(s) => map.insert(job.to_owned(), s),
            None => map.remove(job),
        };
    }

    /// After a `multi` with [`write_record`](Self::write_record)'s operations committed: the
    /// names it left, seen at the transaction that created the record (its `czxid` is the
    /// record node's new `pzxid`); forgotten when it created none.
    fn wrote(&self, record: &RunRecord, after: Vec<String>, results: &[zk::MultiWriteResult]) {
        let path = format!("{}/{}", runs_path(&record.job), record_name(record.slot_ms, record.kind));
        let created = results.iter().find_map(|r| match r {
            zk::MultiWriteResult::Create { path: p, stat } if *p == path && !stat.is_invalid() => Some(stat.czxid),
            _ => None,
        });
        self.remember(&record.job, created.map(|zxid| (zxid, Arc::new(after))));
    }

    /// Adds to `w` the creation of `record` (replacing a record of its identity) and the
    /// deletion of the oldest records past retention; answers the names the write leaves.
    fn write_record(
        &self,
        w: &mut zk::MultiWriter<'_>,
        record: &RunRecord,
        names: Option<&[String]>,
    ) -> Result<Vec<String>, zk::Error> {
        let persistent = self.backend.inner.spec.persistent();
        let dir = runs_path(&record.job);
        let name = record_name(record.slot_ms, record.kind);
        let mut others: Vec<&String> = Vec::new();
        match names {
            None => w.add_create(&dir, b"", &persistent)?,
            Some(names) => {
                for n in names {
                    if *n == name {
                        w.add_delete(&format!("{dir}/{n}"), None)?;
                    } else {
                        others.push(n);
                    }
                }
            }
        }
        others.push(&name);
        others.sort();
        let excess = others.len().saturating_sub(self.retention);
        for old in &others[..excess] {
            if **old != name {
                w.add_delete(&format!("{dir}/{old}"), None)?;
            }
        }
        if !others[..excess].contains(&&name) {
            w.add_create(&format!("{dir}/{name}"), encode_record(record).as_bytes(), &persistent)?;
        }
        Ok(others[excess..].iter().map(|n| (*n).clone()).collect())
    }

    /// Sets the lease's slot node to `slot` (at `version`), or creates it.
    fn write_lease_slot(
        &self,
        w: &mut zk::MultiWriter<'_>,
        node: &str,
        slot: i64,
        version: Option<i32>,
    ) -> Result<(), Failure> {
        let data = slot.to_string();
        match version {
            Some(v) => w.add_set_data(node, data.as_bytes(), Some(v))?,
            None => w.add_create(node, data.as_bytes(), &self.backend.inner.spec.persistent())?,
        }
        Ok(())
    }

    async fn try_claim(&self, client: &zk::Client, owner: i64, req: ClaimRequest<'_>) -> Result<Claim, Failure> {
        let group = group(req.job);
        let (lease, slot_node) = (lease_path(req.lease), slot_path(req.lease));
        for _ in 0..ATTEMPTS {
            self.backend.count(2);
            let (lease_stat, own, grp, lease_slot, names) = tokio::join!(
                client.check_stat(&lease),
                self.read_control(client, req.job),
                self.read_group_control(client, group),
                client.get_data(&slot_node),
                self.names_to_write(client, req.job),
            );
            let lease_stat = match lease_stat? {
                Some(st) if st.ephemeral_owner == owner && u64::try_from(st.czxid).ok() == Some(req.token) => st,
                _ => return Ok(Claim::NotHolder),
            };
            let (own, own_version, own_log) = own?;
            let grp = grp?;
            let (lease_slot, slot_version) = lease_slot_of(lease_slot)?;
            let names = names?;
            // A backfill reads the slot's records and the oldest one; the multi checks that the
            // oldest is still there unchanged (a trim between the read and the write refuses on
            // the next attempt rather than runs).
            let (history, oldest) = match names.as_deref().filter(|_| req.is_backfill()) {
                Some(names) => match self.backfill_history(client, req.job, req.slot_ms, names).await? {
                    Some(read) => read,
                    None => continue,
                },
                None => (SlotHistory::default(), None),
            };
            // The core's claim rule decides; this store applies its writes under the fence.
            let logs =
                Logs { own: &own_log, group: grp.as_ref().map_or(&claim::NO_REQUESTS, |g| &g.2), history: &history };
            let Decision { answer, writes, request } =
                claim::decide(req.ask(), &own, grp.as_ref().map(|g| &g.0), lease_slot, logs);
            if writes.is_empty() && !matches!(answer, Answer::Claimed { .. }) {
                return Ok(req.claim_of(answer, None));
            }
            let mut w = client.new_multi_writer();
            w.add_check_version(&lease, lease_stat.version)?;
            if let Some((path, version)) = &oldest {
                w.add_check_version(path, *version)?;
            }
            if let Some(next) = &writes.own {
                self.write_control(&mut w, req.job, (next, &own_log), own_version)?;
            }
            if let (Some(g), Some(name), Some(read)) = (&writes.group, group, grp.as_ref()) {
                self.write_control(&mut w, name, (g, &read.2), read.1)?;
            }
            if writes.bump_version {
                w.add_set_data(VERSION, b"", None)?;
            }
            if let Some(slot) = writes.lease_slot {
                self.write_lease_slot(&mut w, &slot_node, slot, slot_version)?;
            }
            let claim = req.claim_of(answer, request.as_ref());
            let after = match &claim {
                Claim::Claimed(r) => Some((r, self.write_record(&mut w, r, names.as_ref().map(|n| n.as_slice()))?)),
                _ => None,
            };
            self.backend.count(1);
            match w.commit().await {
                Ok(results) => {
                    if let Some((r, after)) = after {
                        self.wrote(r, after, &results);
                    }
                    return Ok(claim);
                }
                Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => return Ok(Claim::NotHolder),
                // Another writer changed a node read: read again.
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode,
                    ..
                }) => {}
                Err(e) => return Err(zk::Error::from(e).into()),
            }
        }
        Err(Failure::Backend(self.protocol(&format!("claim of `{}` kept losing races; try again", req.job))))
    }

    /// What a backfill's claim of `job`'s slot `slot_ms` reads of its records `names`
    /// (sorted): the slot's records, then the oldest, with the oldest's path and version for
    /// the `multi` to check. `None`: a record went away between the listing and the read
    /// (retention): read again.
    #[allow(clippy::type_complexity)]
    async fn backfill_history(
        &self,
        client: &zk::Client,
        job: &str,
        slot_ms: i64,
        names: &[String],
    ) -> Result<Option<(SlotHistory, Option<(String, i32)>)>, Failure> {
        let dir = runs_path(job);
        let prefix = slot_prefix(slot_ms);
        let at_slot: Vec<String> =
            names.iter().filter(|n| n.starts_with(&prefix)).map(|n| format!("{dir}/{n}")).collect();
        let oldest = names.first().map(|n| format!("{dir}/{n}"));
        self.backend.count(at_slot.len() + 1);
        let reads =
            futures_util::future::join_all(at_slot.iter().chain(oldest.iter()).map(|p| client.get_data(p))).await;
        let mut records = Vec::with_capacity(reads.len());
        let mut version = None;
        for (path, read) in at_slot.iter().chain(oldest.iter()).zip(reads) {
            match read {
                Ok((data, stat)) => {
                    let record = decode_record(&data).map_err(|e| self.protocol(&format!("{path}: {e}")));
                    records.push(record.map_err(Failure::Backend)?);
                    version = Some(stat.version);
                }
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let first = oldest.as_ref().and_then(|_| records.pop());
        let history = slot_history(&records, first.as_ref());
        Ok(Some((history, oldest.zip(version))))
    }

    async fn records(&self, client: &zk::Client, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        let what = "read a job's history";
        let Some(names) = self.names(client, job).await.map_err(|e| self.err(what, e))? else { return Ok(Vec::new()) };
        let dir = runs_path(job);
        let newest: Vec<String> = names.into_iter().rev().take(limit).map(|n| format!("{dir}/{n}")).collect();
        self.backend.count(newest.len());
        let reads = futures_util::future::join_all(newest.iter().map(|p| client.get_data(p))).await;
        let mut out = Vec::with_capacity(reads.len());
        for (path, read) in newest.iter().zip(reads) {
            match read {
                Ok((data, _)) => out.push(decode_record(&data).map_err(|e| self.protocol(&format!("{path}: {e}")))?),
                // Dropped by retention meanwhile.
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.err(what, e)),
            }
        }
        Ok(out)
    }

    async fn state_of(&self, client: &zk::Client, job: &str) -> BackendResult<Option<JobState>> {
        let (control, last) = tokio::join!(self.read_control(client, job), self.records(client, job, 1));
        let (control, version, _) = match control {
            Ok(c) => c,
            Err(Failure::Zk(e)) => return Err(self.err("read a job", e)),
            Err(Failure::Backend(e)) => return Err(e),
        };
        let last = last?.into_iter().next();
        if version.is_none() && last.is_none() {
            return Ok(None);
        }
        Ok(Some(control_state(&control, job.to_owned(), last)))
    }

    /// Whether `job`'s signal node exists (a control change sets it, or creates it).
    async fn signal_exists(&self, client: &zk::Client, job: &str) -> Result<bool, zk::Error> {
        self.backend.count(1);
        client.check_stat(&signal_path(job)).await.map(|s| s.is_some())
    }

    /// Changes `job`'s control row with `change` (which answers whether it changed and what
    /// to return), bumps the control version and writes the job's signal node, in one
    /// `multi`. The signal node is read beside the row (no round trip more).
    async fn control_change<T>(
        &self,
        job: &str,
        what: &'static str,
        change: impl Fn(&mut ControlRow, &mut RequestLog) -> (bool, T),
    ) -> BackendResult<T> {
        let client = self.client().await?;
        self.ready.settle(std::time::Duration::from_secs(5)).await;
        for _ in 0..ATTEMPTS {
            let (read, signal) = tokio::join!(self.read_control(&client, job), self.signal_exists(&client, job));
            let signal = signal.map_err(|e| self.err(what, e))?;
            let (mut c, version, mut log) = match read {
                Ok(r) => r,
                Err(Failure::Zk(e)) => return Err(self.err(what, e)),
                Err(Failure::Backend(e)) => return Err(e),
            };
            let (changed, answer) = change(&mut c, &mut log);
            if !changed && version.is_some() {
                return Ok(answer);
            }
            let mut w = client.new_multi_writer();
            self.write_control(&mut w, job, (&c, &log), version).map_err(|e| self.err(what, e))?;
            if changed {
                w.add_set_data(VERSION, b"", None).map_err(|e| self.err(what, e))?;
                let path = signal_path(job);
                let written = if signal {
                    w.add_set_data(&path, b"", None)
                } else {
                    w.add_create(&path, b"", &self.backend.inner.spec.persistent())
                };
                written.map_err(|e| self.err(what, e))?;
            }
            self.backend.count(1);
            match w.commit().await {
                Ok(_) => return Ok(answer),
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode,
                    ..
                }) => {}
                Err(e) => return Err(self.err(what, zk::Error::from(e))),
            }
        }
        Err(self.protocol(&format!("the control row of `{job}` kept changing; try again")))
    }
}

impl JobStore for ZkJobStore {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        self.client().await?;
        let what = "claim a job run";
        let Some(s) = self.backend.connected(req.session, what)? else { return Ok(Claim::NotHolder) };
        match self.try_claim(&s.client, s.owner, req).await {
            Ok(c) => Ok(c),
            Err(Failure::Zk(e)) if session_gone(&e) => {
                self.backend.forget(&s);
                Ok(Claim::NotHolder)
            }
            Err(Failure::Zk(e)) => Err(self.err(&format!("claim slot {} of `{}`", req.slot_ms, req.job), e)),
            Err(Failure::Backend(e)) => Err(e),
        }
    }

    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        let client = self.client().await?;
        let path = format!("{}/{}", runs_path(&record.job), record_name(record.slot_ms, record.kind));
        let what = "record how a run ended";
        for _ in 0..ATTEMPTS {
            self.backend.count(1);
            let (data, stat) = match client.get_data(&path).await {
                Ok(found) => found,
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return Err(self.err(what, e)),
            };
            let stored = decode_record(&data).map_err(|e| self.protocol(&format!("{path}: {e}")))?;
            if stored.token != record.token {
                return Ok(false);
            }
            self.backend.count(1);
            match client.set_data(&path, encode_record(record).as_bytes(), Some(stat.version)).await {
                Ok(_) => return Ok(true),
                Err(zk::Error::BadVersion) => {}
                Err(zk::Error::NoNode) => return Ok(false),
                Err(e) => return Err(self.err(what, e)),
            }
        }
        Err(self.protocol(&format!("{path} kept changing while its run ended; try again")))
    }

    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let client = self.client().await?;
        let what = "record a slot";
        let name = record_name(record.slot_ms, record.kind);
        for _ in 0..ATTEMPTS {
            let names = self.names_to_write(&client, &record.job).await.map_err(|e| self.err(what, e))?;
            if names.as_ref().is_some_and(|n| n.binary_search(&name).is_ok()) {
                return Ok(false);
            }
            let mut w = client.new_multi_writer();
            let names = names.as_ref().map(|n| n.as_slice());
            let after = self.write_record(&mut w, record, names).map_err(|e| self.err(what, e))?;
            self.backend.count(1);
            match w.commit().await {
                Ok(results) => {
                    self.wrote(record, after, &results);
                    return Ok(true);
                }
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::NodeExists | zk::Error::NoNode, ..
                }) => {}
                Err(e) => return Err(self.err(what, zk::Error::from(e))),
            }
        }
        Ok(false)
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        let client = self.reading_client("read the job's history").await?;
        self.records(&client, job, limit).await
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        let client = self.reading_client("read the job's state").await?;
        self.state_of(&client, job).await
    }

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        let client = self.reading_client("list the jobs").await?;
        self.backend.count(2);
        let (a, b) = tokio::join!(client.list_children(JOBCTL), client.list_children(RUNS));
        let mut names: Vec<String> = a
            .map_err(|e| self.err("list jobs", e))?
            .into_iter()
            .chain(b.map_err(|e| self.err("list jobs", e))?)
            .map(|n| unescape_job(&n))
            .collect();
        names.sort();
        names.dedup();
        let states = futures_util::future::join_all(names.iter().map(|n| self.state_of(&client, n))).await;
        let mut out = Vec::new();
        for s in states {
            out.extend(s?);
        }
        Ok(out)
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        self.control_change(job, "pause or resume a job", move |c, _| c.set_paused(paused)).await
    }

    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        // The core's request rule decides; the row and its log are written as one node.
        self.control_change(job, "trigger a job", move |c, log| claim::request_in_place(c, log, ask)).await
    }

    async fn control_version(&self) -> BackendResult<u64> {
        let client = self.reading_client("read the control version").await?;
        self.backend.count(1);
        match client.check_stat(VERSION).await.map_err(|e| self.err("read the control version", e))? {
            Some(st) => Ok(u64::try_from(st.version).unwrap_or(0)),
            None => Ok(0),
        }
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        let mut slot = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = &*slot {
            return Some(tx.subscribe());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = broadcast::channel(1024);
        let ready_tx = self.ready.track();
        let shared = Arc::clone(&self.backend.inner.shared);
        let description = self.backend.inner.description.clone();
        let forward = tx.clone();
        let task = runtime.spawn(async move {
            let prefix = format!("{JOBSIGNAL}/");
            loop {
                let watched = match shared.get().await {
                    Ok(c) => c.watch(JOBSIGNAL, zk::AddWatchMode::PersistentRecursive).await.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let mut w = match watched {
                    Ok(w) => w,
                    Err(error) => {
                        tracing::warn!(backend = %description, %error, "cannot watch job control; nodes fall back to polling the control version");
                        ready_tx.send_replace(false);
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                ready_tx.send_replace(true);
                loop {
                    let event = w.changed().await;
                    match event.event_type {
                        zk::EventType::NodeCreated | zk::EventType::NodeDataChanged => {
                            if let Some(name) = event.path.strip_prefix(&prefix) {
                                let _ = forward.send(unescape_job(name));
                            }
                        }
                        zk::EventType::Session if event.session_state == zk::SessionState::Disconnected => {}
                        zk::EventType::Session => break,
                        _ => {}
                    }
                }
                ready_tx.send_replace(false);
            }
        });
        *self.watch_task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
        *slot = Some(tx);
        Some(rx)
    }

    /// The registry as an ephemeral node of the session's own ZooKeeper session: created, or
    /// overwritten when this session published before; it goes when the session does.
    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        let what = "publish the job registry";
        self.client().await?;
        let Some(s) = self.backend.connected(session, what)? else { return Ok(false) };
        let path = format!("{REGISTRY}/{}", s.id);
        self.backend.count(1);
        let created = s.client.create(&path, registry.as_bytes(), &self.backend.inner.spec.ephemeral()).await;
        let result = match created {
            Ok(_) => Ok(()),
            Err(zk::Error::NodeExists) => {
                self.backend.count(1);
                s.client.set_data(&path, registry.as_bytes(), None).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if session_gone(&e) => {
                self.backend.forget(&s);
                Ok(false)
            }
            Err(e) => Err(self.err(what, e)),
        }
    }

    /// Every registry node (ephemeral: only live sessions have one), read together.
    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        let what = "read the job registries";
        let client = self.reading_client(what).await?;
        self.backend.count(1);
        let mut sessions = match client.list_children(REGISTRY).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(self.err(what, e)),
        };
        sessions.sort();
        self.backend.count(sessions.len());
        let reads =
            futures_util::future::join_all(sessions.iter().map(|s| client.get_data(&format!("{REGISTRY}/{s}")))).await;
        let mut out = Vec::with_capacity(sessions.len());
        for (session, read) in sessions.into_iter().zip(reads) {
            match read {
                Ok((data, _)) => out.push((SessionId::new(session), String::from_utf8_lossy(&data).into_owned())),
                // Its session ended between the two reads.
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.err(what, e)),
            }
        }
        Ok(out)
    }

    fn retention(&self) -> usize {
        self.retention
    }

    fn keeping(&self, records: usize) -> crate::backend::job_store::SharedJobStore {
        let mut store = ZkJobStore::new(self.backend.clone());
        store.retention = records.max(1);
        crate::backend::job_store::SharedJobStore::new(store)
    }

    fn describe(&self) -> String {
        format!("{} (jobs store)", self.backend.inner.description)
    }
}

/// The slot a lease's slot node holds and the node's version, from its read (`None`s: no node).
fn lease_slot_of(read: Result<(Vec<u8>, zk::Stat), zk::Error>) -> Result<(Option<i64>, Option<i32>), Failure> {
    match read {
        Ok((data, stat)) => Ok((String::from_utf8_lossy(&data).trim().parse::<i64>().ok(), Some(stat.version))),
        Err(zk::Error::NoNode) => Ok((None, None)),
        Err(e) => Err(e.into()),
    }
}
