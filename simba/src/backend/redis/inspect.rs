//! `inspect` on Redis: one read-only Lua script that walks the session, lease and group keys
//! with `SCAN` (ADR 0007). Atomic, like every script; it blocks the server for the walk, a
//! few milliseconds per thousand keys, so it suits an operator's tool, not a hot path.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use redis::Script;

use super::RedisBackend;
use crate::backend::{BackendResult, GroupInfo, LeaseInfo, SessionId, SessionInfo, StoreSnapshot};

/// `ARGV[1]` the key prefix with its trailing `:`. Returns `{seconds, microseconds,
/// sessions, leases, members}` where sessions is `[id, pttl]*`, leases `[name, session,
/// token]*` (held leases only) and members `[group, session]*` (live sessions only), all as
/// strings. Writes nothing.
const INSPECT: &str = r"
local p = ARGV[1]
local glob = string.gsub(p, '([%*%?%[%]\\])', '\\%1')
local now = redis.call('TIME')
local sessions, leases, members = {}, {}, {}
local function walk(prefix, f)
  local cursor = '0'
  repeat
    local r = redis.call('SCAN', cursor, 'MATCH', glob .. prefix .. '*', 'COUNT', 1000)
    cursor = r[1]
    for _, k in ipairs(r[2]) do f(k, string.sub(k, #p + #prefix + 1)) end
  until cursor == '0'
end
local function live(id) return redis.call('EXISTS', p .. 'session:' .. id) == 1 end
walk('session:', function(k, id)
  local ttl = redis.call('PTTL', k)
  if ttl > 0 then
    table.insert(sessions, id)
    table.insert(sessions, tostring(ttl))
  end
end)
walk('lease:', function(k, name)
  local v = redis.call('HMGET', k, 'session', 'token')
  if v[1] and live(v[1]) then
    table.insert(leases, name)
    table.insert(leases, v[1])
    table.insert(leases, tostring(v[2]))
  end
end)
walk('group:', function(k, group)
  for _, m in ipairs(redis.call('SMEMBERS', k)) do
    if live(m) then
      table.insert(members, group)
      table.insert(members, m)
    end
  end
end)
return {now[1], now[2], sessions, leases, members}
";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(INSPECT));

type Reply = (String, String, Vec<String>, Vec<String>, Vec<String>);

impl RedisBackend {
    pub(super) async fn inspect_store(&self) -> BackendResult<StoreSnapshot> {
        let what = "inspect the store";
        let prefix = format!("{}:", self.keys().prefix);
        let (secs, micros, s, l, m): Reply = self.eval(&SCRIPT, [], [prefix.as_str()], what).await?;
        let num = |v: &str| v.parse::<u64>().map_err(|_| self.protocol(what, v));
        let taken_at = SystemTime::UNIX_EPOCH + Duration::from_secs(num(&secs)?) + Duration::from_micros(num(&micros)?);
        let mut sessions = Vec::new();
        for c in s.chunks_exact(2) {
            let remaining = Some(Duration::from_millis(num(&c[1])?));
            sessions.push(SessionInfo { id: SessionId::new(c[0].as_str()), age: None, remaining });
        }
        let mut leases = Vec::new();
        for c in l.chunks_exact(3) {
            leases.push(LeaseInfo {
                name: c[0].clone(),
                session: SessionId::new(c[1].as_str()),
                token: num(&c[2])?,
                acquired_at: None,
            });
        }
        let mut groups: Vec<GroupInfo> = Vec::new();
        for c in m.chunks_exact(2) {
            let id = SessionId::new(c[1].as_str());
            match groups.iter_mut().find(|g| g.name == c[0]) {
                Some(g) => g.members.push(id),
                None => groups.push(GroupInfo { name: c[0].clone(), members: vec![id] }),
            }
        }
        Ok(StoreSnapshot { taken_at: Some(taken_at), sessions, leases, groups }.normalized())
    }
}

impl RedisBackend {
    /// The server's `maxmemory-policy`, or `None` where `CONFIG` is disabled (managed
    /// services), for `simba check`.
    pub async fn eviction_policy(&self) -> BackendResult<Option<String>> {
        let mut conn = self.inner.conn.clone();
        let reply: redis::RedisResult<std::collections::HashMap<String, String>> =
            redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy").query_async(&mut conn).await;
        match reply {
            Ok(map) => Ok(map.get("maxmemory-policy").cloned()),
            Err(e) if e.kind() == redis::ErrorKind::Io => Err(crate::backend::BackendError::unavailable(
                format!("{}: CONFIG GET failed", self.inner.description),
                e,
            )),
            Err(_) => Ok(None),
        }
    }
}

impl crate::backend::Health for RedisBackend {
    /// `maxmemory-policy` must be `noeviction`: an evicted key resets a lease's tokens or
    /// frees it early.
    fn health_checks(&self, timeout: Duration) -> crate::backend::HealthFuture<'_> {
        use crate::backend::{CheckOutcome, HealthCheck};
        const NAME: &str = "redis maxmemory-policy";
        Box::pin(async move {
            let check = crate::backend::health::within(NAME, timeout, async {
                match self.eviction_policy().await {
                    Ok(Some(p)) if p == "noeviction" => HealthCheck::new(NAME, CheckOutcome::Pass, "noeviction"),
                    Ok(Some(p)) => HealthCheck::new(
                        NAME,
                        CheckOutcome::Fail,
                        format!(
                            "{p}: evicted keys reset tokens and free leases early; set maxmemory-policy noeviction"
                        ),
                    ),
                    Ok(None) => HealthCheck::new(NAME, CheckOutcome::Skip, "CONFIG is disabled on this server"),
                    Err(e) => HealthCheck::new(NAME, CheckOutcome::Fail, crate::backend::health::chain(&e)),
                }
            });
            vec![check.await]
        })
    }
}
