CREATE TABLE IF NOT EXISTS simba_job (
    job            TEXT    PRIMARY KEY,
    paused         INTEGER NOT NULL,
    last_slot      INTEGER NULL,
    trigger_id     INTEGER NOT NULL,
    trigger_ms     INTEGER NULL,
    taken_id       INTEGER NOT NULL,
    group_taken_id INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_run (
    job        TEXT    NOT NULL,
    kind       INTEGER NOT NULL,
    slot_ms    INTEGER NOT NULL,
    outcome    TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    attempts   INTEGER NOT NULL,
    session_id TEXT    NOT NULL,
    node       TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    started_ms INTEGER NULL,
    ended_ms   INTEGER NULL,
    error      TEXT    NULL,
    PRIMARY KEY (job, kind, slot_ms)
);

CREATE INDEX IF NOT EXISTS simba_job_run_order ON simba_job_run (job, slot_ms, kind);

CREATE TABLE IF NOT EXISTS simba_job_version (id INTEGER PRIMARY KEY, version INTEGER NOT NULL);

INSERT INTO simba_job_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE TABLE IF NOT EXISTS simba_registry (
    session_id   TEXT    PRIMARY KEY,
    body         TEXT    NOT NULL,
    published_ms INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_request (
    job  TEXT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_job_run_key (
    job         TEXT    NOT NULL,
    slot_ms     INTEGER NOT NULL,
    request_key TEXT    NOT NULL,
    PRIMARY KEY (job, slot_ms)
);
