SELECT COUNT(*) FROM sqlite_master WHERE (type = 'table' AND name IN
('simba_job', 'simba_job_run', 'simba_job_version', 'simba_registry', 'simba_job_request',
'simba_job_run_key'))
OR (type = 'index' AND name = 'simba_job_run_order')
