// Shows whether live updates are flowing: live, reconnecting or resync.
import { useConnectionStatus } from "./hooks";

const LABELS = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  resync: "Resyncing…",
  unauthorized: "Signed out",
} as const;

export function ConnectionIndicator() {
  const status = useConnectionStatus();
  return (
    <span className={`conn conn-${status}`} role="status" aria-live="polite" data-testid="connection" data-status={status}>
      <span className="conn-dot" aria-hidden="true" />
      <span className="conn-label">{LABELS[status]}</span>
    </span>
  );
}
