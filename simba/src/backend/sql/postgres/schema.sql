CREATE TABLE IF NOT EXISTS simba_session (
    id         TEXT COLLATE "C" PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- `token` is the fencing token of the current or last term. The row is never deleted so
-- that the token never resets (T3); `session_id IS NULL` means released.
CREATE TABLE IF NOT EXISTS simba_lease (
    name        TEXT COLLATE "C" PRIMARY KEY,
    session_id  TEXT COLLATE "C" NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL
);

CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id);

CREATE TABLE IF NOT EXISTS simba_member (
    group_name TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
);
