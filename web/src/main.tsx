import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { RouterProvider } from "@tanstack/react-router";
import { router } from "./router";
import { ApiError } from "./api/client";
import { applyTheme } from "./features/theme/theme";
import "./styles.css";

applyTheme();

const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      // The event stream says when data changes; no refetch on focus needed.
      refetchOnWindowFocus: false,
      staleTime: 30_000,
      retry: (count, error) => !(error instanceof ApiError && error.status < 500) && count < 2,
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <RouterProvider router={router} />
    </QueryClientProvider>
  </StrictMode>,
);
