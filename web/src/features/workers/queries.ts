// Server state for seed 000's Workers page: the run list (paged, no
// transcripts), one run's detail with its transcript, and the live overlay
// from seed 000's SSE names.
import { useInfiniteQuery, useQuery, useQueryClient, type InfiniteData } from "@tanstack/react-query";
import { api, unwrap, unwrapAs } from "../../api/client";
import type { WorkerDetailResponse, WorkerListResponse, WorkerRunInfo } from "../../api/gaps";
import { useConnectionStatus, useServerEvents } from "../../events/hooks";
import type { ServerEvent } from "../../events/connection";

export const PAGE_SIZE = 50;
export type StatusFilter = "running" | "done" | "failed";

export const workerKeys = {
  list: (agentId: string) => ["workers", agentId] as const,
  filtered: (agentId: string, status: StatusFilter | undefined, q: string | undefined) =>
    ["workers", agentId, { status: status ?? null, q: q ?? "" }] as const,
  detail: (workerId: string) => ["worker-detail", workerId] as const,
};

export function useWorkerList(agentId: string, status: StatusFilter | undefined, q: string | undefined) {
  const connection = useConnectionStatus();
  return useInfiniteQuery({
    queryKey: workerKeys.filtered(agentId, status, q),
    initialPageParam: 0,
    queryFn: ({ pageParam, signal }) =>
      unwrap(
        api.GET("/api/agents/workers", {
          params: { query: { agent_id: agentId, limit: PAGE_SIZE, offset: pageParam, status, q: q || undefined } },
          signal,
        }),
      ),
    getNextPageParam: (last, pages) => {
      const loaded = pages.reduce((n, p) => n + p.workers.length, 0);
      return loaded < last.total && last.workers.length > 0 ? loaded : undefined;
    },
    // Seed 000 polls every 5 s; with the event stream live there is nothing
    // to poll for, so polling is the fallback while it is down.
    refetchInterval: connection === "live" ? false : 5_000,
  });
}

export function useWorkerDetail(agentId: string, workerId: string | undefined) {
  return useQuery({
    queryKey: workerKeys.detail(workerId ?? ""),
    enabled: !!workerId,
    queryFn: ({ signal }) =>
      unwrapAs<WorkerDetailResponse & { active_tool?: string | null }>(
        api.GET("/api/agents/workers/detail", {
          params: { query: { agent_id: agentId, worker_id: workerId! } },
          signal,
        }),
      ),
  });
}

type LivePatch = Partial<Pick<WorkerRunInfo, "live_status" | "active_tool" | "tool_calls">>;

function patchRun<T extends { id: string; tool_calls: number }>(run: T, id: string, patch: (r: T) => LivePatch): T {
  return run.id === id ? { ...run, ...patch(run) } : run;
}

/** Keeps the list and the open detail current from the event stream. */
export function useWorkerLiveUpdates(agentId: string) {
  const client = useQueryClient();
  useServerEvents((events: ServerEvent[]) => {
    let listStale = false;
    for (const e of events) {
      if (e.agent_id && e.agent_id !== agentId) continue;
      const runId = e.run_id;
      let patch: ((r: { tool_calls: number }) => LivePatch) | null = null;
      switch (e.event) {
        case "worker_started":
          listStale = true;
          break;
        case "worker_completed":
          listStale = true;
          if (runId) void client.invalidateQueries({ queryKey: workerKeys.detail(runId) });
          break;
        case "worker_status":
          patch = () => ({ live_status: (e.data.status as string | undefined) ?? null });
          break;
        case "tool_started": {
          const calls = Array.isArray(e.data.call_ids) ? e.data.call_ids.length : 1;
          patch = (r) => ({ active_tool: (e.data.tool_name as string | undefined) ?? null, tool_calls: r.tool_calls + Math.max(calls, 1) });
          break;
        }
        case "tool_completed":
          patch = () => ({ active_tool: null });
          break;
      }
      if (patch && runId) {
        const p = patch;
        client.setQueriesData<InfiniteData<WorkerListResponse>>({ queryKey: workerKeys.list(agentId) }, (old) =>
          old
            ? { ...old, pages: old.pages.map((pg) => ({ ...pg, workers: pg.workers.map((w) => patchRun(w, runId, p)) })) }
            : old,
        );
        client.setQueryData<WorkerDetailResponse>(workerKeys.detail(runId), (old) => (old ? patchRun(old, runId, p) : old));
      }
    }
    if (listStale) void client.invalidateQueries({ queryKey: workerKeys.list(agentId) });
  });
}
