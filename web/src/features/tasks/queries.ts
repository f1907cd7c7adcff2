// Tasks, workflows and task actions.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrapAs } from "../../api/client";
import type { RunRecord, Task, TaskDetail, TaskList, Workflow } from "../../api/gaps";
import type { components } from "../../api/schema";

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
    queryFn: ({ signal }) => unwrapAs<{ workflows: Workflow[] }>(api.GET("/api/v1/workflows", { signal })).then((b) => b.workflows),
  });
}

export function useBoardTasks() {
  return useQuery({
    queryKey: taskKeys.board,
    queryFn: ({ signal }) => unwrapAs<TaskList>(api.GET("/api/v1/tasks", { params: { query: { limit: BOARD_LIMIT } }, signal })),
  });
}

export function useTask(vtid: string) {
  return useQuery({
    queryKey: taskKeys.detail(vtid),
    queryFn: ({ signal }) => unwrapAs<TaskDetail>(api.GET("/api/v1/tasks/{vtid}", { params: { path: { vtid } }, signal })),
  });
}

export function useTaskRuns(vtid: string) {
  return useQuery({
    queryKey: taskKeys.runs(vtid),
    queryFn: ({ signal }) =>
      unwrapAs<{ runs: RunRecord[]; total: number }>(api.GET("/api/v1/runs", { params: { query: { vtid, limit: 100 } }, signal })),
  });
}

export type CreateTask = components["schemas"]["CreateTask"];

export function useTaskActions() {
  const client = useQueryClient();
  const done = () => client.invalidateQueries({ queryKey: taskKeys.all });
  const create = useMutation({
    mutationFn: (body: CreateTask) => unwrapAs<Task>(api.POST("/api/v1/tasks", { body })),
    onSuccess: done,
  });
  const dispatch = useMutation({
    mutationFn: (vtid: string) => unwrapAs<Task>(api.POST("/api/v1/tasks/{vtid}/dispatch", { params: { path: { vtid } } })),
    onSuccess: done,
  });
  const cancel = useMutation({
    mutationFn: (vtid: string) =>
      unwrapAs<{ ok: boolean }>(api.POST("/api/v1/tasks/{vtid}/cancel", { params: { path: { vtid } }, body: { reason: "cancelled from the web UI" } })),
    onSuccess: done,
  });
  return { create, dispatch, cancel };
}
