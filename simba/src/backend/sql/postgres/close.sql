WITH freed AS (UPDATE simba_lease SET session_id = NULL
WHERE session_id = :1 RETURNING name),
notified AS (SELECT pg_notify('simba_released', name) FROM freed),
left_groups AS (DELETE FROM simba_member WHERE session_id = :1 RETURNING 1)
DELETE FROM simba_session WHERE id = :1
AND (SELECT count(*) FROM notified) >= 0 AND (SELECT count(*) FROM left_groups) >= 0
