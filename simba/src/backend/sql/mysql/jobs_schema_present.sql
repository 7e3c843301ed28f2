SELECT CAST((SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name IN ('simba_job', 'simba_job_run', 'simba_job_version', 'simba_registry', 'simba_job_request',
'simba_job_run_key'))
+ (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE()
AND routine_name IN ('simba_claim_run_v2', 'simba_job_control_v1', 'simba_trim_runs_v1', 'simba_claim_schedule_v1')) AS SIGNED)
