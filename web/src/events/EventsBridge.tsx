// Starts the shared stream and turns "refetch" (a fresh stream, a resync)
// into a refetch of every query on screen.
import { useEffect } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { resyncDone, startEvents, subscribeRefetch } from "./connection";

export function EventsBridge() {
  const client = useQueryClient();
  useEffect(() => {
    const off = subscribeRefetch(() => {
      void client.invalidateQueries().finally(resyncDone);
    });
    startEvents();
    return off;
  }, [client]);
  return null;
}
