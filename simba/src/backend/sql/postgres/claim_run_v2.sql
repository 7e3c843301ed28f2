CREATE OR REPLACE FUNCTION simba_claim_run_v2(p_lease TEXT, p_session TEXT,
    p_token BIGINT, p_job TEXT, p_group TEXT, p_kind BIGINT, p_slot BIGINT, p_node TEXT, p_started BIGINT,
    p_attempts BIGINT, OUT o_result BIGINT, OUT o_slot BIGINT)
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v_looked BOOLEAN;
    v_lease_slot BIGINT;
    v_paused BOOLEAN;
    v_last BIGINT;
    v_own_id BIGINT;
    v_own_ms BIGINT;
    v_taken BIGINT;
    v_group_taken BIGINT;
    v_group_paused BIGINT;
    v_group_id BIGINT;
    v_group_ms BIGINT;
    v_own_pending BIGINT;
    v_group_pending BIGINT;
BEGIN
    o_result := 0;
    SELECT TRUE, last_slot INTO v_looked, v_lease_slot FROM simba_lease
        WHERE name = p_lease AND session_id = p_session AND token = p_token;
    IF v_looked IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
            VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON CONFLICT DO NOTHING;
        PERFORM 1 FROM simba_job WHERE job = p_job OR job = p_group ORDER BY job FOR UPDATE;
        SELECT paused <> 0, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id
            INTO v_paused, v_last, v_own_id, v_own_ms, v_taken, v_group_taken FROM simba_job WHERE job = p_job;
        IF p_group <> p_job THEN
            SELECT paused, trigger_id, trigger_ms INTO v_group_paused, v_group_id, v_group_ms
                FROM simba_job WHERE job = p_group;
        END IF;
        v_paused := v_paused OR COALESCE(v_group_paused, 0) <> 0;
        IF p_kind <> 1 THEN
            IF v_last >= p_slot OR v_lease_slot >= p_slot THEN
                o_result := 1;
                RAISE SQLSTATE 'SB001';
            END IF;
            UPDATE simba_job SET last_slot = p_slot WHERE job = p_job;
            IF v_paused THEN
                UPDATE simba_lease SET last_slot = p_slot WHERE name = p_lease AND session_id = p_session
                    AND token = p_token AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now});
                IF NOT FOUND THEN
                    o_result := 0;
                    RAISE SQLSTATE 'SB001';
                END IF;
                o_result := 2;
                RETURN;
            END IF;
            o_slot := p_slot;
        ELSE
            IF v_own_id > v_taken THEN
                v_own_pending := v_own_ms;
            END IF;
            IF v_group_id > v_group_taken THEN
                v_group_pending := v_group_ms;
            END IF;
            o_slot := GREATEST(v_own_pending, v_group_pending);
            IF o_slot IS NULL THEN
                o_result := 1;
                RAISE SQLSTATE 'SB001';
            END IF;
            IF v_paused THEN
                o_result := 2;
                o_slot := NULL;
                RAISE SQLSTATE 'SB001';
            END IF;
            UPDATE simba_job SET taken_id = v_own_id, group_taken_id = COALESCE(v_group_id, v_group_taken)
                WHERE job = p_job;
            UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
        END IF;
        DELETE FROM simba_job_run WHERE job = p_job AND kind = p_kind AND slot_ms = o_slot;
        INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token,
            started_ms, ended_ms, error)
            VALUES (p_job, p_kind, o_slot, 'running', 1, p_attempts, p_session, p_node, p_token, p_started, NULL, NULL);
        IF p_kind <> 1 THEN
            UPDATE simba_lease SET last_slot = p_slot WHERE name = p_lease AND session_id = p_session
                AND token = p_token AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now});
        ELSE
            UPDATE simba_lease SET token = token WHERE name = p_lease AND session_id = p_session
                AND token = p_token AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now});
        END IF;
        IF NOT FOUND THEN
            o_result := 0;
            o_slot := NULL;
            RAISE SQLSTATE 'SB001';
        END IF;
        o_result := 3;
    EXCEPTION WHEN SQLSTATE 'SB001' THEN
        NULL;
    END;
END
$simba$
