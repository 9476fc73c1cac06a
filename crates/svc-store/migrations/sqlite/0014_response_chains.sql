-- Stored Responses API responses as chains, and a storage quota per project
-- (issue 29). A response keeps what its turn adds to the conversation:
-- conversation is its new input items and its output, as input items, and
-- previous_id names the response it continues (NULL: the first turn).
-- Rows stored before this keep every input item before their output in
-- conversation and their output only in response; chained is 0 for them,
-- 1 for the rows stored since.
-- depth counts the responses of its conversation, itself included;
-- conversation_bytes what a continuation of it reads (its conversation and
-- that of every response before it; an older row's response too);
-- stored_bytes its response and conversation, which its project's quota
-- counts. project_id is its key's project (as its owner says).
-- A deleted response has expires_at 0. An expired or deleted response that
-- another one continues stays, never served, until that one goes: children
-- counts the responses that continue it, and the sweep takes only those
-- with none (a chain's expired tail goes turn by turn, from its last).
-- response_storage counts each project's responses and their bytes. The
-- triggers keep both counts exact whatever adds or removes rows (an
-- insert, a deletion, the sweep, an account's deletion).
-- Keep this file and ../postgres/0014_response_chains.sql in step.
ALTER TABLE responses ADD COLUMN project_id TEXT NOT NULL DEFAULT 'proj_default';
ALTER TABLE responses ADD COLUMN previous_id TEXT REFERENCES responses (id);
ALTER TABLE responses ADD COLUMN chained BIGINT NOT NULL DEFAULT 0;
ALTER TABLE responses ADD COLUMN depth BIGINT NOT NULL DEFAULT 1;
ALTER TABLE responses ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE responses ADD COLUMN conversation_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE responses ADD COLUMN children BIGINT NOT NULL DEFAULT 0;

UPDATE responses SET
    project_id = CASE WHEN instr(owner, '@') > 0
        THEN substr(owner, instr(owner, '@') + 1) ELSE 'proj_default' END,
    stored_bytes = length(CAST(response AS BLOB)) + length(CAST(conversation AS BLOB)),
    conversation_bytes = length(CAST(response AS BLOB)) + length(CAST(conversation AS BLOB));

-- For the responses that continue one (the reference's check on a
-- deletion), and for the sweep, which looks at childless rows only.
CREATE INDEX responses_previous_id ON responses (previous_id);
CREATE INDEX responses_sweep ON responses (children, expires_at);

CREATE TABLE response_storage (
    project_id TEXT PRIMARY KEY NOT NULL,
    bytes      BIGINT NOT NULL,
    responses  BIGINT NOT NULL
);

INSERT INTO response_storage (project_id, bytes, responses)
    SELECT project_id, SUM(stored_bytes), COUNT(*) FROM responses GROUP BY project_id;

CREATE TRIGGER responses_stored AFTER INSERT ON responses
BEGIN
    INSERT OR IGNORE INTO response_storage (project_id, bytes, responses)
        VALUES (NEW.project_id, 0, 0);
    UPDATE response_storage
        SET bytes = bytes + NEW.stored_bytes, responses = responses + 1
        WHERE project_id = NEW.project_id;
    UPDATE responses SET children = children + 1 WHERE id = NEW.previous_id;
END;

CREATE TRIGGER responses_unstored AFTER DELETE ON responses
BEGIN
    UPDATE response_storage
        SET bytes = bytes - OLD.stored_bytes, responses = responses - 1
        WHERE project_id = OLD.project_id;
    UPDATE responses SET children = children - 1 WHERE id = OLD.previous_id;
END;
