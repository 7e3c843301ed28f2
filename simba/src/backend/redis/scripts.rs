//! The Lua scripts of the Redis backend: each backend call is one of them, so each call is one
//! round trip and atomic on the server (Redis runs a script with no other command in between).
//!
//! Conventions: the keys the client knows before the call are passed in `KEYS`; keys that
//! depend on what the script reads (the holder's session key, the lease hashes listed in an
//! owned hash, the groups listed in a joined set) are built inside the script from prefixes
//! passed in `ARGV`. Standalone Redis allows this; Redis Cluster would need every such key in
//! the same slot (see the module documentation).
//!
//! Tokens and slots travel as decimal strings and are compared as strings, never through
//! Lua numbers (doubles, exact only below 2^53). A token is read back with `HGET` after
//! `HINCRBY` for the same reason.

use std::sync::LazyLock;

use super::lua::Lua;

/// `KEYS[1]` session key; `ARGV[1]` ttl in ms.
///
/// Creates the session key, whose value is its own ttl so that a keep-alive needs no
/// argument but the id. Returns the remaining lifetime measured by Redis, or -1 if the key
/// already existed (a 128-bit id collision: the caller draws another id).
const OPEN_SESSION: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[1], 'NX') then
  return redis.call('PTTL', KEYS[1])
end
return -1
";

/// The Lua helper every script that changes an owned hash starts with: `digest(key, token,
/// sign)` adds (`sign` 1) or removes (`sign` -1) one token to the session's digest hash `key`
/// (`count`, `high`, `low`), kept by `HINCRBY` on 64-bit integers. A decimal token `t` is split
/// into `high = t / 10^9` and `low = t % 10^9` (each exact in a Lua number); the client
/// computes `high * 10^9 + low` with wrapping `u64` arithmetic, so the digest is exact for any
/// `i64` token and up to 2^33 leases. Zero increments are skipped (Redis refuses `-0`).
const DIGEST_FN: &str = r"
local function digest(key, token, sign)
  local n = #token
  local high, low = 0, tonumber(token)
  if n > 9 then
    high = tonumber(string.sub(token, 1, n - 9))
    low = tonumber(string.sub(token, n - 8))
  end
  redis.call('HINCRBY', key, 'count', sign)
  if high ~= 0 then redis.call('HINCRBY', key, 'high', sign * high) end
  if low ~= 0 then redis.call('HINCRBY', key, 'low', sign * low) end
end
";

/// How many owned entries a keep-alive checks against their lease hashes, drawn at random
/// (`HRANDFIELD`): the audit that finds a lease record changed behind the session's back (an
/// operator's `HSET`, T6). A session holding at most this many leases has every one checked at
/// every renewal; one holding `n` more has a given entry checked with probability
/// `AUDIT / n` per renewal. Constant work, whatever `n` (S1).
pub(super) const AUDIT: usize = 2;

/// `KEYS[1]` session key, `KEYS[2]` owned hash, `KEYS[3]` joined set, `KEYS[4]` digest hash;
/// `ARGV[1]` session id, `ARGV[2]` lease key prefix, `ARGV[3]` [`AUDIT`].
///
/// Renews the session and its three side keys for the stored ttl, audits `AUDIT` random owned
/// entries (an entry whose lease hash no longer names this session with this token is removed,
/// and its token taken out of the digest, so the engine sees the change), and returns the
/// digest that acquire and release keep up to date. Constant work and a constant-size reply
/// whatever the number of leases (rule S1): `{1, pttl, count, high, low}` (the three sums as
/// decimal strings, exact past 2^53), or `{0, 0, '0', '0', '0'}` when the session is gone
/// (rule S3: it never comes back). The remaining lifetime is the ttl just set with `PEXPIRE`
/// (Redis's clock, rule B2).
const KEEP_ALIVE: &str = r"
local ttl = redis.call('GET', KEYS[1])
if not ttl then
  return {0, 0, '0', '0', '0'}
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
redis.call('PEXPIRE', KEYS[4], ttl)
local pick = redis.call('HRANDFIELD', KEYS[2], ARGV[3], 'WITHVALUES')
for i = 1, #pick, 2 do
  local rec = redis.call('HMGET', ARGV[2] .. pick[i], 'session', 'token')
  if rec[1] ~= ARGV[1] or rec[2] ~= pick[i + 1] then
    redis.call('HDEL', KEYS[2], pick[i])
    digest(KEYS[4], pick[i + 1], -1)
  end
