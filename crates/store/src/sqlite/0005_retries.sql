-- Retries and delayed tasks. Keep in step with postgres/0005_retries.sql.

-- A task's retry policy: attempts in all (NULL: no policy, the seed's rules)
-- and the backoff between them (a JSON shepherd_core::retry::RetryBackoff).
ALTER TABLE tasks ADD COLUMN max_attempts INTEGER;
ALTER TABLE tasks ADD COLUMN retry_backoff TEXT;
-- Not claimable before this instant (a delayed task, or the next attempt).
ALTER TABLE tasks ADD COLUMN run_at INTEGER;
-- The attempts that failed: a JSON array of shepherd_core::retry::AttemptFailure.
ALTER TABLE tasks ADD COLUMN failures TEXT;

-- An agent's default policy for its tasks, from configuration.
ALTER TABLE agents ADD COLUMN max_attempts INTEGER;
ALTER TABLE agents ADD COLUMN retry_backoff TEXT;
