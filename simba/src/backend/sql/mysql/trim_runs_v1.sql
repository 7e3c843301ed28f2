CREATE PROCEDURE IF NOT EXISTS simba_trim_runs_v1(
    IN p_job VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_keep BIGINT)
MODIFIES SQL DATA
BEGIN
    DECLARE v_slot BIGINT DEFAULT NULL;
    DECLARE v_kind BIGINT DEFAULT NULL;
    SELECT slot_ms, kind INTO v_slot, v_kind FROM simba_job_run FORCE INDEX (simba_job_run_time)
        WHERE job = p_job ORDER BY slot_ms DESC, kind DESC LIMIT 1 OFFSET p_keep;
    IF v_slot IS NOT NULL THEN
        DELETE FROM simba_job_run WHERE job = p_job AND slot_ms <= v_slot AND (slot_ms < v_slot OR kind < v_kind);
    END IF;
END
