//! The jobs store on etcd (ADR 0012): control rows and records as keys with
//! revisions beside the lease keys; a claim reads once and writes with one `Txn` whose
//! compares are the lease's fence (the key's create revision is the token, its lease the
//! session's) plus the revisions it read; control changes are broadcast by a watch.
//!
//! | key | value |
//! | --- | --- |
//! | `{prefix}/jobctl/{job}` | the job's control row (`paused`, `last_slot`, run-now requests; see `job_codec`) |
//! | `{prefix}/jobrun/{job}/{slot}{kind}` | one record; keys sort by slot, then kind |
//! | `{prefix}/jobs-version` | empty; its key version is the control version |
//!
//! Job names are escaped into one segment (`billing/3` is `billing%2F3`). Requests per
//! claim: one read `Txn` (lease key, the job's and its group's control, the lease's slot key,
//! the job's record keys) and one write `Txn` that also drops the records past retention.
//! The claim checks and writes the lease's slot key too (`{prefix}/slot/{name}`, what
//! `claim_slot` writes), so a node without the jobs store never runs a slot this one ran.

use std::sync::{Arc, Mutex, PoisonError};

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use simba_core::claim::{self, Answer, ControlRow, Decision, Logs, RequestLog, Trigger};
use tokio::sync::broadcast;

use super::EtcdBackend;
use super::ops::slot_value;
use super::session::lease_of;
use crate::backend::job_codec::{
    control_state, decode_control, decode_log, decode_record, encode_control_log, encode_record, escape_job, group,
    record_name, slot_prefix, unescape_job,
};
use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, RunRecord, Triggered, WatchReady, slot_history,
};
use crate::backend::{BackendError, BackendResult, SessionId};

/// How many times a call reads again after another writer changed what it read.
const ATTEMPTS: usize = 5;

/// The jobs store of an [`EtcdBackend`].
pub(crate) struct EtcdJobStore {
    backend: EtcdBackend,
    retention: usize,
    /// `{prefix}/`.
    root: String,
    control: Mutex<Option<broadcast::Sender<String>>>,
    ready: WatchReady,
    watch_task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for EtcdJobStore {
    fn drop(&mut self) {
        if let Some(t) = self.watch_task.lock().unwrap_or_else(PoisonError::into_inner).take() {
            t.abort();
        }
    }
}

/// Whether a put of a control row is a control change that holders must hear: a pause, a
/// resume or a run-now request (`paused` or `trigger_id` moved), or a row that is new or whose
/// previous value is compacted or unreadable. A claim rewrites its job's row too (the ledger's
/// `last_slot`, a request taken): broadcasting those woke every job's scheduler of every holder
/// for a run-now claim about ten times a second with a 100 ms job, each a read of the job's
/// records, and under load a real request then waited seconds for its holder (R4).
fn control_moved(prev: Option<&KeyValue>, now: &KeyValue) -> bool {
    match (prev.and_then(|p| decode_control(p.value())), decode_control(now.value())) {
        (Some(prev), Some(now)) => prev.paused != now.paused || prev.trigger_id != now.trigger_id,
        _ => true,
    }
}

/// The end of the range of keys that start with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn first(responses: &[TxnOpResponse], i: usize) -> Option<&KeyValue> {
    match responses.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs().first(),
        _ => None,
    }
}

fn all(responses: &[TxnOpResponse], i: usize) -> &[KeyValue] {
    match responses.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs(),
        _ => &[],
    }
}

/// How many of a job's oldest record keys a write reads to find those past retention (one at
/// full retention; more only after the retention was lowered, when the write reads them all).
const TRIM_LOOK: i64 = 8;

/// How many control rows one read of [`JobStore::pending_requests`] takes.
const PENDING_PAGE: i64 = 1_000;

/// What a record's write read of its job's records: how many besides the record's own, the
/// oldest keys (the record's own among them if it is one of them), and whether it exists.
/// `key` is the record key it looked for (a manual slot's is known only after the read: its
/// write then looks for its own key alone, [`EtcdJobStore::record_ops_reading`]).
struct Runs {
    key: String,
    others: usize,
    oldest: Vec<String>,
    exists: bool,
}

