//! The jobs store on Redis (ADR 0012): every call is one Lua script (one round
//! trip, atomic on the server), and control changes are published on a channel so that every
//! node hears a pause or a run-now request at once.
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `{prefix}:job:{job}` | hash | `paused`, `last_slot` (the slot ledger), `trigger_id`, `trigger_ms`, `taken_id`, `group_taken_id`, `requests` (the run-now request log, `id slot key` lines; R3) |
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
//! these keys: every job is then simply unknown; a control hash of an older build has no
//! `requests` field, which reads as an empty log.
//!
//! Run-now requests and manual claims (R3) are decided by the core ([`simba_core::claim::request`],
//! [`simba_core::claim::decide`]) on the hash fields read by one script, and written by a second
//! script only if those fields are unchanged (and, for a claim, under the lease's fence);
//! otherwise they read again, at most [`ATTEMPTS`] times. A record's `request_key` field names
//! the request a manual run answers.

use std::sync::{Arc, Mutex, PoisonError};

use super::lua::Lua;
use tokio::sync::broadcast;

use super::RedisBackend;
use super::subscriber::Subscriber;
use simba_core::claim::{self, Answer, ControlRow, Logs, RequestLog, SeenRecord, SlotHistory, Trigger};

use crate::backend::job_store::{
    Claim, ClaimRequest, DEFAULT_RETENTION, JobState, JobStore, Outcome, RunRecord, SlotKind, Triggered, WatchReady,
    group_of, truncate_error,
};
use crate::backend::{BackendError, BackendResult, SessionId};

/// How many control changes a slow subscriber may fall behind before it skips some (it then
/// reads the control version, so nothing is lost).
const CONTROL_CAPACITY: usize = 1024;

/// How many times a run-now request or a manual claim reads again after the job's control
/// hash changed between its read and its write.
const ATTEMPTS: usize = 5;

/// Lua: `seen(key)` is the request fields of a control hash as one string, compared by the
/// writing scripts with what the caller read ([`seen`]).
const SEEN: &str = r"
local function seen(key)
  local j = redis.call('HMGET', key, 'trigger_id', 'taken_id', 'group_taken_id', 'trigger_ms', 'paused')
  return (j[1] or '') .. '|' .. (j[2] or '') .. '|' .. (j[3] or '') .. '|' .. (j[4] or '') .. '|' .. (j[5] or '')
end
";

/// `KEYS`: 1 job hash, 2 group hash (the job's again). Answers both hashes' request fields,
/// `paused`, `last_slot` and `requests`, in the order of `f`.
const READ_CONTROL: &str = r"
local f = {'trigger_id', 'taken_id', 'group_taken_id', 'trigger_ms', 'paused', 'last_slot', 'requests'}
return {redis.call('HMGET', KEYS[1], unpack(f)), redis.call('HMGET', KEYS[2], unpack(f))}
";

/// `KEYS`: 1 job hash, 2 jobs set, 3 version key. `ARGV`: 1 job, 2 what the caller read
/// (`seen`), 3 trigger id, 4 trigger slot, 5 request log, 6 channel. Writes the request the
/// core's rule made, only if the hash is as read; answers 1 when written.
const TRIGGER_WRITE: &str = r"
if seen(KEYS[1]) ~= ARGV[2] then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'paused', '0', 'taken_id', '0', 'group_taken_id', '0')
end
redis.call('HSET', KEYS[1], 'trigger_id', ARGV[3], 'trigger_ms', ARGV[4], 'requests', ARGV[5])
redis.call('INCR', KEYS[3])
redis.call('PUBLISH', ARGV[6], ARGV[1])
return 1
";

