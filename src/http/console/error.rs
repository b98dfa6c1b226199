//! A console page's failure, shown as a page.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::layout::{self, ROOT};
use crate::http::error::ApiError;

/// A console page's failure: the API's problem, shown as a page (same
/// status, `Retry-After` and metrics code), or a way back to sign-in.
pub enum PageError {
    Api(ApiError),
    /// No session (or one that ended): to the sign-in page.
    SignIn,
}

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(error: E) -> Self {
        PageError::Api(error.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let error = match self {
            PageError::SignIn => {
                return (StatusCode::SEE_OTHER, [(header::LOCATION, ROOT)]).into_response()
            }
            PageError::Api(error) => error,
        };
        let detail = error.detail();
        let (mut parts, _) = error.into_response().into_parts();
        let title = parts.status.canonical_reason().unwrap_or("Error");
        let page = layout::error_page(parts.status.as_u16(), title, &detail);
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, page.into_string().into())
    }
}

pub type PageResult<T = Response> = Result<T, PageError>;
