CREATE PROCEDURE simba_acquire_v1(
    IN p_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_session VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
MODIFIES SQL DATA
SQL SECURITY INVOKER
BEGIN
    DECLARE v_live BOOLEAN DEFAULT FALSE;
    DECLARE v_holder VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_holder_live BOOLEAN DEFAULT FALSE;
    DECLARE v_token BIGINT DEFAULT 0;
    DECLARE v_won BIGINT DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    acquire: BEGIN
        SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}),
               lease.session_id,
               EXISTS (SELECT 1 FROM simba_session s WHERE s.id = lease.session_id AND s.expires_at > {now})
          INTO v_live, v_holder, v_holder_live
          FROM (SELECT 1 AS one) d LEFT JOIN simba_lease lease ON lease.name = p_name;
        IF NOT v_live OR (v_holder_live AND NOT (v_holder <=> p_session)) THEN
            LEAVE acquire;
        END IF;
        START TRANSACTION;
        INSERT INTO simba_lease (name, session_id, token) VALUES (p_name, NULL, 0) ON DUPLICATE KEY UPDATE token = token;
        SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
        SELECT COALESCE(SUM(id = p_session AND expires_at > {now}), 0) > 0,
               COALESCE(SUM(id = v_holder AND expires_at > {now}), 0) > 0
          INTO v_live, v_holder_live
          FROM simba_session WHERE id IN (p_session, v_holder) FOR UPDATE;
        IF NOT v_live THEN
            SET v_won = NULL;
        ELSEIF v_holder <=> p_session THEN
            SET v_won = v_token;
        ELSEIF v_holder IS NOT NULL AND v_holder_live THEN
            SET v_won = NULL;
        ELSE
            UPDATE simba_lease SET session_id = p_session, token = token + 1, acquired_at = {now} WHERE name = p_name;
            SET v_won = v_token + 1;
        END IF;
        COMMIT;
    END acquire;
    SELECT v_live, v_won;
END
