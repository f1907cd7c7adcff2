// Input requests (what agents ask people), which the Inbox and the run views
// both show: the lists by state, run or task, and the event stream's
// `input.*` events, which refresh every one of them.
import { queryOptions, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { InputState } from "@/api/types";
import { useServerEvents } from "@/events/hooks";

/** What one list of requests is filtered by. */
export interface InputRequestFilter {
  state?: InputState;
  runId?: string;
  vtid?: string;
  limit?: number;
}

/** Every pending request (the API's most): the Inbox and its count. */
export const PENDING_LIMIT = 1000;

export const inputRequestKeys = {
  all: ["input-requests"] as const,
  list: (f: InputRequestFilter) =>
    ["input-requests", "list", { state: f.state ?? null, runId: f.runId ?? null, vtid: f.vtid ?? null, limit: f.limit ?? null }] as const,
  one: (id: string) => ["input-requests", "one", id] as const,
};

/** The query of the requests matching `filter`, newest first. */
export function inputRequestsQuery(filter: InputRequestFilter) {
  return queryOptions({
    queryKey: inputRequestKeys.list(filter),
    queryFn: ({ signal }) =>
      unwrap(
        api.GET("/api/v1/input-requests", {
          params: { query: { state: filter.state, run_id: filter.runId, vtid: filter.vtid, limit: filter.limit } },
          signal,
        }),
      ).then((b) => b.requests),
  });
}

/** The pending requests: the Inbox's list, the navigation's count. */
export const PENDING: InputRequestFilter = { state: "pending", limit: PENDING_LIMIT };

/** Requests matching `filter`; `enabled: false` skips the query. */
export function useInputRequests(filter: InputRequestFilter, enabled = true) {
  return useQuery({ ...inputRequestsQuery(filter), enabled });
}

/**
 * Refreshes every list of requests when one is made or ends. Mounted once,
 * in the shell, so that every page showing requests stays current.
 *
 * A fetch already under way may have read the lists before the event: it is
 * cancelled first. (An invalidation alone would not do: a query still on its
 * first fetch keeps that fetch rather than start another.)
 */
export function useInputRequestLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.type === "input.requested" || e.type === "input.answered")) {
      void client
        .cancelQueries({ queryKey: inputRequestKeys.all })
        .then(() => client.invalidateQueries({ queryKey: inputRequestKeys.all }));
    }
  });
}

/** The ids of the pending requests, read now (not from the cache). */
export async function pendingIdsNow(): Promise<Set<string>> {
  const { requests } = await unwrap(api.GET("/api/v1/input-requests", { params: { query: { state: "pending", limit: PENDING_LIMIT } } }));
  return new Set(requests.map((r) => r.id));
}

