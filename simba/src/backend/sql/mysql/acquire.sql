CALL simba_acquire_v1(:1, :2)
