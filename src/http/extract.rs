//! The API's own extractors, a malformed query or path answered in its
//! problem format; and the path's values read: a table, a partition of a
//! table's grain (or of any), an id.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ApiResult};
use super::observe::RequestSpan;
use crate::names::TableName;
use crate::period::{Grain, Period};

/// `Query`, with a malformed query string answered in the API's own format.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(query)| ApiQuery(query))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// Path parameters, with a malformed one answered in the API's own format.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(path)| ApiPath(path))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// A table named in the path (`/…/{table}`), validated before the handler
/// sees it.
pub struct TablePath(pub TableName);

impl<S: Send + Sync> FromRequestParts<S> for TablePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ApiPath(table) = ApiPath::<String>::from_request_parts(parts, state).await?;
        let table = TableName::parse(&table)?;
        RequestSpan::of(parts).record("table", tracing::field::display(&table));
        Ok(TablePath(table))
    }
}

/// A table and a partition value named in the path (`/…/{table}/{ds}`);
/// the value's form depends on the table's grain, so it is read with
/// `PartitionPath::period` once the table is known.
pub struct PartitionPath(pub TableName, pub String);

impl<S: Send + Sync> FromRequestParts<S> for PartitionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ApiPath((table, ds)) =
            ApiPath::<(String, String)>::from_request_parts(parts, state).await?;
        let table = TableName::parse(&table)?;
        let span = RequestSpan::of(parts);
        span.record("table", tracing::field::display(&table));
        // As sent (it is read once the table's grain is known), and cut
        // short: a path may be long.
        span.record("ds", ds.chars().take(40).collect::<String>().as_str());
        Ok(PartitionPath(table, ds))
    }
}

/// A partition value of `grain`'s form: `2026-10-12T13` (hour),
/// `2026-10-12` (day), `2026-10` (month), years 0001 to 9999.
pub fn parse_period(text: &str, grain: Grain) -> ApiResult<Period> {
    Period::parse(text, grain).ok_or_else(|| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidDs(format!(
            "{shown:?} is not a partition of this table: its grain is {} ({}; years 0001 to 9999)",
            grain.as_str(),
            grain.form()
        ))
    })
}

/// A partition value of any grain's form (a filter over several tables).
pub fn parse_label(text: &str) -> ApiResult<Period> {
    Period::parse_any(text).ok_or_else(|| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidDs(format!(
            "{shown:?} is not a partition value (YYYY-MM-DD, YYYY-MM-DDTHH or YYYY-MM)"
        ))
    })
}

/// An id in a path or a cursor (`what`: "load id", "token id").
pub fn parse_id<Id: From<uuid::Uuid>>(text: &str, what: &str) -> ApiResult<Id> {
    uuid::Uuid::parse_str(text).map(Id::from).map_err(|_| {
        let shown: String = text.chars().take(40).collect();
        ApiError::InvalidRequest(format!("{shown:?} is not a {what} (a UUID)"))
    })
}