impl Runs {
    /// Every key of the job (`oldest`, sorted) for the record at `key`.
    fn complete(key: String, oldest: Vec<String>) -> Runs {
        let exists = oldest.contains(&key);
        Runs { others: oldest.len().saturating_sub(usize::from(exists)), key, oldest, exists }
    }
}

impl EtcdJobStore {
    pub(crate) fn new(backend: EtcdBackend) -> Self {
        let root = backend.inner.keys.slot.strip_suffix("slot/").unwrap_or("simba/").to_owned();
        EtcdJobStore {
            backend,
            retention: DEFAULT_RETENTION,
            root,
            control: Mutex::new(None),
            ready: WatchReady::default(),
            watch_task: Mutex::new(None),
        }
    }

    fn ctl_prefix(&self) -> String {
        format!("{}jobctl/", self.root)
    }

    fn ctl_key(&self, job: &str) -> String {
        format!("{}jobctl/{}", self.root, escape_job(job))
    }

    fn runs_prefix(&self, job: &str) -> String {
        format!("{}jobrun/{}/", self.root, escape_job(job))
    }

    fn version_key(&self) -> String {
        format!("{}jobs-version", self.root)
    }

    fn err(&self, what: &str, e: &etcd_client::Error) -> BackendError {
        self.backend.err(what, e)
    }

    fn protocol(&self, what: &str) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    fn control_of(&self, kv: Option<&KeyValue>) -> BackendResult<(ControlRow, i64)> {
        match kv {
            None => Ok((ControlRow::default(), 0)),
            Some(kv) => decode_control(kv.value()).map(|c| (c, kv.mod_revision())).ok_or_else(|| {
                self.protocol(&format!("{} is not a control row; delete it", String::from_utf8_lossy(kv.key())))
            }),
        }
    }

    /// The run-now request log stored with a control row (empty when there is none).
    fn log_of(kv: Option<&KeyValue>) -> RequestLog {
        kv.map(|kv| decode_log(kv.value())).unwrap_or_default()
    }

    fn record_of(&self, kv: &KeyValue) -> BackendResult<RunRecord> {
        decode_record(kv.value()).map_err(|e| self.protocol(&format!("{}: {e}", String::from_utf8_lossy(kv.key()))))
    }

