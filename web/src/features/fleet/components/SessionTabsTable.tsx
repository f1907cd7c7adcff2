// The session tabs the registry lists beside the workers: terminals and
// interactive agents in a session, which take no tasks. Each links to its
// session.
import { Link } from "@tanstack/react-router";
import type { FleetWorker } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";

export function SessionTabsTable({ tabs }: { tabs: FleetWorker[] }) {
  return (
    <table className="table" data-testid="fleet-sessions">
      <thead>
        <tr>
          <th scope="col">Tab</th>
          <th scope="col">Kind</th>
          <th scope="col">Session</th>
          <th scope="col">Status</th>
          <th scope="col">Last activity</th>
        </tr>
      </thead>
      <tbody>
        {tabs.map((w) => (
          <tr key={w.worker_id} data-testid="fleet-session-row" data-worker-id={w.worker_id}>
            <td>{w.name ?? w.worker_id}</td>
            <td>{w.agent_type === "terminal" ? "terminal" : `agent ${w.agent_id}`}</td>
            <td>
              <Link to="/sessions/$sessionId" params={{ sessionId: w.session_id! }}>
                {w.project_path ?? w.session_id}
              </Link>
            </td>
            <td>
              <StatusBadge status={w.status} />
            </td>
            <td>
              <RelativeTime iso={w.last_activity} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
