-- Files and batches (OpenAI's Batch API, issue 34). A file's bytes are on
-- disk, under its id; its row is its record, summed for the project's
-- quota. A batch's input lines are copied here when it is created, one
-- row each, which replicas take on leases, answer once, and count on the
-- batch; when none is left, one replica takes the batch on a lease of its
-- own (finalizing) to write its output and error files, and it ends.
-- Ended batches are swept with their lines and files' records.
-- Keep this file and ../postgres/0018_batches.sql in step.
CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    purpose    TEXT NOT NULL,
    filename   TEXT NOT NULL,
    bytes      BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Listing a project's files (newest first) and summing them for its quota.
CREATE INDEX files_project_id ON files (project_id, created_at, id);

CREATE TABLE batches (
    id                TEXT PRIMARY KEY,
    project_id        TEXT NOT NULL,
    key_id            TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    input_file_id     TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    status            TEXT NOT NULL,
    output_file_id    TEXT,
    error_file_id     TEXT,
    errors            TEXT,
    metadata          TEXT,
    total             BIGINT NOT NULL,
    completed         BIGINT NOT NULL,
    failed            BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    expires_at        BIGINT NOT NULL,
    in_progress_at    BIGINT,
    finalizing_at     BIGINT,
    completed_at      BIGINT,
    failed_at         BIGINT,
    expired_at        BIGINT,
    cancelling_at     BIGINT,
    cancelled_at      BIGINT,
    -- The finalizing lease: who writes the batch's files, until when, and
    -- the status the batch ends in (set when it is first taken).
    lease_owner       TEXT,
    lease_until       BIGINT,
    finish_to         TEXT
);

-- Listing a project's batches (newest first); finding those to end or to
-- sweep.
CREATE INDEX batches_project_id ON batches (project_id, created_at, id);
CREATE INDEX batches_status ON batches (status);

-- state: 'pending' until answered, then 'ok' or 'failed' with output, the
-- output or error file's line. A pending line's lease: who runs it, until
-- when.
CREATE TABLE batch_lines (
    batch_id    TEXT NOT NULL,
    idx         BIGINT NOT NULL,
    custom_id   TEXT NOT NULL,
    body        TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'pending',
    output      TEXT,
    lease_owner TEXT,
    lease_until BIGINT,
    PRIMARY KEY (batch_id, idx)
);

-- Finding pending lines to lease (and batches with none left), and the
-- lines a replica holds, to renew.
CREATE INDEX batch_lines_state ON batch_lines (state, batch_id, idx);
CREATE INDEX batch_lines_lease_owner ON batch_lines (lease_owner);
