CREATE OR REPLACE FUNCTION simba_acquire_v1(p_name TEXT, p_session TEXT, OUT o_live BOOLEAN, OUT o_token BIGINT)
LANGUAGE plpgsql VOLATILE AS $simba$
DECLARE
    v_holder TEXT;
    v_holder_live BOOLEAN;
    v_token BIGINT;
BEGIN
    SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}),
           lease.session_id,
           EXISTS (SELECT 1 FROM simba_session s WHERE s.id = lease.session_id AND s.expires_at > {now})
      INTO o_live, v_holder, v_holder_live
      FROM (SELECT 1) one LEFT JOIN simba_lease lease ON lease.name = p_name;
    IF NOT o_live OR (v_holder_live AND v_holder IS DISTINCT FROM p_session) THEN
        RETURN;
    END IF;
    SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO simba_lease (name, session_id, token, acquired_at)
            SELECT p_name, p_session, 1, {now}
            WHERE EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now})
            ON CONFLICT (name) DO NOTHING
            RETURNING token INTO o_token;
        IF o_token IS NOT NULL THEN
            RETURN;
        END IF;
        SELECT session_id, token INTO v_holder, v_token FROM simba_lease WHERE name = p_name FOR UPDATE;
        IF NOT FOUND THEN
            o_live := FALSE;
            RETURN;
        END IF;
    END IF;
    WITH me AS (SELECT EXISTS (SELECT 1 FROM simba_session WHERE id = p_session AND expires_at > {now}) AS live),
         sealed AS (UPDATE simba_session SET expires_at = expires_at
                    WHERE id = v_holder AND id <> p_session AND expires_at <= {now} AND (SELECT live FROM me) RETURNING id),
         free AS (SELECT (v_holder IS NULL OR EXISTS (SELECT 1 FROM sealed)
                          OR NOT EXISTS (SELECT 1 FROM simba_session WHERE id = v_holder)) AS yes),
         taken AS (UPDATE simba_lease SET session_id = p_session, token = simba_lease.token + 1, acquired_at = {now}
                   WHERE name = p_name AND session_id IS NOT DISTINCT FROM v_holder
                     AND (SELECT live FROM me) AND (SELECT yes FROM free)
                   RETURNING simba_lease.token)
    SELECT (SELECT live FROM me), (SELECT token FROM taken) INTO o_live, o_token;
    IF o_live AND o_token IS NULL AND v_holder = p_session THEN
        o_token := v_token;
    END IF;
END
$simba$
