UPDATE simba_lease SET session_id = :2, token = LAST_INSERT_ID(token + 1), acquired_at = {now}
WHERE name = :1 AND session_id IS NULL
AND EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})
