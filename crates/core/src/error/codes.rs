//! Every error code the server answers with, each with what it means: the
//! one list the OpenAPI document's `ErrorDetail.code` enum and its
//! description are generated from. A code is stable once listed: clients
//! match on it, so its spelling never changes.
//!
//! Errors are still built with the code as a string (`Error::conflict(
//! "task_exists", …)`); in debug builds `Error::new` refuses a code missing
//! here, and `shepherd/tests/error_codes.rs` fails when the sources use one.

/// One error code and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode {
    pub code: &'static str,
    pub description: &'static str,
}

/// Declares the table, sorted by code (a test keeps it sorted).
macro_rules! error_codes {
    ($($code:literal => $description:literal,)+) => {
        /// Every code, sorted.
        pub const ERROR_CODES: &[ErrorCode] = &[
            $(ErrorCode { code: $code, description: $description },)+
        ];
    };
}

error_codes! {
    "agent_at_capacity" => "The agent runs as many tasks as it may at once.",
    "agent_not_found" => "No agent has that id.",
    "agent_not_interactive" => "The agent cannot run in a terminal tab.",
    "already_answered" => "The input request was answered, expired or withdrawn already; the first answer stands.",
    "already_claimed" => "Another worker holds the task's claim.",
    "already_dispatched" => "The task was dispatched already.",
    "bad_body" => "The request body could not be read.",
    "bad_database_url" => "The database URL (or its TLS settings) is not usable.",
    "bad_request" => "The request is malformed.",
    "bad_schema" => "The database schema is not one this server knows.",
    "bad_tls_certificate" => "The TLS certificate or key cannot be loaded.",
    "body_timeout" => "The request body did not arrive in time.",
    "builtin_user" => "The built-in admin stays an enabled admin.",
    "channel_archived" => "The channel is archived.",
    "channel_not_found" => "No channel has that id.",
    "claim_stale" => "The claim token is not the task's active claim (it expired or was replaced).",
    "conflict" => "The request conflicts with the current state.",
    "constraint_violation" => "A uniqueness or reference rule of the database refused the write.",
    "conversation_busy" => "The conversation is working on a message (or stopping a cancelled run).",
    "conversation_idle" => "The conversation is idle; there is nothing to cancel.",
    "conversation_not_found" => "No conversation has that id.",
    "csrf_token_invalid" => "A change signed in by the session cookie lacks its session's X-CSRF-Token header.",
    "database_not_found" => "No database file where the configuration says (backup, prune).",
    "database_unavailable" => "The database cannot be reached; retry later.",
    "diff_too_large" => "The run's diff is larger than a host sends over its link.",
    "forbidden" => "The token may not do this.",
    "git_failed" => "A git command failed.",
    "git_timeout" => "A git command took too long.",
    "headers_too_large" => "The request headers are larger than the server accepts.",
    "host_enrollment_required" => "Registering a new host needs an admin, or the server's host enrollment token.",
    "host_exists" => "The host id is registered already: re-registering needs the host's current token, or an admin's replace.",
    "host_failed" => "The host could not answer the request (its error was not one of the API's).",
    "host_kind_conflict" => "The host id belongs to a host of the other kind (a server node or a runner).",
    "host_link_taken" => "The host already has a live link; a second one is refused rather than replacing it.",
    "host_not_allowed" => "The request's Host is not a name this server is known by.",
    "host_not_found" => "No host has that id.",
    "host_offline" => "The host has no link to this server now: its runner is stopped, unreachable or connected to another node.",
    "host_timeout" => "The host did not answer the request in time.",
    "input_request_not_found" => "No input request has that id.",
    "internal" => "An unexpected failure; the server log has the details.",
    "invalid_after" => "`after` is not a cursor.",
    "invalid_agent_id" => "The agent id is not a valid identifier.",
    "invalid_agent_session_id" => "The agent session id could be read as an option or holds other characters.",
    "invalid_agents" => "The list of agents is too long or malformed.",
    "invalid_answer" => "The answer does not fit the input request (a decision for a permission, text or one of the options for a question).",
    "invalid_body" => "The JSON body does not have the expected shape.",
    "invalid_capabilities" => "A capability is empty or longer than 64 characters.",
    "invalid_channel_id" => "The channel id is not a valid identifier.",
    "invalid_cursor" => "The cursor is not a sequence number.",
    "invalid_email" => "The email address is not one.",
    "invalid_event" => "The event is not one the task's workflow knows.",
    "invalid_expires_in" => "A token's lifetime is a number with a unit (s, m, h, d, w), at most 366 days.",
    "invalid_group_by" => "`group_by` names no known grouping.",
    "invalid_host_id" => "The host id is not a valid identifier.",
    "invalid_host_name" => "The host name is empty, too long or holds control characters.",
    "invalid_input_request" => "The input request is malformed (a permission needs tool_name, a question a prompt; sizes and options are bounded).",
    "invalid_limit" => "`limit` is out of range.",
    "invalid_location" => "The session's location is not a usable directory.",
    "invalid_max" => "`max` is out of range.",
    "invalid_max_attempts" => "`max_attempts` is out of range.",
    "invalid_max_concurrent" => "`max_concurrent` is out of range.",
    "invalid_message" => "The message cannot be read.",
    "invalid_name" => "The name is empty or too long.",
    "invalid_offset" => "`offset` is out of range.",
    "invalid_page_token" => "The page token is not one the server gave.",
    "invalid_path" => "The request path is not valid UTF-8 once percent-decoded.",
    "invalid_priority" => "`priority` is out of range.",
    "invalid_query" => "The query string does not have the expected shape.",
    "invalid_reason" => "The reason is too long.",
    "invalid_reports" => "The batch of reports is empty or too large.",
    "invalid_resource_id" => "The resource id is not a valid identifier.",
    "invalid_retry_backoff" => "`retry_backoff` is out of range.",
    "invalid_run_at" => "`run_at` is not a usable time.",
    "invalid_runs" => "The batch of runs' steps is empty or too large.",
    "invalid_session_id" => "The session id is not a valid identifier.",
    "invalid_sessions_root" => "The sessions root is not an absolute path.",
    "invalid_since" => "`since` is not a time.",
    "invalid_size" => "The terminal size is out of range.",
    "invalid_slots" => "The number of slots is out of range.",
    "invalid_stale_threshold" => "The stale threshold is out of range.",
    "invalid_start_index" => "The first step's index is out of range.",
    "invalid_state" => "The state names no known state.",
    "invalid_status" => "The status is not a known one or is too long.",
    "invalid_text" => "The text is empty or too long.",
    "invalid_title" => "The title is empty or too long.",
    "invalid_token_name" => "A token's name is 1-100 printable characters.",
    "invalid_transition" => "The event does not apply in the task's state; it was recorded and refused.",
    "invalid_usage" => "The usage report has an impossible value.",
    "invalid_user_name" => "A user name is 1-64 lowercase letters, digits and - _ . starting with a letter or digit.",
    "invalid_vtid" => "The vtid is not a valid identifier.",
    "invalid_wait_ms" => "`wait_ms` is out of range (0 to 30000).",
    "invalid_webhook_events" => "The webhook's event list is empty, too long, or holds a name that is neither an event type nor a prefix wildcard (`run.*`).",
    "invalid_webhook_format" => "The webhook format is neither `standard` nor `slack`.",
    "invalid_webhook_secret" => "The webhook secret is not `whsec_` followed by the base64 of 24 to 64 bytes.",
    "invalid_webhook_url" => "The webhook URL is not an absolute http or https URL with a host (no credentials, no fragment, at most 2048 bytes).",
    "invalid_worker_id" => "The worker id is not a valid identifier.",
    "invalid_worker_type" => "The worker type is not a known one.",
    "invalid_workspace" => "The workspace report is not usable.",
    "length_required" => "The request needs a Content-Length.",
    "login_failed" => "The sign-in provider refused the code, or its ID token did not verify.",
    "login_name_taken" => "The sign-in's user name belongs to another Shepherd user.",
    "login_not_allowed" => "The sign-in provider's account may not sign in here (its email domain, or no usable name).",
    "login_state_mismatch" => "The sign-in was not started in this browser, was used already, or took too long.",
    "malformed_json" => "The body is not valid JSON.",
    "max_above_capacity" => "`max` is above the worker's capacity.",
    "method_not_allowed" => "The route does not take this method.",
    "migrate_store_failed" => "Copying a SQLite store into PostgreSQL was refused or failed (`shepherd migrate-store`).",
    "migration_changed" => "An applied migration was edited since it ran.",
    "missing_capabilities" => "The worker lacks capabilities the task needs.",
    "missing_worker_id" => "The request names no worker.",
    "not_a_git_diff_worker" => "The tab is not a git-diff tab.",
    "not_a_terminal" => "The tab has no terminal.",
    "not_acceptable" => "The server cannot answer in a format the request accepts.",
    "not_found" => "The thing named does not exist.",
    "not_your_host" => "The token belongs to another host, or to no host.",
    "not_your_run" => "A run token acts only for its own run.",
    "not_your_worker" => "The worker token belongs to another worker.",
    "oidc_not_configured" => "The server has no [oidc] table: sign in with a token.",
    "operator_only" => "Only the operator's token may do this.",
    "origin_not_allowed" => "The request's Origin is not allowed.",
    "outside_sessions_root" => "The location is outside the sessions root.",
    "overloaded" => "The server has too many requests in flight; retry later.",
    "payload_too_large" => "The request body is larger than the server accepts.",
    "provider_error" => "The sign-in provider sent the browser back with an error.",
    "provider_unavailable" => "The sign-in provider could not be reached.",
    "refused" => "The server refused the request.",
    "request_timeout" => "The request did not arrive in time.",
    "reserved_user_name" => "The user name is one the audit trail uses for the server itself (system, timeout, run_ended, operator, ...) or holds a colon.",
    "resource_archived" => "The resource is archived.",
    "resource_busy" => "Another conversation of the resource is processing.",
    "resource_has_no_agent" => "The resource names no agent.",
    "resource_not_found" => "No resource has that id.",
    "restore_failed" => "The tab's process could not be started again (its restore failed).",
    "route_not_found" => "No route has that path.",
    "run_has_no_workspace" => "The run reported no workspace.",
    "run_not_found" => "No run has that id.",
    "run_not_running" => "The run has ended; it can no longer ask or be asked for anything.",
    "schema_too_new" => "The database was migrated by a newer shepherd than this one; the server refuses to start on it.",
    "secrets_key_mismatch" => "A stored secret does not open with this server's secrets key (`secret.key` in the data directory, or `secrets_key_file`): the database's secrets were sealed under another key; a server refuses to start on it.",
    "secrets_key_missing" => "A stored secret is sealed and the store was opened without a secrets key.",
    "session_not_found" => "No session has that id.",
    "session_on_other_node" => "The session lives on another server node.",
    "sessions_unavailable" => "This server does not host sessions.",
    "shutting_down" => "The server is shutting down.",
    "spawn_failed" => "The tab's process could not be started.",
    "step_gap" => "The steps do not continue from the last one recorded.",
    "task_cancelled" => "The task is cancelled.",
    "task_exists" => "A task with that vtid exists.",
    "task_finished" => "The task has reached a final state.",
    "task_not_claimable" => "The task is in a state no worker may claim.",
    "task_not_dispatched" => "The task is a draft; dispatch it first.",
    "task_not_due" => "The task may not be claimed before its `run_at`.",
    "task_not_failed" => "Only a failed or cancelled task can be retried.",
    "task_not_found" => "No task has that vtid.",
    "token_not_found" => "No token of yours has that id.",
    "too_many_requests" => "Too many requests; retry later.",
    "too_many_steps" => "The batch of steps is too large.",
    "too_many_streams" => "The server has as many streams open as it allows; retry later.",
    "transcript_corrupt" => "The stored transcript cannot be read.",
    "unauthorized" => "The request has no valid token.",
    "unavailable" => "The server cannot serve the request now; retry later.",
    "unknown_agent" => "No agent with that id is configured or registered.",
    "unknown_event" => "The event is not one the workflow knows.",
    "unknown_event_type" => "No event has that type; the message lists the known ones.",
    "unknown_workflow" => "No workflow has that name.",
    "unsupported_media_type" => "The body's Content-Type is not application/json.",
    "uri_too_long" => "The request URI is longer than the server accepts.",
    "user_disabled" => "The user is disabled.",
    "user_exists" => "A user of that name exists already.",
    "user_not_found" => "No user has that name.",
    "validator_is_builder" => "The worker that built the task may not validate it.",
    "webhook_from_config" => "The webhook comes from shepherd.toml; remove it there, not through the API.",
    "webhook_not_found" => "No webhook has that id.",
    "webhook_request_refused" => "A server without a token refuses requests that carry a webhook delivery's headers: its own deliveries never act as the operator.",
    "websocket_required" => "The route needs a WebSocket upgrade.",
    "worker_at_capacity" => "The worker holds as many claims as it may.",
    "worker_not_found" => "No worker has that id.",
    "worker_terminated" => "The worker has deregistered; it must register again.",
    "workspace_branch_gone" => "The run's branch no longer exists.",
    "workspace_repo_gone" => "The run's repository no longer exists.",
    "workspace_repo_not_allowed" => "The run's repository is not one the server reads.",
    "wrong_agent" => "The task is for another agent.",
}

/// Whether `code` is in [`ERROR_CODES`].
pub fn is_listed(code: &str) -> bool {
    listed(code).is_some()
}

/// The listed code spelled `code` (an error read off the wire becomes an
/// [`crate::Error`] again with it).
pub fn listed(code: &str) -> Option<&'static str> {
    ERROR_CODES
        .binary_search_by(|c| c.code.cmp(code))
        .ok()
        .map(|i| ERROR_CODES[i].code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_sorted_without_repeats_and_every_code_is_snake_case() {
        for pair in ERROR_CODES.windows(2) {
            assert!(
                pair[0].code < pair[1].code,
                "{:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
        for c in ERROR_CODES {
            assert!(
                !c.code.is_empty()
                    && c.code
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{c:?}"
            );
            assert!(!c.description.is_empty(), "{c:?}");
        }
        assert!(is_listed("task_not_found"));
        assert!(!is_listed("task_not_fond"));
    }
}
