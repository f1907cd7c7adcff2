// A run's token usage and cost, and the branch its worktree left, in one
// short line for the task page's list of runs.
import type { RunWorkspace, Usage } from "@/api/types";

/** Tokens in a short form: 950, 12.3k, 4.1M. */
export function tokens(n: number | undefined): string {
  const v = n ?? 0;
  if (v < 1_000) return String(v);
  if (v < 1_000_000) return `${(v / 1_000).toFixed(1)}k`;
  return `${(v / 1_000_000).toFixed(1)}M`;
}

/** `$0.0123`, or nothing while the agent has reported no cost. */
export function cost(c: number | null | undefined): string {
  if (c == null) return "";
  return c < 1 ? `$${c.toFixed(4)}` : `$${c.toFixed(2)}`;
}

export function RunUsage({ usage, workspace }: { usage?: Usage | null; workspace?: RunWorkspace | null }) {
  if (!usage && !workspace) return null;
  return (
    <span className="muted" data-testid="run-usage">
      {usage && (
        <span title="input / output tokens and cost">
          {" · "}
          {tokens(usage.input_tokens)} in · {tokens(usage.output_tokens)} out
          {usage.cost_usd != null && ` · ${cost(usage.cost_usd)}`}
        </span>
      )}
      {workspace && (
        <span title={`branch from ${workspace.base}`}>
          {" · "}
          <span className="mono">{workspace.branch}</span>
        </span>
      )}
    </span>
  );
}
