WITH dead AS (SELECT id FROM simba_session WHERE expires_at < {now} - {grace}),
cleared AS (UPDATE simba_lease SET session_id = NULL WHERE session_id IN (SELECT id FROM dead) RETURNING 1),
left_groups AS (DELETE FROM simba_member WHERE session_id IN (SELECT id FROM dead) RETURNING 1),
collected AS (DELETE FROM simba_session WHERE id IN (SELECT id FROM dead)
AND (SELECT count(*) FROM cleared) >= 0 AND (SELECT count(*) FROM left_groups) >= 0 RETURNING 1)
INSERT INTO simba_session (id, expires_at, ttl_ms, created_at)
SELECT '{id}', now_ms + {ttl}, {ttl}, now_ms FROM (SELECT {now} AS now_ms) clock
WHERE (SELECT count(*) FROM collected) >= 0
