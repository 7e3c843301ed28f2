//! `inspect` on Redis: a read-only Lua script called once per page of the key space (ADR 0007,
//! rule O13). Each call runs one `SCAN` step of [`INSPECT_PAGE`] over the prefix's keys and
//! reads the session, lease and group keys it found; the client calls it again with the
//! cursor until the walk ends. A script blocks the server while it runs, so a page stays short
//! (about a millisecond) whatever the store's size, and renewals interleave between pages.
//!
//! Not atomic across pages: a lease taken or released during the walk may be seen in either
//! state (SCAN returns every key present for the whole walk at least once), which a view of a
//! live store tolerates; a session is reported live if it was when its page was read.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use super::lua::Lua;

use super::RedisBackend;
use crate::backend::{BackendResult, GroupInfo, LeaseInfo, SessionId, SessionInfo, StoreSnapshot};

/// How many keys one call of the script asks `SCAN` for (its `COUNT`).
pub(crate) const INSPECT_PAGE: usize = 1000;

/// `ARGV[1]` the key prefix with its trailing `:`, `ARGV[2]` the cursor (`0` to start),
/// `ARGV[3]` the page size. Returns `{seconds, microseconds, next cursor, sessions, leases,
/// members}` where sessions is `[id, pttl]*`, leases `[name, session, token]*` (held leases
/// only) and members `[group, session]*` (live sessions only), all as strings; the next
/// cursor is `0` when the walk is done. Writes nothing.
const INSPECT: &str = r"
local p = ARGV[1]
local glob = string.gsub(p, '([%*%?%[%]\])', '\%1')
local now = redis.call('TIME')
local sessions, leases, members = {}, {}, {}
local function live(id) return redis.call('EXISTS', p .. 'session:' .. id) == 1 end
local function under(k, kind)
  local head = p .. kind
  if string.sub(k, 1, #head) == head then return string.sub(k, #head + 1) end
  return nil
end
local r = redis.call('SCAN', ARGV[2], 'MATCH', glob .. '*', 'COUNT', tonumber(ARGV[3]))
for _, k in ipairs(r[2]) do
  local id = under(k, 'session:')
  local name = under(k, 'lease:')
  local group = under(k, 'group:')
  if id then
    local ttl = redis.call('PTTL', k)
    if ttl > 0 then
      table.insert(sessions, id)
      table.insert(sessions, tostring(ttl))
    end
  elseif name then
    local v = redis.call('HMGET', k, 'session', 'token')
    if v[1] and live(v[1]) then
      table.insert(leases, name)
      table.insert(leases, v[1])
      table.insert(leases, tostring(v[2]))
    end
  elseif group then
    for _, m in ipairs(redis.call('SMEMBERS', k)) do
      if live(m) then
        table.insert(members, group)
        table.insert(members, m)
      end
    end
  end
end
return {now[1], now[2], r[1], sessions, leases, members}
";

static SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(INSPECT));

type Reply = (String, String, String, Vec<String>, Vec<String>, Vec<String>);

impl RedisBackend {
    pub(super) async fn inspect_store(&self) -> BackendResult<StoreSnapshot> {
        self.inspect_in_pages(INSPECT_PAGE).await.map(|(snap, _)| snap)
    }

