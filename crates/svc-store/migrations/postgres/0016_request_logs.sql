-- The request log (issue 33): one row per API request, written in batches
-- off the request's path and deleted by the hourly sweep after
-- request_log_retention. Never a prompt, a reply or a secret: ids, the
-- model, how it ended, tokens, cost (micro-dollars) and timings (ms).
-- seq orders the rows (newest first) and carries the list's cursors.
-- Keep this file and ../sqlite/0016_request_logs.sql in step.
CREATE TABLE request_logs (
    seq               BIGSERIAL PRIMARY KEY,
    id                TEXT NOT NULL,
    started_at_ms     BIGINT NOT NULL,
    key_id            TEXT,
    project_id        TEXT,
    user_id           TEXT,
    model             TEXT,
    dialect           TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    status            BIGINT NOT NULL,
    error_type        TEXT,
    prompt_tokens     BIGINT NOT NULL,
    cached_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    cost_micros       BIGINT NOT NULL,
    ttft_ms           BIGINT,
    duration_ms       BIGINT NOT NULL,
    upstream          TEXT
);

-- For the retention sweep and time filters, and for the dashboard's
-- "my requests" (by key) and the per-project view.
CREATE INDEX request_logs_started_at ON request_logs (started_at_ms);
CREATE INDEX request_logs_key_id ON request_logs (key_id, seq);
CREATE INDEX request_logs_project_id ON request_logs (project_id, seq);
CREATE INDEX request_logs_id ON request_logs (id);
