// A browser notification for each new request that still waits for a person
// when its event arrives. Requests a rule answered at once (their
// `input.answered` follows straight away) are not notified; neither is a
// request twice. Several at once (a stream catching up after a reconnect)
// make one notification. Only the tab reading the shared stream notifies.
import { useRef } from "react";
import { pendingIdsNow } from "@/api/inputRequests";
import type { InputRequest } from "@/api/types";
import { isLeader } from "@/events/connection";
import { useServerEvents } from "@/events/hooks";
import { bashCommand, requestTitle } from "@/components/InputRequestView";
import { notificationState, notify } from "@/features/inbox/stores/notifications";

function describe(r: InputRequest): string {
  if (r.kind === "question") return r.prompt ?? "";
  const command = bashCommand(r);
  if (command !== null) return command;
  return r.prompt ?? JSON.stringify(r.tool_input ?? null);
}

export function useInputRequestNotifications(openInbox: () => void) {
  const seen = useRef(new Set<string>());
  useServerEvents((events) => {
    if (notificationState() !== "granted" || !isLeader()) return;
    const ended = new Set<string>();
    for (const e of events) if (e.type === "input.answered") ended.add(e.data.id);
    const fresh: InputRequest[] = [];
    for (const e of events) {
      if (e.type !== "input.requested") continue;
      const r = e.data.request;
      if (r.state !== "pending" || ended.has(r.id) || seen.current.has(r.id)) continue;
      seen.current.add(r.id);
      fresh.push(r);
    }
    if (fresh.length === 0) return;
    // Still pending now? A rule's answer may have followed in another batch.
    void pendingIdsNow().then((pending) => {
      const waiting = fresh.filter((r) => pending.has(r.id));
      if (waiting.length === 1) {
        const r = waiting[0];
        const what = r.kind === "question" ? "asks" : `wants to run ${requestTitle(r)}`;
        notify(`${r.agent_id} ${what}`, `${describe(r)}\n${r.vtid}`, r.id, openInbox);
      } else if (waiting.length > 1) {
        notify(`${waiting.length} requests wait for you`, waiting.map((r) => `${r.agent_id}: ${describe(r)}`).join("\n"), "shepherd-inbox", openInbox);
      }
    }, () => {
      /* not read: the Inbox's count still shows them */
    });
  });
}
