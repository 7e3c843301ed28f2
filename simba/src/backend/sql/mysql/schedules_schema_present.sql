SELECT CAST((SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN
('simba_schedule', 'simba_schedule_space', 'simba_schedule_change', 'simba_schedule_audit')) AS SIGNED)
