CALL simba_trim_runs_v1(:1, :2)
