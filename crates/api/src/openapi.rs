//! The OpenAPI document, generated from the handlers' annotations.
//!
//! Every route is listed here; a test checks that the document names each
//! route the router serves.

use axum::Json;
use shepherd_protocol as p;
use utoipa::OpenApi;

pub use shepherd_protocol::{ErrorBody, ErrorDetail};

#[derive(OpenApi)]
#[openapi(
    info(title = "Shepherd", description = "A durable control plane for long-running AI agent workers."),
    paths(
        crate::health::healthz, crate::health::readyz, serve_openapi,
        crate::tasks::create_task, crate::tasks::list_tasks, crate::tasks::get_task, crate::tasks::dispatch_task,
        crate::tasks::cancel_task, crate::tasks::task_event, crate::tasks::workflows, crate::tasks::agents,
        crate::connector::register, crate::connector::pending, crate::connector::claim, crate::connector::progress,
        crate::connector::claim_next, crate::connector::progress_batch, crate::connector::append_steps_batch,
        crate::connector::heartbeat, crate::connector::deregister,
        crate::runs::seed_list, crate::runs::seed_detail, crate::runs::channels_status, crate::runs::list_runs, crate::runs::get_run,
        crate::runs::get_steps, crate::runs::append_steps, crate::runs::set_status,
        crate::runs::requeue_run, crate::tasks::retry_task,
        crate::usage::set_usage, crate::usage::usage_report, crate::run_diff::run_diff,
        crate::events::events,
        crate::channels::upsert, crate::channels::list, crate::channels::archive,
        crate::workers::list_workers, crate::workers::worker_events, crate::workers::event_page,
        crate::conversations::upsert_resource, crate::conversations::list_resources,
        crate::conversations::create_conversation, crate::conversations::list_conversations,
        crate::conversations::get_conversation, crate::conversations::send_message,
        crate::conversations::cancel_conversation, crate::conversations::activate_conversation,
        crate::sessions::create, crate::sessions::list, crate::sessions::show, crate::sessions::delete,
        crate::sessions::add_worker, crate::sessions::remove_worker, crate::sessions::restart, crate::sessions::diff,
        crate::session_ws::attach,
        crate::metrics::metrics,
        crate::input_requests::ask, crate::input_requests::list, crate::input_requests::get_one,
        crate::input_requests::answer, crate::input_requests::run_token,
        crate::webhooks::create, crate::webhooks::list, crate::webhooks::get_one,
        crate::webhooks::delete, crate::webhooks::deliveries,
        crate::users::me, crate::users::create_user, crate::users::list_users, crate::users::update_user,
        crate::users::create_token, crate::users::list_tokens, crate::users::revoke_token,
        crate::login::options, crate::login::logout,
        crate::hosts::list_hosts, crate::hosts::register_host, crate::hosts::heartbeat, crate::hosts::prune_branches,
        crate::host_link::open_link,
    ),
    components(schemas(
        p::ErrorBody, p::ErrorDetail, p::SeedErrorBody, p::TransitionRejectedBody,
        // Every event type's schema comes along with `WireEvent` (see
        // `shepherd_protocol::events::event_families`).
        p::WireEvent, p::Resync, p::StreamData,
        shepherd_sessions::ServerMessage, shepherd_sessions::ClientMessage,
    )),
    modifiers(&BearerAuth, &CommonErrors)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Declares the errors any operation can answer before its handler runs
/// (an unreadable body or query, a missing token, a body too large), so a
/// client generated from the document knows every status it may see.
struct CommonErrors;

