// The CSRF token of the browser's session cookie, as GET /api/v1/me last
// said it. The HTTP client adds it to every request that changes
// something; a request signed in by a bearer token has none and needs none.
let current: string | null = null;

export const csrfStore = {
  token: () => current,
  set(token: string | null | undefined) {
    current = token ?? null;
  },
};
