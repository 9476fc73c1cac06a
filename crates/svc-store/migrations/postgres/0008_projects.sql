-- Projects (OpenAI's organization shape): every key belongs to a project;
-- accounts are project members with the role owner or member. The
-- organization's roles are the accounts' is_admin flag (1: owner, 0:
-- reader). Keys and accounts from before move into the default project,
-- proj_default: admins as its owners, everyone else as members.
-- allowed_models (projects and keys) is a JSON array of model ids, where
-- `*` matches any run of characters; NULL allows every model. A key's kind
-- is all, restricted or admin; permissions is a JSON array of scope names,
-- set only for restricted keys.
-- Keep this file and ../sqlite/0008_projects.sql in step.
CREATE TABLE projects (
    id             TEXT PRIMARY KEY NOT NULL,
    name           TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    archived_at    BIGINT,
    allowed_models TEXT
);

CREATE TABLE project_members (
    project_id TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    role       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);

-- For "the projects of this account" and for deleting an account's rows.
CREATE INDEX project_members_user_id ON project_members (user_id);

INSERT INTO projects (id, name, created_at)
    VALUES ('proj_default', 'Default project', CAST(EXTRACT(EPOCH FROM now()) AS BIGINT));

INSERT INTO project_members (project_id, user_id, role, created_at)
    SELECT 'proj_default', id, CASE WHEN is_admin <> 0 THEN 'owner' ELSE 'member' END, created_at
    FROM users;

ALTER TABLE api_keys ADD COLUMN project_id TEXT NOT NULL DEFAULT 'proj_default';
ALTER TABLE api_keys ADD COLUMN kind TEXT NOT NULL DEFAULT 'all';
ALTER TABLE api_keys ADD COLUMN permissions TEXT;
ALTER TABLE api_keys ADD COLUMN allowed_models TEXT;

-- Serves "keys of one project" and its newest-first order.
CREATE INDEX api_keys_project_id ON api_keys (project_id, created_at);

-- Keys are judged with their project's allowed models (src/keys.rs), so a
-- change to a project is a key change, as for accounts (0005).
CREATE TRIGGER projects_changed
    AFTER UPDATE OF allowed_models, archived_at OR DELETE ON projects
    FOR EACH ROW EXECUTE FUNCTION svc_notify_key_change();
