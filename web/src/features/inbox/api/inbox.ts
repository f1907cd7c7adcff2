// Server state for the Inbox: the pending requests (also the navigation's
// count), the ended ones by state, and answering one. Nothing is optimistic:
// a request leaves the list when the server says it ended, through the
// answer's reply or the `input.*` events (src/api/inputRequests.ts).
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import { ApiError } from "@/api/errors";
import { PENDING, inputRequestKeys, inputRequestsQuery } from "@/api/inputRequests";
import type { InputAnswer, InputRequest, InputState } from "@/api/types";
import { useConnectionStatus } from "@/events/hooks";

/** The ended requests a tab shows, newest first. */
export const HISTORY_LIMIT = 100;

/**
 * The pending requests. While the event stream is down, polled, so that the
 * list and the count never stay stale for long.
 */
export function usePendingRequests() {
  const connection = useConnectionStatus();
  return useQuery({ ...inputRequestsQuery(PENDING), refetchInterval: connection === "live" ? false : 5_000 });
}

/** The requests in one state: pending, or ended (answered, expired, withdrawn). */
export function useInboxRequests(state: InputState) {
  const pending = usePendingRequests();
  const ended = useQuery({ ...inputRequestsQuery({ state, limit: HISTORY_LIMIT }), enabled: state !== "pending" });
  return state === "pending" ? pending : ended;
}

/** Someone else answered first: the request as it ended. */
export class AlreadyAnswered extends Error {
  constructor(readonly request: InputRequest | null) {
    super("already answered");
  }
}

export interface AnswerVariables {
  id: string;
  answer: InputAnswer;
}

/** Answers a request; a 409 becomes AlreadyAnswered with who answered and how. */
export function useAnswerRequest() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: async ({ id, answer }: AnswerVariables) => {
      try {
        return await unwrap(api.POST("/api/v1/input-requests/{id}/answer", { params: { path: { id } }, body: answer }));
      } catch (e) {
        if (e instanceof ApiError && e.code === "already_answered") {
          const winner = await unwrap(api.GET("/api/v1/input-requests/{id}", { params: { path: { id } } })).catch(() => null);
          throw new AlreadyAnswered(winner);
        }
        throw e;
      }
    },
    // Answered or not, the lists are refetched: the server says what ended.
    onSettled: () => client.invalidateQueries({ queryKey: inputRequestKeys.all }),
  });
}
