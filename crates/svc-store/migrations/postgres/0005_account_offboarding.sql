-- Offboarding: an admin can disable an account (disabled_at set) and enable
-- it again. A disabled account cannot sign in and its keys are refused; keys
-- are judged together with their owner's row (src/keys.rs), so disabling,
-- enabling or deleting an account is a key change: it notifies the same
-- channel as migration 0004, by svc or by hand. Keep this file and
-- ../sqlite/0005_account_offboarding.sql in step.
ALTER TABLE users ADD COLUMN disabled_at BIGINT;

CREATE TRIGGER users_changed
    AFTER UPDATE OF disabled_at OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
