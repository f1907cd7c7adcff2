// A git-diff tab: `git status --porcelain` and `git diff` of the session's
// directory, rendered line by line (added green, removed red, hunks blue).
// The text is shown as text, never as markup.
import { useMemo } from "react";
import { useDiff } from "@/features/sessions/api/sessions";

function lineClass(line: string): string {
  if (line.startsWith("diff --git") || line.startsWith("index ") || line.startsWith("+++") || line.startsWith("---")) return "diff-file";
  if (line.startsWith("@@")) return "diff-hunk";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  return "diff-ctx";
}

export function DiffView({ sessionId, workerId }: { sessionId: string; workerId: string }) {
  const diff = useDiff(sessionId, workerId);
  const lines = useMemo(() => (diff.data?.diff ?? "").replace(/\n$/, "").split("\n"), [diff.data]);
  return (
    <div className="diff-view" data-testid="diff-view">
      <div className="diff-toolbar">
        <button type="button" className="btn btn-small" onClick={() => void diff.refetch()} disabled={diff.isFetching} data-testid="diff-refresh">
          {diff.isFetching ? "Refreshing…" : "Refresh"}
        </button>
      </div>
      {diff.error && (
        <p className="error" role="alert">
          {diff.error.message}
        </p>
      )}
      {diff.data && (
        <>
          <h3 className="diff-title">Status</h3>
          <pre className="diff-status" data-testid="diff-status" tabIndex={0}>
            {diff.data.status.trim() || "Nothing changed."}
          </pre>
          <h3 className="diff-title">Diff</h3>
          {diff.data.diff.trim() === "" ? (
            <p className="muted">No unstaged changes.</p>
          ) : (
            <pre className="diff" data-testid="diff" tabIndex={0} aria-label="Diff">
              {lines.map((l, i) => (
                <span key={i} className={`diff-line ${lineClass(l)}`}>
                  {l}
                  {"\n"}
                </span>
              ))}
            </pre>
          )}
        </>
      )}
    </div>
  );
}
