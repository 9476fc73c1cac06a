-- Every change to a key (revoked, limits set, expiry moved, deleted), by
-- svc or by hand, notifies the channel svc_keys_<schema>: each svc replica
-- listens there and stops reusing what it read about keys (src/changes.rs).
-- SQLite has no notifications; ../sqlite/0004_key_changes.sql says what
-- stands in for them there. Keep the two files in step.
CREATE FUNCTION svc_notify_key_change() RETURNS trigger AS $$
DECLARE
    changed TEXT := CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END;
BEGIN
    PERFORM pg_notify(left('svc_keys_' || TG_TABLE_SCHEMA, 63), changed);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER api_keys_changed
    AFTER UPDATE OF revoked_at, expires_at, rpm_limit, tpm_limit OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
