CREATE PROCEDURE IF NOT EXISTS simba_claim_run_v2(
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
    DECLARE v_lease_slot BIGINT DEFAULT NULL;
    DECLARE v_paused BIGINT DEFAULT 0;
    DECLARE v_last BIGINT DEFAULT NULL;
    DECLARE v_own_id BIGINT DEFAULT 0;
    DECLARE v_own_ms BIGINT DEFAULT NULL;
    DECLARE v_taken BIGINT DEFAULT 0;
    DECLARE v_group_taken BIGINT DEFAULT 0;
    DECLARE v_group_paused BIGINT DEFAULT NULL;
    DECLARE v_group_id BIGINT DEFAULT NULL;
    DECLARE v_group_ms BIGINT DEFAULT NULL;
    DECLARE v_own_pending BIGINT DEFAULT NULL;
    DECLARE v_group_pending BIGINT DEFAULT NULL;
    DECLARE v_fenced BIGINT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    body: BEGIN
        SELECT COUNT(*), MAX(last_slot) INTO v_looked, v_lease_slot FROM simba_lease
            WHERE name = p_lease AND session_id = p_session AND token = p_token;
        IF v_looked = 0 THEN
            ROLLBACK;
            LEAVE body;
        END IF;
        INSERT INTO simba_job (job, paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id)
            VALUES (p_job, 0, NULL, 0, NULL, 0, 0) ON DUPLICATE KEY UPDATE job = job;
        SELECT COUNT(*) INTO v_fenced FROM simba_job WHERE job = p_job OR job = p_group FOR UPDATE;
        SELECT paused, last_slot, trigger_id, trigger_ms, taken_id, group_taken_id
            INTO v_paused, v_last, v_own_id, v_own_ms, v_taken, v_group_taken FROM simba_job WHERE job = p_job;
        IF p_group <> p_job THEN
            SELECT MAX(paused), MAX(trigger_id), MAX(trigger_ms) INTO v_group_paused, v_group_id, v_group_ms
                FROM simba_job WHERE job = p_group;
        END IF;
        IF v_paused <> 0 OR COALESCE(v_group_paused, 0) <> 0 THEN
            SET v_paused = 1;
        ELSE
            SET v_paused = 0;
        END IF;
        IF p_kind <> 1 THEN
            IF (v_last IS NOT NULL AND v_last >= p_slot) OR (v_lease_slot IS NOT NULL AND v_lease_slot >= p_slot) THEN
                SET v_result = 1;
                ROLLBACK;
                LEAVE body;
            END IF;
            UPDATE simba_job SET last_slot = p_slot WHERE job = p_job;
            SET v_slot = p_slot;
        ELSE
            IF v_own_id > v_taken THEN
                SET v_own_pending = v_own_ms;
            END IF;
            IF v_group_id IS NOT NULL AND v_group_id > v_group_taken THEN
                SET v_group_pending = v_group_ms;
            END IF;
            IF v_own_pending IS NULL OR (v_group_pending IS NOT NULL AND v_group_pending > v_own_pending) THEN
                SET v_slot = v_group_pending;
            ELSE
                SET v_slot = v_own_pending;
            END IF;
            IF v_slot IS NULL THEN
                SET v_result = 1;
                ROLLBACK;
                LEAVE body;
            END IF;
            IF v_paused <> 0 THEN
                SET v_result = 2;
                SET v_slot = NULL;
                ROLLBACK;
                LEAVE body;
            END IF;
            UPDATE simba_job SET taken_id = v_own_id, group_taken_id = COALESCE(v_group_id, v_group_taken)
                WHERE job = p_job;
            UPDATE simba_job_version SET version = version + 1 WHERE id = 1;
        END IF;
        IF p_kind = 1 OR v_paused = 0 THEN
            DELETE FROM simba_job_run WHERE job = p_job AND kind = p_kind AND slot_ms = v_slot;
            INSERT INTO simba_job_run (job, kind, slot_ms, outcome, attempt, attempts, session_id, node, token,
                started_ms, ended_ms, error)
                VALUES (p_job, p_kind, v_slot, 'running', 1, p_attempts, p_session, p_node, p_token, p_started,
                        NULL, NULL);
        END IF;
        SELECT COUNT(*) INTO v_fenced FROM simba_lease WHERE name = p_lease AND session_id = p_session
            AND token = p_token AND EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now})
            FOR UPDATE;
        IF v_fenced = 0 THEN
            SET v_result = 0;
            SET v_slot = NULL;
            ROLLBACK;
            LEAVE body;
        END IF;
        IF p_kind <> 1 THEN
            UPDATE simba_lease SET last_slot = p_slot WHERE name = p_lease;
        END IF;
        COMMIT;
        IF p_kind <> 1 AND v_paused <> 0 THEN
            SET v_result = 2;
            SET v_slot = NULL;
        ELSE
            SET v_result = 3;
        END IF;
    END body;
    SELECT v_result, v_slot;
END claim
