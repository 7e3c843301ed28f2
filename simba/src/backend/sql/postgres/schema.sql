CREATE TABLE IF NOT EXISTS simba_session (
    id         TEXT COLLATE "C" PRIMARY KEY,
    expires_at BIGINT NOT NULL,
    ttl_ms     BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- `token` is the fencing token of the current or last term; `session_id IS NULL` means
-- released. An idle row may be removed (B3): `simba_lease_floor` then keeps a token at least as
-- high as the row's, and a new row starts above it (the trigger of `lease_floor_v1.sql`), so a
-- token never resets (T3).
CREATE TABLE IF NOT EXISTS simba_lease (
    name        TEXT COLLATE "C" PRIMARY KEY,
    session_id  TEXT COLLATE "C" NULL,
    token       BIGINT NOT NULL,
    acquired_at BIGINT NULL,
    last_slot   BIGINT NULL
);

CREATE INDEX IF NOT EXISTS simba_lease_session ON simba_lease (session_id);

-- One row (`id = 1`, written by the first removal of idle leases): the highest token of a
-- removed lease row.
CREATE TABLE IF NOT EXISTS simba_lease_floor (
    id    SMALLINT PRIMARY KEY CHECK (id = 1),
    token BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS simba_member (
    group_name TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    joined_at  BIGINT NOT NULL,
    PRIMARY KEY (group_name, session_id)
);
