//! The jobs store on Redis (ADR 0012): every call is one Lua script (one round
//! trip, atomic on the server), and control changes are published on a channel so that every
//! node hears a pause or a run-now request at once.
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `{prefix}:job:{job}` | hash | `paused`, `last_slot` (the slot ledger), `trigger_id`, `trigger_ms`, `taken_id`, `group_taken_id` |
//! | `{prefix}:runs:{job}` | sorted set | one member `{kind}\|{slot}` per record, scored by the slot (ms) |
//! | `{prefix}:run:{job}\|{kind}\|{slot}` | hash | one record's fields |
//! | `{prefix}:jobs` | set | every job name with a control hash or a record |
//! | `{prefix}:jobs:version` | string | the control version (`INCR` on every control change) |
//! | `{prefix}:jobs:control` | pub/sub channel | names of jobs whose control changed |
//!
//! None of them has a TTL. Retention is enforced by the script that adds a record: past
//! `retention` members it deletes the oldest records with their hashes. The claim reads the
//! session key and the lease hash exactly as `claim_slot` does (the same fence), checks the
//! slot against the job's ledger and the lease's `last_slot` (so nodes of an older build,
//! which write only the latter, never run a slot twice with this one), and writes both, the
//! record and the retention in the same script. A store written by an older build has none of
//! these keys: every job is then simply unknown.

use std::sync::{Arc, Mutex, PoisonError};

use redis::Script;
use tokio::sync::broadcast;

use super::RedisBackend;
use super::subscriber::Subscriber;
use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, Outcome, RunRecord, SlotKind, WatchReady, group_of,
    truncate_error,
};
use crate::backend::{BackendError, BackendResult, SessionId};

/// How many control changes a slow subscriber may fall behind before it skips some (it then
/// reads the control version, so nothing is lost).
const CONTROL_CAPACITY: usize = 1024;

/// Shared Lua helpers: `lt` compares decimal integers exactly (as `claim_slot` does),
/// `record_key` names a record's hash, `add_record` writes one and enforces retention.
const HELPERS: &str = r"
local function lt(a, b)
  if a == b then return false end
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  return a < b
end
local function add_record(prefix, runs, job, kind, slot, fields, keep)
  local member = kind .. '|' .. slot
  local key = prefix .. ':run:' .. job .. '|' .. member
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('ZADD', runs, tonumber(slot), member)
  local n = redis.call('ZCARD', runs)
  if n > keep then
    local old = redis.call('ZRANGE', runs, 0, n - keep - 1)
    for _, m in ipairs(old) do redis.call('DEL', prefix .. ':run:' .. job .. '|' .. m) end
    redis.call('ZREMRANGEBYRANK', runs, 0, n - keep - 1)
  end
end
";

/// `KEYS`: 1 session key, 2 lease hash, 3 job hash, 4 group hash (the job's again when it has
/// no group), 5 runs set, 6 jobs set, 7 version key. `ARGV`: 1 session id, 2 token, 3 slot,
/// 4 kind code, 5 job, 6 prefix, 7 retention, 8 node, 9 started, 10 attempts, 11 a schedule's
/// slot (`1`: the job's own ledger only, the lease's `last_slot` neither read nor written, the
/// claim rule's `Ask::ScheduleSlot`, rule A5).
///
/// Answers `{0}` not the holder, `{1}` already claimed (or no pending request), `{3}`
/// paused, `{2, slot}` claimed at `slot` (a manual claim's slot is the request's time).
///
/// After the fence, the decision is the core's claim rule, [`simba_core::claim::decide`],
/// written in Lua: that function is the reference this script follows (its unit tests give the
/// exact answers and writes), and the conformance suite (`simba::tck::jobs`) checks both agree.
const CLAIM: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local lease = redis.call('HMGET', KEYS[2], 'session', 'token', 'last_slot')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return {0} end
local job = redis.call('HMGET', KEYS[3], 'paused', 'last_slot', 'trigger_id', 'trigger_ms', 'taken_id', 'group_taken_id')
local paused = job[1] == '1'
if KEYS[4] ~= KEYS[3] and redis.call('HGET', KEYS[4], 'paused') == '1' then paused = true end
redis.call('SADD', KEYS[6], ARGV[5])
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[3], 'paused', '0', 'trigger_id', '0', 'taken_id', '0', 'group_taken_id', '0')
end
local slot
if ARGV[4] ~= '1' then
  slot = ARGV[3]
  local lasts = {job[2] or false}
  if ARGV[11] ~= '1' then table.insert(lasts, lease[3] or false) end
  for _, last in ipairs(lasts) do
    if last and not lt(last, slot) then return {1} end
  end
  redis.call('HSET', KEYS[3], 'last_slot', slot)
  if ARGV[11] ~= '1' then redis.call('HSET', KEYS[2], 'last_slot', slot) end
  if paused then return {3} end
