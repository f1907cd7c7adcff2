// Who is signed in (GET /api/v1/me), how one may sign in here
// (GET /auth/options), what the signed-in role may do, and signing out.
import { queryOptions, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import { authStore } from "@/auth/token";
import { csrfStore } from "@/auth/csrf";
import type { Role } from "@/api/types";

export const accountKeys = {
  me: ["account", "me"] as const,
  options: ["account", "options"] as const,
};

export const meQuery = queryOptions({
  queryKey: accountKeys.me,
  queryFn: async ({ signal }) => {
    const me = await unwrap(api.GET("/api/v1/me", { signal }));
    csrfStore.set(me.csrf_token);
    return me;
  },
  staleTime: Infinity,
});

export function useMe() {
  return useQuery(meQuery);
}

export function useLoginOptions() {
  return useQuery({
    queryKey: accountKeys.options,
    queryFn: ({ signal }) => unwrap(api.GET("/auth/options", { signal })),
    staleTime: Infinity,
  });
}

const RANK: Record<Role, number> = { viewer: 0, operator: 1, admin: 2 };

/**
 * Whether the signed-in person holds at least `role`. False until /me has
 * answered, so an action a viewer may not take never flashes on screen.
 */
export function useHasRole(role: Role): boolean {
  const { data } = useMe();
  return data?.role != null && RANK[data.role] >= RANK[role];
}

/** Whether the signed-in person may change things (an operator or admin). */
export const useCanOperate = () => useHasRole("operator");

/**
 * Ends the browser's session: the cookie's (POST /auth/logout) or the
 * token's (forgotten by this tab). Then every query is dropped and the
 * sign-in prompt shows.
 */
export function useSignOut() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: async () => {
      if (csrfStore.token()) {
        const { response } = await api.POST("/auth/logout");
        if (!response.ok && response.status !== 401) throw new Error(`sign-out failed: ${response.status}`);
      }
      csrfStore.set(null);
      authStore.clear();
    },
    onSuccess: () => {
      client.clear();
      authStore.markNeeded();
    },
  });
}
