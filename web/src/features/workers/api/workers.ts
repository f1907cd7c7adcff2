// Server state for the Workers page: the run list (paged, no
// transcripts) and one run's detail with its transcript, each with the
// cursor it is valid at; live events refresh them (see stores/live.ts).
import { useInfiniteQuery, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { RunStatus, WorkerDetailResponse } from "@/api/types";
import { useConnectionStatus, useServerEvents } from "@/events/hooks";
import { recordLive } from "@/features/workers/stores/live";

export const PAGE_SIZE = 50;
/** The statuses the Workers page filters by: the contract's three, and
 * `cancelled`, Shepherd's addition. */
export type StatusFilter = Extract<RunStatus, "running" | "done" | "failed" | "cancelled">;

export const workerKeys = {
  list: (agentId: string) => ["workers", agentId] as const,
  filtered: (agentId: string, status: StatusFilter | undefined, q: string | undefined) =>
    ["workers", agentId, { status: status ?? null, q: q ?? "" }] as const,
  detail: (workerId: string) => ["worker-detail", workerId] as const,
  record: (runId: string) => ["run-record", runId] as const,
};

/** The event-log cursor a response's data is valid at. */
function cursorOf(response: Response): number {
  return Number(response.headers.get("x-shepherd-cursor") ?? 0);
}

export function useWorkerList(agentId: string, status: StatusFilter | undefined, q: string | undefined) {
  const connection = useConnectionStatus();
  return useInfiniteQuery({
    queryKey: workerKeys.filtered(agentId, status, q),
    initialPageParam: 0,
    queryFn: async ({ pageParam, signal }) => {
      const res = api.GET("/api/agents/workers", {
        params: { query: { agent_id: agentId, limit: PAGE_SIZE, offset: pageParam, status, q: q || undefined } },
        signal,
      });
      const body = await unwrap(res);
      return { ...body, cursor: cursorOf((await res).response) };
    },
    getNextPageParam: (last, pages) => {
      const loaded = pages.reduce((n, p) => n + p.workers.length, 0);
      return loaded < last.total && last.workers.length > 0 ? loaded : undefined;
    },
    // The Workers page contract polls every 5 s; with the event stream live there is nothing
    // to poll for, so polling is the fallback while it is down.
    refetchInterval: connection === "live" ? false : 5_000,
  });
}

export type WorkerDetail = WorkerDetailResponse & { active_tool?: string | null; cursor: number };

export function useWorkerDetail(agentId: string, workerId: string | undefined) {
  return useQuery({
    queryKey: workerKeys.detail(workerId ?? ""),
    enabled: !!workerId,
    queryFn: async ({ signal }) => {
      const res = api.GET("/api/agents/workers/detail", {
        params: { query: { agent_id: agentId, worker_id: workerId! } },
        signal,
      });
      const body = await unwrap(res);
      return { ...body, cursor: cursorOf((await res).response) } as WorkerDetail;
    },
  });
}

/**
 * The run's full record (its attempt number, say), which the detail route
 * leaves out: read from its task's run list, which carries no transcripts.
 */
export function useRunRecord(runId: string, vtid: string) {
  return useQuery({
    queryKey: workerKeys.record(runId),
    queryFn: ({ signal }) =>
      unwrap(api.GET("/api/v1/runs", { params: { query: { vtid, limit: 100 } }, signal })).then((b) => b.runs.find((r) => r.id === runId) ?? null),
  });
}

/** Feeds the live overlay and refetches what a start or an end changes. */
export function useWorkerLiveUpdates(agentId: string) {
  const client = useQueryClient();
  useServerEvents((events) => {
    recordLive(events);
    let listStale = false;
    for (const e of events) {
      if (e.agent_id && e.agent_id !== agentId) continue;
      if (e.event === "worker_started") listStale = true;
      if (e.event === "worker_completed") {
        listStale = true;
        if (e.run_id) void client.invalidateQueries({ queryKey: workerKeys.detail(e.run_id) });
      }
    }
    if (listStale) void client.invalidateQueries({ queryKey: workerKeys.list(agentId) });
  });
}