else
  local own_id, taken, group_taken = tonumber(job[3] or '0'), tonumber(job[5] or '0'), tonumber(job[6] or '0')
  local own_at = (own_id > taken) and job[4] or false
  local group_id, group_at = group_taken, false
  if KEYS[4] ~= KEYS[3] then
    local g = redis.call('HMGET', KEYS[4], 'trigger_id', 'trigger_ms')
    group_id = tonumber(g[1] or '0')
    if group_id > group_taken then group_at = g[2] or false else group_id = group_taken end
  end
  if own_at and group_at then
    if lt(own_at, group_at) then slot = group_at else slot = own_at end
  else
    slot = own_at or group_at
  end
  if not slot then return {1} end
  if paused then return {3} end
  redis.call('HSET', KEYS[3], 'taken_id', tostring(own_id), 'group_taken_id', tostring(group_id))
  redis.call('INCR', KEYS[7])
end
add_record(ARGV[6], KEYS[5], ARGV[5], ARGV[4], slot, {
  'job', ARGV[5], 'kind', ARGV[4], 'slot', slot, 'outcome', 'running', 'attempt', '1', 'attempts', ARGV[10],
  'session', ARGV[1], 'node', ARGV[8], 'token', ARGV[2], 'started', ARGV[9]}, tonumber(ARGV[7]))
return {2, slot}
";

/// `KEYS`: 1 the record's hash. `ARGV`: the 12 fields' values (empty: absent), then the
/// claiming token. Overwrites the record only if it exists with that token.
const FINISH: &str = r"
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[13] then return 0 end
local names = {'job', 'kind', 'slot', 'outcome', 'attempt', 'attempts', 'session', 'node', 'token', 'started', 'ended', 'error'}
redis.call('HDEL', KEYS[1], 'started', 'ended', 'error')
for i, name in ipairs(names) do
  if ARGV[i] ~= '' or i < 10 then redis.call('HSET', KEYS[1], name, ARGV[i]) end
end
return 1
";

/// `KEYS`: 1 runs set, 2 jobs set. `ARGV`: 1 prefix, 2 retention, then the 12 fields' values
/// (empty: absent). Inserts the record unless one with its identity exists.
const APPEND: &str = r"
local key = ARGV[1] .. ':run:' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5]
if redis.call('EXISTS', key) == 1 then return 0 end
local names = {'job', 'kind', 'slot', 'outcome', 'attempt', 'attempts', 'session', 'node', 'token', 'started', 'ended', 'error'}
local fields = {}
for i, name in ipairs(names) do
  local v = ARGV[i + 2]
  if v ~= '' or i < 10 then table.insert(fields, name); table.insert(fields, v) end
end
redis.call('SADD', KEYS[2], ARGV[3])
add_record(ARGV[1], KEYS[1], ARGV[3], ARGV[4], ARGV[5], fields, tonumber(ARGV[2]))
return 1
";

/// `ARGV`: 1 prefix, 2 limit (records per job; 0: only the control hash), 3.. the jobs (none:
/// every known job). Answers, per job that exists: `{job, {control fields}, {records...}}`,
/// each record the 12 fields (false: absent).
const READ: &str = r"
local names = {}
for i = 3, #ARGV do table.insert(names, ARGV[i]) end
if #names == 0 then
  names = redis.call('SMEMBERS', ARGV[1] .. ':jobs')
  table.sort(names)
