-- The schedule store (ADR 0020): schedules stored as data, per space (namespace; '' is the
-- default one). TEXT compares byte by byte (BINARY), so ids list in byte order.
CREATE TABLE IF NOT EXISTS simba_schedule (
    space        TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    part         INTEGER NOT NULL,
    handler_name TEXT    NOT NULL,
    spec         TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    policies     TEXT    NOT NULL,
    paused       INTEGER NOT NULL,
    pause_note   TEXT    NULL,
    created_by   TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL,
    updated_by   TEXT    NOT NULL,
    updated_ms   INTEGER NOT NULL,
    revision     INTEGER NOT NULL,
    PRIMARY KEY (space, id)
);

CREATE INDEX IF NOT EXISTS simba_schedule_by_part ON simba_schedule (space, part, id);

CREATE INDEX IF NOT EXISTS simba_schedule_by_handler ON simba_schedule (space, handler_name, id);

-- The partition count of a space, written by its first create.
CREATE TABLE IF NOT EXISTS simba_schedule_space (
    space      TEXT    PRIMARY KEY,
    partitions INTEGER NOT NULL
);

-- One change counter per partition of a space, bumped by every write in the same transaction.
CREATE TABLE IF NOT EXISTS simba_schedule_change (
    space   TEXT    NOT NULL,
    part    INTEGER NOT NULL,
    counter INTEGER NOT NULL,
    PRIMARY KEY (space, part)
);

-- The operators' audit trail, the newest records of each space kept.
CREATE TABLE IF NOT EXISTS simba_schedule_audit (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    space        TEXT    NOT NULL,
    at_ms        INTEGER NOT NULL,
    who          TEXT    NOT NULL,
    audit_action TEXT    NOT NULL,
    target       TEXT    NOT NULL,
    note         TEXT    NULL
);

CREATE INDEX IF NOT EXISTS simba_schedule_audit_by_target ON simba_schedule_audit (space, target, seq);

CREATE INDEX IF NOT EXISTS simba_schedule_audit_by_space ON simba_schedule_audit (space, seq);
