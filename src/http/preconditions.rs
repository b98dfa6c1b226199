//! `If-Match` / `If-None-Match`: the headers read into what a writer expects
//! of a partition's version (`crate::versions::Expected`), and the
//! `If-None-Match` of a GET. The entity tags idem sends are content hashes.

use axum::http::{header, HeaderMap};

use crate::http::error::{ApiError, ApiResult};
use crate::versions::Expected;

/// The entity tags of an `If-Match` or `If-None-Match` header.
#[derive(Clone, Debug, PartialEq, Eq)]
enum EntityTags {
    /// `*`: any current version.
    Any,
    /// These tags, unquoted; none when the header named none (it was empty,
    /// or not visible ASCII), which matches nothing.
    Listed(Vec<String>),
}

/// The entity tags of an `If-Match`/`If-None-Match` header, `None` when it is
/// absent. A value that is not visible ASCII names no tag idem ever gave.
fn entity_tags(headers: &HeaderMap, name: header::HeaderName) -> Option<EntityTags> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    let tags: Vec<String> = values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .map(|t| t.trim_start_matches("W/").trim_matches('"').to_string())
        .collect();
    if tags.iter().any(|t| t == "*") {
        Some(EntityTags::Any)
    } else {
        Some(EntityTags::Listed(tags))
    }
}

/// What a PUT's `If-Match` / `If-None-Match: *` expect of the partition. An
/// `If-None-Match` that lists versions is refused: a PUT creates a day only
/// where none is.
pub fn expected(headers: &HeaderMap) -> ApiResult<Expected> {
    let absent =
        match entity_tags(headers, header::IF_NONE_MATCH) {
            None => false,
            Some(EntityTags::Any) => true,
            Some(EntityTags::Listed(_)) => return Err(ApiError::InvalidRequest(
                "a PUT takes If-None-Match: * only (create if absent); use If-Match for a version"
                    .into(),
            )),
        };
    Ok(match (absent, entity_tags(headers, header::IF_MATCH)) {
        (false, None) => Expected::Any,
        (true, None) => Expected::Absent,
        (false, Some(EntityTags::Any)) => Expected::Present,
        (false, Some(EntityTags::Listed(versions))) => Expected::OneOf(versions),
        (true, Some(_)) => Expected::Never,
    })
}

/// Whether a GET's `If-None-Match` names `version` (or is `*`): the client
/// holds it already.
pub fn if_none_match_names(headers: &HeaderMap, version: &str) -> bool {
    entity_tags(headers, header::IF_NONE_MATCH).is_some_and(|tags| match tags {
        EntityTags::Any => true,
        EntityTags::Listed(tags) => tags.iter().any(|t| t == version),
    })
}
