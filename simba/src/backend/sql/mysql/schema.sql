CREATE TABLE IF NOT EXISTS simba_session (
    id         VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
) ENGINE = InnoDB;

-- `token` is the fencing token of the current or last term; `session_id IS NULL` means
-- released. A new row holds the last token handed out for its name (0 when none: the row of an
-- acquisition that lost), raised to `simba_lease_floor` by the trigger of `lease_floor_v1.sql`.
-- An idle row may be removed (B3) after the floor is raised to its token, so a token never
-- resets (T3).
CREATE TABLE IF NOT EXISTS simba_lease (
    name        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    session_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL,
    KEY simba_lease_session (session_id)
) ENGINE = InnoDB;

-- One row (`id = 1`, written by the first removal of idle leases): the highest token of a
-- removed lease row.
CREATE TABLE IF NOT EXISTS simba_lease_floor (
    id    TINYINT NOT NULL PRIMARY KEY,
    token BIGINT NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_member (
    group_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    session_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
) ENGINE = InnoDB;
