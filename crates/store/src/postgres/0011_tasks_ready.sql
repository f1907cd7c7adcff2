-- The claimable queue in the order tasks are handed out (priority, then
-- age). Only tasks waiting for a worker are in it, so claim-next reads
-- the first rows of this index and stops at its limit, instead of sorting
-- every waiting task on each call. The states are every workflow's
-- dispatched and review states (core::workflow; a store test checks the
-- list). Keep in step with the other backend's 0011_tasks_ready.sql.
CREATE INDEX tasks_ready ON tasks (priority DESC, dispatched_at, id)
    WHERE state IN ('pending', 'in_progress', 'reviewing')
      AND cancel_requested_at IS NULL;