end
local limit = tonumber(ARGV[2])
local out = {}
for _, job in ipairs(names) do
  local control = redis.call('HMGET', ARGV[1] .. ':job:' .. job, 'paused', 'last_slot', 'trigger_id', 'trigger_ms', 'taken_id')
  local records = {}
  if limit > 0 then
    local members = redis.call('ZREVRANGE', ARGV[1] .. ':runs:' .. job, 0, limit - 1)
    for _, m in ipairs(members) do
      table.insert(records, redis.call('HMGET', ARGV[1] .. ':run:' .. job .. '|' .. m,
        'job', 'kind', 'slot', 'outcome', 'attempt', 'attempts', 'session', 'node', 'token', 'started', 'ended', 'error'))
    end
  end
  local known = control[1] or control[2] or control[3] or #records > 0
  if known then table.insert(out, {job, control, records}) end
end
return out
";

/// `KEYS`: 1 job hash, 2 jobs set, 3 version key. `ARGV`: 1 job, 2 paused (0 or 1), 3 channel.
/// Answers whether the job was paused.
const SET_PAUSED: &str = r"
local was = redis.call('HGET', KEYS[1], 'paused') == '1'
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'paused', '0', 'trigger_id', '0', 'taken_id', '0', 'group_taken_id', '0')
end
if was ~= (ARGV[2] == '1') then
  redis.call('HSET', KEYS[1], 'paused', ARGV[2])
  redis.call('INCR', KEYS[3])
  redis.call('PUBLISH', ARGV[3], ARGV[1])
end
if was then return 1 end
return 0
";

/// `KEYS`: 1 job hash, 2 jobs set, 3 version key. `ARGV`: 1 job, 2 the request's time, 3
/// channel. Answers the request id. The request's slot is the core's
/// [`simba_core::claim::trigger_slot`], written in Lua.
const TRIGGER: &str = r"
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'paused', '0', 'trigger_id', '0', 'taken_id', '0', 'group_taken_id', '0')
end
local j = redis.call('HMGET', KEYS[1], 'trigger_id', 'taken_id', 'trigger_ms')
local pending = tonumber(j[1] or '0') > tonumber(j[2] or '0')
if pending then
  if not (j[3] and lt(ARGV[2], j[3])) then redis.call('HSET', KEYS[1], 'trigger_ms', ARGV[2]) end
elseif j[3] and not lt(j[3], ARGV[2]) then
  redis.call('HINCRBY', KEYS[1], 'trigger_ms', 1)
else
  redis.call('HSET', KEYS[1], 'trigger_ms', ARGV[2])
end
local id = redis.call('HINCRBY', KEYS[1], 'trigger_id', 1)
redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return id
";

/// `KEYS`: 1 the session key, 2 the registry hash. `ARGV`: 1 session id, 2 the registry,
/// 3 the session key prefix. Drops the entries of sessions whose key is gone, then writes this
/// session's only if its key exists. Answers 1 when written.
const PUBLISH_REGISTRY: &str = r"
for _, s in ipairs(redis.call('HKEYS', KEYS[2])) do
  if redis.call('EXISTS', ARGV[3] .. s) == 0 then redis.call('HDEL', KEYS[2], s) end
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
";

/// `KEYS`: 1 the registry hash. `ARGV`: 1 the session key prefix. The entries whose session key
/// exists, as a flat list of session id, registry.
const READ_REGISTRIES: &str = r"
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if redis.call('EXISTS', ARGV[1] .. all[i]) == 1 then
    table.insert(out, all[i])
    table.insert(out, all[i + 1])
  end
end
return out
";

struct Scripts {
    claim: Script,
    finish: Script,
    append: Script,
    read: Script,
    set_paused: Script,
    trigger: Script,
    publish_registry: Script,
    read_registries: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    claim: Script::new(&format!("{HELPERS}{CLAIM}")),
    finish: Script::new(FINISH),
    append: Script::new(&format!("{HELPERS}{APPEND}")),
    read: Script::new(READ),
    set_paused: Script::new(SET_PAUSED),
    trigger: Script::new(&format!("{HELPERS}{TRIGGER}")),
    publish_registry: Script::new(PUBLISH_REGISTRY),
    read_registries: Script::new(READ_REGISTRIES),
});

