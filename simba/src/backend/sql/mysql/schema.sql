CREATE TABLE IF NOT EXISTS simba_session (
    id         VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
) ENGINE = InnoDB;

-- `token` is the fencing token of the current or last term. The row is never deleted so
-- that the token never resets (T3); `session_id IS NULL` means released. Token 0 marks a
-- row created by an acquisition that lost; it is never handed out.
CREATE TABLE IF NOT EXISTS simba_lease (
    name        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    session_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL,
    KEY simba_lease_session (session_id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_member (
    group_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    session_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
) ENGINE = InnoDB;
