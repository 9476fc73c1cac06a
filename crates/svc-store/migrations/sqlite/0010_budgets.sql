-- Token budgets (issue 20): a key's and a project's tokens per UTC day,
-- week or month. budget_tokens NULL: no budget; budget_period is 'day',
-- 'week' or 'month' when budget_tokens is set. budget_usage counts the
-- tokens of one scope ('key:<id>' or 'project:<id>') in one window (its
-- start, unix seconds): charged before a request by a single conditional
-- statement, settled with the real usage when it ends.
-- Keep this file and ../postgres/0010_budgets.sql in step.
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
