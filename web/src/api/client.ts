// The one HTTP client: openapi-fetch typed by the generated schema, with the
// token sent as a bearer header (never in a URL), or, signed in by the
// session cookie, the session's CSRF token on every request that changes
// something. Every answer that
// is not 2xx becomes an ApiError carrying the server's stable error code.
// Only query modules (src/api, features/*/api) call it.
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "@/api/schema";
import type { ErrorBody } from "@/api/types";
import { ApiError } from "@/api/errors";
import { authStore } from "@/auth/token";
import { csrfStore } from "@/auth/csrf";

const bearer: Middleware = {
  onRequest({ request }) {
    const token = authStore.token();
    // A request that carries its own token (a sign-in's candidate) keeps it.
    if (token && !request.headers.has("Authorization")) request.headers.set("Authorization", `Bearer ${token}`);
    const csrf = csrfStore.token();
    if (csrf && !["GET", "HEAD", "OPTIONS"].includes(request.method)) request.headers.set("X-CSRF-Token", csrf);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401) authStore.markNeeded();
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: "" });
api.use(bearer);

async function toError(res: Response, body: unknown): Promise<ApiError> {
  // The server's answers carry an ErrorBody; a proxy's may carry anything.
  const err = (body as Partial<ErrorBody> | undefined)?.error;
  return new ApiError(res.status, err?.code ?? "http_error", err?.message ?? `${res.status} ${res.statusText}`);
}

/** Unwraps an openapi-fetch result, throwing ApiError on failure. */
export async function unwrap<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await p;
  if (!response.ok || data === undefined) throw await toError(response, error);
  return data;
}
