-- SQLite has no notifications: svc announces every change to a key by
-- appending to <database file>-keychanges, whose size the servers sharing
-- the file compare (src/changes.rs). Nothing changes in the schema; this
-- file keeps the numbering in step with ../postgres/0004_key_changes.sql.
SELECT 1;
