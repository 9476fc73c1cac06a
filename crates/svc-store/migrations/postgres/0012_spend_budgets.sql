-- Spend budgets (issue 20): a budget counts tokens or US dollars (in
-- millionths, at each model's configured prices). budget_unit is 'tokens'
-- or 'usd' when budget_tokens (the limit, in that unit) is set; NULL reads
-- as 'tokens', so existing budgets stay token budgets. Changing a budget
-- sets budget_tokens too; the key-change triggers list budget_unit and
-- (for the dashboard's key models page) allowed_models as well.
-- Keep this file and ../sqlite/0012_spend_budgets.sql in step.
ALTER TABLE api_keys ADD COLUMN budget_unit TEXT;
ALTER TABLE projects ADD COLUMN budget_unit TEXT;

-- A key is judged with its allowed models too (the dashboard changes them):
-- a change to them is a key change (0004, 0008, 0010).
DROP TRIGGER api_keys_changed ON api_keys;
CREATE TRIGGER api_keys_changed
    AFTER UPDATE OF revoked_at, expires_at, rpm_limit, tpm_limit, budget_tokens, budget_period,
        budget_unit, allowed_models
    OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
DROP TRIGGER projects_changed ON projects;
CREATE TRIGGER projects_changed
    AFTER UPDATE OF allowed_models, archived_at, budget_tokens, budget_period, budget_unit
    OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
