// One task on the board: title, id, agent, last change, and the actions its
// state allows (see TaskActions).
import { Link } from "@tanstack/react-router";
import type { Task, Workflow } from "@/api/types";
import { RelativeTime } from "@/components/time";
import { TaskActions } from "./TaskActions";

export function TaskCard({ task, workflow }: { task: Task; workflow: Workflow }) {
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
      <TaskActions task={task} workflow={workflow} small />
    </li>
  );
}
