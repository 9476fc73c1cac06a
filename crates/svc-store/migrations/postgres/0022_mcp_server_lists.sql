-- The registered MCP servers a project or a key may use (issue 63), as
-- allowed_models is for models (0008): a JSON array of server labels,
-- where `*` matches any run of characters; NULL allows every registered
-- server, an empty array none. A key may use a server both lists allow.
-- Keys are judged with both lists, so the key-change triggers list the
-- new columns as well (0012).
-- Keep this file and ../sqlite/0022_mcp_server_lists.sql in step.
ALTER TABLE api_keys ADD COLUMN allowed_mcp_servers TEXT;
ALTER TABLE projects ADD COLUMN allowed_mcp_servers TEXT;

DROP TRIGGER api_keys_changed ON api_keys;
CREATE TRIGGER api_keys_changed
    AFTER UPDATE OF revoked_at, expires_at, rpm_limit, tpm_limit, budget_tokens, budget_period,
        budget_unit, allowed_models, allowed_mcp_servers
    OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
DROP TRIGGER projects_changed ON projects;
CREATE TRIGGER projects_changed
    AFTER UPDATE OF allowed_models, archived_at, budget_tokens, budget_period, budget_unit,
        allowed_mcp_servers
    OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
