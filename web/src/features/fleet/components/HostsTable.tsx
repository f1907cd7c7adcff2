// Where work lives: each server node and each runner's host, whether it is
// there (and since when it has not been), its sessions root and sessions,
// and how many runs it holds of how many it may.
import type { FleetHost } from "@/api/types";
import { Badge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";

function capacity(h: FleetHost): string {
  return h.capacity.slots == null ? `${h.capacity.running} running` : `${h.capacity.running} / ${h.capacity.slots}`;
}

export function HostsTable({ hosts }: { hosts: FleetHost[] }) {
  return (
    // Focusable: on a phone the table scrolls sideways, and a keyboard must reach it.
    <table className="table" data-testid="hosts-table" tabIndex={0} aria-label="Hosts">
      <thead>
        <tr>
          <th scope="col">Host</th>
          <th scope="col">State</th>
          <th scope="col">Sessions</th>
          <th scope="col">Runs</th>
          <th scope="col">Agents</th>
        </tr>
      </thead>
      <tbody>
        {hosts.map((h) => (
          <tr key={h.id} data-testid="host-row" data-host-id={h.id}>
            <td>
              <span title={h.id}>{h.name}</span> <Badge tone={h.kind === "server" ? "blue" : "neutral"}>{h.kind}</Badge>
            </td>
            <td>
              {h.online ? (
                <Badge tone="green">online</Badge>
              ) : (
                <Badge tone="red" title={h.last_seen_at}>
                  offline since <RelativeTime iso={h.last_seen_at} />
                </Badge>
              )}
            </td>
            <td>
              {h.sessions_root ? (
                <>
                  {h.sessions} <span className="muted small">in {h.sessions_root}</span>
                </>
              ) : (
                <span className="muted">hosts none</span>
              )}
            </td>
            <td>{capacity(h)}</td>
            <td>{h.agents.length > 0 ? h.agents.join(", ") : <span className="muted">none</span>}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
