-- Per-key rate limits set by an admin; NULL means the server's default.
-- Keep this file and ../sqlite/0003_key_rate_limits.sql in step.
ALTER TABLE api_keys ADD COLUMN rpm_limit BIGINT;
ALTER TABLE api_keys ADD COLUMN tpm_limit BIGINT;
