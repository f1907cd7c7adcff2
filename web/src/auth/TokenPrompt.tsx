// Asks for the operator token when the API answers 401. The token is checked
// against the server before it is kept, and is only ever sent as a header.
import { useState, useSyncExternalStore, type FormEvent } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { authStore } from "./token";

export function TokenPrompt() {
  const needed = useSyncExternalStore(authStore.subscribe, authStore.needed);
  const client = useQueryClient();
  const [value, setValue] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  if (!needed) return null;

  async function submit(e: FormEvent) {
    e.preventDefault();
    const token = value.trim();
    if (!token) return;
    setBusy(true);
    setError(null);
    try {
      const res = await fetch("/api/v1/agents", { headers: { Authorization: `Bearer ${token}` } });
      if (res.status === 401) {
        setError("That token was refused.");
        return;
      }
      authStore.set(token);
      setValue("");
      await client.invalidateQueries();
    } catch {
      setError("The server could not be reached.");
    } finally {
      setBusy(false);
    }
  }

  return (
    <div className="overlay">
      <form className="dialog" role="dialog" aria-modal="true" aria-labelledby="token-title" onSubmit={submit} data-testid="token-prompt">
        <h2 id="token-title">Operator token</h2>
        <p>This server needs its operator token (<code>SHEPHERD_AUTH_TOKEN</code>). It is kept in this tab only.</p>
        <label className="field">
          <span>Token</span>
          <input type="password" autoFocus autoComplete="off" value={value} onChange={(e) => setValue(e.target.value)} />
        </label>
        {error && (
          <p className="error" role="alert">
            {error}
          </p>
        )}
        <div className="actions">
          <button type="submit" className="btn btn-primary" disabled={busy || !value.trim()}>
            Sign in
          </button>
        </div>
      </form>
    </div>
  );
}
