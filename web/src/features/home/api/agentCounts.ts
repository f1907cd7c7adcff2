// Each agent's failed runs and queued tasks for the home page, and the events
// that change them.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import { agentKeys } from "@/api/agents";
import { useServerEvents } from "@/events/hooks";

const countsKey = (agentId: string) => [...agentKeys.all, agentId, "counts"] as const;

/** Failed runs and queued tasks of one agent (totals only: one row each). */
export function useAgentCounts(agentId: string) {
  return useQuery({
    queryKey: countsKey(agentId),
    queryFn: async ({ signal }) => {
      const [failed, queued] = await Promise.all([
        unwrap(api.GET("/api/agents/workers", { params: { query: { agent_id: agentId, status: "failed", limit: 1 } }, signal })),
        unwrap(api.GET("/api/v1/tasks", { params: { query: { agent_id: agentId, state: "pending", limit: 1 } }, signal })),
      ]);
      return { failed: failed.total, queued: queued.total };
    },
  });
}

/** Runs starting or ending, task and agent events refresh the agents and their counts. */
export function useAgentLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.event.startsWith("worker_") || e.type.startsWith("task.") || e.type.startsWith("agent."))) {
      void client.invalidateQueries({ queryKey: agentKeys.all });
    }
  });
}
