SELECT o_answer FROM simba_job_control_v2(:1, :2, :3)
