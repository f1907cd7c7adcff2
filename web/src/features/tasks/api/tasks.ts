// Tasks, workflows and task actions, and the events that refresh them.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { CreateTask, Task } from "@/api/types";
import { useServerEvents } from "@/events/hooks";

export const BOARD_LIMIT = 500;

export const taskKeys = {
  all: ["tasks"] as const,
  board: ["tasks", "board"] as const,
  detail: (vtid: string) => ["tasks", "detail", vtid] as const,
  runs: (vtid: string) => ["tasks", "runs", vtid] as const,
};

export function useWorkflows() {
  return useQuery({
    queryKey: ["workflows"],
    staleTime: Infinity,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/workflows", { signal })).then((b) => b.workflows),
  });
}

export function useBoardTasks() {
  return useQuery({
    queryKey: taskKeys.board,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/tasks", { params: { query: { limit: BOARD_LIMIT } }, signal })),
  });
}

export function useTask(vtid: string) {
  return useQuery({
    queryKey: taskKeys.detail(vtid),
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/tasks/{vtid}", { params: { path: { vtid } }, signal })),
  });
}

export function useTaskRuns(vtid: string) {
  return useQuery({
    queryKey: taskKeys.runs(vtid),
    queryFn: ({ signal }) =>
      unwrap(api.GET("/api/v1/runs", { params: { query: { vtid, limit: 100 } }, signal })),
  });
}

export function useTaskActions() {
  const client = useQueryClient();
  const done = () => client.invalidateQueries({ queryKey: taskKeys.all });
  const create = useMutation({
    mutationFn: (body: CreateTask) => unwrap(api.POST("/api/v1/tasks", { body })),
    onSuccess: done,
  });
  const dispatch = useMutation({
    mutationFn: (vtid: string) => unwrap(api.POST("/api/v1/tasks/{vtid}/dispatch", { params: { path: { vtid } } })),
    onSuccess: done,
  });
  const cancel = useMutation({
    mutationFn: (vtid: string) =>
      unwrap(api.POST("/api/v1/tasks/{vtid}/cancel", { params: { path: { vtid } }, body: { reason: "cancelled from the web UI" } })),
    onSuccess: done,
  });
  const retry = useMutation({
    mutationFn: (vtid: string) => unwrap(api.POST("/api/v1/tasks/{vtid}/retry", { params: { path: { vtid } } })),
    onSuccess: done,
  });
  const rerun = useMutation({
    mutationFn: (task: Task) => unwrap(api.POST("/api/v1/tasks", { body: rerunOf(task) })),
    onSuccess: done,
  });
  return { create, dispatch, cancel, retry, rerun };
}

/** Whether a task in `state` can be retried (the API allows failed and cancelled ones). */
export function retryable(state: string) {
  return state === "failed" || state === "cancelled";
}

/** Whether a task in `state` can be run again as a new task. */
export function rerunnable(state: string) {
  return state === "done";
}

/** A new task with `task`'s definition, dispatched at once. */
export function rerunOf(task: Task): CreateTask {
  return {
    title: task.title,
    spec: task.spec,
    agent_id: task.agent_id ?? null,
    capabilities: task.capabilities,
    workflow: task.workflow,
    priority: task.priority,
    channel_id: task.channel_id ?? null,
    max_attempts: task.max_attempts ?? null,
    retry_backoff: task.retry_backoff ?? null,
    dispatch: true,
  };
}

/** A task event, or a run event about a task, refreshes the board. */
export function useTaskLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.task_id && (e.type.startsWith("task.") || e.type.startsWith("worker.") || e.event.startsWith("worker_")))) {
      void client.invalidateQueries({ queryKey: taskKeys.all });
    }
  });
}

/** Any event about one task refreshes it. */
export function useTaskDetailLiveUpdates(vtid: string) {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.task_id === vtid)) void client.invalidateQueries({ queryKey: taskKeys.all });
  });
}
