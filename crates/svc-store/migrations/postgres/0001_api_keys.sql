-- API keys, stored by the SHA-256 of the secret (lowercase hex); times are
-- unix seconds. Keep this file and ../sqlite/0001_api_keys.sql in step.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    name         TEXT NOT NULL,
    hint         TEXT NOT NULL,
    owner_id     TEXT,
    created_via  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    last_used_at BIGINT,
    revoked_at   BIGINT
);

-- Serves both "keys of one owner" and its newest-first order.
CREATE INDEX api_keys_owner_id ON api_keys (owner_id, created_at);
