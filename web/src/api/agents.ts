// The agents, which several pages list or offer to choose from.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";

export const agentKeys = { all: ["agents"] as const };

export function useAgents() {
  return useQuery({
    queryKey: agentKeys.all,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/agents", { signal })).then((b) => b.agents),
  });
}
