// The task board: one column per state of the chosen workflow (simple or
// autopilot); cards move live as the event stream reports state changes.
import { useMemo } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import { useQueryClient } from "@tanstack/react-query";
import type { Task, Workflow } from "../../api/gaps";
import { useServerEvents } from "../../events/hooks";
import { RelativeTime } from "../../components/time";
import { BOARD_LIMIT, taskKeys, useBoardTasks, useTaskActions, useWorkflows } from "./queries";
import { CreateTaskDialog } from "./CreateTaskDialog";

export interface TasksSearch {
  workflow?: string;
  new?: boolean;
}

export function validateTasksSearch(search: Record<string, unknown>): TasksSearch {
  return {
    workflow: typeof search.workflow === "string" ? search.workflow : undefined,
    new: search.new === true || search.new === "true" ? true : undefined,
  };
}

/** Invalidates task queries when a task event arrives. */
export function useTaskLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.task_id && (e.type.startsWith("task.") || e.type.startsWith("worker.") || e.event.startsWith("worker_")))) {
      void client.invalidateQueries({ queryKey: taskKeys.all });
    }
  });
}

function TaskCard({ task, workflow }: { task: Task; workflow: Workflow }) {
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

export function TasksPage({ search }: { search: TasksSearch }) {
  const navigate = useNavigate({ from: "/tasks" });
  const workflows = useWorkflows();
  const tasks = useBoardTasks();
  useTaskLiveUpdates();
  const workflow = workflows.data?.find((w) => w.name === (search.workflow ?? "simple")) ?? workflows.data?.[0];
  const columns = useMemo(() => {
    const by = new Map<string, Task[]>();
    for (const s of workflow?.states ?? []) by.set(s, []);
    for (const t of tasks.data?.tasks ?? []) if (t.workflow === workflow?.name) by.get(t.state)?.push(t);
    return by;
  }, [workflow, tasks.data]);

  return (
    <div className="page tasks-page">
      <header className="page-header">
        <h1>Tasks</h1>
        <div className="tabs" role="group" aria-label="Workflow">
          {workflows.data?.map((w) => (
            <Link
              key={w.name}
              from="/tasks"
              search={(prev) => ({ ...prev, workflow: w.name === "simple" ? undefined : w.name })}
              className={`pill${workflow?.name === w.name ? " pill-active" : ""}`}
              aria-pressed={workflow?.name === w.name}
              role="button"
            >
              {w.name}
            </Link>
          ))}
        </div>
        <button type="button" className="btn btn-primary" onClick={() => void navigate({ search: (p) => ({ ...p, new: true }) })} data-testid="new-task">
          New task
        </button>
      </header>
      {tasks.isError && (
        <div className="empty error" role="alert">
          Could not load tasks: {tasks.error.message}
        </div>
      )}
      {tasks.data && tasks.data.total > BOARD_LIMIT && <p className="muted">Showing the newest {BOARD_LIMIT} of {tasks.data.total} tasks.</p>}
      <div className="board" data-testid="board">
        {[...columns.entries()].map(([state, list]) => (
          <section key={state} className="board-column" aria-label={`${state} tasks`} data-testid="board-column" data-state={state}>
            <h2>
              {state} <span className="muted">{list.length}</span>
            </h2>
            <ul>
              {list.map((t) => workflow && <TaskCard key={t.vtid} task={t} workflow={workflow} />)}
            </ul>
          </section>
        ))}
      </div>
      {search.new && (
        <CreateTaskDialog
          onClose={(created) => {
            void navigate({
              search: (p) => ({ ...p, new: undefined, workflow: created ? (created.workflow === "simple" ? undefined : created.workflow) : p.workflow }),
              replace: true,
            });
          }}
        />
      )}
    </div>
  );
}
