-- Prompt tokens served from a reused prefix (issue 32): the embedded
-- engine's prefix cache, or an upstream's own count. They are part of
-- prompt_tokens, counted apart so that the usage API reports
-- input_cached_tokens and spend budgets price them. Rows from before
-- this migration counted none.
-- Keep this file and ../postgres/0015_cached_tokens.sql in step.
ALTER TABLE usage_daily ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_models ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0;
