INSERT INTO simba_lease (name, session_id, token, acquired_at, last_slot) SELECT :1, :2,
COALESCE((SELECT token FROM simba_lease_floor WHERE id = 1), 0) + 1, {now}, NULL
WHERE EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now})
ON CONFLICT (name) DO UPDATE SET session_id = excluded.session_id,
token = simba_lease.token + 1, acquired_at = excluded.acquired_at
WHERE simba_lease.session_id IS NULL OR NOT EXISTS (SELECT 1 FROM simba_session s
WHERE s.id = simba_lease.session_id AND s.expires_at > {now}) RETURNING token
