-- An admin key's reach is fixed when it is made (issue 29): 'organization'
-- or 'project' (its own project), never more than its maker reached then;
-- at each request it reaches the lesser of this and its owner's roles now.
-- NULL for other kinds. Keys from before: the operator's (no owner) reach
-- the organization; an organization owner's reaches it too unless the key
-- was made through the admin API, where anyone's admin key could make a
-- key for another member (the escalation this fixes), so those keys reach
-- only their project (their owner can make a new one). Nothing updates
-- admin_reach afterwards, so the key-change triggers need not list it.
-- Keep this file and ../sqlite/0013_admin_key_reach.sql in step.
ALTER TABLE api_keys ADD COLUMN admin_reach TEXT;
UPDATE api_keys SET admin_reach = CASE
        WHEN owner_id IS NULL THEN 'organization'
        WHEN created_via <> 'api'
            AND EXISTS (SELECT 1 FROM users u WHERE u.id = api_keys.owner_id AND u.is_admin <> 0)
            THEN 'organization'
        ELSE 'project'
    END
    WHERE kind = 'admin';
