// Fleet: the hosts work lives on, and the worker registry contract's
// list_workers view grouped by host. Recovered workers (after a restart)
// carry source / event_state / recovered_at badges; active workers with no
// activity for longer than the threshold are highlighted as stuck; the
// worker_events timeline is beside them.
import { useNavigate } from "@tanstack/react-router";
import type { FleetHost, FleetWorker } from "@/api/types";
import { useHosts } from "@/api/hosts";
import { useFleetLiveUpdates, useFleetWorkers, useWorkerEvents } from "@/features/fleet/api/fleet";
import { FleetTable } from "./FleetTable";
import { HostsTable } from "./HostsTable";
import { SessionTabsTable } from "./SessionTabsTable";
import { WorkerEventsTimeline } from "./WorkerEventsTimeline";

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

interface HostGroup {
  key: string;
  title: string;
  offline: boolean;
  workers: FleetWorker[];
}

/** Workers by the host they run on, in the hosts' order; workers that
 *  named no host (outside workers) last. */
function byHost(workers: FleetWorker[], hosts: FleetHost[]): HostGroup[] {
  const groups: HostGroup[] = hosts.map((h) => ({ key: h.id, title: h.name, offline: !h.online, workers: [] }));
  const other: HostGroup = { key: "", title: "No host named", offline: false, workers: [] };
  for (const w of workers) {
    (groups.find((g) => g.key === w.host_id) ?? other).workers.push(w);
  }
  return [...groups, other].filter((g) => g.workers.length > 0);
}

export function FleetPage({ search }: { search: FleetSearch }) {
  const navigate = useNavigate({ from: "/fleet" });
  const stale = search.stale ?? DEFAULT_STALE;
  const hosts = useHosts();
  const workers = useFleetWorkers(!!search.closed);
  const events = useWorkerEvents(stale);
  useFleetLiveUpdates();
  // Session tabs (terminals, interactive agents) register as workers but take no tasks.
  const all = workers.data?.workers ?? [];
  const fleet = all.filter((w) => !w.session_id);
  const tabs = all.filter((w) => !!w.session_id);
  const groups = byHost(fleet, hosts.data?.hosts ?? []);
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
      <section className="card" aria-label="Hosts">
        <h2>
          Hosts <span className="muted">{hosts.data ? hosts.data.hosts.length : ""}</span>
        </h2>
        {hosts.isError && (
          <p className="error" role="alert">
            {hosts.error.message}
          </p>
        )}
        {hosts.data && <HostsTable hosts={hosts.data.hosts} />}
      </section>
      <div className="detail-grid">
        <section className="card" aria-label="Workers">
          <h2>
            Workers <span className="muted">{workers.data ? fleet.length : ""}</span>
          </h2>
          {workers.isError && (
            <p className="error" role="alert">
              {workers.error.message}
            </p>
          )}
          {workers.data && fleet.length === 0 && <p className="muted">No workers registered.</p>}
          {groups.map((g) => (
            <div key={g.key} data-testid="host-group" data-host-id={g.key}>
              {(groups.length > 1 || g.key !== "") && (
                <h3>
                  {g.title} {g.offline && <span className="muted small">(offline)</span>}
                </h3>
              )}
              <FleetTable workers={g.workers} stuck={stuck} stale={stale} selected={search.worker} />
            </div>
          ))}
          {tabs.length > 0 && (
            <>
              <h2>
                Session tabs <span className="muted">{tabs.length}</span>
              </h2>
              <p className="muted small">Terminals and interactive agents open in sessions: they take no tasks.</p>
              <SessionTabsTable tabs={tabs} />
            </>
          )}
        </section>
        <section className="card" aria-label="Worker events">
          <h2>
            worker_events {search.worker && <span className="muted">for {search.worker}</span>}
          </h2>
          <WorkerEventsTimeline events={timeline} />
        </section>
      </div>
    </div>
  );
}
