// The one query cache, with the defaults every query shares.
import { QueryClient } from "@tanstack/react-query";
import { ApiError } from "@/api/errors";

export const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      // The event stream says when data changes; no refetch on focus needed.
      refetchOnWindowFocus: false,
      staleTime: 30_000,
      retry: (count, error) => !(error instanceof ApiError && error.status < 500) && count < 2,
    },
  },
});
