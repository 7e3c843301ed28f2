CREATE PROCEDURE IF NOT EXISTS simba_job_control_v1(
    IN p_job VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_op BIGINT, IN p_value BIGINT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_paused BIGINT DEFAULT 0;
    DECLARE v_trigger BIGINT DEFAULT 0;
    DECLARE v_answer BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
        VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON DUPLICATE KEY UPDATE job = job;
    SELECT paused, trigger_id INTO v_paused, v_trigger FROM simba_job WHERE job = p_job FOR UPDATE;
    IF p_op = 0 THEN
        SET v_answer = CASE WHEN v_paused <> 0 THEN 1 ELSE 0 END;
        IF v_answer <> p_value THEN
            UPDATE simba_job SET paused = p_value WHERE job = p_job;
            UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
        END IF;
    ELSE
        UPDATE simba_job SET trigger_ms = CASE
                WHEN trigger_ms IS NULL THEN p_value
                WHEN trigger_id > taken_id THEN CASE WHEN trigger_ms > p_value THEN trigger_ms ELSE p_value END
                WHEN trigger_ms >= p_value THEN trigger_ms + 1
                ELSE p_value END,
            trigger_id = trigger_id + 1 WHERE job = p_job;
        UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
        SET v_answer = v_trigger + 1;
    END IF;
    COMMIT;
    SELECT v_answer;
END
