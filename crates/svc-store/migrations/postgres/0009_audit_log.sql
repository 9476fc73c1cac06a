-- The audit log (issue 20): one row per event (sign-ins, keys created,
-- rotated or revoked, device approvals, account, project and membership
-- changes, rate-limit changes), append-only: a trigger refuses every
-- UPDATE; rows leave only by the retention sweep's DELETE. seq orders the
-- rows (newest first) and carries the list's cursors. actor, details are
-- JSON in OpenAI's audit-log shape; the actor_* and project_id columns are
-- copies of what the API filters by. No column ever holds a secret.
-- Key rotation: a rotated key's successor names it in rotated_from (a
-- later budget slice keeps the budget window by it); the old key keeps
-- working until its expires_at, moved to the end of the grace period
-- (an expires_at change notifies the replicas already: 0004).
-- Keep this file and ../sqlite/0009_audit_log.sql in step.
CREATE TABLE audit_logs (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    type          TEXT NOT NULL,
    effective_at  BIGINT NOT NULL,
    actor         TEXT NOT NULL,
    actor_user_id TEXT,
    actor_key_id  TEXT,
    actor_email   TEXT,
    project_id    TEXT,
    project_name  TEXT,
    details       TEXT NOT NULL
);

-- For the retention sweep and time filters; and for a project owner's
-- admin key, which always reads its own project's entries, newest first.
CREATE INDEX audit_logs_effective_at ON audit_logs (effective_at);
CREATE INDEX audit_logs_project_id ON audit_logs (project_id, seq);

CREATE FUNCTION svc_audit_logs_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit log entries are never changed';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_logs_append_only BEFORE UPDATE ON audit_logs
    FOR EACH ROW EXECUTE FUNCTION svc_audit_logs_append_only();

ALTER TABLE api_keys ADD COLUMN rotated_from TEXT;
