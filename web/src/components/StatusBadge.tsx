// A run's or task's status as a coloured badge: running amber, done green,
// failed red, cancelled grey (the Workers page contract), other states neutral.
const TONE: Record<string, string> = {
  running: "amber",
  claimed: "amber",
  in_progress: "amber",
  building: "amber",
  done: "green",
  completed: "green",
  failed: "red",
  cancelled: "grey",
  draft: "grey",
  pending: "blue",
  allocated: "blue",
  reviewing: "purple",
  busy: "amber",
  ready: "green",
  closed: "grey",
  active: "amber",
  idle: "green",
};

export function StatusBadge({ status, label }: { status: string; label?: string }) {
  return (
    <span className={`badge badge-${TONE[status] ?? "neutral"}`} data-status={status}>
      {label ?? status}
    </span>
  );
}

export function Badge({ children, tone = "neutral", title }: { children: React.ReactNode; tone?: string; title?: string }) {
  return (
    <span className={`badge badge-${tone}`} title={title}>
      {children}
    </span>
  );
}
