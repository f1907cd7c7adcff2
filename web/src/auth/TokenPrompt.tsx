// Asks for the operator token when the API answers 401. The token is checked
// against the server before it is kept, and is only ever sent as a header.
import { useState, useSyncExternalStore, type FormEvent } from "react";
import { TokenRefused, useSignIn } from "@/api/signIn";
import { authStore } from "@/auth/token";

function signInError(error: Error): string {
  return error instanceof TokenRefused ? "That token was refused." : "The server could not be reached.";
}

export function TokenPrompt() {
  const needed = useSyncExternalStore(authStore.subscribe, authStore.needed);
  const signIn = useSignIn();
  const [value, setValue] = useState("");
  if (!needed) return null;

  function submit(e: FormEvent) {
    e.preventDefault();
    const token = value.trim();
    if (!token) return;
    signIn.mutate(token, { onSuccess: () => setValue("") });
  }

  return (
    <div className="overlay">
      <form className="dialog" role="dialog" aria-modal="true" aria-labelledby="token-title" onSubmit={submit} data-testid="token-prompt">
        <h2 id="token-title">Operator token</h2>
        <p>This server needs its operator token (<code>SHEPHERD_TOKEN</code>). It is kept in this tab only.</p>
        <label className="field">
          <span>Token</span>
          <input type="password" autoFocus autoComplete="off" value={value} onChange={(e) => setValue(e.target.value)} />
        </label>
        {signIn.error && (
          <p className="error" role="alert">
            {signInError(signIn.error)}
          </p>
        )}
        <div className="actions">
          <button type="submit" className="btn btn-primary" disabled={signIn.isPending || !value.trim()}>
            Sign in
          </button>
        </div>
      </form>
    </div>
  );
}
