// One task on the board: title, id, agent, last change, and the dispatch and
// cancel buttons its state allows.
import { Link } from "@tanstack/react-router";
import type { Task, Workflow } from "@/api/types";
import { RelativeTime } from "@/components/time";
import { useTaskActions } from "@/features/tasks/api/tasks";

export function TaskCard({ task, workflow }: { task: Task; workflow: Workflow }) {
  const { dispatch, cancel } = useTaskActions();
  const final = workflow.final_states.includes(task.state);
  return (
    <li className="task-card" data-testid="task-card" data-vtid={task.vtid} data-state={task.state}>
      <Link to="/tasks/$vtid" params={{ vtid: task.vtid }} className="task-title">
        {task.title}
      </Link>
      <div className="task-meta muted">
        <span>{task.vtid}</span>
        {task.agent_id && <span>· {task.agent_id}</span>}
        <span>
          · <RelativeTime iso={task.updated_at} />
        </span>
      </div>
      <div className="task-actions">
        {task.state === workflow.draft_state && (
          <button type="button" className="btn btn-small" disabled={dispatch.isPending} onClick={() => dispatch.mutate(task.vtid)} data-testid="task-dispatch-btn">
            Dispatch
          </button>
        )}
        {!final && !task.cancel_requested_at && (
          <button type="button" className="btn btn-small btn-danger" disabled={cancel.isPending} onClick={() => cancel.mutate(task.vtid)} data-testid="task-cancel-btn">
            Cancel
          </button>
        )}
        {task.cancel_requested_at && !final && <span className="muted">cancelling…</span>}
      </div>
    </li>
  );
}
