SELECT COUNT(*) FROM sqlite_master WHERE (type = 'table' AND name IN
('simba_schedule', 'simba_schedule_space', 'simba_schedule_change', 'simba_schedule_audit'))
OR (type = 'index' AND name IN ('simba_schedule_by_part', 'simba_schedule_by_handler',
'simba_schedule_audit_by_target', 'simba_schedule_audit_by_space'))
