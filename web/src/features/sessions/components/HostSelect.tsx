// Which host a new session lives on: the server node that answers (the
// default), or a runner's host that declared a sessions root. A host that is
// offline is listed but cannot be picked.
import { useHosts } from "@/api/hosts";

export function HostSelect({ value, onChange }: { value: string; onChange: (host: string) => void }) {
  const hosts = useHosts();
  const able = (hosts.data?.hosts ?? []).filter((h) => h.sessions_root !== null && h.kind === "runner");
  if (able.length === 0) return null;
  return (
    <label className="field">
      <span>Host</span>
      <select value={value} onChange={(e) => onChange(e.target.value)} data-testid="session-host">
        <option value="">this server</option>
        {able.map((h) => (
          <option key={h.id} value={h.id} disabled={!h.online}>
            {h.name} ({h.online ? h.sessions_root : "offline"})
          </option>
        ))}
      </select>
    </label>
  );
}
