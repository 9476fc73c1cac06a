-- Offboarding: an admin can disable an account (disabled_at set) and enable
-- it again. A disabled account cannot sign in and its keys are refused; keys
-- are judged together with their owner's row (src/keys.rs), so svc announces
-- disabling, enabling or deleting an account in <database file>-keychanges
-- like any key change (see 0004). Keep this file and
-- ../postgres/0005_account_offboarding.sql in step.
ALTER TABLE users ADD COLUMN disabled_at BIGINT;
