// Agents and their counts for the home page.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, unwrapAs } from "../../api/client";
import type { Agent, TaskList } from "../../api/gaps";

export const agentKeys = { all: ["agents"] as const, counts: (id: string) => ["agents", id, "counts"] as const };

export function useAgents() {
  return useQuery({
    queryKey: agentKeys.all,
    queryFn: ({ signal }) => unwrapAs<{ agents: Agent[] }>(api.GET("/api/v1/agents", { signal })).then((b) => b.agents),
  });
}

/** Failed runs and queued tasks of one agent (totals only: one row each). */
export function useAgentCounts(agentId: string) {
  return useQuery({
    queryKey: agentKeys.counts(agentId),
    queryFn: async ({ signal }) => {
      const [failed, queued] = await Promise.all([
        unwrap(api.GET("/api/agents/workers", { params: { query: { agent_id: agentId, status: "failed", limit: 1 } }, signal })),
        unwrapAs<TaskList>(api.GET("/api/v1/tasks", { params: { query: { agent_id: agentId, state: "pending", limit: 1 } }, signal })),
      ]);
      return { failed: failed.total, queued: queued.total };
    },
  });
}
