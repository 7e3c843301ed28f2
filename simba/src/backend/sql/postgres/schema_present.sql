SELECT to_regclass('simba_session') IS NOT NULL AND to_regclass('simba_lease') IS NOT NULL
AND to_regclass('simba_member') IS NOT NULL AND to_regclass('simba_lease_session') IS NOT NULL
AND to_regprocedure('simba_acquire_v1(text,text)') IS NOT NULL
AND to_regclass('simba_lease_floor') IS NOT NULL AND to_regprocedure('simba_lease_floor_v1()') IS NOT NULL
AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass('simba_lease') AND tgname = 'simba_lease_floor_v1')