end
local d = redis.call('HMGET', KEYS[4], 'count', 'high', 'low')
return {1, tonumber(ttl), d[1] or '0', d[2] or '0', d[3] or '0'}
";

/// `KEYS[1]` session key, `KEYS[2]` lease hash, `KEYS[3]` owned hash, `KEYS[4]` digest hash,
/// `KEYS[5]` token floor; `ARGV[1]` session id, `ARGV[2]` lease name, `ARGV[3]` session key
/// prefix.
///
/// `{-1, '0'}`: the session is gone (rule S3), nothing acquired. `{0, '0'}`: another live
/// session holds the lease. `{1, token}`: this session holds it; the token grew by one if
/// the lease was free (never held, released, or its holder's session key is gone), and is
/// unchanged if this session already held it (a retry after a lost reply). A new hash starts
/// at the token floor (B3: the highest token of a removed hash), so its first token is above
/// it (T3). A win records its time (`at`, ms on Redis's clock) for the removal of idle
/// leases. The owned entry and the digest follow: an older entry for the name (a term the
/// audit has not yet found ended) leaves the digest as the new one enters it.
const ACQUIRE: &str = r"
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return {-1, '0'}
end
local function own(token)
  local old = redis.call('HGET', KEYS[3], ARGV[2])
  if old ~= token then
    if old then digest(KEYS[4], old, -1) end
    redis.call('HSET', KEYS[3], ARGV[2], token)
    digest(KEYS[4], token, 1)
  end
  if pttl > 0 then
    redis.call('PEXPIRE', KEYS[3], pttl)
    redis.call('PEXPIRE', KEYS[4], pttl)
  end
  return {1, token}
end
local holder = redis.call('HGET', KEYS[2], 'session')
if holder == ARGV[1] then
  return own(redis.call('HGET', KEYS[2], 'token'))
end
if holder and holder ~= '' and redis.call('EXISTS', ARGV[3] .. holder) == 1 then
  return {0, '0'}
end
if redis.call('HEXISTS', KEYS[2], 'token') == 0 then
  local floor = redis.call('GET', KEYS[5])
  if floor then redis.call('HSET', KEYS[2], 'token', floor) end
end
redis.call('HINCRBY', KEYS[2], 'token', 1)
local t = redis.call('TIME')
redis.call('HSET', KEYS[2], 'session', ARGV[1], 'at', t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)))
return own(redis.call('HGET', KEYS[2], 'token'))
";

/// `KEYS[1]` token floor; `ARGV[1]` lease key prefix, `ARGV[2]` name prefix, `ARGV[3]` scan
/// cursor, `ARGV[4]` page size, `ARGV[5]` idle time in ms, `ARGV[6]` session key prefix,
/// `ARGV[7]` the most hashes to remove.
///
/// One `SCAN` step over the lease hashes whose name starts with the prefix (glob characters
/// escaped); removes each that no live session holds, that has no slot ledger (`last_slot`)
/// and whose last win (`at`; none: a hash from before it was recorded) is at least the idle
/// time old, up to the budget; raises the floor to the highest token removed (B3, T3).
/// Returns `{next cursor, removed}` (cursor `0`: the walk is done).
const REMOVE_IDLE: &str = r"
local function glob(s) return (string.gsub(s, '([%*%?%[%]\\])', '\\%1')) end
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idle, budget = tonumber(ARGV[5]), tonumber(ARGV[7])
local r = redis.call('SCAN', ARGV[3], 'MATCH', glob(ARGV[1] .. ARGV[2]) .. '*', 'COUNT', tonumber(ARGV[4]))
local floor = redis.call('GET', KEYS[1]) or '0'
local removed = 0
for _, k in ipairs(r[2]) do
  if removed >= budget then break end
  local v = redis.call('HMGET', k, 'session', 'token', 'last_slot', 'at')
  local free = not v[1] or v[1] == '' or redis.call('EXISTS', ARGV[6] .. v[1]) == 0
  if v[2] and not v[3] and free and (not v[4] or now - tonumber(v[4]) >= idle) then
    if greater(v[2], floor) then floor = v[2] end
    redis.call('DEL', k)
    removed = removed + 1
  end