    /// The record keys of `job` as read by a keys-only range, oldest first.
    fn names(&self, kvs: &[KeyValue]) -> Vec<String> {
        let mut names: Vec<String> = kvs.iter().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()).collect();
        names.sort();
        names
    }

    /// The reads a write of the record at `key` needs of its job's records under `runs`, in one
    /// transaction: the [`TRIM_LOOK`] oldest keys with the count of all (a range's count is
    /// its whole, whatever its limit), and whether `key` exists. Never the whole history: at
    /// full retention a write drops one record, and reading all `retention` keys for it made
    /// every claim cost O(retention) in bytes and time.
    fn runs_reads(runs: &str, key: &str) -> [TxnOp; 2] {
        let oldest = GetOptions::new()
            .with_range(prefix_end(runs))
            .with_keys_only()
            .with_sort(SortTarget::Key, SortOrder::Ascend)
            .with_limit(TRIM_LOOK);
        [TxnOp::get(runs, Some(oldest)), TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]
    }

    /// What [`runs_reads`](Self::runs_reads) of `key` answered at `i` and `i + 1`.
    fn runs_read(&self, key: &str, r: &[TxnOpResponse], i: usize) -> Runs {
        let count = match r.get(i) {
            Some(TxnOpResponse::Get(g)) => usize::try_from(g.count()).unwrap_or(0),
            _ => 0,
        };
        let exists = first(r, i + 1).is_some();
        let (key, oldest) = (key.to_owned(), self.names(all(r, i)));
        Runs { others: count.saturating_sub(usize::from(exists)), key, oldest, exists }
    }

    /// The write of `record` (replacing a record of its identity) and the deletion of the
    /// oldest records past retention; `None` when `runs` read too few of the oldest keys (the
    /// retention was lowered) or looked for another key: the caller reads them all
    /// ([`Runs::complete`]).
    fn record_ops(&self, record: &RunRecord, runs: &Runs) -> Option<Vec<TxnOp>> {
        let key = format!("{}{}", self.runs_prefix(&record.job), record_name(record.slot_ms, record.kind));
        if key != runs.key {
            return None;
        }
        let mut keys: Vec<&String> = runs.oldest.iter().filter(|k| **k != key).collect();
        let excess = (runs.others + 1).saturating_sub(self.retention);
        // The `excess` oldest of all keys are among those read when the read holds at least
        // `excess` keys besides the record's own (or every key).
        if excess > keys.len() && keys.len() < runs.others {
            return None;
        }
        keys.push(&key);
        keys.sort();
        let mut ops: Vec<TxnOp> =
            keys[..excess].iter().filter(|k| ***k != key).map(|k| TxnOp::delete(k.as_str(), None)).collect();
        if !keys[..excess].contains(&&key) {
            ops.push(TxnOp::put(key.as_str(), encode_record(record), None));
        }
        Some(ops)
    }

    /// [`record_ops`](Self::record_ops), reading every key of the job when `runs` holds too few.
    async fn record_ops_reading(&self, record: &RunRecord, runs: &Runs, what: &str) -> BackendResult<Vec<TxnOp>> {
        if let Some(ops) = self.record_ops(record, runs) {
            return Ok(ops);
        }
        let prefix = self.runs_prefix(&record.job);
        let key = format!("{prefix}{}", record_name(record.slot_ms, record.kind));
        if key != runs.key {
            // A run-now claim's record is at the request's slot, not the one the read looked
            // for: look for that key alone, and keep the count and the oldest keys read. Reading
            // every key of the job instead (10,000 at full retention) took longer than the
            // claim's call timeout on a busy machine, so the holder gave up every run-now claim
            // (the operator scenario on etcd, R3).
            let keys_only = GetOptions::new().with_keys_only().with_count_only();
            let found = self.backend.kv().get(key.as_str(), Some(keys_only)).await.map_err(|e| self.err(what, &e))?;
            let exists = found.count() > 0;
            let total = runs.others + usize::from(runs.exists);
            let own =
                Runs { key, others: total.saturating_sub(usize::from(exists)), oldest: runs.oldest.clone(), exists };
            if let Some(ops) = self.record_ops(record, &own) {
                return Ok(ops);
            }
        }
        let options = GetOptions::new().with_range(prefix_end(&prefix)).with_keys_only();
        let listed = self.backend.kv().get(prefix.as_str(), Some(options)).await.map_err(|e| self.err(what, &e))?;
        let key = format!("{prefix}{}", record_name(record.slot_ms, record.kind));
        let complete = Runs::complete(key, self.names(listed.kvs()));
        self.record_ops(record, &complete).ok_or_else(|| self.protocol("the job's record keys changed while read"))
    }

    async fn control_change<T>(
        &self,
        job: &str,
        what: &'static str,
        change: impl Fn(&mut ControlRow, &mut RequestLog) -> (bool, T),
    ) -> BackendResult<T> {
        self.ready.settle(std::time::Duration::from_secs(5)).await;
        let key = self.ctl_key(job);
        let mut kv = self.backend.kv();
        for _ in 0..ATTEMPTS {
            let read = kv.get(key.as_str(), None).await.map_err(|e| self.err(what, &e))?;
            let (mut c, rev) = self.control_of(read.kvs().first())?;
            let mut log = Self::log_of(read.kvs().first());
            let (changed, answer) = change(&mut c, &mut log);
            if !changed && rev != 0 {
                return Ok(answer);
            }
            let mut ops = vec![TxnOp::put(key.as_str(), encode_control_log(&c, &log), None)];
            if changed {
                ops.push(TxnOp::put(self.version_key(), "", None));
            }
            let write = Txn::new().when([Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)]).and_then(ops);
            if kv.txn(write).await.map_err(|e| self.err(what, &e))?.succeeded() {
                return Ok(answer);
            }
        }
        Err(self.protocol(&format!("the control row of `{job}` kept changing; try again")))
    }
}

