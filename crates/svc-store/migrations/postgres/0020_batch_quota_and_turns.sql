-- Batches within their project's quota, taken in turns (issue 43).
-- A running batch counts the copy of its lines (input_bytes) and its
-- answers so far (answer_bytes, the sum of its lines' output_bytes)
-- toward its project's quota of file bytes; once it ends, its output and
-- error files count instead, and its lines are deleted. turn: when a line
-- of the batch was last taken (a number that only grows), so that lines
-- are taken from the projects and keys served least recently first.
-- Keep this file and ../sqlite/0020_batch_quota_and_turns.sql in step.
ALTER TABLE batches ADD COLUMN input_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN answer_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE batches ADD COLUMN turn BIGINT NOT NULL DEFAULT 0;
ALTER TABLE batch_lines ADD COLUMN output_bytes BIGINT;

-- Counting and summing a project's batches that have not ended.
CREATE INDEX batches_project_status ON batches (project_id, status);
-- The lines on a lease (live or ended), which a lease ranks with each
-- batch's first lines: a few per replica.
CREATE INDEX batch_lines_leased ON batch_lines (batch_id, idx)
    WHERE lease_owner IS NOT NULL AND state = 'pending';
