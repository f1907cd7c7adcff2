// Names for the generated wire types the pages use (all from schema.d.ts,
// which scripts/gen-api.mjs generates from /api/openapi.json).
import type { components } from "./schema";

type S = components["schemas"];

export type WorkerRunInfo = S["WorkerRunInfo"];
export type RunStatus = S["RunStatus"];
export type WorkerListResponse = S["WorkerListResponse"];
export type WorkerDetailResponse = S["WorkerDetailResponse"];
export type TranscriptStep = S["TranscriptStep"];
export type ActionContent = S["ActionContent"];
export type Agent = S["Agent"];
export type Task = S["Task"];
export type TaskList = S["TaskList"];
export type TaskDetail = S["TaskDetail"];
export type Claim = S["Claim"];
export type LogEvent = S["Event"];
export type Workflow = S["WorkflowInfo"];
export type FleetWorker = S["WorkerInfo"];
export type FleetHost = S["HostView"];
export type WorkerEventsResponse = S["WorkerEventsResponse"];
export type WorkerEvent = S["WorkerEvent"];
export type RunRecord = S["Run"];
export type Usage = S["Usage"];
export type RunWorkspace = S["RunWorkspace"];
export type ResourceInfo = S["ResourceInfo"];
export type ConversationInfo = S["ConversationInfo"];
export type ConversationDetail = S["ConversationDetail"];
export type MessageInfo = S["MessageInfo"];
export type Session = S["Session"];
export type SessionWorker = S["SessionWorker"];
export type GitDiff = S["GitDiff"];
export type ErrorBody = S["ErrorBody"];
export type CreateTask = S["CreateTask"];
export type ResourceBody = S["ResourceBody"];
export type CreateSession = S["CreateSession"];
export type AddWorker = S["AddWorker"];
export type RestartMode = S["RestartMode"];
/** An event on the `/api/events` stream (its `type` says what `data` holds). */
export type WireEvent = S["WireEvent"];
/** A terminal WebSocket's frames, server to client and client to server. */
export type TerminalServerMessage = S["ServerMessage"];
export type TerminalClientMessage = S["ClientMessage"];
export type ActivityState = S["ActivityState"];
export type InputRequest = S["InputRequest"];
export type InputAnswer = S["InputAnswer"];
export type InputState = S["InputState"];
export type InputKind = S["InputKind"];
export type Me = S["Me"];
export type Role = S["Role"];
export type LoginOptions = S["LoginOptions"];
