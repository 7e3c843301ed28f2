CREATE TABLE IF NOT EXISTS simba_job (
    job            TEXT COLLATE "C" PRIMARY KEY,
    paused         BIGINT NOT NULL,
    last_slot      BIGINT NULL,
    trigger_id     BIGINT NOT NULL,
    trigger_ms     BIGINT NULL,
    taken_id       BIGINT NOT NULL,
    group_taken_id BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_run (
    job        TEXT COLLATE "C" NOT NULL,
    kind       BIGINT NOT NULL,
    slot_ms    BIGINT NOT NULL,
    outcome    TEXT NOT NULL,
    attempt    BIGINT NOT NULL,
    attempts   BIGINT NOT NULL,
    session_id TEXT NOT NULL,
    node       TEXT NOT NULL,
    token      BIGINT NOT NULL,
    started_ms BIGINT NULL,
    ended_ms   BIGINT NULL,
    error      TEXT NULL,
    PRIMARY KEY (job, kind, slot_ms)
);

CREATE INDEX IF NOT EXISTS simba_job_run_order ON simba_job_run (job, slot_ms, kind);

CREATE TABLE IF NOT EXISTS simba_job_version (id BIGINT PRIMARY KEY, version BIGINT NOT NULL);

INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE TABLE IF NOT EXISTS simba_registry (
    session_id   TEXT COLLATE "C" PRIMARY KEY,
    body         TEXT NOT NULL,
    published_ms BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_request (
    job  TEXT COLLATE "C" PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_run_key (
    job         TEXT COLLATE "C" NOT NULL,
    slot_ms     BIGINT NOT NULL,
    request_key TEXT NOT NULL,
    PRIMARY KEY (job, slot_ms)
);
