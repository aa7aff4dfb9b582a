//! Usage routes: the trailing-window summary, computed with the domain's totals rules
//! (unknown tokens and prices are null, never 0).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metaforge_domain::usage::UsageTotals;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::GatewayState;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiQuery;

/// The window to sum over.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct WindowQuery {
    /// Trailing window in hours (1..=8760, default 24).
    #[serde(default)]
    #[param(minimum = 1, maximum = 8760)]
    window_hours: Option<u32>,
}

/// Usage over a trailing window.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UsageSummary {
    /// The window summed, in hours.
    window_hours: u32,
    /// Totals with by_phase, by_role and by_model.
    totals: UsageTotals,
}

/// The largest window accepted: one year.
pub(crate) const MAX_WINDOW_HOURS: u32 = 8760;

/// Sums every model call recorded in the trailing window.
#[utoipa::path(get, path = "/v1/runs/usage/summary", tag = "usage", params(WindowQuery),
    responses((status = 200, body = UsageSummary), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, description = "The usage store cannot be read", body = ErrorBody)),
    security(("api_key" = [])))]
pub(crate) async fn summary(
    State(state): State<Arc<GatewayState>>,
    ApiQuery(query): ApiQuery<WindowQuery>,
) -> Result<Json<UsageSummary>, ApiError> {
    let window_hours = query.window_hours.unwrap_or(24);
    if !(1..=MAX_WINDOW_HOURS).contains(&window_hours) {
        return Err(ApiError::bad_request(
            "window_hours",
            format!("window_hours must be between 1 and {MAX_WINDOW_HOURS}, not {window_hours}"),
        ));
    }
    Ok(Json(UsageSummary {
        window_hours,
        totals: state.usage_totals(window_hours).await?,
    }))
}
