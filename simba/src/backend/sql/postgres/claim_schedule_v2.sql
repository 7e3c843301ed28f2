CREATE OR REPLACE FUNCTION simba_claim_schedule_v2(p_lease TEXT, p_session TEXT,
    p_token BIGINT, p_job TEXT, p_group TEXT, p_kind BIGINT, p_slot BIGINT, p_node TEXT, p_started BIGINT,
    p_attempts BIGINT, OUT o_result BIGINT, OUT o_slot BIGINT)
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v_paused BOOLEAN;
    v_last BIGINT;
    v_group_paused BIGINT;
BEGIN
    o_result := 0;
    PERFORM 1 FROM simba_lease WHERE name = p_lease AND session_id = p_session AND token = p_token
        AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}) FOR SHARE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
        VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON CONFLICT DO NOTHING;
    IF p_group <> p_job THEN
        SELECT paused INTO v_group_paused FROM simba_job WHERE job = p_group FOR SHARE;
    END IF;
    SELECT paused <> 0, last_slot INTO v_paused, v_last FROM simba_job WHERE job = p_job FOR UPDATE;
    v_paused := v_paused OR COALESCE(v_group_paused, 0) <> 0;
    IF v_last >= p_slot THEN
        o_result := 1;
        RETURN;
    END IF;
    UPDATE simba_job SET last_slot = p_slot WHERE job = p_job;
    IF v_paused THEN
        o_result := 2;
        RETURN;
    END IF;
    INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token,
        started_ms, ended_ms, error)
        VALUES (p_job, p_kind, p_slot, 'running', 1, p_attempts, p_session, p_node, p_token, p_started,
        NULL, NULL)
        ON CONFLICT (job, kind, slot_ms) DO UPDATE SET outcome = EXCLUDED.outcome, attempt = EXCLUDED.attempt,
        attempts = EXCLUDED.attempts, session_id = EXCLUDED.session_id, node = EXCLUDED.node,
        token = EXCLUDED.token, started_ms = EXCLUDED.started_ms, ended_ms = NULL, error = NULL;
    o_result := 3;
    o_slot := p_slot;
END
$simba$
