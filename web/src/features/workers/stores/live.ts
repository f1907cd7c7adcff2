// The live overlay of running runs: status text, active tool and tool-call
// count from the Workers page contract's SSE names, each remembered with the event's `seq`.
// A fetched list or detail carries the cursor it is valid at
// (X-Shepherd-Cursor), and only events after that cursor are laid over it:
// a refetch that raced a live event can neither hide it nor count it twice.
import { useSyncExternalStore } from "react";
import type { ServerEvent } from "@/events/connection";

interface Live {
  status?: { seq: number; text: string | null };
  tool?: { seq: number; name: string | null };
  calls: { seq: number; n: number }[];
}

export interface LiveFields {
  live_status?: string | null;
  active_tool?: string | null;
  tool_calls: number;
}

const runs = new Map<string, Live>();
const MAX_RUNS = 2_000;
const listeners = new Set<() => void>();
let version = 0;

function entry(runId: string): Live {
  let l = runs.get(runId);
  if (!l) {
    l = { calls: [] };
    runs.set(runId, l);
  }
  return l;
}

/** Records the live part of a batch of events; true if any was about runs. */
export function recordLive(events: ServerEvent[]): boolean {
  let changed = false;
  for (const e of events) {
    const runId = e.run_id;
    if (!runId) continue;
    if (e.type === "run.status" && e.event === "worker_status") {
      entry(runId).status = { seq: e.seq, text: e.data.status };
      changed = true;
    } else if (e.type === "run.step" && e.event === "tool_started") {
      const l = entry(runId);
      l.tool = { seq: e.seq, name: e.data.tool_name ?? null };
      l.calls.push({ seq: e.seq, n: Math.max(e.data.call_ids.length, 1) });
      changed = true;
    } else if (e.type === "run.step" && e.event === "tool_completed") {
      entry(runId).tool = { seq: e.seq, name: null };
      changed = true;
    }
  }
  // Entries only matter until the next fetch of their run; keep the newest.
  while (runs.size > MAX_RUNS) runs.delete(runs.keys().next().value!);
  if (changed) {
    version++;
    for (const l of listeners) l();
  }
  return changed;
}

function subscribe(l: () => void) {
  listeners.add(l);
  return () => {
    listeners.delete(l);
  };
}

/** `base` (valid at `cursor`) with every later live event laid over it. */
export function useLive<T extends LiveFields>(runId: string, base: T, cursor: number): T {
  useSyncExternalStore(subscribe, () => version);
  const l = runs.get(runId);
  if (!l) return base;
  const later = l.calls.filter((c) => c.seq > cursor).reduce((n, c) => n + c.n, 0);
  return {
    ...base,
    live_status: l.status && l.status.seq > cursor ? l.status.text : base.live_status,
    active_tool: l.tool && l.tool.seq > cursor ? l.tool.name : base.active_tool,
    tool_calls: base.tool_calls + later,
  };
}