/// `KEYS`: as [`CLAIM`]. `ARGV`: 1 session id, 2 token, 3 the core's answer (1 already
/// claimed, 2 claimed, 3 paused), 4 the job's and 5 the group's fields as read (`seen`), 6 new
/// `taken_id`, 7 new `group_taken_id`, 8 new `trigger_ms` (empty: unchanged), 9 the group's new
/// `taken_id` (empty: unchanged), 10 slot, 11 job, 12 prefix, 13 retention, 14 node, 15
/// started, 16 attempts, 17 request key (empty: none). Answers `{0}` not the holder, `{4}` the
/// hashes changed since read, else the core's answer (`{2, slot}` with the record written).
const CLAIM_MANUAL: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local lease = redis.call('HMGET', KEYS[2], 'session', 'token')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return {0} end
if seen(KEYS[3]) ~= ARGV[4] or seen(KEYS[4]) ~= ARGV[5] then return {4} end
if ARGV[3] ~= '2' then return {tonumber(ARGV[3])} end
redis.call('SADD', KEYS[6], ARGV[11])
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[3], 'paused', '0', 'trigger_id', '0')
end
redis.call('HSET', KEYS[3], 'taken_id', ARGV[6], 'group_taken_id', ARGV[7])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[3], 'trigger_ms', ARGV[8]) end
if ARGV[9] ~= '' and KEYS[4] ~= KEYS[3] then redis.call('HSET', KEYS[4], 'taken_id', ARGV[9]) end
redis.call('INCR', KEYS[7])
local fields = {'job', ARGV[11], 'kind', '1', 'slot', ARGV[10], 'outcome', 'running', 'attempt', '1',
  'attempts', ARGV[16], 'session', ARGV[1], 'node', ARGV[14], 'token', ARGV[2], 'started', ARGV[15]}
if ARGV[17] ~= '' then table.insert(fields, 'request_key'); table.insert(fields, ARGV[17]) end
add_record(ARGV[12], KEYS[5], ARGV[11], '1', ARGV[10], fields, tonumber(ARGV[13]))
return {2, ARGV[10]}
";

/// Lua: `backfill_view(runs, prefix, job, slot, keys)` is what a backfill's claim (rule J15)
/// decides on, as one string: the lease's `last_slot`, the job's `paused` and `last_slot`, the
/// group's `paused` (one line), the slot's records (`{kind}|{slot} {outcome} {started}`, one a
/// line) and the oldest record's member last. The claim reads it with [`BACKFILL_READ`], the
/// core decides in Rust, and [`BACKFILL_WRITE`] writes only if the view is unchanged.
const BACKFILL_VIEW: &str = r"
local function backfill_view(keys, prefix, job, slot)
  local lease = redis.call('HGET', keys[2], 'last_slot') or ''
  local j = redis.call('HMGET', keys[3], 'paused', 'last_slot')
  local g = ''
  if keys[4] ~= keys[3] then g = redis.call('HGET', keys[4], 'paused') or '' end
  local out = {lease .. ' ' .. (j[1] or '') .. ' ' .. (j[2] or '') .. ' ' .. g}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', keys[5], slot, slot)) do
    local r = redis.call('HMGET', prefix .. ':run:' .. job .. '|' .. m, 'outcome', 'started')
    table.insert(out, m .. ' ' .. (r[1] or '') .. ' ' .. (r[2] or ''))
  end
  local oldest = redis.call('ZRANGE', keys[5], 0, 0)
  table.insert(out, oldest[1] or '')
  return table.concat(out, '\n')
end
";

/// `KEYS`: as [`CLAIM`]. `ARGV`: 1 prefix, 2 job, 3 slot, 4 session id, 5 token. Answers
/// `{'0'}` not the holder (the fence first, as every claim), else `{'1', view}`.
const BACKFILL_READ: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0'} end
local lease = redis.call('HMGET', KEYS[2], 'session', 'token')
if lease[1] ~= ARGV[4] or lease[2] ~= ARGV[5] then return {'0'} end
return {'1', backfill_view(KEYS, ARGV[1], ARGV[2], ARGV[3])}
";

/// `KEYS`: as [`CLAIM`]. `ARGV`: 1 session id, 2 token, 3 the view as read, 4 job, 5 prefix,
/// 6 retention, 7 slot, 8 node, 9 started, 10 attempts. Answers `{0}` not the holder, `{4}`
/// the view changed since read, `{2}` the `running` backfill record written (kind `3`; no
/// control field is written).
const BACKFILL_WRITE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local lease = redis.call('HMGET', KEYS[2], 'session', 'token')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then return {0} end
if backfill_view(KEYS, ARGV[5], ARGV[4], ARGV[7]) ~= ARGV[3] then return {4} end
redis.call('SADD', KEYS[6], ARGV[4])
add_record(ARGV[5], KEYS[5], ARGV[4], '3', ARGV[7], {
  'job', ARGV[4], 'kind', '3', 'slot', ARGV[7], 'outcome', 'running', 'attempt', '1', 'attempts', ARGV[10],
  'session', ARGV[1], 'node', ARGV[8], 'token', ARGV[2], 'started', ARGV[9]}, tonumber(ARGV[6]))
