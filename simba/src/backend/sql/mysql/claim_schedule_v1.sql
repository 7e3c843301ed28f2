CREATE PROCEDURE IF NOT EXISTS simba_claim_schedule_v1(
    IN p_lease VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_session VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_token BIGINT,
    IN p_job VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_group VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_kind BIGINT, IN p_slot BIGINT,
    IN p_node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_started BIGINT, IN p_attempts BIGINT)
MODIFIES SQL DATA
claim: BEGIN
    DECLARE v_result BIGINT DEFAULT 0;
    DECLARE v_slot BIGINT DEFAULT NULL;
    DECLARE v_looked BIGINT DEFAULT 0;
    DECLARE v_paused BIGINT DEFAULT 0;
    DECLARE v_last BIGINT DEFAULT NULL;
    DECLARE v_group_paused BIGINT DEFAULT NULL;
    DECLARE v_fenced BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    body: BEGIN
        SELECT COUNT(*) INTO v_looked FROM simba_lease
            WHERE name = p_lease AND session_id = p_session AND token = p_token;
        IF v_looked = 0 THEN
            ROLLBACK;
            LEAVE body;
        END IF;
        INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
            VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON DUPLICATE KEY UPDATE job = job;
        IF p_group <> p_job THEN
            SELECT MAX(paused) INTO v_group_paused FROM simba_job WHERE job = p_group LOCK IN SHARE MODE;
        END IF;
        SELECT paused, last_slot INTO v_paused, v_last FROM simba_job WHERE job = p_job FOR UPDATE;
        IF v_last IS NOT NULL AND v_last >= p_slot THEN
            SET v_result = 1;
            ROLLBACK;
            LEAVE body;
        END IF;
        IF v_paused <> 0 OR COALESCE(v_group_paused, 0) <> 0 THEN
            SET v_paused = 1;
        ELSE
            SET v_paused = 0;
        END IF;
        UPDATE simba_job SET last_slot = p_slot WHERE job = p_job;
        IF v_paused = 0 THEN
            DELETE FROM simba_job_run WHERE job = p_job AND kind = p_kind AND slot_ms = p_slot;
            INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token,
                started_ms, ended_ms, error)
                VALUES (p_job, p_kind, p_slot, 'running', 1, p_attempts, p_session, p_node, p_token, p_started,
                        NULL, NULL);
        END IF;
        SELECT COUNT(*) INTO v_fenced FROM simba_lease WHERE name = p_lease AND session_id = p_session
            AND token = p_token AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now})
            LOCK IN SHARE MODE;
        IF v_fenced = 0 THEN
            ROLLBACK;
            LEAVE body;
        END IF;
        COMMIT;
        IF v_paused <> 0 THEN
            SET v_result = 2;
        ELSE
            SET v_result = 3;
            SET v_slot = p_slot;
        END IF;
    END body;
    SELECT v_result, v_slot;
END claim
