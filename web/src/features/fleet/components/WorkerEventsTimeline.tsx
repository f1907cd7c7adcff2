// The worker_events timeline, newest first.
import type { WorkerEvent } from "@/api/types";
import { RelativeTime } from "@/components/time";

export function WorkerEventsTimeline({ events }: { events: WorkerEvent[] }) {
  return (
    <ol className="timeline" data-testid="worker-events" tabIndex={0} aria-label="worker_events timeline">
      {events.map((e) => (
        <li key={e.id}>
          <span className="mono">{e.type}</span> <span className="muted">{e.worker_id}</span>{" "}
          <span className="muted">
            <RelativeTime iso={e.ts} />
          </span>
        </li>
      ))}
    </ol>
  );
}
