WITH renewed AS (UPDATE simba_session SET expires_at = {now} + ttl_ms
WHERE id = :1 AND expires_at > {now} RETURNING expires_at),
listed AS (SELECT count(*) AS n, COALESCE(sum(token & 4294967295), 0) AS low,
COALESCE(sum(token >> 32), 0) AS high FROM simba_lease WHERE session_id = :1)
SELECT renewed.expires_at - {now}, listed.n, listed.low::bigint, listed.high::bigint FROM renewed, listed
