// Asks the browser for permission to notify, or says where things stand.
import { requestNotifications, useNotificationState } from "@/features/inbox/stores/notifications";

export function NotificationButton() {
  const state = useNotificationState();
  if (state === "unsupported") return null;
  if (state === "granted")
    return (
      <span className="muted small" data-testid="notifications-on">
        Notifications on
      </span>
    );
  if (state === "denied")
    return (
      <span className="muted small" data-testid="notifications-blocked">
        Notifications are blocked in this browser's settings
      </span>
    );
  return (
    <button type="button" className="btn btn-small" data-testid="enable-notifications" onClick={() => void requestNotifications()}>
      Enable notifications
    </button>
  );
}
