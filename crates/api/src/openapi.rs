//! The OpenAPI document, generated from the handlers' annotations.
//!
//! Every route is listed here; a test checks that the document names each
//! route the router serves.

use axum::Json;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

/// The shape of every error response.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable, snake_case.
    pub code: String,
    pub message: String,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Shepherd", description = "A durable control plane for long-running AI agent workers."),
    paths(
        crate::health::healthz, crate::health::readyz, serve_openapi,
        crate::tasks::create_task, crate::tasks::list_tasks, crate::tasks::get_task, crate::tasks::dispatch_task,
        crate::tasks::cancel_task, crate::tasks::task_event, crate::tasks::workflows, crate::tasks::agents,
        crate::connector::register, crate::connector::pending, crate::connector::claim, crate::connector::progress,
        crate::connector::heartbeat, crate::connector::deregister,
        crate::runs::seed_list, crate::runs::seed_detail, crate::runs::list_runs, crate::runs::get_run,
        crate::runs::get_steps, crate::runs::append_steps, crate::runs::set_status,
        crate::events::events,
        crate::channels::upsert, crate::channels::list, crate::channels::archive,
        crate::workers::list_workers, crate::workers::worker_events, crate::workers::event_page,
        crate::sessions::create, crate::sessions::list, crate::sessions::show, crate::sessions::delete,
        crate::sessions::add_worker, crate::sessions::remove_worker, crate::sessions::restart, crate::sessions::diff,
        crate::session_ws::attach,
    ),
    components(schemas(ErrorBody, ErrorDetail, shepherd_sessions::ServerMessage, shepherd_sessions::ClientMessage)),
    modifiers(&BearerAuth)
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

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "meta", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn serve_openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
