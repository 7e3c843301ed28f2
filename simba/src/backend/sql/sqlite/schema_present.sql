SELECT COUNT(*) FROM sqlite_master WHERE (type = 'table' AND name IN
('simba_session', 'simba_lease', 'simba_lease_floor', 'simba_member')) OR (type = 'index' AND name = 'simba_lease_session')
