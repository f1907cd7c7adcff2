-- Where a worktree run worked: its branch, base, base commit, head and
-- repository as a JSON object (shepherd_core::model::RunWorkspace), set from
-- the runner's start and end reports. Keep in step with postgres/0008_run_workspace.sql.
ALTER TABLE runs ADD COLUMN workspace TEXT;
