-- The schedule store (ADR 0020): schedules stored as data, per space (namespace; '' is the
-- default one). Keys in utf8mb4_bin, so ids list in code point (byte) order. The indexes are
-- part of the tables: MySQL has no CREATE INDEX IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS simba_schedule (
    space        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    id           VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    part         BIGINT NOT NULL,
    handler_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    spec         TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload      MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    policies     TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    paused       BIGINT NOT NULL,
    pause_note   TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    created_by   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_ms   BIGINT NOT NULL,
    updated_by   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    updated_ms   BIGINT NOT NULL,
    revision     BIGINT NOT NULL,
    PRIMARY KEY (space, id),
    KEY simba_schedule_by_part (space, part, id),
    KEY simba_schedule_by_handler (space, handler_name, id)
) ENGINE = InnoDB;

-- The partition count of a space, written by its first create.
CREATE TABLE IF NOT EXISTS simba_schedule_space (
    space      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    partitions BIGINT NOT NULL
) ENGINE = InnoDB;

-- One change counter per partition of a space, bumped by every write in the same transaction.
CREATE TABLE IF NOT EXISTS simba_schedule_change (
    space   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    part    BIGINT NOT NULL,
    counter BIGINT NOT NULL,
    PRIMARY KEY (space, part)
) ENGINE = InnoDB;

-- The operators' audit trail, the newest records of each space kept.
CREATE TABLE IF NOT EXISTS simba_schedule_audit (
    seq          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    space        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    at_ms        BIGINT NOT NULL,
    who          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    audit_action VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    target       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    note         TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    KEY simba_schedule_audit_by_target (space, target, seq),
    KEY simba_schedule_audit_by_space (space, seq)
) ENGINE = InnoDB;
