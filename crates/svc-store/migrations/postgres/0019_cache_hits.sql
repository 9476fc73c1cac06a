-- Replies served from the response cache (issue 34), counted apart in
-- usage: how many, and the prompt and completion tokens they took when they
-- were made (what the cache saved). A hit's own tokens are none. Rows from
-- before this migration counted none.
-- Keep this file and ../sqlite/0019_cache_hits.sql in step.
ALTER TABLE usage_daily ADD COLUMN cache_hits BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cache_saved_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_models ADD COLUMN cache_hits BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_models ADD COLUMN cache_saved_tokens BIGINT NOT NULL DEFAULT 0;
