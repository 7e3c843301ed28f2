SELECT simba_finish_runs_v1(CAST(:1 AS JSONB), :2)
