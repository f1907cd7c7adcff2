// Fleet: seed 001's list_workers view. Recovered workers (after a restart)
// carry source / event_state / recovered_at badges; active workers with no
// activity for longer than the threshold are highlighted as stuck; the
// worker_events timeline is beside them.
import { Link, useNavigate } from "@tanstack/react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrapAs } from "../../api/client";
import type { FleetWorker, WorkerEventsResponse } from "../../api/gaps";
import { useServerEvents } from "../../events/hooks";
import { Badge, StatusBadge } from "../../components/StatusBadge";
import { RelativeTime } from "../../components/time";

export interface FleetSearch {
  stale?: number;
  closed?: boolean;
  worker?: string;
}

export function validateFleetSearch(search: Record<string, unknown>): FleetSearch {
  const stale = Number(search.stale);
  return {
    stale: Number.isFinite(stale) && stale >= 0 && search.stale !== undefined ? Math.floor(stale) : undefined,
    closed: search.closed === true || search.closed === "true" ? true : undefined,
    worker: typeof search.worker === "string" ? search.worker : undefined,
  };
}

const DEFAULT_STALE = 10;

export function FleetPage({ search }: { search: FleetSearch }) {
  const navigate = useNavigate({ from: "/fleet" });
  const stale = search.stale ?? DEFAULT_STALE;
  const client = useQueryClient();
  const workers = useQuery({
    queryKey: ["fleet", "workers", !!search.closed],
    queryFn: ({ signal }) =>
      unwrapAs<{ workers: FleetWorker[]; count: number }>(
        api.GET("/api/v1/workers", { params: { query: { include_closed: !!search.closed } }, signal }),
      ),
  });
  const events = useQuery({
    queryKey: ["fleet", "events", stale],
    queryFn: ({ signal }) =>
      unwrapAs<WorkerEventsResponse>(
        api.GET("/api/v1/worker_events", {
          params: { query: { limit: 200, include_summary: true, stale_threshold_minutes: stale } },
          signal,
        }),
      ),
    // "Stuck" depends on time passing, not only on events.
    refetchInterval: 30_000,
  });
  useServerEvents((evs) => {
    if (evs.some((e) => e.type.startsWith("worker.") || e.type === "workers.snapshot" || e.type.startsWith("run."))) {
      void client.invalidateQueries({ queryKey: ["fleet"] });
    }
  });
  const stuck = new Set(events.data?.summary?.stuck ?? []);
  const timeline = [...(events.data?.events ?? [])]
    .filter((e) => !search.worker || e.worker_id === search.worker)
    .sort((a, b) => b.id - a.id);

  return (
    <div className="page fleet-page">
      <header className="page-header">
        <h1>Fleet</h1>
        <label className="inline-field">
          Stuck after
          <input
            type="number"
            min={0}
            value={stale}
            onChange={(e) => void navigate({ search: (p) => ({ ...p, stale: e.target.value === "" ? undefined : Number(e.target.value) }), replace: true })}
            data-testid="stale-threshold"
          />
          minutes
        </label>
        <label className="check">
          <input type="checkbox" checked={!!search.closed} onChange={(e) => void navigate({ search: (p) => ({ ...p, closed: e.target.checked || undefined }) })} />
          Include closed
        </label>
      </header>
      <div className="detail-grid">
        <section className="card" aria-label="Workers">
          <h2>
            Workers <span className="muted">{workers.data?.count ?? ""}</span>
          </h2>
          {workers.isError && (
            <p className="error" role="alert">
              {workers.error.message}
            </p>
          )}
          {workers.data?.count === 0 && <p className="muted">No workers registered.</p>}
          <table className="table" data-testid="fleet-table">
            <thead>
              <tr>
                <th scope="col">Worker</th>
                <th scope="col">Agent</th>
                <th scope="col">Status</th>
                <th scope="col">Provenance</th>
                <th scope="col">Last activity</th>
                <th scope="col">Claims</th>
              </tr>
            </thead>
            <tbody>
              {workers.data?.workers.map((w) => (
                <tr key={w.worker_id} className={stuck.has(w.worker_id) ? "row-stuck" : undefined} data-testid="fleet-row" data-worker-id={w.worker_id}>
                  <td>
                    <Link from="/fleet" search={(p) => ({ ...p, worker: p.worker === w.worker_id ? undefined : w.worker_id })} aria-current={search.worker === w.worker_id ? "true" : undefined}>
                      {w.name ?? w.worker_id}
                    </Link>
                    {stuck.has(w.worker_id) && (
                      <Badge tone="red" title={`active with no activity for more than ${stale} minutes`}>
                        stuck
                      </Badge>
                    )}
                  </td>
                  <td>{w.agent_id}</td>
                  <td>
                    <StatusBadge status={w.status} /> <StatusBadge status={w.event_state} label={`event_state: ${w.event_state}`} />
                  </td>
                  <td>
                    <Badge tone={w.source === "registry" ? "green" : "purple"}>source: {w.source}</Badge>
                    {w.recovered_at && (
                      <Badge tone="purple" title={w.recovered_at}>
                        recovered <RelativeTime iso={w.recovered_at} />
                      </Badge>
                    )}
                  </td>
                  <td>
                    <RelativeTime iso={w.last_activity} />
                  </td>
                  <td>{w.active_claims}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
        <section className="card" aria-label="Worker events">
          <h2>
            worker_events {search.worker && <span className="muted">for {search.worker}</span>}
          </h2>
          <ol className="timeline" data-testid="worker-events" tabIndex={0} aria-label="worker_events timeline">
            {timeline.map((e) => (
              <li key={e.id}>
                <span className="mono">{e.type}</span> <span className="muted">{e.worker_id}</span>{" "}
                <span className="muted">
                  <RelativeTime iso={e.ts} />
                </span>
              </li>
            ))}
          </ol>
        </section>
      </div>
    </div>
  );
}
