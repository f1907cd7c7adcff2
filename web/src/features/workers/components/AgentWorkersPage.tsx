// The Workers page at /agents/$agentId/workers?worker=<uuid>: every
// run of the agent (across channels) on the left, the selected one on the
// right. Selection, status filter and search live in the URL, so deep links
// and back/forward work. At phone width (styles.css) the page is one column:
// the list, or with a worker chosen its detail and a Back control.
import { useCallback, useMemo } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import { useWorkerList, useWorkerLiveUpdates, type StatusFilter } from "@/features/workers/api/workers";
import { WorkerList } from "./WorkerList";
import { WorkerDetail } from "./WorkerDetail";
import { SearchBox } from "./SearchBox";
import { ApiError } from "@/api/errors";

const PILLS: { label: string; value: StatusFilter | undefined }[] = [
  { label: "All", value: undefined },
  { label: "Running", value: "running" },
  { label: "Done", value: "done" },
  { label: "Failed", value: "failed" },
  { label: "Cancelled", value: "cancelled" },
];

const FILTERS: readonly string[] = ["running", "done", "failed", "cancelled"];

function isStatusFilter(value: unknown): value is StatusFilter {
  return typeof value === "string" && FILTERS.includes(value);
}

export interface WorkersSearch {
  worker?: string;
  status?: StatusFilter;
  q?: string;
}

export function validateWorkersSearch(search: Record<string, unknown>): WorkersSearch {
  return {
    worker: typeof search.worker === "string" ? search.worker : undefined,
    status: isStatusFilter(search.status) ? search.status : undefined,
    q: typeof search.q === "string" && search.q !== "" ? search.q : undefined,
  };
}

export function AgentWorkersPage({ agentId, search }: { agentId: string; search: WorkersSearch }) {
  const navigate = useNavigate({ from: "/agents/$agentId/workers" });
  const list = useWorkerList(agentId, search.status, search.q);
  useWorkerLiveUpdates(agentId);
  const runs = useMemo(() => list.data?.pages.flatMap((p) => p.workers.map((run) => ({ run, cursor: p.cursor }))) ?? [], [list.data]);
  const total = list.data?.pages[0]?.total ?? 0;
  const { hasNextPage, isFetchingNextPage, fetchNextPage } = list;
  const loadMore = useCallback(() => {
    if (hasNextPage && !isFetchingNextPage) void fetchNextPage();
  }, [hasNextPage, isFetchingNextPage, fetchNextPage]);
  const setQuery = useCallback(
    (q: string) => void navigate({ search: (prev) => ({ ...prev, q: q || undefined }), replace: true }),
    [navigate],
  );

  return (
    <div className="page workers-page" data-view={search.worker ? "detail" : "list"}>
      <header className="page-header">
        <h1>
          <Link to="/">Agents</Link> / {agentId} / Workers
        </h1>
      </header>
      <div className="toolbar">
        <SearchBox value={search.q ?? ""} onChange={setQuery} />
        <div className="pills" role="group" aria-label="Status">
          {PILLS.map((p) => (
            <Link
              key={p.label}
              from="/agents/$agentId/workers"
              search={(prev) => ({ ...prev, status: p.value })}
              className={`pill${search.status === p.value ? " pill-active" : ""}`}
              aria-pressed={search.status === p.value}
              role="button"
              data-testid={`pill-${p.label.toLowerCase()}`}
            >
              {p.label}
            </Link>
          ))}
        </div>
        <span className="count" data-testid="worker-count" aria-live="polite">
          {list.isSuccess ? `${total} ${total === 1 ? "run" : "runs"}` : ""}
        </span>
      </div>
      <div className="two-columns">
        <section className="column-list" aria-label="Worker list">
          {list.isError ? (
            <div className="empty error" role="alert">
              {list.error instanceof ApiError && list.error.code === "agent_not_found"
                ? `There is no agent called “${agentId}”.`
                : `Could not load runs: ${list.error.message}`}
            </div>
          ) : list.isSuccess && runs.length === 0 ? (
            <div className="empty" data-testid="list-empty">
              {search.q || search.status ? "No runs match." : "No runs yet."}
            </div>
          ) : (
            <WorkerList agentId={agentId} runs={runs} selected={search.worker} hasMore={!!hasNextPage} loadMore={loadMore} />
          )}
        </section>
        <section className="column-detail" aria-label="Worker detail">
          <Link from="/agents/$agentId/workers" search={(prev) => ({ ...prev, worker: undefined })} className="back-link" data-testid="worker-back">
            <span aria-hidden="true">← </span>All workers
          </Link>
          <WorkerDetail agentId={agentId} workerId={search.worker} />
        </section>
      </div>
    </div>
  );
}
