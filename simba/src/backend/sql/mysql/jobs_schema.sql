CREATE TABLE IF NOT EXISTS simba_job (
    job            VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    paused         BIGINT NOT NULL,
    last_slot      BIGINT NULL,
    trigger_id     BIGINT NOT NULL,
    trigger_ms     BIGINT NULL,
    taken_id       BIGINT NOT NULL,
    group_taken_id BIGINT NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_job_run (
    job        VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    kind       BIGINT NOT NULL,
    slot_ms    BIGINT NOT NULL,
    outcome    VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    attempt    BIGINT NOT NULL,
    attempts   BIGINT NOT NULL,
    session_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    node       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token      BIGINT NOT NULL,
    started_ms BIGINT NULL,
    ended_ms   BIGINT NULL,
    error      TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (job, kind, slot_ms),
    KEY simba_job_run_time (job, slot_ms)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_job_version (id BIGINT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)
    ENGINE = InnoDB;

INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON DUPLICATE KEY UPDATE id = id;

CREATE TABLE IF NOT EXISTS simba_registry (
    session_id   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    body         MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    published_ms BIGINT NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_job_request (
    job  VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    body MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS simba_job_run_key (
    job         VARCHAR(160) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot_ms     BIGINT NOT NULL,
    request_key VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (job, slot_ms)
) ENGINE = InnoDB;
