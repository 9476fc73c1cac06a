-- Spend budgets (issue 20): a budget counts tokens or US dollars (in
-- millionths, at each model's configured prices). budget_unit is 'tokens'
-- or 'usd' when budget_tokens (the limit, in that unit) is set; NULL reads
-- as 'tokens', so existing budgets stay token budgets. (On PostgreSQL the
-- key-change triggers also list budget_unit; SQLite has none to change.)
-- Keep this file and ../postgres/0012_spend_budgets.sql in step.
ALTER TABLE api_keys ADD COLUMN budget_unit TEXT;
ALTER TABLE projects ADD COLUMN budget_unit TEXT;
