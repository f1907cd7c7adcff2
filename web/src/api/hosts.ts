// The hosts (server nodes and runners' machines), which the Fleet page lists
// and the new-session form offers to choose from.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";

export const hostKeys = { all: ["hosts"] as const };

/** Where work lives: server nodes and runners' hosts, online or not. */
export function useHosts() {
  return useQuery({
    queryKey: hostKeys.all,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/hosts", { signal })),
    // A host goes offline by saying nothing: only time passing shows it.
    refetchInterval: 15_000,
  });
}
