-- Finished runs per agent, status and worker: each worker's completions
-- move a counter row of its own, so concurrent workers never queue behind
-- one shared row. Runs still running are not counted here: they are
-- counted from the runs_agent_status index, which holds only a few of them.
-- worker_id '' holds what was counted before this split. Keep in step with
-- postgres/0010_run_counts_by_worker.sql.
CREATE TABLE run_counts_by_worker (
    agent_id  TEXT NOT NULL,
    status    TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    n         INTEGER NOT NULL,
    PRIMARY KEY (agent_id, status, worker_id)
);
INSERT INTO run_counts_by_worker (agent_id, status, worker_id, n)
    SELECT agent_id, status, '', n FROM run_counts WHERE status <> 'running';
DROP TABLE run_counts;
ALTER TABLE run_counts_by_worker RENAME TO run_counts;