/// The jobs store of a [`RedisBackend`]. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RedisJobStore {
    backend: RedisBackend,
    retention: usize,
    control: Arc<Mutex<Option<broadcast::Sender<String>>>>,
    /// Whether this store's control subscription is listening, once one was asked for: a
    /// change made through a store that subscribed waits (at most the connect timeout) until
    /// it is, so that its own subscriber hears it.
    ready: Arc<WatchReady>,
}

fn kind_code(kind: SlotKind) -> &'static str {
    match kind {
        SlotKind::Scheduled => "0",
        SlotKind::Manual => "1",
        SlotKind::CaughtUp => "2",
    }
}

/// A record's 12 field values as the scripts take them (`""`: absent).
fn values(r: &RunRecord) -> [String; 12] {
    let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
    [
        r.job.clone(),
        kind_code(r.kind).to_owned(),
        r.slot_ms.to_string(),
        r.outcome.as_str().to_owned(),
        r.attempt.to_string(),
        r.attempts.to_string(),
        r.session.clone(),
        r.node.clone(),
        r.token.to_string(),
        opt(r.started_ms),
        opt(r.ended_ms),
        // An empty text is stored as the absence of text, as an empty error says nothing.
        r.error.as_deref().map(truncate_error).unwrap_or_default(),
    ]
}

/// One job as [`READ`] answers it.
type JobRow = (String, Vec<Option<String>>, Vec<Vec<Option<String>>>);

impl RedisJobStore {
    pub(crate) fn new(backend: RedisBackend) -> Self {
        RedisJobStore { backend, retention: DEFAULT_RETENTION, control: Arc::default(), ready: Arc::default() }
    }

    fn prefix(&self) -> &str {
        &self.backend.inner.keys.prefix
    }

    fn job_key(&self, job: &str) -> String {
        format!("{}:job:{job}", self.prefix())
    }

    fn runs_key(&self, job: &str) -> String {
        format!("{}:runs:{job}", self.prefix())
    }

    fn jobs_key(&self) -> String {
        format!("{}:jobs", self.prefix())
    }

    fn version_key(&self) -> String {
        format!("{}:jobs:version", self.prefix())
    }

    fn channel(&self) -> String {
        format!("{}:jobs:control", self.prefix())
    }

    fn protocol(&self, what: &str) -> BackendError {
        BackendError::Protocol(format!("{}: {what}", self.backend.inner.description))
    }

    /// Runs `script` with any number of keys and arguments.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&str],
        what: &'static str,
    ) -> BackendResult<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.backend.inner.conn.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| super::connect::call_error(&self.backend.inner.description, what, e))
    }

    fn record(&self, fields: Vec<Option<String>>) -> BackendResult<RunRecord> {
        let mut f = fields.into_iter();
        let mut next = || f.next().flatten();
        let text =
            |v: Option<String>, what: &str| v.ok_or_else(|| self.protocol(&format!("a run record has no {what}")));
        let int = |v: Option<String>, what: &str| -> BackendResult<i64> {
            text(v, what)?.parse().map_err(|_| self.protocol(&format!("a run record's {what} is not a number")))
        };
        let opt = |v: Option<String>| v.and_then(|s| s.parse::<i64>().ok());
        let job = text(next(), "job")?;
        let kind = match text(next(), "kind")?.as_str() {
            "0" => SlotKind::Scheduled,
            "1" => SlotKind::Manual,
            "2" => SlotKind::CaughtUp,
            other => return Err(self.protocol(&format!("unknown slot kind {other:?} in a record of `{job}`"))),
        };
        let slot_ms = int(next(), "slot")?;
        let outcome = text(next(), "outcome")?.parse::<Outcome>().map_err(|e| self.protocol(&e))?;
        let attempt = u32::try_from(int(next(), "attempt")?).map_err(|_| self.protocol("attempt out of range"))?;
        let attempts = u32::try_from(int(next(), "attempts")?).map_err(|_| self.protocol("attempts out of range"))?;
        let session = next().unwrap_or_default();
        let node = next().unwrap_or_default();
        let token = u64::try_from(int(next(), "token")?).map_err(|_| self.protocol("negative token"))?;
        Ok(RunRecord {
            job,
            slot_ms,
            kind,
            outcome,
            attempt,
            attempts,
            session,
            node,
            token,
            started_ms: opt(next()),
            ended_ms: opt(next()),
            error: next().filter(|e| !e.is_empty()),
        })
    }

    fn state(&self, (job, control, records): JobRow) -> BackendResult<JobState> {
        let c = |i: usize| control.get(i).cloned().flatten();
        let num = |i: usize| c(i).and_then(|v| v.parse::<i64>().ok());
        let pending = num(2).unwrap_or(0) > num(4).unwrap_or(0);
        let last = records.into_iter().next().map(|r| self.record(r)).transpose()?;
        Ok(JobState {
            job,
            paused: c(0).as_deref() == Some("1"),
            last_slot_ms: num(1),
            last,
            trigger_pending_ms: if pending { num(3) } else { None },
        })
    }

    async fn read(&self, jobs: &[&str], limit: usize) -> BackendResult<Vec<JobRow>> {
        let limit = limit.to_string();
        let mut args = vec![self.prefix(), limit.as_str()];
        args.extend_from_slice(jobs);
        self.eval(&SCRIPTS.read, &[], &args, "read jobs").await
    }

    fn control_keys(&self, job: &str) -> [String; 3] {
        [self.job_key(job), self.jobs_key(), self.version_key()]
    }

    fn registry_key(&self) -> String {
        format!("{}:registry", self.prefix())
    }
}

