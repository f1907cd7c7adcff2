// What can be done to a task in its state: Dispatch a draft, Cancel an
// unfinished one (after a confirmation), Retry a failed or cancelled one, or
// Rerun a done one as a new task with the same definition (then open it).
import { useState } from "react";
import { useNavigate } from "@tanstack/react-router";
import type { Task, Workflow } from "@/api/types";
import { ConfirmDialog } from "@/components/ConfirmDialog";
import { rerunnable, retryable, useTaskActions } from "@/features/tasks/api/tasks";
import { useCanOperate } from "@/api/account";

export function TaskActions({ task, workflow, small = false }: { task: Task; workflow: Workflow | undefined; small?: boolean }) {
  const navigate = useNavigate();
  const { dispatch, cancel, retry, rerun } = useTaskActions();
  const [confirming, setConfirming] = useState(false);
  const canOperate = useCanOperate();
  const final = workflow?.final_states.includes(task.state) ?? false;
  const btn = small ? "btn btn-small" : "btn";
  const failed = [dispatch, cancel, retry, rerun].find((m) => m.isError)?.error;

  const confirmCancel = () =>
    cancel.mutate(task.vtid, {
      onSettled: () => setConfirming(false),
    });
  const startRerun = () =>
    rerun.mutate(task, {
      onSuccess: (created) => void navigate({ to: "/tasks/$vtid", params: { vtid: created.vtid } }),
    });

  // A viewer changes nothing: no action to offer.
  if (!canOperate) return null;
  return (
    <div className="task-actions">
      {task.state === workflow?.draft_state && (
        <button type="button" className={btn} disabled={dispatch.isPending} onClick={() => dispatch.mutate(task.vtid)} data-testid="task-dispatch-btn">
          Dispatch
        </button>
      )}
      {!final && !task.cancel_requested_at && (
        <button type="button" className={`${btn} btn-danger`} disabled={cancel.isPending} onClick={() => setConfirming(true)} data-testid="task-cancel-btn">
          Cancel
        </button>
      )}
      {task.cancel_requested_at && !final && <span className="muted">cancelling…</span>}
      {retryable(task.state) && (
        <button
          type="button"
          className={btn}
          disabled={retry.isPending}
          onClick={() => retry.mutate(task.vtid)}
          data-testid="task-retry-btn"
          title={`Run ${task.vtid} again (attempt ${task.attempts + 1})`}
        >
          Retry
        </button>
      )}
      {rerunnable(task.state) && (
        <button
          type="button"
          className={btn}
          disabled={rerun.isPending}
          onClick={startRerun}
          data-testid="task-rerun-btn"
          title={`A new task with the definition of ${task.vtid}`}
        >
          Rerun
        </button>
      )}
      {failed && (
        <span className="error small" role="alert">
          {failed.message}
        </span>
      )}
      {confirming && (
        <ConfirmDialog
          title={`Cancel ${task.vtid}?`}
          message={`“${task.title}” stops${task.state === "running" ? ", and its running agent is ended" : ""}. It can be retried later.`}
          confirmLabel="Cancel task"
          dismissLabel="Keep it"
          busy={cancel.isPending}
          onConfirm={confirmCancel}
          onDismiss={() => setConfirming(false)}
        />
      )}
    </div>
  );
}
