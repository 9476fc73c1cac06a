-- The registered MCP servers a project or a key may use (issue 63), as
-- allowed_models is for models (0008): a JSON array of server labels,
-- where `*` matches any run of characters; NULL allows every registered
-- server, an empty array none. A key may use a server both lists allow.
-- (On PostgreSQL the key-change triggers also list the new columns;
-- SQLite has none to change.)
-- Keep this file and ../postgres/0022_mcp_server_lists.sql in step.
ALTER TABLE api_keys ADD COLUMN allowed_mcp_servers TEXT;
ALTER TABLE projects ADD COLUMN allowed_mcp_servers TEXT;