/// What a backfill's claim reads beside the others (rule J15): the slot's records and the
/// job's oldest record.
fn backfill_reads(runs: &str, slot_ms: i64) -> [TxnOp; 2] {
    let slot = format!("{runs}{}", slot_prefix(slot_ms));
    let oldest =
        GetOptions::new().with_range(prefix_end(runs)).with_sort(SortTarget::Key, SortOrder::Ascend).with_limit(1);
    [TxnOp::get(slot.as_str(), Some(GetOptions::new().with_range(prefix_end(&slot)))), TxnOp::get(runs, Some(oldest))]
}

/// A backfill writes no control row: its record's absence and the oldest record (a trim
/// between the read and the write) are what its write compares.
fn backfill_compares(record_key: &str, oldest: Option<&KeyValue>) -> Vec<Compare> {
    let mut compares = vec![Compare::version(record_key, CompareOp::Equal, 0)];
    if let Some(o) = oldest {
        compares.push(Compare::mod_revision(o.key(), CompareOp::Equal, o.mod_revision()));
    }
    compares
}

/// The slot a lease's slot key holds, in the ordered form of `slot_value`.
fn slot_of_value(kv: &KeyValue) -> Option<i64> {
    let v = std::str::from_utf8(kv.value()).ok()?;
    u64::from_str_radix(v, 16).ok().map(|v| (v ^ (1 << 63)) as i64)
}

impl EtcdJobStore {
    /// The puts of a claim's control writes: the job's and its group's rows with their
    /// request logs, the control version, the lease's slot.
    fn control_ops(
        &self,
        writes: &claim::Writes,
        (own_key, own_log): (&str, &RequestLog),
        (group_key, group_log): (&str, &RequestLog),
        slot_key: &str,
    ) -> Vec<TxnOp> {
        let mut ops = Vec::new();
        if let Some(next) = &writes.own {
            ops.push(TxnOp::put(own_key, encode_control_log(next, own_log), None));
        }
        if let Some(g) = writes.group.as_ref().filter(|_| group_key != own_key) {
            ops.push(TxnOp::put(group_key, encode_control_log(g, group_log), None));
        }
        if writes.bump_version {
            ops.push(TxnOp::put(self.version_key(), "", None));
        }
        if let Some(slot) = writes.lease_slot {
            ops.push(TxnOp::put(slot_key, slot_value(slot), None));
        }
        ops
    }
}

