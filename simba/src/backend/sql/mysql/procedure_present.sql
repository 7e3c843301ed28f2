SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE()
AND routine_type = 'PROCEDURE' AND routine_name = 'simba_acquire_v1'