return {2}
";

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
/// Answers `{0}` not the holder, `{1}` already claimed, `{3}` paused, `{2, slot}` claimed at
/// `slot`. Scheduled and caught-up slots only: a manual claim is `CLAIM_MANUAL`'s.
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
-- A manual slot is claimed by CLAIM_MANUAL (R3): the core decides on the request logs.
if ARGV[4] == '1' then return {1} end
slot = ARGV[3]
-- A schedule's slot (ARGV[11] = 1) is checked and moved on its own ledger only (A5).
local lasts = {job[2] or false}
if ARGV[11] ~= '1' then table.insert(lasts, lease[3] or false) end
for _, last in ipairs(lasts) do
  if last and not lt(last, slot) then return {1} end
end
redis.call('HSET', KEYS[3], 'last_slot', slot)
if ARGV[11] ~= '1' then redis.call('HSET', KEYS[2], 'last_slot', slot) end
if paused then return {3} end
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
/// each record the 12 fields and its request key (false: absent).
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
        'job', 'kind', 'slot', 'outcome', 'attempt', 'attempts', 'session', 'node', 'token', 'started', 'ended', 'error',
        'request_key'))
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
    claim: Lua,
    finish: Lua,
    append: Lua,
    read: Lua,
    set_paused: Lua,
    read_control: Lua,
    trigger_write: Lua,
    claim_manual: Lua,
    backfill_read: Lua,
    backfill_write: Lua,
    publish_registry: Lua,
    read_registries: Lua,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    claim: Lua::new(&format!("{HELPERS}{CLAIM}")),
    finish: Lua::new(FINISH),
    append: Lua::new(&format!("{HELPERS}{APPEND}")),
    read: Lua::new(READ),
    set_paused: Lua::new(SET_PAUSED),
    read_control: Lua::new(READ_CONTROL),
    trigger_write: Lua::new(&format!("{SEEN}{TRIGGER_WRITE}")),
    claim_manual: Lua::new(&format!("{HELPERS}{SEEN}{CLAIM_MANUAL}")),
    backfill_read: Lua::new(&format!("{BACKFILL_VIEW}{BACKFILL_READ}")),
    backfill_write: Lua::new(&format!("{HELPERS}{BACKFILL_VIEW}{BACKFILL_WRITE}")),
    publish_registry: Lua::new(PUBLISH_REGISTRY),
    read_registries: Lua::new(READ_REGISTRIES),
});

/// A control hash as read by `READ_CONTROL`: the row and log the core decides on, and its
/// request fields as the writing scripts compare them (`seen`).
struct Control {
    row: ControlRow,
    log: RequestLog,
    seen: String,
}

