// The task board: one column per state of the chosen workflow (simple or
// autopilot); cards move live as the event stream reports state changes.
import { useMemo } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import type { Task } from "@/api/types";
import { BOARD_LIMIT, useBoardTasks, useTaskLiveUpdates, useWorkflows } from "@/features/tasks/api/tasks";
import { CreateTaskDialog } from "./CreateTaskDialog";
import { OperatorOnly } from "@/components/OperatorOnly";
import { TaskCard } from "./TaskCard";

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
        <OperatorOnly>
          <button type="button" className="btn btn-primary" onClick={() => void navigate({ search: (p) => ({ ...p, new: true }) })} data-testid="new-task">
            New task
          </button>
        </OperatorOnly>
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
        <OperatorOnly>
          <CreateTaskDialog
          onClose={(created) => {
            void navigate({
              search: (p) => ({ ...p, new: undefined, workflow: created ? (created.workflow === "simple" ? undefined : created.workflow) : p.workflow }),
              replace: true,
            });
          }}
          />
        </OperatorOnly>
      )}
    </div>
  );
}
