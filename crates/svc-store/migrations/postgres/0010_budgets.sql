-- Token budgets (issue 20): a key's and a project's tokens per UTC day,
-- week or month. budget_tokens NULL: no budget; budget_period is 'day',
-- 'week' or 'month' when budget_tokens is set. budget_usage counts the
-- tokens of one scope ('key:<id>' or 'project:<id>') in one window (its
-- start, unix seconds): charged before a request by a single conditional
-- statement, settled with the real usage when it ends.
-- Keep this file and ../sqlite/0010_budgets.sql in step.
ALTER TABLE api_keys ADD COLUMN budget_tokens BIGINT;
ALTER TABLE api_keys ADD COLUMN budget_period TEXT;
-- The first key of the rotations that led to a key (NULL: itself): its
-- budget's count, so that rotating a key keeps its budget window.
ALTER TABLE api_keys ADD COLUMN lineage_id TEXT;
ALTER TABLE projects ADD COLUMN budget_tokens BIGINT;
ALTER TABLE projects ADD COLUMN budget_period TEXT;

CREATE TABLE budget_usage (
    scope        TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    used         BIGINT NOT NULL,
    PRIMARY KEY (scope, window_start)
);

-- Keys are judged with their own and their project's budget: a change to
-- either is a key change (0004, 0008).
DROP TRIGGER api_keys_changed ON api_keys;
CREATE TRIGGER api_keys_changed
    AFTER UPDATE OF revoked_at, expires_at, rpm_limit, tpm_limit, budget_tokens, budget_period
    OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
DROP TRIGGER projects_changed ON projects;
CREATE TRIGGER projects_changed
    AFTER UPDATE OF allowed_models, archived_at, budget_tokens, budget_period OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
