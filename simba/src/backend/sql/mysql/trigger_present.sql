SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = DATABASE()
AND trigger_name = 'simba_lease_floor_v1'
