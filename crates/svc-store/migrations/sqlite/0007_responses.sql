-- Responses API responses kept with `store` (POST /v1/responses), by id.
-- owner is `user:<id>` or `operator`: only keys of that owner read them.
-- response is the response object as JSON; conversation the input items
-- before its output (earlier turns included), as a JSON array. Rows are
-- not served from expires_at on, and swept once expired.
-- Keep this file and ../postgres/0007_responses.sql in step.
CREATE TABLE responses (
    id           TEXT PRIMARY KEY NOT NULL,
    owner        TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    response     TEXT NOT NULL,
    conversation TEXT NOT NULL
);

CREATE INDEX responses_expires_at ON responses (expires_at);