impl Control {
    /// From the values `READ_CONTROL` answers for one hash.
    fn of(fields: Vec<Option<String>>) -> Self {
        let f = |i: usize| fields.get(i).cloned().flatten();
        let num = |i: usize| f(i).and_then(|v| v.parse::<i64>().ok());
        let row = ControlRow {
            paused: f(4).as_deref() == Some("1"),
            last_slot: num(5),
            trigger_id: num(0).unwrap_or(0),
            trigger_ms: num(3),
            taken_id: num(1).unwrap_or(0),
            group_taken_id: num(2).unwrap_or(0),
        };
        let seen = (0..5).map(|i| f(i).unwrap_or_default()).collect::<Vec<_>>().join("|");
        Control { row, log: RequestLog::decode(&f(6).unwrap_or_default()), seen }
    }
}

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
        SlotKind::Backfill => "3",
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
        script: &Lua,
        keys: &[String],
        args: &[&str],
        what: &'static str,
    ) -> BackendResult<T> {
        let mut invocation = script.script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.backend.inner.link.conn();
        let reply = invocation.invoke_async(&mut conn).await.map_err(|e| self.backend.call_failed(what, e))?;
        if script.writes {
            self.backend.replicated(&mut conn, what).await?;
        }
        Ok(reply)
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
            "3" => SlotKind::Backfill,
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
            request_key: next().filter(|k| !k.is_empty()),
            payload_override: None,
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

    /// The control hashes `own` and `group` as a run-now request or a manual claim reads them.
    async fn read_control(&self, own: &str, group: &str) -> BackendResult<[Control; 2]> {
        let keys = [own.to_owned(), group.to_owned()];
        let read: Vec<Vec<Option<String>>> =
            self.eval(&SCRIPTS.read_control, &keys, &[], "read a job's control").await?;
        match <[Vec<Option<String>>; 2]>::try_from(read) {
            Ok([a, b]) => Ok([Control::of(a), Control::of(b)]),
            Err(_) => Err(self.protocol("the control read answered no two hashes")),
        }
    }

    /// The manual claim (R3): the core decides on the control hashes read, and `CLAIM_MANUAL`
    /// writes its answer under the lease's fence if they are unchanged.
    async fn claim_manual(&self, req: &ClaimRequest<'_>, keys: &[String; 7]) -> BackendResult<Claim> {
        let has_group = keys[3] != keys[2];
        let (token, keep) = (req.token.to_string(), self.retention.to_string());
        let (started, attempts) = (req.started_ms.to_string(), req.attempts.max(1).to_string());
        for _ in 0..ATTEMPTS {
            let [own, grp] = self.read_control(&keys[2], &keys[3]).await?;
            let group_log = if has_group { &grp.log } else { &simba_core::claim::NO_REQUESTS };
            let logs = Logs::requests(&own.log, group_log);
            let decision = claim::decide(req.ask(), &own.row, has_group.then_some(&grp.row), None, logs);
            let code = match decision.answer {
                Answer::AlreadyClaimed | Answer::Refused(_) => "1",
                Answer::Claimed { .. } => "2",
                Answer::Paused => "3",
            };
            let slot = match decision.answer {
                Answer::Claimed { slot_ms } => slot_ms,
                _ => 0,
            };
            let next = decision.writes.own.unwrap_or(own.row);
            let trigger_ms = next.trigger_ms.filter(|_| next.trigger_ms != own.row.trigger_ms);
            let group_taken = decision.writes.group.map(|g| g.taken_id.to_string()).unwrap_or_default();
            let (taken, group_taken_id) = (next.taken_id.to_string(), next.group_taken_id.to_string());
            let (trigger_ms, slot) = (trigger_ms.map(|t| t.to_string()).unwrap_or_default(), slot.to_string());
            let key = decision.request.as_ref().map(|r| r.key.as_str()).unwrap_or_default();
            let args = [
                req.session.as_str(),
                &token,
                code,
                &own.seen,
                &grp.seen,
                &taken,
                &group_taken_id,
                &trigger_ms,
                &group_taken,
                &slot,
                req.job,
                self.prefix(),
                &keep,
                req.node,
                &started,
                &attempts,
                key,
            ];
            let answer: Vec<i64> = self.eval(&SCRIPTS.claim_manual, keys, &args, "claim a manual run").await?;
            match answer.first() {
                Some(0) => return Ok(Claim::NotHolder),
                Some(4) => continue,
                Some(_) => return Ok(req.claim_of(decision.answer, decision.request.as_ref())),
                None => return Err(self.protocol("the manual claim script answered nothing")),
            }
        }
        Err(self.protocol(&format!("the control hash of `{}` kept changing; try again", req.job)))
    }

    /// A backfill's claim (rule J15): the core decides on the view [`BACKFILL_READ`] answers,
    /// and [`BACKFILL_WRITE`] writes the record under the lease's fence if the view is unchanged.
    async fn claim_backfill(&self, req: &ClaimRequest<'_>, keys: &[String; 7]) -> BackendResult<Claim> {
        let has_group = keys[3] != keys[2];
        let (token, keep, slot) = (req.token.to_string(), self.retention.to_string(), req.slot_ms.to_string());
        let (started, attempts) = (req.started_ms.to_string(), req.attempts.max(1).to_string());
        for _ in 0..ATTEMPTS {
            let args = [self.prefix(), req.job, &slot, req.session.as_str(), &token];
            let read: Vec<String> = self.eval(&SCRIPTS.backfill_read, keys, &args, "read a backfill's slot").await?;
            let Some(view) = read.get(1) else { return Ok(Claim::NotHolder) };
            let (lease_slot, own, group, history) = self.backfill_view(view)?;
            let decision =
                claim::decide(req.ask(), &own, has_group.then_some(&group), lease_slot, Logs::history(&history));
            if !matches!(decision.answer, Answer::Claimed { .. }) {
                return Ok(req.claim_of(decision.answer, None));
            }
            let args = [
                req.session.as_str(),
                &token,
                view,
                req.job,
                self.prefix(),
                &keep,
                &slot,
                req.node,
                &started,
                &attempts,
            ];
            let answer: Vec<i64> = self.eval(&SCRIPTS.backfill_write, keys, &args, "claim a backfill run").await?;
            match answer.first() {
                Some(0) => return Ok(Claim::NotHolder),
                Some(4) => continue,
                Some(_) => return Ok(req.claim_of(decision.answer, None)),
                None => return Err(self.protocol("the backfill claim script answered nothing")),
            }
        }
        Err(self.protocol(&format!("the records of `{}` kept changing; try again", req.job)))
    }

    /// The backfill view's parts ([`BACKFILL_VIEW`]): the lease's last slot, the job's and its
    /// group's control rows (pause and ledger), and what the claim reads of the history.
    fn backfill_view(&self, view: &str) -> BackendResult<(Option<i64>, ControlRow, ControlRow, SlotHistory)> {
        let bad = || self.protocol(&format!("unexpected backfill view {view:?}"));
        let mut lines: Vec<&str> = view.split('\n').collect();
        let oldest = lines.pop().ok_or_else(bad)?;
        let head: Vec<&str> = lines.first().ok_or_else(bad)?.split(' ').collect();
        let int = |v: Option<&&str>| v.and_then(|v| v.parse::<i64>().ok());
        let own =
            ControlRow { paused: head.get(1) == Some(&"1"), last_slot: int(head.get(2)), ..ControlRow::default() };
        let group = ControlRow { paused: head.get(3) == Some(&"1"), ..ControlRow::default() };
        let kind = |member: &str| -> BackendResult<(i64, &'static str)> {
            let (k, slot) = member.split_once('|').ok_or_else(bad)?;
            let kind = match k {
                "0" => SlotKind::Scheduled,
                "1" => SlotKind::Manual,
                "2" => SlotKind::CaughtUp,
                "3" => SlotKind::Backfill,
                _ => return Err(bad()),
            };
            Ok((slot.parse().map_err(|_| bad())?, kind.as_str()))
        };
        let mut at_slot = Vec::new();
        for line in &lines[1..] {
            let mut f = line.split(' ');
            let (_, k) = kind(f.next().unwrap_or_default())?;
            let outcome = f.next().unwrap_or_default();
            at_slot.push(SeenRecord::new(k, outcome, f.next().and_then(|v| v.parse().ok())));
        }
        let oldest = if oldest.is_empty() { None } else { Some(kind(oldest).map(|(s, k)| (s, k.to_owned()))?) };
        Ok((int(head.first()), own, group, SlotHistory { at_slot, oldest }))
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
        if req.kind == SlotKind::Manual {
            return self.claim_manual(&req, &keys).await;
        }
        if req.is_backfill() {
            return self.claim_backfill(&req, &keys).await;
        }
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

    async fn trigger(&self, job: &str, ask: Trigger<'_>) -> BackendResult<Triggered> {
        self.ready.settle(self.backend.inner.connect_timeout).await;
        let channel = self.channel();
        let hash = self.job_key(job);
        for _ in 0..ATTEMPTS {
            let [own, _] = self.read_control(&hash, &hash).await?;
            // The core's request rule decides; the script writes it if the hash is as read.
            let (answer, writes) = claim::request(&own.row, &own.log, ask);
            let Some((row, log)) = writes else { return Ok(answer) };
            let (id, slot) = (row.trigger_id.to_string(), row.trigger_ms.unwrap_or(ask.at_ms).to_string());
            let log = log.encode();
            let args = [job, own.seen.as_str(), &id, &slot, &log, &channel];
            let written: i64 =
                self.eval(&SCRIPTS.trigger_write, &self.control_keys(job), &args, "trigger a job").await?;
            if written == 1 {
                return Ok(answer);
            }
        }
        Err(self.protocol(&format!("the control hash of `{job}` kept changing; try again")))
    }

    async fn control_version(&self) -> BackendResult<u64> {
        let mut conn = self.backend.inner.link.conn();
        let v: Option<u64> = redis::cmd("GET")
            .arg(self.version_key())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.backend.call_failed("read the control version", e))?;
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
                link: Arc::clone(&inner.link),
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