impl JobStore for EtcdJobStore {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        let Some(lease) = lease_of(req.session) else { return Ok(Claim::NotHolder) };
        let Ok(token) = i64::try_from(req.token) else { return Ok(Claim::NotHolder) };
        let k = &self.backend.inner.keys;
        let (lease_key, slot_key) = (k.lease(req.lease), k.slot(req.lease));
        let own_key = self.ctl_key(req.job);
        let group_key = group(req.job).map(|g| self.ctl_key(g)).unwrap_or_else(|| own_key.clone());
        let runs = self.runs_prefix(req.job);
        let record_key = format!("{runs}{}", record_name(req.slot_ms, req.kind));
        let what = format!("claim slot {} of `{}`", req.slot_ms, req.job);
        let mut kv = self.backend.kv();
        for _ in 0..ATTEMPTS {
            let mut reads = vec![
                TxnOp::get(lease_key.as_str(), None),
                TxnOp::get(own_key.as_str(), None),
                TxnOp::get(group_key.as_str(), None),
                TxnOp::get(slot_key.as_str(), None),
            ];
            reads.extend(Self::runs_reads(&runs, &record_key));
            if req.is_backfill() {
                reads.extend(backfill_reads(&runs, req.slot_ms));
            }
            let read = Txn::new().and_then(reads);
            let r = kv.txn(read).await.map_err(|e| self.err(&what, &e))?;
            let r = r.op_responses();
            match first(&r, 0) {
                Some(l) if l.create_revision() == token && l.lease() == lease => {}
                _ => return Ok(Claim::NotHolder),
            }
            let (own, own_rev) = self.control_of(first(&r, 1))?;
            let grp = if group_key != own_key { Some(self.control_of(first(&r, 2))?.0) } else { None };
            let group_rev = first(&r, 2).map_or(0, KeyValue::mod_revision);
            let own_log = Self::log_of(first(&r, 1));
            let group_log = Self::log_of(first(&r, 2).filter(|_| group_key != own_key));
            let slot_kv = first(&r, 3);
            let slot_rev = slot_kv.map_or(0, KeyValue::mod_revision);
            let lease_slot = slot_kv.and_then(slot_of_value);
            let existing = self.runs_read(&record_key, &r, 4);
            let at_slot = all(&r, 6).iter().map(|kv| self.record_of(kv)).collect::<BackendResult<Vec<_>>>()?;
            let oldest = first(&r, 7);
            let history = slot_history(&at_slot, oldest.map(|kv| self.record_of(kv)).transpose()?.as_ref());
            // The core's claim rule decides; this store applies its writes under the fence.
            let logs = Logs { own: &own_log, group: &group_log, history: &history };
            let Decision { answer, writes, request } = claim::decide(req.ask(), &own, grp.as_ref(), lease_slot, logs);
            if writes.is_empty() && !matches!(answer, Answer::Claimed { .. }) {
                return Ok(req.claim_of(answer, None));
            }
            let backfill_compares = if req.is_backfill() { backfill_compares(&record_key, oldest) } else { Vec::new() };
            let mut ops = self.control_ops(&writes, (&own_key, &own_log), (&group_key, &group_log), &slot_key);
            let claim = req.claim_of(answer, request.as_ref());
            if let Claim::Claimed(rec) = &claim {
                ops.extend(self.record_ops_reading(rec, &existing, &what).await?);
            }
            let write = Txn::new()
                .when(
                    [
                        Compare::create_revision(lease_key.as_str(), CompareOp::Equal, token),
                        Compare::lease(lease_key.as_str(), CompareOp::Equal, lease),
                        Compare::mod_revision(own_key.as_str(), CompareOp::Equal, own_rev),
                        Compare::mod_revision(group_key.as_str(), CompareOp::Equal, group_rev),
                        Compare::mod_revision(slot_key.as_str(), CompareOp::Equal, slot_rev),
                    ]
                    .into_iter()
                    .chain(backfill_compares)
                    .collect::<Vec<_>>(),
                )
                .and_then(ops);
            let done = kv.txn(write).await.map_err(|e| self.err(&what, &e))?;
            if done.succeeded() {
                return Ok(claim);
            }
        }
        Err(self.protocol(&format!("claim of `{}` kept losing races; try again", req.job)))
    }

    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        let key = format!("{}{}", self.runs_prefix(&record.job), record_name(record.slot_ms, record.kind));
        let what = "record how a run ended";
        let mut kv = self.backend.kv();
        for _ in 0..ATTEMPTS {
            let found = kv.get(key.as_str(), None).await.map_err(|e| self.err(what, &e))?;
            let Some(stored) = found.kvs().first() else { return Ok(false) };
            if self.record_of(stored)?.token != record.token {
                return Ok(false);
            }
            let write = Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, stored.mod_revision())])
                .and_then([TxnOp::put(key.as_str(), encode_record(record), None)]);
            if kv.txn(write).await.map_err(|e| self.err(what, &e))?.succeeded() {
                return Ok(true);
            }
        }
        Err(self.protocol(&format!("{key} kept changing while its run ended; try again")))
    }

    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let runs = self.runs_prefix(&record.job);
        let key = format!("{runs}{}", record_name(record.slot_ms, record.kind));
        let what = "record a slot";
        let mut kv = self.backend.kv();
        for _ in 0..ATTEMPTS {
            let read =
                kv.txn(Txn::new().and_then(Self::runs_reads(&runs, &key))).await.map_err(|e| self.err(what, &e))?;
            let existing = self.runs_read(&key, read.op_responses().as_slice(), 0);
            if existing.exists {
                return Ok(false);
            }
            let write = Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                .and_then(self.record_ops_reading(record, &existing, what).await?);
            if kv.txn(write).await.map_err(|e| self.err(what, &e))?.succeeded() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let runs = self.runs_prefix(job);
        let options = GetOptions::new()
            .with_range(prefix_end(&runs))
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let read = self
            .backend
            .kv()
            .get(runs.as_str(), Some(options))
            .await
            .map_err(|e| self.err("read a job's history", &e))?;
        read.kvs().iter().map(|kv| self.record_of(kv)).collect()
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        let read = self.backend.kv().get(self.ctl_key(job), None).await.map_err(|e| self.err("read a job", &e))?;
        let control = read.kvs().first();
        let last = self.history(job, 1).await?.into_iter().next();
        if control.is_none() && last.is_none() {
            return Ok(None);
        }
        Ok(Some(control_state(&self.control_of(control)?.0, job.to_owned(), last)))
    }

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        let (ctl, runs) = (self.ctl_prefix(), format!("{}jobrun/", self.root));
        let mut kv = self.backend.kv();
        let keys_only = |p: &str| GetOptions::new().with_range(prefix_end(p)).with_keys_only();
        let a = kv.get(ctl.as_str(), Some(keys_only(&ctl))).await.map_err(|e| self.err("list jobs", &e))?;
        // The jobs with records, one key each: the first record key from where the previous
        // job's keys end. Reading every record key (retention times the jobs) went past the
        // 4 MiB a gRPC answer may hold at full retention.
        let mut with_records = Vec::new();
        let mut from = runs.clone().into_bytes();
        loop {
            let first = GetOptions::new().with_range(prefix_end(&runs)).with_keys_only().with_limit(1);
            let b = kv.get(from.clone(), Some(first)).await.map_err(|e| self.err("list jobs", &e))?;
            let Some(key) = b.kvs().first().map(|kv| String::from_utf8_lossy(kv.key()).into_owned()) else { break };
            let Some((job, _)) = key.strip_prefix(runs.as_str()).and_then(|rest| rest.split_once('/')) else { break };
            from = prefix_end(&format!("{runs}{job}/"));
            with_records.push(job.to_owned());
        }
        let mut names: Vec<String> = a
            .kvs()
            .iter()
            .filter_map(|kv| String::from_utf8_lossy(kv.key()).strip_prefix(ctl.as_str()).map(str::to_owned))
            .chain(with_records)
            .map(|n| unescape_job(&n))
            .collect();
        names.sort();
        names.dedup();
        let mut out = Vec::with_capacity(names.len());
        for n in &names {
            out.extend(self.job(n).await?);
        }
        Ok(out)
    }

    /// The control rows under the prefix alone, [`PENDING_PAGE`] at a time (a row holds its
    /// request log, a few hundred bytes at most): never the records, never another namespace.
    async fn pending_requests(&self, prefix: &str) -> BackendResult<Vec<String>> {
        let ctl = self.ctl_prefix();
        let start = format!("{ctl}{}", escape_job(prefix));
        let end = prefix_end(&start);
        let mut kv = self.backend.kv();
        let mut from = start.clone().into_bytes();
        let mut out = Vec::new();
        loop {
            let page = GetOptions::new().with_range(end.clone()).with_limit(PENDING_PAGE);
            let got = kv.get(from.clone(), Some(page)).await.map_err(|e| self.err("read the run-now requests", &e))?;
            for kv in got.kvs() {
                let (row, _) = self.control_of(Some(kv))?;
                if row.pending().is_some()
                    && let Some(name) = String::from_utf8_lossy(kv.key()).strip_prefix(ctl.as_str())
                {
                    out.push(unescape_job(name));
                }
            }
            match got.kvs().last() {
                Some(last) if got.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        out.sort();
        Ok(out)
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        self.control_change(job, "pause or resume a job", move |c, _| c.set_paused(paused)).await
    }

    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        // The core's request rule decides; the row and its log are written as one value.
        self.control_change(job, "trigger a job", move |c, log| claim::request_in_place(c, log, ask)).await
    }

    async fn control_version(&self) -> BackendResult<u64> {
        let read = self
            .backend
            .kv()
            .get(self.version_key(), None)
            .await
            .map_err(|e| self.err("read the control version", &e))?;
        Ok(read.kvs().first().map_or(0, |kv| u64::try_from(kv.version()).unwrap_or(0)))
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        let mut slot = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = &*slot {
            return Some(tx.subscribe());
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = broadcast::channel(1024);
        let ready_tx = self.ready.track();
        let client = self.backend.inner.client.clone();
        let description = Arc::clone(&self.backend.inner.description);
        let prefix = self.ctl_prefix();
        let forward = tx.clone();
        let task = runtime.spawn(async move {
            loop {
                let opened = async {
                    // With each put's previous value, so that a claim's write (the ledger, a
                    // request taken) is told from a control change (`control_moved`).
                    let options = WatchOptions::new().with_prefix().with_prev_key();
                    let mut stream = client.clone().watch(prefix.as_str(), Some(options)).await?;
                    // Wait for the server to confirm the watch.
                    while let Some(r) = stream.message().await? {
                        if r.created() {
                            return Ok::<_, etcd_client::Error>(Some(stream));
                        }
                    }
                    Ok(None)
                };
                let mut stream = match opened.await {
                    Ok(Some(s)) => s,
                    Ok(None) => {
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(backend = %description, %error, "cannot watch job control; nodes fall back to polling the control version");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                };
                ready_tx.send_replace(true);
                while let Ok(Some(r)) = stream.message().await {
                    for e in r.events() {
                        if e.event_type() == EventType::Put
                            && let Some(kv) = e.kv()
                            && control_moved(e.prev_kv(), kv)
                            && let Some(name) = String::from_utf8_lossy(kv.key()).strip_prefix(prefix.as_str())
                        {
                            let _ = forward.send(unescape_job(name));
                        }
                    }
                }
                ready_tx.send_replace(false);
            }
        });
        *self.watch_task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task.abort_handle());
        *slot = Some(tx);
        Some(rx)
    }

    /// The registry as a key under the session's etcd lease: it goes when the session does.
    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        let Some(lease) = lease_of(session) else { return Ok(false) };
        let key = format!("{}registry/{session}", self.root);
        let put = etcd_client::PutOptions::new().with_lease(lease);
        match self.backend.kv().put(key, registry, Some(put)).await {
            Ok(_) => Ok(true),
            // A put under a revoked lease writes nothing (S3).
            Err(e) if super::lease_not_found(&e) => {
                self.backend.forget(lease);
                Ok(false)
            }
            Err(e) => Err(self.err("publish the job registry", &e)),
        }
    }

    /// Every registry key (each under its session's lease: only live sessions have one).
    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        let dir = format!("{}registry/", self.root);
        let options = GetOptions::new().with_range(prefix_end(&dir)).with_sort(SortTarget::Key, SortOrder::Ascend);
        let read = self
            .backend
            .kv()
            .get(dir.as_str(), Some(options))
            .await
            .map_err(|e| self.err("read the job registries", &e))?;
        Ok(read
            .kvs()
            .iter()
            .filter_map(|kv| {
                let session = kv.key_str().ok()?.strip_prefix(dir.as_str())?;
                Some((SessionId::new(session), String::from_utf8_lossy(kv.value()).into_owned()))
            })
            .collect())
    }

    fn retention(&self) -> usize {
        self.retention
    }

    fn keeping(&self, records: usize) -> crate::backend::job_store::SharedJobStore {
        let mut store = EtcdJobStore::new(self.backend.clone());
        store.retention = records.max(1);
        crate::backend::job_store::SharedJobStore::new(store)
    }

    fn describe(&self) -> String {
        format!("{} (jobs store)", self.backend.inner.description)
    }
}
