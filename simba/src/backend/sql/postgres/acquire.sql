WITH fast AS (UPDATE simba_lease SET session_id = :2, token = simba_lease.token + 1, acquired_at = {now}
WHERE name = :1 AND session_id IS NULL
AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now}) RETURNING token)
SELECT TRUE AS o_live, token AS o_token FROM fast
UNION ALL SELECT o_live, o_token FROM simba_acquire_v1(:1, :2) WHERE NOT EXISTS (SELECT 1 FROM fast)
