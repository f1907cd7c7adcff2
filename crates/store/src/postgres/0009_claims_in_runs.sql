-- A run is one claim attempt: the claim's lease lives on its run row, so
-- granting and ending a claim write one row, not two. Keep in step with
-- sqlite/0009_claims_in_runs.sql.

-- The claim's id (as reported on the wire), its fencing token (hashed, like
-- worker tokens), its lease and how it ended. The claim's time is the run's
-- started_at. A run is the active claim of its task while released_at is NULL.
ALTER TABLE runs ADD COLUMN claim_id TEXT;
ALTER TABLE runs ADD COLUMN claim_token TEXT;
ALTER TABLE runs ADD COLUMN expires_at BIGINT;
ALTER TABLE runs ADD COLUMN released_at BIGINT;
ALTER TABLE runs ADD COLUMN release_reason TEXT;

UPDATE runs SET claim_id = c.id, claim_token = c.token, expires_at = c.expires_at,
    released_at = c.released_at, release_reason = c.release_reason
FROM claims c WHERE c.run_id = runs.id;
-- A run without a claim row (none is expected) must not count as active.
UPDATE runs SET released_at = COALESCE(completed_at, started_at) WHERE claim_id IS NULL;

DROP TABLE claims;

-- At most one active claim per task, enforced by the database (N1, N5).
CREATE UNIQUE INDEX runs_one_active ON runs (task_id) WHERE released_at IS NULL;
-- A worker's active claims: its load, its heartbeats, its deregistration.
CREATE INDEX runs_worker_active ON runs (worker_id) WHERE released_at IS NULL;
