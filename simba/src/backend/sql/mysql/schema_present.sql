SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()
AND table_name IN ('simba_session', 'simba_lease', 'simba_lease_floor', 'simba_member')), @@session.time_zone,
CAST(@@global.innodb_flush_log_at_trx_commit AS SIGNED)
