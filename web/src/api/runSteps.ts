// A running run's steps, live: the steps stored so far (GET
// /api/v1/runs/{id}/steps, with the cursor that answer is valid at), then the
// shared event stream after that cursor. Each `run.step` event names its
// step's index; one past what the cache holds fetches the steps after the
// last one held (steps are append-only, so a fetch only ever adds). The
// Workers page's detail and the task page's runs both show it.
import { useEffect, useRef, useState } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { RunStatus, TranscriptStep } from "@/api/types";
import { useServerEvents } from "@/events/hooks";

/** Steps per request; a longer run is read in several. */
const PAGE = 1000;

export interface RunSteps {
  steps: TranscriptStep[];
  /** The index of the last step held (-1: none). */
  lastIndex: number;
  status: RunStatus;
  /** The event-log cursor the newest read was valid at. */
  cursor: number;
}

export const runStepKeys = {
  steps: (runId: string) => ["run-steps", runId] as const,
};

/** Reads the steps after those `held` has (all of them without it). */
async function readSteps(runId: string, held: RunSteps | undefined, signal: AbortSignal): Promise<RunSteps> {
  const steps = held ? [...held.steps] : [];
  let after = held?.lastIndex ?? -1;
  let status: RunStatus;
  let cursor = held?.cursor ?? 0;
  for (;;) {
    const res = api.GET("/api/v1/runs/{run_id}/steps", { params: { path: { run_id: runId }, query: { after, limit: PAGE } }, signal });
    const body = await unwrap(res);
    cursor = Number((await res).response.headers.get("x-shepherd-cursor") ?? cursor);
    status = body.status;
    for (const s of body.steps) {
      if (s.index > after) {
        steps.push(s.step);
        after = s.index;
      }
    }
    if (body.steps.length < PAGE) break;
  }
  return { steps, lastIndex: after, status, cursor };
}

/**
 * The steps of run `runId` while `enabled`, kept current by the event
 * stream. A step announced while a read was under way (which may have missed
 * it) is read once that read ends.
 */
export function useRunSteps(runId: string, enabled = true) {
  const client = useQueryClient();
  const key = runStepKeys.steps(runId);
  const query = useQuery({
    queryKey: key,
    enabled,
    queryFn: ({ signal }) => readSteps(runId, client.getQueryData<RunSteps>(key), signal),
  });
  // The highest step index the stream announced after the cache's cursor.
  const [announced, setAnnounced] = useState(-1);
  const cursor = query.data?.cursor;
  useServerEvents((events) => {
    let highest = -1;
    for (const e of events) {
      if (e.run_id !== runId || e.type !== "run.step") continue;
      if (cursor !== undefined && e.seq <= cursor) continue;
      highest = Math.max(highest, e.data.index);
    }
    if (highest >= 0) setAnnounced((a) => Math.max(a, highest));
  });
  const lastIndex = query.data?.lastIndex;
  const { isFetching, refetch } = query;
  // Read again only when something new was announced or arrived since the
  // last try, so a step the server does not have yet cannot spin this.
  const tried = useRef("");
  useEffect(() => {
    if (!enabled || lastIndex === undefined || isFetching || announced <= lastIndex) return;
    const attempt = `${announced}:${lastIndex}`;
    if (tried.current === attempt) return;
    tried.current = attempt;
    void refetch({ cancelRefetch: false });
  }, [enabled, announced, lastIndex, isFetching, refetch]);
  return query;
}
