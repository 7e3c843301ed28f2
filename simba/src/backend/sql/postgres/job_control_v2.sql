CREATE OR REPLACE FUNCTION simba_job_control_v2(p_job TEXT, p_op BIGINT,
    p_value BIGINT, OUT o_answer BIGINT)
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v_paused BIGINT;
    v_trigger BIGINT;
BEGIN
    INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
        VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON CONFLICT DO NOTHING;
    SELECT paused, trigger_id INTO v_paused, v_trigger FROM simba_job WHERE job = p_job FOR UPDATE;
    IF p_op = 0 THEN
        o_answer := CASE WHEN v_paused <> 0 THEN 1 ELSE 0 END;
        IF o_answer <> p_value THEN
            UPDATE simba_job SET paused = p_value WHERE job = p_job;
            UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
            PERFORM pg_notify('simba_job_control', p_job);
        END IF;
    ELSE
        UPDATE simba_job SET trigger_ms = CASE
                WHEN trigger_ms IS NULL THEN p_value
                WHEN trigger_id > taken_id THEN GREATEST(trigger_ms, p_value)
                WHEN trigger_ms >= p_value THEN trigger_ms + 1
                ELSE p_value END,
            trigger_id = trigger_id + 1 WHERE job = p_job;
        UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
        PERFORM pg_notify('simba_job_control', p_job);
        o_answer := v_trigger + 1;
    END IF;
END
$simba$
