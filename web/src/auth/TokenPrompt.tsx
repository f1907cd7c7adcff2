// Asks the person to sign in when the API answers 401: through the server's
// single sign-on when it has one (a link to /auth/login, which comes back to
// this page), or with a token. The token is checked against the server
// before it is kept, and is only ever sent as a header.
import { useState, useSyncExternalStore, type FormEvent } from "react";
import { TokenRefused, useSignIn } from "@/api/signIn";
import { useLoginOptions } from "@/api/account";
import { authStore } from "@/auth/token";

/** Where single sign-on starts, coming back to the page on screen. */
function loginHref(): string {
  return `/auth/login?return_to=${encodeURIComponent(location.pathname + location.search)}`;
}

function signInError(error: Error): string {
  return error instanceof TokenRefused ? "That token was refused." : "The server could not be reached.";
}

export function TokenPrompt() {
  const needed = useSyncExternalStore(authStore.subscribe, authStore.needed);
  const signIn = useSignIn();
  const options = useLoginOptions();
  const [value, setValue] = useState("");
  if (!needed) return null;
  const sso = options.data?.oidc === true;

  function submit(e: FormEvent) {
    e.preventDefault();
    const token = value.trim();
    if (!token) return;
    signIn.mutate(token, { onSuccess: () => setValue("") });
  }

  return (
    <div className="overlay">
      <form className="dialog" role="dialog" aria-modal="true" aria-labelledby="token-title" onSubmit={submit} data-testid="token-prompt">
        <h2 id="token-title">{sso ? "Sign in" : "Operator token"}</h2>
        {sso && (
          <p>
            <a className="btn btn-primary" href={loginHref()} data-testid="sso-login">
              Sign in with single sign-on
            </a>
          </p>
        )}
        <p>
          {sso ? "Or paste a personal access token, or the server's operator token " : "This server needs a personal access token or its operator token "}
          (<code>SHEPHERD_TOKEN</code>). It is kept in this tab only.
        </p>
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
          <button type="submit" className={sso ? "btn" : "btn btn-primary"} disabled={signIn.isPending || !value.trim()}>
            Sign in
          </button>
        </div>
      </form>
    </div>
  );
}
