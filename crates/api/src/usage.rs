//! A run's token usage and cost, reported by the worker holding its claim
//! (`POST /api/v1/runs/{run_id}/usage`). Runs in lists and details carry
//! the stored total as `usage`; `GET /api/v1/usage` sums it per agent, task
//! or day.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::time::{parse_iso8601, to_rfc3339, Millis};
use shepherd_core::usage::Usage;
use shepherd_core::Error;
use shepherd_protocol::{SetUsage, UsageAck, UsageGroup, UsageGroupBy, UsageQuery, UsageReport};
use shepherd_store::now_ms;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::AppState;

/// Set the token usage and cost of a running run, fenced by its claim token.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/usage", tag = "runs", params(("run_id" = String, Path)), request_body = SetUsage, responses(
    (status = 200, body = UsageAck),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "claim_stale", body = crate::openapi::ErrorBody),
    (status = 422, description = "invalid_usage", body = crate::openapi::ErrorBody)))]
pub async fn set_usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<SetUsage>,
) -> ApiResult<Json<UsageAck>> {
    let worker = match caller {
        Caller::Worker(w) => Some(w),
        // Never a claim's holder: a run token is fenced out.
        Caller::Run(r) => Some(format!("run:{r}")),
        Caller::Host(h) => Some(format!("host:{h}")),
        Caller::Operator | Caller::User { .. } => None,
    };
    let run = state
        .store
        .set_run_usage(
            &run_id,
            &b.claim_token,
            worker,
            b.usage,
            state.lease_rules(),
        )
        .await?;
    Ok(Json(UsageAck {
        ok: true,
        run_id: run.id,
        usage: run.usage,
    }))
}

/// `since`: an RFC 3339 time (or a date), or an age back from `now` such as
/// `7d`, `12h`, `30m`, `90s`.
pub fn parse_since(s: &str, now: Millis) -> Result<Millis, Error> {
    if let Some(t) = parse_iso8601(s) {
        return Ok(t);
    }
    let bad = || {
        Error::bad_request(
            "invalid_since",
            format!("since must be an RFC 3339 time or an age such as 7d, 12h or 30m, not {s:?}"),
        )
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = s.split_at(split);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms)
        .map(|back| now.saturating_sub(back))
        .ok_or_else(bad)
}

/// Sums stored usage per group. Groups are ordered by cost, then tokens
/// (the expensive ones first); days in calendar order.
pub fn aggregate(
    rows: &[shepherd_store::UsageRow],
    group_by: UsageGroupBy,
) -> (Vec<UsageGroup>, Usage, i64) {
    let mut groups: BTreeMap<String, (i64, Usage)> = BTreeMap::new();
    let mut total = Usage::default();
    for (agent, task, started, usage) in rows {
        let key = match group_by {
            UsageGroupBy::Agent => agent.clone(),
            UsageGroupBy::Task => task.clone(),
            UsageGroupBy::Day => to_rfc3339(*started).chars().take(10).collect(),
        };
        let g = groups.entry(key).or_default();
        g.0 += 1;
        g.1.add(usage);
        total.add(usage);
    }
    let mut out: Vec<UsageGroup> = groups
        .into_iter()
        .map(|(key, (runs, usage))| UsageGroup { key, runs, usage })
        .collect();
    if group_by != UsageGroupBy::Day {
        let tokens = |u: &Usage| u.input_tokens + u.output_tokens;
        out.sort_by(|a, b| {
            b.usage
                .cost_usd
                .unwrap_or(0.0)
                .total_cmp(&a.usage.cost_usd.unwrap_or(0.0))
                .then(tokens(&b.usage).cmp(&tokens(&a.usage)))
                .then(a.key.cmp(&b.key))
        });
    }
    (out, total, rows.len() as i64)
}

/// Stored token usage and cost summed per agent, task or day.
#[utoipa::path(get, path = "/api/v1/usage", tag = "runs", params(UsageQuery), responses(
    (status = 200, body = UsageReport),
    (status = 400, description = "invalid_group_by, invalid_since", body = crate::openapi::ErrorBody)))]
pub async fn usage_report(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    caller.require_operator()?;
    let group_by = match q.group_by.as_deref() {
        None => UsageGroupBy::Agent,
        Some(g) => g.parse().map_err(|_| {
            Error::bad_request(
                "invalid_group_by",
                format!("group_by must be agent, task or day, not {g:?}"),
            )
        })?,
    };
    let since = q
        .since
        .as_deref()
        .map(|s| parse_since(s, now_ms()))
        .transpose()?;
    let rows = state.store.usage_rows(since).await?;
    let (groups, total, runs) = aggregate(&rows, group_by);
    Ok(Json(UsageReport {
        group_by,
        since: since.map(to_rfc3339),
        groups,
        total,
        runs,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/runs/{run_id}/usage", post(set_usage))
        .route("/api/v1/usage", get(usage_report))
}
