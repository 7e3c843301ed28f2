CREATE TABLE IF NOT EXISTS simba_session (
    id         TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL,
    ttl_ms     INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);

-- `token` is the fencing token of the current or last term. The row is never deleted so
-- that the token never resets (T3); `session_id IS NULL` means released.
CREATE TABLE IF NOT EXISTS simba_lease (
    name        TEXT    PRIMARY KEY,
    session_id  TEXT    NULL,
    token       INTEGER NOT NULL,
    acquired_at INTEGER,
    last_slot   INTEGER NULL
);

-- Keep-alive digests and `owned` look leases up by holder.
CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id);

CREATE TABLE IF NOT EXISTS simba_member (
    group_name TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    joined_at  INTEGER NOT NULL,
    PRIMARY KEY (group_name, session_id)
);
