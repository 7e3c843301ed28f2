//! The Redis fencing recipe (rule F2): one Lua script checks the token and writes the value
//! atomically. Token and value keys share the hash tag `{resource}`, so they live in one slot
//! of a Redis Cluster.
//!
//! ```lua
//! -- KEYS[1] = {resource}:token, KEYS[2] = {resource}:value, ARGV[1] = token, ARGV[2] = value
//! local highest = tonumber(redis.call('get', KEYS[1]) or '0')
//! if tonumber(ARGV[1]) < highest then return 0 end
//! redis.call('set', KEYS[1], ARGV[1])
//! redis.call('set', KEYS[2], ARGV[2])
//! return 1
//! ```

use redis::Script;
use redis::aio::ConnectionManager;

const WRITE: &str = r"
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < highest then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
";

/// The Redis recipe: a fenced value per resource name.
#[derive(Clone)]
pub struct RedisFence {
    conn: ConnectionManager,
    script: Script,
}

impl std::fmt::Debug for RedisFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFence").finish_non_exhaustive()
    }
}

impl RedisFence {
    /// Uses `conn`.
    pub fn new(conn: ConnectionManager) -> Self {
        RedisFence { conn, script: Script::new(WRITE) }
    }

    /// Connects to `url` (`redis://...`).
    pub async fn connect(url: &str) -> Result<Self, crate::BoxError> {
        let client = redis::Client::open(url)?;
        Ok(Self::new(ConnectionManager::new(client).await?))
    }

    fn keys(resource: &str) -> (String, String) {
        (format!("{{{resource}}}:token"), format!("{{{resource}}}:value"))
    }

    /// Writes `value` to `resource` with `token`: `Ok(true)` when accepted, `Ok(false)` when
    /// refused as stale (a higher token was accepted before). Equal tokens are accepted.
    pub async fn write(&self, resource: &str, token: u64, value: &str) -> Result<bool, crate::BoxError> {
        let (tk, vk) = Self::keys(resource);
        let mut conn = self.conn.clone();
        let r: i64 = self.script.key(tk).key(vk).arg(token).arg(value).invoke_async(&mut conn).await?;
        Ok(r == 1)
    }

    /// The highest accepted token and the value of `resource`, if it was written.
    pub async fn read(&self, resource: &str) -> Result<Option<(u64, String)>, crate::BoxError> {
        let (tk, vk) = Self::keys(resource);
        let mut conn = self.conn.clone();
        let (t, v): (Option<u64>, Option<String>) = redis::pipe().get(tk).get(vk).query_async(&mut conn).await?;
        Ok(t.map(|t| (t, v.unwrap_or_default())))
    }
}
