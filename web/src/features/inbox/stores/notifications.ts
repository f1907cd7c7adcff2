// The browser's notification permission, as a store the Inbox's button and
// the notifier read, and the notifications themselves.
import { useSyncExternalStore } from "react";

export type NotificationState = NotificationPermission | "unsupported";

const listeners = new Set<() => void>();

function read(): NotificationState {
  return typeof Notification === "undefined" ? "unsupported" : Notification.permission;
}

let state: NotificationState = read();

function refresh() {
  const next = read();
  if (next === state) return;
  state = next;
  for (const l of listeners) l();
}

export function notificationState(): NotificationState {
  refresh();
  return state;
}

export function useNotificationState(): NotificationState {
  return useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    () => state,
  );
}

/** Asks the browser (once the user clicked): the answer updates the store. */
export async function requestNotifications(): Promise<void> {
  if (typeof Notification === "undefined") return;
  try {
    await Notification.requestPermission();
  } finally {
    refresh();
  }
}

/** Shows one notification; clicking it brings the tab forward and calls `onClick`. */
export function notify(title: string, body: string, tag: string, onClick: () => void) {
  if (notificationState() !== "granted") return;
  try {
    const n = new Notification(title, { body, tag });
    n.onclick = () => {
      window.focus();
      onClick();
      n.close();
    };
  } catch {
    /* some browsers only notify from a service worker: the badge still counts */
  }
}
