CREATE TABLE IF NOT EXISTS simba_session (
    id         TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    ttl_ms     INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

-- `token` is the fencing token of the current or last term; `session_id IS NULL` means
-- released. An idle row may be removed (B3) after `simba_lease_floor` is raised to its token,
-- and a new row starts above the floor (`take.sql`), so a token never resets (T3).
CREATE TABLE IF NOT EXISTS simba_lease (
    name        TEXT    PRIMARY KEY,
    session_id  TEXT    NULL,
    token       INTEGER NOT NULL,
    acquired_at INTEGER,
    last_slot   INTEGER NULL
);

-- Keep-alive digests and `owned` look leases up by holder.
CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id);

-- One row (`id = 1`, written by the first removal of idle leases): the highest token of a
-- removed lease row.
CREATE TABLE IF NOT EXISTS simba_lease_floor (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_member (
    group_name TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    joined_at  INTEGER NOT NULL,
    PRIMARY KEY (group_name, session_id)
);
