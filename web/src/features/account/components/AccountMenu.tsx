// The top bar's account corner: who is signed in and with which role, a
// note when that role may only look, and Sign out for a session that can
// end (a single sign-on cookie or a token kept by this tab).
import { useSyncExternalStore } from "react";
import { useMe, useSignOut } from "@/api/account";
import { authStore } from "@/auth/token";

export function AccountMenu() {
  const { data: me } = useMe();
  const signOut = useSignOut();
  // Re-rendered when the tab's token changes.
  useSyncExternalStore(authStore.subscribe, authStore.version);
  if (!me || me.kind !== "user") return null;
  const endable = Boolean(me.csrf_token) || Boolean(authStore.token());
  return (
    <div className="account" data-testid="account">
      <span className="account-name" title={me.role ? `${me.name}, ${me.role}` : me.name}>
        {me.name}
        {me.role && <span className="muted small"> · {me.role}</span>}
      </span>
      {me.role === "viewer" && (
        <span className="badge badge-amber" data-testid="read-only-note" title="A viewer reads everything and changes nothing">
          read-only
        </span>
      )}
      {endable && (
        <button type="button" className="btn btn-ghost btn-small" disabled={signOut.isPending} onClick={() => signOut.mutate()} data-testid="sign-out">
          Sign out
        </button>
      )}
    </div>
  );
}
