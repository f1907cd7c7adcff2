// Server state for the conversations contract's conversations: resources, a resource's
// conversation list (newest first) and one conversation with every message
// and step persisted so far, plus the cursor that answer is valid at. The
// client load sequence is the contract's: the database first, then the live tail
// of the shared event stream after that cursor.
import { useEffect, useMemo, useRef, useState } from "react";
import { useInfiniteQuery, useMutation, useQuery, useQueryClient, type UseQueryResult } from "@tanstack/react-query";
import { api, unwrap } from "@/api/client";
import type { ConversationDetail, ConversationInfo, ResourceBody } from "@/api/types";
import { useServerEvents } from "@/events/hooks";

export const convKeys = {
  all: ["conversations"] as const,
  resources: ["conversations", "resources"] as const,
  list: (resourceId: string) => ["conversations", "list", resourceId] as const,
  detail: (id: string) => ["conversations", "detail", id] as const,
};

export function useResources() {
  return useQuery({
    queryKey: convKeys.resources,
    queryFn: ({ signal }) => unwrap(api.GET("/api/v1/resources", { signal })).then((b) => b.resources),
  });
}

/** Conversations a page of the history holds (the route's largest page). */
const PAGE = 200;

/**
 * A resource's conversations, newest first, a page at a time: `loadMore`
 * reads the next older page. An invalidation (live events) refetches every
 * page loaded, in order, each from the token the fresh page before it
 * answers, so the pages loaded stay loaded and line up without gaps or
 * repeats even when new conversations pushed the others down.
 */
export function useConversationList(resourceId: string) {
  const query = useInfiniteQuery({
    queryKey: convKeys.list(resourceId),
    enabled: resourceId !== "",
    initialPageParam: undefined as string | undefined,
    queryFn: ({ signal, pageParam }) =>
      unwrap(
        api.GET("/api/v1/resources/{id}/conversations", {
          params: { path: { id: resourceId }, query: { limit: PAGE, page: pageParam } },
          signal,
        }),
      ),
    getNextPageParam: (last) => last.next ?? undefined,
  });
  const { data, hasNextPage, isFetchingNextPage, fetchNextPage } = query;
  const conversations = useMemo(() => {
    // A conversation read twice (a page read across a refetch) shows once.
    const seen = new Set<string>();
    const out: ConversationInfo[] = [];
    for (const page of data?.pages ?? []) {
      for (const c of page.conversations) {
        if (!seen.has(c.id)) {
          seen.add(c.id);
          out.push(c);
        }
      }
    }
    return out;
  }, [data]);
  return {
    conversations,
    isSuccess: query.isSuccess,
    hasMore: hasNextPage,
    loadingMore: isFetchingNextPage,
    // One read at a time: a second click while one is under way waits for it.
    loadMore: () => void fetchNextPage({ cancelRefetch: false }),
  };
}

/**
 * One conversation. An answer is valid at its cursor: one older than the
 * answer already held (a read that started first and ended last) never
 * replaces it.
 */
export function useConversation(id: string | undefined) {
  const client = useQueryClient();
  return useQuery({
    queryKey: convKeys.detail(id ?? ""),
    enabled: !!id,
    queryFn: async ({ signal }) => {
      const fresh = await unwrap(api.GET("/api/v1/conversations/{id}", { params: { path: { id: id! } }, signal }));
      const held = client.getQueryData<ConversationDetail>(convKeys.detail(id!));
      return held && held.cursor > fresh.cursor ? held : fresh;
    },
  });
}

/**
 * Tails the shared stream for one resource: an event about the shown
 * conversation after the cursor its detail was loaded at refetches it (the
 * database has every step the event announces); an event about another
 * conversation marks its cached detail stale, so going back to it reloads
 * it; any conversation event refreshes the list.
 *
 * The newest event seen about the shown conversation is remembered: while
 * the detail on screen is older than it (its read began before the event and
 * was not restarted, as a first read never is), it is read again.
 */
export function useConversationLiveUpdates(
  resourceId: string,
  conversationId: string | undefined,
  detail: UseQueryResult<ConversationDetail>,
) {
  const client = useQueryClient();
  const cursor = detail.data?.id === conversationId ? detail.data?.cursor : undefined;
  const [newest, setNewest] = useState<{ id: string; seq: number } | null>(null);
  useServerEvents((events) => {
    let detail = false;
    let list = false;
    let seen = -1;
    const others = new Set<string>();
    for (const e of events) {
      if (conversationId && e.conversation_id === conversationId) {
        seen = Math.max(seen, e.seq);
        if (cursor === undefined || e.seq > cursor) detail = true;
      } else if (e.conversation_id) {
        others.add(e.conversation_id);
      }
      if (e.conversation_id || e.channel_id === resourceId || e.type.startsWith("channel.")) list = true;
    }
    if (conversationId && seen >= 0) {
      setNewest((n) => (n && n.id === conversationId && n.seq >= seen ? n : { id: conversationId, seq: seen }));
    }
    if (detail && conversationId) void client.invalidateQueries({ queryKey: convKeys.detail(conversationId) });
    for (const id of others) void client.invalidateQueries({ queryKey: convKeys.detail(id), refetchType: "none" });
    if (list) {
      void client.invalidateQueries({ queryKey: convKeys.list(resourceId) });
      void client.invalidateQueries({ queryKey: convKeys.resources });
    }
  });
  const behind = newest !== null && newest.id === conversationId && cursor !== undefined ? newest.seq > cursor : false;
  const { isFetching, refetch } = detail;
  // Once per (event, answer) pair, so an answer that stays behind cannot spin.
  const tried = useRef("");
  useEffect(() => {
    if (!behind || isFetching || !newest) return;
    const attempt = `${newest.seq}:${cursor}`;
    if (tried.current === attempt) return;
    tried.current = attempt;
    void refetch({ cancelRefetch: false });
  }, [behind, isFetching, newest, cursor, refetch]);
}

export function useConversationActions(resourceId: string) {
  const client = useQueryClient();
  const done = () => client.invalidateQueries({ queryKey: convKeys.all });
  const send = useMutation({
    mutationFn: ({ id, text }: { id: string; text: string }) =>
      unwrap(api.POST("/api/v1/conversations/{id}/messages", { params: { path: { id } }, body: { text } })),
    onSuccess: done,
  });
  const cancel = useMutation({
    mutationFn: (id: string) =>
      unwrap(api.POST("/api/v1/conversations/{id}/cancel", { params: { path: { id } }, body: { reason: "cancelled from the web UI" } })),
    onSuccess: done,
  });
  const newChat = useMutation({
    mutationFn: () => unwrap(api.POST("/api/v1/resources/{id}/conversations", { params: { path: { id: resourceId } } })),
    onSuccess: done,
  });
  const activate = useMutation({
    mutationFn: (id: string) => unwrap(api.POST("/api/v1/conversations/{id}/activate", { params: { path: { id } } })),
    onSuccess: done,
  });
  return { send, cancel, newChat, activate };
}

export function useCreateResource() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (body: ResourceBody) => unwrap(api.POST("/api/v1/resources", { body })),
    onSuccess: () => client.invalidateQueries({ queryKey: convKeys.resources }),
  });
}
