SELECT (SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema()
AND tablename IN ('simba_job', 'simba_job_run', 'simba_job_version', 'simba_registry', 'simba_job_request',
'simba_job_run_key')) + (SELECT COUNT(*) FROM pg_proc
WHERE pronamespace = current_schema()::regnamespace
AND proname IN ('simba_claim_run_v2', 'simba_job_control_v2', 'simba_claim_schedule_v2',
'simba_claim_schedules_v2', 'simba_finish_runs_v1')) + (SELECT COUNT(*) FROM pg_indexes
WHERE schemaname = current_schema() AND indexname = 'simba_job_run_order')
