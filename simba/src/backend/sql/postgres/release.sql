WITH freed AS (UPDATE simba_lease SET session_id = NULL
WHERE name = :1 AND session_id = :2 AND token = :3 RETURNING name)
SELECT pg_notify('simba_released', name) FROM freed
