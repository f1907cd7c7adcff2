// Home: every agent with its running, failed and queued counts and its
// concurrency limit; each links to its Workers page. Terminal tabs are not
// agents (the server lists none): they live under Sessions.
import { Link } from "@tanstack/react-router";
import { useAgents } from "@/api/agents";
import { useAgentLiveUpdates } from "@/features/home/api/agentCounts";
import { AgentCard } from "./AgentCard";

export function HomePage() {
  const agents = useAgents();
  useAgentLiveUpdates();
  const real = agents.data ?? [];
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
    </div>
  );
}
