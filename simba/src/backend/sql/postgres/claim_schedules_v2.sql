CREATE OR REPLACE FUNCTION simba_claim_schedules_v2(p_items JSONB, OUT o_i BIGINT, OUT o_result BIGINT,
    OUT o_slot BIGINT)
RETURNS SETOF RECORD
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v RECORD;
BEGIN
    FOR v IN SELECT * FROM jsonb_to_recordset(p_items) AS x(i BIGINT, lease TEXT, session TEXT, token BIGINT,
        job TEXT, grp TEXT, kind BIGINT, slot BIGINT, node TEXT, started BIGINT, attempts BIGINT)
        ORDER BY job, kind, slot
    LOOP
        o_i := v.i;
        SELECT c.o_result, c.o_slot INTO o_result, o_slot FROM simba_claim_schedule_v2(v.lease, v.session,
            v.token, v.job, v.grp, v.kind, v.slot, v.node, v.started, v.attempts) c;
        RETURN NEXT;
    END LOOP;
END
$simba$
