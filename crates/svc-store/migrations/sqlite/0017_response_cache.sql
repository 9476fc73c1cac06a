-- The response cache (issue 34), where there is no Redis: whole replies of
-- reproducible requests by a key the server derives (a SHA-256 of the
-- model's identity, the key's project, the route and the request), kept
-- until they expire; the sweep also deletes the oldest past the size bound.
-- Keep this file and ../postgres/0017_response_cache.sql in step.
CREATE TABLE response_cache (
    key           TEXT PRIMARY KEY,
    value         TEXT NOT NULL,
    bytes         BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);

CREATE INDEX response_cache_expires_at ON response_cache (expires_at_ms);
