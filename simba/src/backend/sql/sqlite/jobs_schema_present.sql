SELECT COUNT(*) FROM sqlite_master WHERE (type = 'table' AND name IN
('simba_job', 'simba_job_run', 'simba_job_version', 'simba_registry'))
OR (type = 'index' AND name = 'simba_job_run_order')
