// Home: every agent with its running, failed and queued counts and its
// concurrency limit; each links to its Workers page. Terminal tabs (the
// `pty` agents a session's tabs register) are not agents: they are counted
// apart, with a link to Sessions.
import { Link } from "@tanstack/react-router";
import { useAgents } from "@/api/agents";
import { useAgentLiveUpdates } from "@/features/home/api/agentCounts";
import type { Agent } from "@/api/types";
import { AgentCard } from "./AgentCard";

/** What a session's terminal tabs register: an agent of worker type `pty`. */
function isTerminalTab(a: Agent) {
  return a.worker_type === "pty";
}

export function HomePage() {
  const agents = useAgents();
  useAgentLiveUpdates();
  const all = agents.data ?? [];
  const real = all.filter((a) => !isTerminalTab(a));
  const tabs = all.length - real.length;
  return (
    <div className="page">
      <header className="page-header">
        <h1>Agents</h1>
        <Link to="/tasks" search={{ new: true }} className="btn btn-primary">
          New task
        </Link>
      </header>
      {agents.isError && (
        <div className="empty error" role="alert">
          Could not load agents: {agents.error.message}
        </div>
      )}
      {agents.isSuccess && real.length === 0 && (
        <div className="empty">No agents yet: declare one under [agents.NAME] in shepherd.toml, or register a worker.</div>
      )}
      <ul className="agent-grid" aria-label="Agents">
        {real.map((a) => <AgentCard key={a.id} agent={a} />)}
      </ul>
      {tabs > 0 && (
        <p className="muted" data-testid="home-terminals">
          Terminal tabs are not agents: see them under <Link to="/sessions">Sessions</Link>.
        </p>
      )}
    </div>
  );
}
