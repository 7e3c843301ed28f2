//! A Lua script and whether it writes. With [`RedisOptions::wait_replicas`](super::RedisOptions::wait_replicas)
//! set, a `WAIT` follows each call of a script that writes (rule B8) and none follows a
//! script that only reads: a read has nothing for the replicas to acknowledge.

use redis::Script;

/// The commands a script may call and still count as read-only. Any other command, or a
/// command named by a variable, makes the script a writing one: unknown means writes.
const READS: &[&str] = &[
    "EXISTS",
    "GET",
    "HGET",
    "HGETALL",
    "HKEYS",
    "HMGET",
    "HRANDFIELD",
    "LINDEX",
    "LLEN",
    "PTTL",
    "SCAN",
    "SMEMBERS",
    "TIME",
    "ZCARD",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZREVRANGE",
];

/// A script, loaded on a server the first time it runs there, and whether it writes.
pub(super) struct Lua {
    pub(super) script: Script,
    pub(super) writes: bool,
}

impl Lua {
    /// The script of `body`; whether it writes is read from the commands it calls.
    pub(super) fn new(body: &str) -> Self {
        Lua { script: Script::new(body), writes: writes(body) }
    }
}

/// Whether `body` calls any command outside [`READS`] (or one named by a variable).
fn writes(body: &str) -> bool {
    ["redis.call(", "redis.pcall("].iter().any(|call| {
        body.split(call).skip(1).any(|rest| {
            let rest = rest.trim_start();
            let Some(quote) = rest.chars().next().filter(|c| *c == '\'' || *c == '"') else { return true };
            let name: String = rest[1..].chars().take_while(|c| *c != quote).collect();
            !READS.contains(&name.to_ascii_uppercase().as_str())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b8_a_script_writes_when_it_calls_anything_but_a_read() {
        assert!(!writes("return redis.call('HMGET', KEYS[1], 'a')"));
        assert!(!writes("local x = redis.call(\"exists\", KEYS[1]) return redis.call('PTTL', KEYS[1])"));
        assert!(writes("redis.call('EXISTS', KEYS[1]) redis.call('HSET', KEYS[1], 'a', 1)"));
        assert!(writes("redis.pcall('PUBLISH', KEYS[1], 'x')"));
        assert!(writes("local cmd = 'DEL' redis.call(cmd, KEYS[1])"));
        assert!(!writes("return 1"));
    }

    /// The scripts that only read send no `WAIT`; every other one does (rule B8).
    #[test]
    fn b8_only_the_reading_scripts_skip_the_wait() {
        let s = &super::super::scripts::SCRIPTS;
        let j = &super::super::schedule_scripts::SCRIPTS;
        let writing = [&s.open_session, &s.keep_alive, &s.acquire, &s.release, &s.close_session, &s.owned];
        assert!(writing.iter().all(|l| l.writes));
        assert!([&s.claim_slot, &s.join_group, &s.leave_group, &s.members].iter().all(|l| l.writes));
        assert!([&j.create, &j.update, &j.delete, &j.set_paused, &j.record].iter().all(|l| l.writes));
        assert!(!j.list.writes);
    }
}
