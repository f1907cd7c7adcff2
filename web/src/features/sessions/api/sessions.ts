// Server state for the sessions contract's sessions: the list, one session with its tabs
// (persisted metadata, alive or not), tab actions and a git-diff tab's diff.
// Session events on the shared stream refresh them.
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { AddWorker, CreateSession, RestartMode } from "@/api/types";
import { useServerEvents } from "@/events/hooks";

export const sessionKeys = {
  all: ["sessions"] as const,
  list: ["sessions", "list"] as const,
  detail: (id: string) => ["sessions", "detail", id] as const,
  diff: (id: string, workerId: string) => ["sessions", "diff", id, workerId] as const,
};

export function useSessions() {
  return useQuery({
    queryKey: sessionKeys.list,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/sessions", { signal })),
  });
}

export function useSession(id: string) {
  return useQuery({
    queryKey: sessionKeys.detail(id),
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/sessions/{id}", { params: { path: { id } }, signal })),
  });
}

export function useDiff(id: string, workerId: string) {
  return useQuery({
    queryKey: sessionKeys.diff(id, workerId),
    queryFn: ({ signal }) =>
      unwrap(api.GET("/api/v1/sessions/{id}/workers/{worker_id}/diff", { params: { path: { id, worker_id: workerId } }, signal })),
  });
}

/** Session events (tab added, restored, exited, …) refresh the session views. */
export function useSessionLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.session_id || e.type.startsWith("session."))) {
      void client.invalidateQueries({ queryKey: sessionKeys.list });
      for (const e of events) if (e.session_id) void client.invalidateQueries({ queryKey: sessionKeys.detail(e.session_id) });
    }
  });
}

export function useSessionActions() {
  const client = useQueryClient();
  const done = () => client.invalidateQueries({ queryKey: sessionKeys.all });
  const create = useMutation({
    mutationFn: (body: CreateSession) => unwrap(api.POST("/api/v1/sessions", { body })),
    onSuccess: done,
  });
  const remove = useMutation({
    mutationFn: (id: string) => unwrap(api.DELETE("/api/v1/sessions/{id}", { params: { path: { id } } })),
    onSuccess: done,
  });
  const addWorker = useMutation({
    mutationFn: ({ id, type, name, agent_id }: AddWorker & { id: string }) =>
      unwrap(api.POST("/api/v1/sessions/{id}/workers", { params: { path: { id } }, body: { type, name, agent_id } })),
    onSuccess: done,
  });
  const removeWorker = useMutation({
    mutationFn: ({ id, workerId }: { id: string; workerId: string }) =>
      unwrap(api.DELETE("/api/v1/sessions/{id}/workers/{worker_id}", { params: { path: { id, worker_id: workerId } } })),
    onSuccess: done,
  });
  const restart = useMutation({
    mutationFn: ({ id, workerId, mode }: { id: string; workerId: string; mode: RestartMode }) =>
      unwrap(api.POST("/api/v1/sessions/{id}/workers/{worker_id}/restart", { params: { path: { id, worker_id: workerId } }, body: { mode } })),
    onSuccess: done,
  });
  return { create, remove, addWorker, removeWorker, restart };
}
