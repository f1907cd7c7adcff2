-- Conversations on resources (seed 002). A resource is a channel with the
-- agent its conversations talk to. Keep in step with postgres/0003_conversations.sql.

ALTER TABLE channels ADD COLUMN agent_id TEXT;

-- The conversation a task (and so its runs) answers, if any: events about
-- them carry it, so a client can tail one conversation.
ALTER TABLE tasks ADD COLUMN conversation_id TEXT;
ALTER TABLE runs ADD COLUMN conversation_id TEXT;
CREATE INDEX tasks_channel ON tasks (channel_id, created_at DESC, id DESC) WHERE channel_id IS NOT NULL;
CREATE INDEX runs_channel ON runs (channel_id, started_at DESC, id DESC) WHERE channel_id IS NOT NULL;
CREATE INDEX runs_conversation ON runs (conversation_id, started_at, id) WHERE conversation_id IS NOT NULL;

CREATE TABLE conversations (
    id               TEXT PRIMARY KEY,
    resource_id      TEXT NOT NULL REFERENCES channels (id),
    state            TEXT NOT NULL CHECK (state IN ('idle', 'processing', 'cancelled')),
    active           INTEGER NOT NULL DEFAULT 0,
    -- The task answering the latest accepted message (its runs are the reply).
    current_task_id  TEXT,
    -- The agent's own conversation id, captured from its output on every run.
    agent_session_id TEXT,
    messages         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
-- One processing conversation and one active conversation per resource,
-- enforced by the database, not only by code.
CREATE UNIQUE INDEX conversations_one_processing ON conversations (resource_id) WHERE state = 'processing';
CREATE UNIQUE INDEX conversations_one_active ON conversations (resource_id) WHERE active = 1;
CREATE INDEX conversations_resource ON conversations (resource_id, created_at DESC, id DESC);

-- User messages, in order. An agent's reply is the runs of the message's task.
CREATE TABLE conversation_messages (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL REFERENCES conversations (id),
    resource_id     TEXT NOT NULL,
    ordinal         INTEGER NOT NULL,
    text            TEXT NOT NULL,
    -- queued: waits for the resource (multitask enqueue / interrupt);
    -- sent: its task exists; dropped: its conversation was cancelled first.
    status          TEXT NOT NULL CHECK (status IN ('queued', 'sent', 'dropped')),
    task_id         TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (conversation_id, ordinal)
);
CREATE INDEX conversation_messages_queued ON conversation_messages (resource_id, created_at, ordinal) WHERE status = 'queued';
CREATE INDEX conversation_messages_task ON conversation_messages (task_id) WHERE task_id IS NOT NULL;
