//! The Lua scripts of the Redis schedule store (`schedules.rs`, which documents the key
//! layout). Every write is one script: the row, its indexes, its partition's change counter
//! and its audit record change together or not at all (rules A6, A7).

use std::sync::LazyLock;

use super::lua::Lua;

/// The fields of a schedule's hash, in the order [`ROW_FIELDS_LUA`] reads them and
/// `schedules.rs` decodes them.
pub(super) const ROW_FIELDS: [&str; 13] = [
    "id",
    "partition",
    "handler",
    "spec",
    "payload",
    "policies",
    "paused",
    "pause_note",
    "created_by",
    "created_ms",
    "updated_by",
    "updated_ms",
    "revision",
];

/// [`ROW_FIELDS`] as a Lua list (checked against it by a unit test).
const ROW_FIELDS_LUA: &str = "local FIELDS = {'id', 'partition', 'handler', 'spec', 'payload', 'policies', 'paused', \
                              'pause_note', 'created_by', 'created_ms', 'updated_by', 'updated_ms', 'revision'}\n";

/// The bookkeeping of every write: the partition's change counter, the audit record (newest
/// first) in the space's trail and in its target's, the space's trail trimmed to the writer's
/// retention and each record trimmed from it also from its target's trail (its oldest record,
/// so the target's trail holds exactly the target's records the space's keeps). A write trims
/// one record once the trail is full; a writer keeping fewer records than the trail holds
/// trims the difference once.
const WROTE: &str = r"
local function wrote(changes, audit, target, partition, record, keep)
  redis.call('HINCRBY', changes, partition, 1)
  redis.call('LPUSH', audit, record)
  redis.call('LPUSH', audit .. ':' .. target, record)
  while redis.call('LLEN', audit) > keep do
    local old = redis.call('RPOP', audit)
    local of = audit .. ':' .. cjson.decode(old)['target']
    if redis.call('LINDEX', of, -1) == old then
      redis.call('RPOP', of)
    else
      redis.call('LREM', of, -1, old)
    end
  end
end
";

/// `KEYS`: 1 space hash, 2 row hash, 3 ids set, 4 partition set, 5 handler set, 6 changes
/// hash, 7 audit list. `ARGV`: 1 partitions, 2 partition, 3 id, 4 handler, 5 spec, 6 payload,
/// 7 policies, 8 paused (0 or 1), 9 pause note, 10 has a note (0 or 1), 11 who, 12 when,
/// 13 audit record, 14 records kept.
///
/// Answers `{'0'}` created, `{'1'}` the id exists, `{'2', stored}` the space has another
/// partition count (nothing written but in the first case).
const CREATE: &str = r"
local stored = redis.call('HGET', KEYS[1], 'partitions')
if stored and stored ~= ARGV[1] then return {'2', stored} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'1'} end
if not stored then redis.call('HSET', KEYS[1], 'partitions', ARGV[1]) end
redis.call('HSET', KEYS[2], 'id', ARGV[3], 'partition', ARGV[2], 'handler', ARGV[4], 'spec', ARGV[5],
  'payload', ARGV[6], 'policies', ARGV[7], 'paused', ARGV[8], 'created_by', ARGV[11], 'created_ms', ARGV[12],
  'updated_by', ARGV[11], 'updated_ms', ARGV[12], 'revision', '1')
if ARGV[10] == '1' then redis.call('HSET', KEYS[2], 'pause_note', ARGV[9]) end
redis.call('ZADD', KEYS[3], 0, ARGV[3])
redis.call('ZADD', KEYS[4], 0, ARGV[3])
redis.call('ZADD', KEYS[5], 0, ARGV[3])
wrote(KEYS[6], KEYS[7], ARGV[3], ARGV[2], ARGV[13], tonumber(ARGV[14]))
return {'0'}
";

/// `KEYS`: 1 row hash, 2 changes hash, 3 audit list. `ARGV`: 1 the space's handler-set key
/// without the handler, 2 id, 3 handler, 4 spec, 5 payload, 6 policies, 7 who, 8 when, 9 audit
/// record, 10 records kept. Answers the new revision, or -1 when there is no such schedule
/// (nothing written). The schedule moves to its new handler's set.
const UPDATE: &str = r"
local row = redis.call('HMGET', KEYS[1], 'partition', 'handler')
if not row[1] then return -1 end
if row[2] ~= ARGV[3] then
  if row[2] then redis.call('ZREM', ARGV[1] .. row[2], ARGV[2]) end
  redis.call('ZADD', ARGV[1] .. ARGV[3], 0, ARGV[2])
end
redis.call('HSET', KEYS[1], 'handler', ARGV[3], 'spec', ARGV[4], 'payload', ARGV[5], 'policies', ARGV[6],
  'updated_by', ARGV[7], 'updated_ms', ARGV[8])
local revision = redis.call('HINCRBY', KEYS[1], 'revision', 1)
wrote(KEYS[2], KEYS[3], ARGV[2], row[1], ARGV[9], tonumber(ARGV[10]))
return revision
";

