// Server state for the Fleet page: the hosts, the registered workers and
// the worker_events timeline with its stuck-worker summary, and the events
// that refresh them.
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import { hostKeys } from "@/api/hosts";
import { useServerEvents } from "@/events/hooks";

const fleetKeys = {
  all: ["fleet"] as const,
  workers: (includeClosed: boolean) => ["fleet", "workers", includeClosed] as const,
  events: (staleMinutes: number) => ["fleet", "events", staleMinutes] as const,
};

export function useFleetWorkers(includeClosed: boolean) {
  return useQuery({
    queryKey: fleetKeys.workers(includeClosed),
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/workers", { params: { query: { include_closed: includeClosed } }, signal })),
  });
}

/** The newest worker_events, with the workers active but silent for `staleMinutes`. */
export function useWorkerEvents(staleMinutes: number) {
  return useQuery({
    queryKey: fleetKeys.events(staleMinutes),
    queryFn: ({ signal }) =>
      unwrap(
        api.GET("/api/v1/worker_events", {
          params: { query: { limit: 200, include_summary: true, stale_threshold_minutes: staleMinutes } },
          signal,
        }),
      ),
    // "Stuck" depends on time passing, not only on events.
    refetchInterval: 30_000,
  });
}

/** Worker and run events refresh the fleet. */
export function useFleetLiveUpdates() {
  const client = useQueryClient();
  useServerEvents((evs) => {
    if (
      evs.some(
        (e) =>
          e.type.startsWith("worker.") ||
          e.type === "workers.snapshot" ||
          e.type.startsWith("run.") ||
          e.type.startsWith("host.") ||
          e.type === "session.created" ||
          e.type === "session.deleted",
      )
    ) {
      void client.invalidateQueries({ queryKey: fleetKeys.all });
      void client.invalidateQueries({ queryKey: hostKeys.all });
    }
  });
}
