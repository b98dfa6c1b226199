//! The HTTP surface: one module per resource, each with its own `router()`.

pub mod body;
pub mod loads;
pub mod ops;
pub mod partitions;
pub mod tables;

use axum::Router;
use chrono::NaiveDate;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(tables::router())
        .merge(partitions::router())
        .merge(loads::router())
        .merge(ops::router())
}

/// A partition value from a path or query: an ISO date, `YYYY-MM-DD`.
pub fn parse_ds(text: &str) -> ApiResult<NaiveDate> {
    let valid = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    valid
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::InvalidDs(format!("{text:?} is not a date of the form YYYY-MM-DD"))
        })
}
