SELECT COUNT(*), COALESCE(SUM(token & 4294967295), 0), COALESCE(SUM(token >> 32), 0)
FROM simba_lease WHERE session_id = :1
