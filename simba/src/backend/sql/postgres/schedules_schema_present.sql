SELECT (SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema()
AND tablename IN ('simba_schedule', 'simba_schedule_space', 'simba_schedule_change', 'simba_schedule_audit'))
+ (SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname IN
('simba_schedule_by_part', 'simba_schedule_by_handler', 'simba_schedule_audit_by_target',
'simba_schedule_audit_by_space'))
