-- Audio models' usage (issue 47), per key, day and model: seconds of audio
-- transcribed or translated, and characters of text spoken. Their tokens
-- stay in the token columns (none, for most audio models). Rows from
-- before this migration counted none.
-- Keep this file and ../sqlite/0021_audio_usage.sql in step.
ALTER TABLE usage_models ADD COLUMN audio_seconds BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_models ADD COLUMN characters BIGINT NOT NULL DEFAULT 0;