    /// The walk, `page` keys per call: the snapshot and how many calls it took.
    pub(crate) async fn inspect_in_pages(&self, page: usize) -> BackendResult<(StoreSnapshot, usize)> {
        let what = "inspect the store";
        let prefix = format!("{}:", self.keys().prefix);
        let page = page.max(1).to_string();
        let num = |v: &str| v.parse::<u64>().map_err(|_| self.protocol(what, v));
        let (mut cursor, mut calls, mut taken_at) = ("0".to_owned(), 0, None);
        let (mut sessions, mut leases, mut members) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            let (secs, micros, next, s, l, m): Reply =
                self.eval(&SCRIPT, [], [prefix.as_str(), cursor.as_str(), page.as_str()], what).await?;
            calls += 1;
            if taken_at.is_none() {
                // The walk's first instant: a lease seen later was held at least then or after.
                taken_at = Some(
                    SystemTime::UNIX_EPOCH + Duration::from_secs(num(&secs)?) + Duration::from_micros(num(&micros)?),
                );
            }
            for c in s.chunks_exact(2) {
                let remaining = Some(Duration::from_millis(num(&c[1])?));
                sessions.push(SessionInfo { id: SessionId::new(c[0].as_str()), age: None, remaining });
            }
            for c in l.chunks_exact(3) {
                let token = num(&c[2])?;
                leases.push(LeaseInfo {
                    name: c[0].clone(),
                    session: SessionId::new(c[1].as_str()),
                    token,
                    acquired_at: None,
                });
            }
            members.extend(m.chunks_exact(2).map(|c| (c[0].clone(), SessionId::new(c[1].as_str()))));
            if next == "0" {
                break;
            }
            cursor = next;
        }
        let mut groups: Vec<GroupInfo> = Vec::new();
        for (name, id) in members {
            match groups.iter_mut().find(|g| g.name == name) {
                Some(g) => g.members.push(id),
                None => groups.push(GroupInfo { name, members: vec![id] }),
            }
        }
        let mut snap = StoreSnapshot { taken_at, sessions, leases, groups }.normalized();
        // SCAN may return a key twice across pages.
        snap.leases.dedup_by(|a, b| a.name == b.name);
        Ok((snap, calls))
    }
}

impl RedisBackend {
    /// The server's `maxmemory-policy`, or `None` where `CONFIG` is disabled (managed
    /// services), for `simba check`.
    pub async fn eviction_policy(&self) -> BackendResult<Option<String>> {
        let mut conn = self.inner.link.conn();
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

impl RedisBackend {
    /// How many replicas follow the server now (`INFO replication`'s `connected_slaves`).
    pub async fn connected_replicas(&self) -> BackendResult<u32> {
        let mut conn = self.inner.link.conn();
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.call_failed("read INFO replication", e))?;
        let n = info.lines().find_map(|l| l.trim().strip_prefix("connected_slaves:")).and_then(|v| v.parse().ok());
        Ok(n.unwrap_or(0))
    }

    /// Rule B8 for `simba check`: replicas that a failover could promote without
    /// `wait_replicas` fail (a promotion can grant a told token again), as does a
    /// `wait_replicas` above the replicas that follow (every write would fail).
    async fn replication_check(&self) -> crate::backend::HealthCheck {
        use crate::backend::{CheckOutcome, HealthCheck};
        const NAME: &str = "redis replication";
        let wait = self.inner.wait.map_or(0, |(n, _)| n);
        match self.connected_replicas().await {
            Ok(0) if wait == 0 => HealthCheck::new(NAME, CheckOutcome::Pass, "no replica follows this server"),
            Ok(n) if wait == 0 => HealthCheck::new(
                NAME,
                CheckOutcome::Fail,
                format!(
                    "{n} replica(s) follow this server and wait_replicas is 0: a failover that promotes one can grant \
                     a told token again; add wait_replicas=1 to the URL"
                ),
            ),
            Ok(n) if n < wait => HealthCheck::new(
                NAME,
                CheckOutcome::Fail,
                format!(
                    "wait_replicas={wait} but {n} replica(s) follow this server: every write fails; lower it or add replicas"
                ),
            ),
            Ok(n) => HealthCheck::new(
                NAME,
                CheckOutcome::Pass,
                format!("{n} replica(s); every write waits for {wait} (wait_replicas)"),
            ),
            Err(e) => HealthCheck::new(NAME, CheckOutcome::Fail, crate::backend::health::chain(&e)),
        }
    }
}

impl crate::backend::Health for RedisBackend {
    /// `maxmemory-policy` must be `noeviction`: an evicted key resets a lease's tokens or
    /// frees it early. Replicas need `wait_replicas` (rule B8).
    fn health_checks(&self, timeout: Duration) -> crate::backend::HealthFuture<'_> {
        use crate::backend::{CheckOutcome, HealthCheck};
        const NAME: &str = "redis maxmemory-policy";
        Box::pin(async move {
            let replication =
                crate::backend::health::within("redis replication", timeout, self.replication_check()).await;
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
            vec![check.await, replication]
        })
    }
}
