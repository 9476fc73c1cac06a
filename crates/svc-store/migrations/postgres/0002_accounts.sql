-- Accounts and what hangs off them: users, sessions, device authorizations,
-- usage counters and throttles. Times are unix seconds unless named _ms.
-- Keep this file and ../sqlite/0002_accounts.sql in step.

-- Dashboard accounts. The email is normalised (trimmed, lowercase) before it
-- gets here; the password is an argon2id PHC string; is_admin is 0 or 1.
CREATE TABLE users (
    id            TEXT PRIMARY KEY NOT NULL,
    email         TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    is_admin      BIGINT NOT NULL,
    created_at    BIGINT NOT NULL
);

-- One-time tokens that let the first user sign up, by their SHA-256.
CREATE TABLE setup_tokens (
    token_hash TEXT PRIMARY KEY NOT NULL,
    expires_at BIGINT NOT NULL
);

-- Dashboard sign-in sessions, by the SHA-256 of the cookie's token. flash
-- holds one message for the next page, taken (and cleared) once.
CREATE TABLE sessions (
    token_hash TEXT PRIMARY KEY NOT NULL,
    user_id    TEXT NOT NULL,
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    address    TEXT,
    flash      TEXT
);

-- For deleting expired sessions.
CREATE INDEX sessions_expires_at ON sessions (expires_at);

-- Device authorizations (RFC 8628), found by the SHA-256 of the device code
-- (the client's polls) or by the user code (the dashboard). status is
-- pending, approved, denied or redeemed; key_id is set on redemption.
-- last_polled_at_ms is in milliseconds, to enforce the polling interval.
CREATE TABLE device_authorizations (
    id                TEXT PRIMARY KEY NOT NULL,
    device_code_hash  TEXT NOT NULL UNIQUE,
    user_code         TEXT NOT NULL UNIQUE,
    client_id         TEXT,
    scope             TEXT,
    client_address    TEXT,
    user_agent        TEXT,
    created_at        BIGINT NOT NULL,
    expires_at        BIGINT NOT NULL,
    interval_secs     BIGINT NOT NULL,
    last_polled_at_ms BIGINT,
    status            TEXT NOT NULL,
    user_id           TEXT,
    decided_at        BIGINT,
    key_id            TEXT
);

-- For deleting expired authorizations.
CREATE INDEX device_authorizations_expires_at ON device_authorizations (expires_at);

-- Requests and tokens per key per UTC day (day is YYYY-MM-DD, so text order
-- is date order).
CREATE TABLE usage_daily (
    key_id            TEXT NOT NULL,
    day               TEXT NOT NULL,
    requests          BIGINT NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    PRIMARY KEY (key_id, day)
);

-- For "every key since this day"; one key's days are served by the key.
CREATE INDEX usage_daily_day ON usage_daily (day);

-- Fixed-window throttling counters shared by every replica: the hits on
-- bucket in the window that started at window_start (unix seconds).
CREATE TABLE throttles (
    bucket       TEXT PRIMARY KEY NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL
);
