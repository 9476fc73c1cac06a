-- User codes are kept as the SHA-256 of the normalised code (lowercase hex),
-- like device codes, and looked up by that hash. Rows written before hold
-- the code itself, which SQL cannot hash on SQLite; authorizations live
-- minutes, so they are dropped (a login in progress starts again).
-- Keep this file and ../postgres/0006_hashed_user_codes.sql in step.
DELETE FROM device_authorizations;
ALTER TABLE device_authorizations RENAME COLUMN user_code TO user_code_hash;

-- Throttle buckets are swept once their window is a day old (svc-core's
-- throttle.rs): find those by window start.
CREATE INDEX throttles_window_start ON throttles (window_start);