impl JobStore for RedisJobStore {
    async fn claim_run(&self, req: ClaimRequest<'_>) -> BackendResult<Claim> {
        let k = self.backend.keys();
        let group = group_of(req.job).unwrap_or(req.job);
        let keys = [
            k.session(req.session),
            k.lease(req.lease),
            self.job_key(req.job),
            self.job_key(group),
            self.runs_key(req.job),
            self.jobs_key(),
            self.version_key(),
        ];
        let (token, slot, keep) = (req.token.to_string(), req.slot_ms.to_string(), self.retention.to_string());
        let (started, attempts) = (req.started_ms.to_string(), req.attempts.max(1).to_string());
        let args = [
            req.session.as_str(),
            &token,
            &slot,
            kind_code(req.kind),
            req.job,
            self.prefix(),
            &keep,
            req.node,
            &started,
            &attempts,
            if req.is_schedule_slot() { "1" } else { "0" },
        ];
        let answer: Vec<redis::Value> = self.eval(&SCRIPTS.claim, &keys, &args, "claim a job run").await?;
        let code: Option<i64> = answer.first().and_then(|v| redis::from_redis_value(v.clone()).ok());
        match code {
            Some(0) => Ok(Claim::NotHolder),
            Some(1) => Ok(Claim::AlreadyClaimed),
            Some(3) => Ok(Claim::Paused),
            Some(2) => {
                let slot: Option<String> = answer.get(1).and_then(|v| redis::from_redis_value(v.clone()).ok());
                let slot_ms = slot
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| self.protocol("the claim script answered no slot"))?;
                Ok(Claim::Claimed(req.running_record(slot_ms)))
            }
            _ => Err(self.protocol(&format!("unexpected reply to a job claim: {answer:?}"))),
        }
    }

    async fn finish_run(&self, record: &RunRecord) -> BackendResult<bool> {
        let key = format!("{}:run:{}|{}|{}", self.prefix(), record.job, kind_code(record.kind), record.slot_ms);
        let v = values(record);
        let token = record.token.to_string();
        let mut args: Vec<&str> = v.iter().map(String::as_str).collect();
        args.push(&token);
        let done: i64 = self.eval(&SCRIPTS.finish, &[key], &args, "record how a run ended").await?;
        Ok(done == 1)
    }

    async fn append(&self, record: &RunRecord) -> BackendResult<bool> {
        let v = values(record);
        let keep = self.retention.to_string();
        let mut args = vec![self.prefix(), keep.as_str()];
        args.extend(v.iter().map(String::as_str));
        let done: i64 =
            self.eval(&SCRIPTS.append, &[self.runs_key(&record.job), self.jobs_key()], &args, "record a slot").await?;
        Ok(done == 1)
    }

    async fn history(&self, job: &str, limit: usize) -> BackendResult<Vec<RunRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows = self.read(&[job], limit).await?;
        let records = rows.into_iter().next().map(|(_, _, r)| r).unwrap_or_default();
        records.into_iter().map(|r| self.record(r)).collect()
    }

    async fn job(&self, job: &str) -> BackendResult<Option<JobState>> {
        let rows = self.read(&[job], 1).await?;
        rows.into_iter().next().map(|row| self.state(row)).transpose()
    }

    async fn jobs(&self) -> BackendResult<Vec<JobState>> {
        let rows = self.read(&[], 1).await?;
        rows.into_iter().map(|row| self.state(row)).collect()
    }

    async fn set_paused(&self, job: &str, paused: bool) -> BackendResult<bool> {
        self.ready.settle(self.backend.inner.connect_timeout).await;
        let channel = self.channel();
        let args = [job, if paused { "1" } else { "0" }, channel.as_str()];
        let was: i64 = self.eval(&SCRIPTS.set_paused, &self.control_keys(job), &args, "pause or resume a job").await?;
        Ok(was == 1)
    }

    async fn trigger(&self, job: &str, at_ms: i64) -> BackendResult<u64> {
        self.ready.settle(self.backend.inner.connect_timeout).await;
        let (channel, at) = (self.channel(), at_ms.to_string());
        let id: i64 =
            self.eval(&SCRIPTS.trigger, &self.control_keys(job), &[job, &at, &channel], "trigger a job").await?;
        u64::try_from(id).map_err(|_| self.protocol("negative trigger id"))
    }

    async fn control_version(&self) -> BackendResult<u64> {
        let mut conn = self.backend.inner.conn.clone();
        let v: Option<u64> =
            redis::cmd("GET").arg(self.version_key()).query_async(&mut conn).await.map_err(|e| {
                super::connect::call_error(&self.backend.inner.description, "read the control version", e)
            })?;
        Ok(v.unwrap_or(0))
    }

    fn subscribe_control(&self) -> Option<broadcast::Receiver<String>> {
        let mut slot = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = &*slot {
            return Some(tx.subscribe());
        }
        let inner = &self.backend.inner;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(backend = %inner.description, "no Tokio runtime: job control changes will not be broadcast to this client");
            return None;
        };
        let (tx, rx) = broadcast::channel(CONTROL_CAPACITY);
        let ready_tx = self.ready.track();
        runtime.spawn(
            Subscriber {
                client: inner.client.clone(),
                channel: self.channel(),
                releases: tx.clone(),
                stop: inner.subscriber_stop.clone(),
                description: Arc::clone(&inner.description),
                call_timeout: inner.connect_timeout,
                ready: Some(ready_tx),
            }
            .run(),
        );
        *slot = Some(tx);
        Some(rx)
    }

    async fn publish_registry(&self, session: &SessionId, registry: &str) -> BackendResult<bool> {
        let keys = self.backend.keys();
        let args = [session.as_str(), registry, keys.session.as_str()];
        let done: i64 = self
            .eval(
                &SCRIPTS.publish_registry,
                &[keys.session(session), self.registry_key()],
                &args,
                "publish the job registry",
            )
            .await?;
        Ok(done == 1)
    }

    async fn registries(&self) -> BackendResult<Vec<(SessionId, String)>> {
        let sessions = self.backend.keys().session.as_str();
        let flat: Vec<String> =
            self.eval(&SCRIPTS.read_registries, &[self.registry_key()], &[sessions], "read the job registries").await?;
        let mut out: Vec<(SessionId, String)> =
            flat.chunks_exact(2).map(|p| (SessionId::new(p[0].clone()), p[1].clone())).collect();
        out.sort();
        Ok(out)
    }

    fn retention(&self) -> usize {
        self.retention
    }

    fn keeping(&self, records: usize) -> crate::backend::job_store::SharedJobStore {
        crate::backend::job_store::SharedJobStore::new(RedisJobStore { retention: records.max(1), ..self.clone() })
    }

    fn describe(&self) -> String {
        format!("{} (jobs store)", self.backend.inner.description)
    }
}
