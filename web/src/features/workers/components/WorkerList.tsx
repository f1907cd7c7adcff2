// The left column: a virtualised list of runs, loading more pages as it
// scrolls; arrow keys move the selection.
import { useEffect, useRef, type KeyboardEvent } from "react";
import { useNavigate } from "@tanstack/react-router";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { WorkerRunInfo } from "@/api/types";
import { WorkerCard } from "./WorkerCard";

/** A run as listed, with the cursor its page is valid at. */
export interface ListedRun {
  run: WorkerRunInfo;
  cursor: number;
}

interface Props {
  agentId: string;
  runs: ListedRun[];
  selected: string | undefined;
  hasMore: boolean;
  loadMore: () => void;
}

export function WorkerList({ agentId, runs, selected, hasMore, loadMore }: Props) {
  const scrollRef = useRef<HTMLDivElement>(null);
  const navigate = useNavigate({ from: "/agents/$agentId/workers" });
  const virtualizer = useVirtualizer({
    count: runs.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => 76,
    overscan: 10,
    getItemKey: (i) => runs[i].run.id,
  });
  const items = virtualizer.getVirtualItems();
  const lastIndex = items.length > 0 ? items[items.length - 1].index : -1;

  useEffect(() => {
    if (hasMore && lastIndex >= runs.length - 10) loadMore();
  }, [hasMore, lastIndex, runs.length, loadMore]);

  function onKeyDown(e: KeyboardEvent) {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp" && e.key !== "Home" && e.key !== "End") return;
    if (runs.length === 0) return;
    e.preventDefault();
    const current = runs.findIndex((r) => r.run.id === selected);
    let next = current;
    if (e.key === "ArrowDown") next = current < 0 ? 0 : Math.min(current + 1, runs.length - 1);
    if (e.key === "ArrowUp") next = current < 0 ? 0 : Math.max(current - 1, 0);
    if (e.key === "Home") next = 0;
    if (e.key === "End") next = runs.length - 1;
    const id = runs[next].run.id;
    virtualizer.scrollToIndex(next, { align: "auto" });
    void navigate({ search: (prev) => ({ ...prev, worker: id }) }).then(() => {
      scrollRef.current?.querySelector<HTMLElement>(`[data-worker-id="${CSS.escape(id)}"]`)?.focus();
    });
  }

  return (
    <div className="worker-list" ref={scrollRef} onKeyDown={onKeyDown} data-testid="worker-list">
      <ul role="list" aria-label="Worker runs" style={{ height: virtualizer.getTotalSize(), position: "relative", margin: 0, padding: 0 }}>
        {items.map((item) => {
          const { run, cursor } = runs[item.index];
          return (
            <li
              key={item.key}
              data-index={item.index}
              ref={virtualizer.measureElement}
              style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
            >
              <WorkerCard run={run} cursor={cursor} agentId={agentId} selected={run.id === selected} />
            </li>
          );
        })}
      </ul>
    </div>
  );
}