impl utoipa::Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::Operation;
        use utoipa::openapi::{Ref, ResponseBuilder};
        let error = |what: &str| {
            ResponseBuilder::new()
                .description(what)
                .content(
                    "application/json",
                    utoipa::openapi::ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            let protected = path.starts_with("/api/") && path != "/api/openapi.json";
            let ops: [Option<&mut Operation>; 5] = [
                item.get.as_mut(),
                item.post.as_mut(),
                item.put.as_mut(),
                item.patch.as_mut(),
                item.delete.as_mut(),
            ];
            for op in ops.into_iter().flatten() {
                let mut add = |status: &str, what: &str| {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error(what).into());
                };
                // The Host rule holds on every route.
                add("421", "host_not_allowed");
                if protected {
                    add("401", "unauthorized: a token is needed (or it is wrong)");
                    add("403", "origin_not_allowed, operator_only, forbidden (a user whose role is below the route's)");
                    add("429", "too_many_requests (its token's requests in flight)");
                }
                let has_query = op.parameters.as_ref().is_some_and(|ps| {
                    ps.iter()
                        .any(|p| p.parameter_in == utoipa::openapi::path::ParameterIn::Query)
                });
                if has_query {
                    add("400", "invalid_query");
                }
                if op.request_body.is_some() {
                    add("400", "malformed_json, unsupported_media_type");
                    add("408", "body_timeout");
                    add("413", "payload_too_large");
                    add("422", "invalid_body");
                }
            }
        }
    }
}

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn serve_openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Generators type the wire from the document, so every enum must list
    /// the words the wire carries (`running`, `event_log`), never the Rust
    /// variant names (`Running`, `EventLog`).
    #[test]
    fn enums_list_the_wire_strings() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut seen = 0;
        for (name, schema) in schemas {
            let Some(values) = schema.get("enum").and_then(|v| v.as_array()) else {
                continue;
            };
            seen += 1;
            for v in values {
                let v = v.as_str().unwrap_or_default();
                assert!(
                    !v.starts_with(|c: char| c.is_ascii_uppercase()),
                    "{name} lists {v:?}"
                );
            }
        }
        for name in ["RunStatus", "WorkerSource", "SessionStatus", "ClaimPurpose"] {
            assert!(schemas[name]["enum"].is_array(), "{name} is not an enum");
        }
        assert!(seen >= 4);
        assert_eq!(
            schemas["WorkerSource"]["enum"],
            serde_json::json!(["registry", "event_log"])
        );
    }

    /// Every event type the server writes has a schema for its `data` in the
    /// document, exactly one: the log's type names (`kind::ALL`, which every
    /// new constant joins) and the workflows' progress events. A new type
    /// without a schema fails here.
    #[test]
    fn operation_ids_are_unique() {
        // Generated clients name a method after each operationId: two
        // handlers named alike in different modules would clash.
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for (method, op) in ops.as_object().unwrap() {
                if let Some(id) = op.get("operationId").and_then(|v| v.as_str()) {
                    if let Some(other) = seen.insert(id.to_owned(), format!("{method} {path}")) {
                        panic!("operationId {id:?} names both {other} and {method} {path}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_event_type_has_a_data_schema() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let events = &schemas["WireEvent"];
        let mapping = events["discriminator"]["mapping"].as_object().unwrap();
        let own = |name: &str| schemas[name]["allOf"][1]["properties"].clone();
        let mut want: Vec<&str> = shepherd_core::event::kind::ALL.to_vec();
        // Types no longer written that older logs still hold stay documented.
        want.extend(shepherd_core::event::kind::LEGACY);
        want.extend(shepherd_core::workflow::event_types());
        for t in &want {
            let target = mapping
                .get(*t)
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| panic!("no schema for event type {t:?}"));
            let name = target.rsplit('/').next().unwrap();
            let branch = own(name);
            let types = branch["type"]["enum"].as_array().unwrap();
            assert!(types.iter().any(|v| v == t), "{name} does not list {t:?}");
            let payload = branch["data"]["$ref"].as_str().unwrap();
            let payload = payload.rsplit('/').next().unwrap();
            assert!(
                schemas[payload].is_object(),
                "{payload} is not in the document"
            );
        }
        // Nothing documented that the server does not write, and no type twice.
        let mut listed: Vec<String> = Vec::new();
        for item in events["oneOf"].as_array().unwrap() {
            let name = item["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
            for t in own(name)["type"]["enum"].as_array().unwrap() {
                let t = t.as_str().unwrap().to_owned();
                assert!(!listed.contains(&t), "{t:?} has two schemas");
                assert!(
                    want.contains(&t.as_str()),
                    "{t:?} is documented but never written"
                );
                listed.push(t);
            }
        }
        assert_eq!(listed.len(), want.len());
        assert_eq!(mapping.len(), want.len());
    }
}