/// `KEYS`: 1 row hash, 2 ids set, 3 changes hash, 4 audit list. `ARGV`: 1 the space's
/// partition-set key without the partition, 2 the handler-set key without the handler, 3 id,
/// 4 audit record, 5 records kept. Answers 1 deleted, 0 no such schedule (nothing written).
const DELETE: &str = r"
local row = redis.call('HMGET', KEYS[1], 'partition', 'handler')
if not row[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZREM', ARGV[1] .. row[1], ARGV[3])
if row[2] then redis.call('ZREM', ARGV[2] .. row[2], ARGV[3]) end
wrote(KEYS[3], KEYS[4], ARGV[3], row[1], ARGV[4], tonumber(ARGV[5]))
return 1
";

/// `KEYS`: 1 row hash, 2 changes hash, 3 audit list. `ARGV`: 1 paused (0 or 1), 2 note, 3 has
/// a note (0 or 1), 4 who, 5 when, 6 audit record, 7 records kept, 8 id. Answers 1 or 0, whether it
/// was paused before, or -1 when there is no such schedule (nothing written).
const SET_PAUSED: &str = r"
local row = redis.call('HMGET', KEYS[1], 'partition', 'paused')
if not row[1] then return -1 end
redis.call('HSET', KEYS[1], 'paused', ARGV[1], 'updated_by', ARGV[4], 'updated_ms', ARGV[5])
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'pause_note', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'pause_note')
end
redis.call('HINCRBY', KEYS[1], 'revision', 1)
wrote(KEYS[2], KEYS[3], ARGV[8], row[1], ARGV[6], tonumber(ARGV[7]))
if row[2] == '1' then return 1 end
return 0
";

/// `KEYS`: 1 row hash, 2 changes hash, 3 audit list. `ARGV`: 1 id, 2 audit record, 3 records
/// kept. Answers 1 recorded, 0 no such schedule (nothing written).
const RECORD: &str = r"
local partition = redis.call('HGET', KEYS[1], 'partition')
if not partition then return 0 end
wrote(KEYS[2], KEYS[3], ARGV[1], partition, ARGV[2], tonumber(ARGV[3]))
return 1
";

/// `KEYS`: 1 the index to walk (the space's ids, a partition's or a handler's set), 2 another
/// index, walked instead when it is smaller (a partition's and a handler's sets both filter).
/// `ARGV`: 1 the space's row key without the id, 2 where to start (`-`, `[id` or `(id`), 3 the
/// prefix (`''`: none), 4 has a handler (0 or 1), 5 handler, 6 has a partition (0 or 1), 7
/// partition, 8 limit (at least 1). Answers the rows (fields as [`ROW_FIELDS`], `false` when
/// absent) of the schedules after the start that match, in id order.
///
/// The index's members all score 0, so `ZRANGEBYLEX` walks them in byte order from the start;
/// the ids with a prefix are contiguous there, so the walk ends at the first id past them.
/// Only a filter the index does not give (a handler within a partition) drops ids: their two
/// fields are read first, the row only when they match.
const LIST: &str = r"
local index = KEYS[1]
if KEYS[2] ~= KEYS[1] and redis.call('ZCARD', KEYS[2]) < redis.call('ZCARD', KEYS[1]) then index = KEYS[2] end
local prefix, limit = ARGV[3], tonumber(ARGV[8])
local both = ARGV[4] == '1' and ARGV[6] == '1'
local function wanted(partition, handler)
  return partition and (ARGV[4] ~= '1' or handler == ARGV[5]) and (ARGV[6] ~= '1' or partition == ARGV[7])
end
local batch = math.min(math.max(limit, 64), 1024)
local from = ARGV[2]
local out = {}
while true do
  local ids = redis.call('ZRANGEBYLEX', index, from, '+', 'LIMIT', 0, batch)
  for _, id in ipairs(ids) do
    if string.sub(id, 1, #prefix) ~= prefix then return out end
    local row = false
    if not both or wanted(unpack(redis.call('HMGET', ARGV[1] .. id, 'partition', 'handler'))) then
      row = redis.call('HMGET', ARGV[1] .. id, unpack(FIELDS))
    end
    if row and wanted(row[2], row[3]) then
      table.insert(out, row)
      if #out >= limit then return out end
    end
  end
  if #ids < batch then return out end
  from = '(' .. ids[#ids]
end
";

/// The schedule store's scripts, loaded on a server the first time each runs.
pub(super) struct Scripts {
    pub(super) create: Lua,
    pub(super) update: Lua,
    pub(super) delete: Lua,
    pub(super) set_paused: Lua,
    pub(super) record: Lua,
    pub(super) list: Lua,
}

pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    create: Lua::new(&format!("{WROTE}{CREATE}")),
    update: Lua::new(&format!("{WROTE}{UPDATE}")),
    delete: Lua::new(&format!("{WROTE}{DELETE}")),
    set_paused: Lua::new(&format!("{WROTE}{SET_PAUSED}")),
    record: Lua::new(&format!("{WROTE}{RECORD}")),
    list: Lua::new(&format!("{ROW_FIELDS_LUA}{LIST}")),
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The Lua list of fields is [`ROW_FIELDS`], in order.
    #[test]
    fn lua_fields_are_the_row_fields() {
        let quoted: Vec<String> = ROW_FIELDS.iter().map(|f| format!("'{f}'")).collect();
        assert_eq!(ROW_FIELDS_LUA, format!("local FIELDS = {{{}}}\n", quoted.join(", ")));
    }
}
