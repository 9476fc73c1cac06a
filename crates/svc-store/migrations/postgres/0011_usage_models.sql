-- Requests and tokens per key, UTC day and model (issue 20's usage API,
-- GET /v1/organization/usage/completions, groups by model). usage_daily
-- keeps the per-key totals it always had; usage from before this
-- migration has no model and is only there.
-- Keep this file and ../sqlite/0011_usage_models.sql in step.
CREATE TABLE usage_models (
    key_id            TEXT NOT NULL,
    day               TEXT NOT NULL,
    model             TEXT NOT NULL,
    requests          BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    PRIMARY KEY (key_id, day, model)
);

-- For "every key and model in these days".
CREATE INDEX usage_models_day ON usage_models (day);
