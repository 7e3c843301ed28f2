UPDATE simba_session SET expires_at = {now} + ttl_ms WHERE id = :1 AND expires_at > {now}
RETURNING expires_at - {now}
