SELECT o_result, o_slot FROM simba_claim_schedule_v2(:1, :2, :3, :4, :5, :6, :7, :8, :9, :10)