end
if removed > 0 then redis.call('SET', KEYS[1], floor) end
return {r[1], removed}
";

/// `KEYS[1]` lease hash, `KEYS[2]` owned hash, `KEYS[3]` digest hash; `ARGV[1]` session id,
/// `ARGV[2]` token, `ARGV[3]` lease name, `ARGV[4]` release channel.
///
/// Frees the lease only for the term that holds it (rule T7): clears `session` (the token
/// stays, rule T3), drops the owned entry and its token from the digest, and publishes the
/// name so that candidates take over at once (rule K2). Returns 1 if it released.
const RELEASE: &str = r"
if redis.call('HGET', KEYS[1], 'session') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], 'session')
if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[3])
  digest(KEYS[3], ARGV[2], -1)
end
redis.call('PUBLISH', ARGV[4], ARGV[3])
return 1
";

/// `KEYS[1]` session key, `KEYS[2]` owned hash, `KEYS[3]` joined set, `KEYS[4]` digest hash;
/// `ARGV[1]` session id, `ARGV[2]` lease key prefix, `ARGV[3]` group key prefix, `ARGV[4]`
/// release channel.
///
/// Closes the session (rule S4): frees every lease it still holds and publishes each name,
/// leaves every group it joined, and deletes its keys. Closing a gone session does nothing.
/// Returns how many leases it freed.
const CLOSE_SESSION: &str = r"
local freed = 0
local owned = redis.call('HGETALL', KEYS[2])
for i = 1, #owned, 2 do
  local lease = ARGV[2] .. owned[i]
  if redis.call('HGET', lease, 'session') == ARGV[1] then
    redis.call('HDEL', lease, 'session')
    redis.call('PUBLISH', ARGV[4], owned[i])
    freed = freed + 1
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('SREM', ARGV[3] .. group, ARGV[1])
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return freed
";

/// `KEYS[1]` session key, `KEYS[2]` owned hash, `KEYS[3]` digest hash; `ARGV[1]` session id,
/// `ARGV[2]` lease key prefix.
///
/// The `name, token` pairs of the leases the session holds (flat), each owned entry checked
/// against its lease hash as the keep-alive's audit does, the stale ones removed. It then
/// rewrites the digest from what it listed, so a digest that went wrong by any path (a hand
/// edit, a session from before the digest existed) is right again after one listing. Nothing
/// for a gone session. O(leases): the engine calls it only when a keep-alive's digest differs.
const OWNED: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local out = {}
local owned = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[3])
for i = 1, #owned, 2 do
  local rec = redis.call('HMGET', ARGV[2] .. owned[i], 'session', 'token')
  if rec[1] == ARGV[1] and rec[2] == owned[i + 1] then
    out[#out + 1] = owned[i]
    out[#out + 1] = owned[i + 1]
    digest(KEYS[3], owned[i + 1], 1)
  else
    redis.call('HDEL', KEYS[2], owned[i])
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 and #out > 0 then redis.call('PEXPIRE', KEYS[3], pttl) end
return out
";

/// `KEYS[1]` session key, `KEYS[2]` lease hash; `ARGV[1]` session id, `ARGV[2]` token,
/// `ARGV[3]` slot (decimal `i64`).
///
/// Records `last_slot` only for the live holder's term and only forward. Returns 1 if it
/// did. Slots are compared as decimal strings, exactly over the whole `i64` range.
const CLAIM_SLOT: &str = r"
local function lt(a, b)
  if a == b then return false end
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  return a < b
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local rec = redis.call('HMGET', KEYS[2], 'session', 'token', 'last_slot')
if rec[1] ~= ARGV[1] or rec[2] ~= ARGV[2] then
  return 0
end
if rec[3] and not lt(rec[3], ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[2], 'last_slot', ARGV[3])
return 1
";

/// `KEYS[1]` session key, `KEYS[2]` group set, `KEYS[3]` joined set; `ARGV[1]` session id,
/// `ARGV[2]` group name.
///
/// Adds the session to the group, and the group to the session's joined set (so that a
/// close can leave every group). Returns 0, changing nothing, if the session is gone.
const JOIN_GROUP: &str = r"
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[2])
if pttl > 0 then redis.call('PEXPIRE', KEYS[3], pttl) end
return 1
";

/// `KEYS[1]` group set, `KEYS[2]` joined set; `ARGV[1]` session id, `ARGV[2]` group name.
const LEAVE_GROUP: &str = r"
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
";

/// `KEYS[1]` group set; `ARGV[1]` session key prefix.
///
/// The members whose session key still exists. Members whose session is gone are removed
/// (membership ends with the session; nothing else would remove them after an expiry).
const MEMBERS: &str = r"
local live = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. id) == 1 then
    live[#live + 1] = id
  else
    redis.call('SREM', KEYS[1], id)
  end
end
return live
";

/// Every script, built once (the SHA1 is computed on first use). `Script::invoke_async`
/// sends `EVALSHA` and loads the script on `NOSCRIPT`, so a restarted or flushed server
/// costs one extra round trip per script, once.
pub(super) struct Scripts {
    pub(super) open_session: Lua,
    pub(super) keep_alive: Lua,
    pub(super) acquire: Lua,
    pub(super) release: Lua,
    pub(super) close_session: Lua,
    pub(super) owned: Lua,
    pub(super) claim_slot: Lua,
    pub(super) join_group: Lua,
    pub(super) leave_group: Lua,
    pub(super) members: Lua,
    pub(super) remove_idle: Lua,
}

pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    open_session: Lua::new(OPEN_SESSION),
    keep_alive: with_digest(KEEP_ALIVE),
    acquire: with_digest(ACQUIRE),
    release: with_digest(RELEASE),
    close_session: Lua::new(CLOSE_SESSION),
    owned: with_digest(OWNED),
    claim_slot: Lua::new(CLAIM_SLOT),
    join_group: Lua::new(JOIN_GROUP),
    leave_group: Lua::new(LEAVE_GROUP),
    members: Lua::new(MEMBERS),
    remove_idle: Lua::new(REMOVE_IDLE),
});

