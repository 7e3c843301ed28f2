CREATE OR REPLACE FUNCTION simba_finish_runs_v1(p_items JSONB, p_keep BIGINT)
RETURNS SETOF BIGINT
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v RECORD;
    v_slot BIGINT;
    v_kind BIGINT;
BEGIN
    FOR v IN SELECT * FROM jsonb_to_recordset(p_items) AS x(i BIGINT, job TEXT, kind BIGINT, slot BIGINT,
        outcome TEXT, attempt BIGINT, attempts BIGINT, session TEXT, node TEXT, token BIGINT, started BIGINT,
        ended BIGINT, error TEXT)
        ORDER BY job, kind, slot
    LOOP
        UPDATE simba_job_run SET outcome = v.outcome, attempt = v.attempt, attempts = v.attempts,
            session_id = v.session, node = v.node, token = v.token, started_ms = v.started, ended_ms = v.ended,
            error = v.error
            WHERE job = v.job AND kind = v.kind AND slot_ms = v.slot AND token = v.token;
        IF FOUND THEN
            RETURN NEXT v.i;
        END IF;
        SELECT slot_ms, kind INTO v_slot, v_kind FROM simba_job_run WHERE job = v.job
            ORDER BY slot_ms DESC, kind DESC LIMIT 1 OFFSET p_keep;
        IF FOUND THEN
            DELETE FROM simba_job_run WHERE job = v.job AND (slot_ms, kind) < (v_slot, v_kind);
        END IF;
    END LOOP;
END
$simba$
