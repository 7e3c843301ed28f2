CALL simba_claim_run_v2(:1, :2, :3, :4, :5, :6, :7, :8, :9, :10)
