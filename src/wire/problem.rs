//! A refusal's or failure's body (`application/problem+json`, RFC 9457):
//! its type, title, status, detail and stable `code`, and what some
//! problems carry besides: the first bad rows and how many were refused,
//! or a failed audit's report.

use serde::{Deserialize, Serialize};

use crate::ingest::BadRow;
use crate::problem::ProblemCode;
use crate::schema::AuditReport;

/// A problem answer's body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// `https://idem.dev/problems/{code}`, the code's `_` as `-`.
    #[serde(rename = "type")]
    pub type_: String,
    pub title: String,
    pub status: u16,
    /// For people; clients match on `code`.
    pub detail: String,
    pub code: ProblemCode,
    /// The first bad rows of a refused body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<BadRow>>,
    /// How many rows (keys, versions) were refused, when more than listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<u64>,
    /// A failed audit's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<AuditReport>,
}

impl Problem {
    /// A problem that carries nothing but its code, title, status and
    /// detail.
    pub fn new(code: ProblemCode, title: &str, status: u16, detail: String) -> Problem {
        Problem {
            type_: format!(
                "https://idem.dev/problems/{}",
                code.as_str().replace('_', "-")
            ),
            title: title.to_string(),
            status,
            detail,
            code,
            errors: None,
            rejected: None,
            report: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_says_only_what_it_carries_and_reads_back_the_same() {
        let mut problem = Problem::new(
            ProblemCode::BadRows,
            "Bad rows",
            422,
            "2 rows are bad".into(),
        );
        let plain = serde_json::to_string(&problem).unwrap();
        assert_eq!(
            plain,
            r#"{"type":"https://idem.dev/problems/bad-rows","title":"Bad rows","status":422,"detail":"2 rows are bad","code":"bad_rows"}"#
        );
        problem.errors = Some(vec![BadRow {
            line: 3,
            record: 2,
            column: None,
            message: "not JSON".into(),
            columns: vec![],
        }]);
        problem.rejected = Some(2);
        let text = serde_json::to_string(&problem).unwrap();
        assert!(text.ends_with(r#""errors":[{"line":3,"record":2,"message":"not JSON","columns":[]}],"rejected":2}"#), "{text}");
        assert_eq!(serde_json::from_str::<Problem>(&text).unwrap(), problem);
    }
}
