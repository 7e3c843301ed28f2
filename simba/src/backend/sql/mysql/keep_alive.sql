UPDATE simba_session SET expires_at = {now} + ttl_ms WHERE id = '{id}' AND expires_at > {now};
SELECT s.expires_at - {now}, (SELECT COUNT(*) = {count} AND MOD(COALESCE(SUM(token & 4294967295), 0)
+ MOD(COALESCE(SUM(token >> 32), 0), 4294967296) * 4294967296, 18446744073709551616) = {sum}
FROM simba_lease WHERE session_id = '{id}') FROM simba_session s WHERE s.id = '{id}' AND s.expires_at > {now}
