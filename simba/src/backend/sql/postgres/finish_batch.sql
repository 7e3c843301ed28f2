WITH x AS (SELECT * FROM jsonb_to_recordset(CAST(:1 AS JSONB)) AS x(i BIGINT, job TEXT, kind BIGINT, slot BIGINT,
    outcome TEXT, attempt BIGINT, attempts BIGINT, session TEXT, node TEXT, token BIGINT, started BIGINT, ended BIGINT,
    error TEXT)),
done AS (UPDATE simba_job_run r SET outcome = x.outcome, attempt = x.attempt, attempts = x.attempts,
    session_id = x.session, node = x.node, token = x.token, started_ms = x.started, ended_ms = x.ended, error = x.error
    FROM x WHERE r.job = x.job AND r.kind = x.kind AND r.slot_ms = x.slot AND r.token = x.token RETURNING x.i),
bound AS (SELECT j.job, b.slot_ms, b.kind FROM (SELECT DISTINCT job FROM x) j CROSS JOIN LATERAL
    (SELECT slot_ms, kind FROM simba_job_run WHERE job = j.job ORDER BY slot_ms DESC, kind DESC LIMIT 1 OFFSET :2) b),
trimmed AS (DELETE FROM simba_job_run d USING bound WHERE d.job = bound.job
    AND (d.slot_ms, d.kind) < (bound.slot_ms, bound.kind) RETURNING 1)
SELECT i FROM done
