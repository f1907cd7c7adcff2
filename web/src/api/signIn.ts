// Signing in with the operator token: the token is tried against the server
// before it is kept, then every query on screen is refetched with it.
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { api } from "@/api/client";
import { authStore } from "@/auth/token";

/** Thrown when the server refuses the token. */
export class TokenRefused extends Error {}

export function useSignIn() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: async (token: string) => {
      const { response } = await api.GET("/api/v1/agents", { headers: { Authorization: `Bearer ${token}` } });
      if (response.status === 401) throw new TokenRefused();
      authStore.set(token);
      await client.invalidateQueries();
    },
  });
}
