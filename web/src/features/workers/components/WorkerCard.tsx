// One run in the Workers list: task, status, channel, when, live status.
import { Link } from "@tanstack/react-router";
import type { WorkerRunInfo } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";
import { useLive } from "@/features/workers/stores/live";

export function WorkerCard({ run: fetched, cursor, agentId, selected }: { run: WorkerRunInfo; cursor: number; agentId: string; selected: boolean }) {
  const run = useLive(fetched.id, fetched, cursor);
  return (
    <Link
      to="/agents/$agentId/workers"
      params={{ agentId }}
      search={(prev) => ({ ...prev, worker: run.id })}
      className={`worker-card${selected ? " bg-app-selected" : ""}`}
      data-testid="worker-card"
      data-worker-id={run.id}
      data-selected={selected}
      data-run-status={run.status}
    >
      <span className="worker-card-task" title={run.task}>
        {run.task}
      </span>
      <span className="worker-card-meta">
        <StatusBadge status={run.status} />
        {run.channel_name && <span className="muted">· {run.channel_name}</span>}
        <span className="muted">
          · <RelativeTime iso={run.started_at} />
        </span>
      </span>
      {run.status === "running" && run.live_status && (
        <span className="worker-card-live" data-testid="worker-card-live">
          {run.live_status}
        </span>
      )}
    </Link>
  );
}
