// The fleet's workers: status, provenance (registry or recovered after a
// restart), last activity and claims; a stuck worker's row is highlighted.
// A worker's name filters the timeline to it (and back).
import { Link } from "@tanstack/react-router";
import type { FleetWorker } from "@/api/types";
import { Badge, StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";

interface Props {
  workers: FleetWorker[];
  /** Ids of active workers with no activity for longer than `stale` minutes. */
  stuck: Set<string>;
  stale: number;
  selected?: string;
}

export function FleetTable({ workers, stuck, stale, selected }: Props) {
  return (
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
        {workers.map((w) => (
          <tr key={w.worker_id} className={stuck.has(w.worker_id) ? "row-stuck" : undefined} data-testid="fleet-row" data-worker-id={w.worker_id}>
            <td>
              <Link from="/fleet" search={(p) => ({ ...p, worker: p.worker === w.worker_id ? undefined : w.worker_id })} aria-current={selected === w.worker_id ? "true" : undefined}>
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
  );
}
