CALL simba_job_control_v1(:1, :2, :3)
