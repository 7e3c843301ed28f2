SELECT o_i, o_result, o_slot FROM simba_claim_schedules_v2(CAST(:1 AS JSONB))