/// A script whose body uses the `digest` helper of [`DIGEST_FN`].
fn with_digest(body: &str) -> Lua {
    Lua::new(&format!("{DIGEST_FN}{body}"))
}

/// The exact wrapping sum of tokens from the two partial sums of [`KEEP_ALIVE`].
pub(super) fn token_sum(high: u64, low: u64) -> u64 {
    high.wrapping_mul(1_000_000_000).wrapping_add(low)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::HeldDigest;

    /// The split of [`KEEP_ALIVE`], done in Rust on decimal strings.
    fn split(token: u64) -> (u64, u64) {
        let s = token.to_string();
        if s.len() > 9 {
            let (h, l) = s.split_at(s.len() - 9);
            (h.parse().unwrap_or(0), l.parse().unwrap_or(0))
        } else {
            (0, token)
        }
    }

    #[test]
    fn split_sums_match_the_wrapping_digest() {
        let tokens = [1, 999_999_999, 1_000_000_000, 1 << 53, (1 << 53) + 1, i64::MAX as u64, i64::MAX as u64 - 1];
        let (mut high, mut low) = (0, 0);
        let mut digest = HeldDigest::default();
        for t in tokens {
            let (h, l) = split(t);
            high += h;
            low += l;
            digest.add(t);
        }
        assert_eq!(token_sum(high, low), digest.token_sum);
        // Three maximal tokens overflow u64: the sum wraps as HeldDigest's does.
        let t = i64::MAX as u64;
        let (h, l) = split(t);
        let mut d = HeldDigest::default();
        (0..3).for_each(|_| d.add(t));
        assert_eq!(token_sum(3 * h, 3 * l), d.token_sum);
    }

    #[test]
    fn scripts_hash_distinctly() {
        let s = &*SCRIPTS;
        let hashes = [
            s.open_session.script.get_hash(),
            s.keep_alive.script.get_hash(),
            s.acquire.script.get_hash(),
            s.release.script.get_hash(),
            s.close_session.script.get_hash(),
            s.owned.script.get_hash(),
            s.claim_slot.script.get_hash(),
            s.join_group.script.get_hash(),
            s.leave_group.script.get_hash(),
            s.members.script.get_hash(),
        ];
        let unique: std::collections::HashSet<_> = hashes.iter().collect();
        assert_eq!(unique.len(), hashes.len());
    }
}
