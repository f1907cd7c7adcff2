// React bindings for the shared event stream.
import { useEffect, useRef, useSyncExternalStore } from "react";
import { connectionStatus, subscribeEvents, subscribeStatus, type ServerEvent } from "./connection";

export function useConnectionStatus() {
  return useSyncExternalStore(subscribeStatus, connectionStatus);
}

/** Calls `handler` with each batch of events while the component is mounted. */
export function useServerEvents(handler: (events: ServerEvent[]) => void) {
  const ref = useRef(handler);
  ref.current = handler;
  useEffect(() => subscribeEvents((events) => ref.current(events)), []);
}
