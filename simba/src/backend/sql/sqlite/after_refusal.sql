SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = :2 AND expires_at > {now}),
lease.session_id, lease.token FROM (SELECT 1) one LEFT JOIN simba_lease lease ON lease.name = :1
