//! What a write expects of a partition's current version, and why an
//! expectation was not met. The HTTP edge reads it from `If-Match` /
//! `If-None-Match` (`crate::http::preconditions`); the store checks it
//! against the live partition inside the swap's transaction, so the check
//! and the swap see the same version.
//!
//! A version is the partition's content hash (hex), the ETag idem sends.
//! The reasons' wording names the headers because it is the 412's detail
//! and is kept with a refused load in the ledger.

use std::fmt;

/// A writer's expectation of the current version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Expected {
    /// No condition.
    #[default]
    Any,
    /// The partition must not exist yet (`If-None-Match: *`).
    Absent,
    /// The partition must exist, in any version (`If-Match: *`).
    Present,
    /// The partition must exist in one of these versions (an `If-Match`
    /// list); an empty list matches no version.
    OneOf(Vec<String>),
    /// Both absent and present (`If-None-Match: *` with an `If-Match`): no
    /// partition meets it, and the reason is whichever half fails.
    Never,
}

/// Why the current version is not the expected one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unmet {
    /// The partition exists, and was expected not to.
    Exists,
    /// The partition does not exist, and was expected to.
    Missing,
    /// The partition's version (given) is none of those expected.
    Differs(String),
}

impl Expected {
    /// Checks the expectation against the live partition's version, `None`
    /// when there is no partition.
    pub fn check(&self, current: Option<&str>) -> Result<(), Unmet> {
        match (self, current) {
            (Expected::Any, _) => Ok(()),
            (Expected::Absent | Expected::Never, Some(_)) => Err(Unmet::Exists),
            (Expected::Absent, None) => Ok(()),
            (Expected::Present | Expected::OneOf(_) | Expected::Never, None) => Err(Unmet::Missing),
            (Expected::Present, Some(_)) => Ok(()),
            (Expected::OneOf(versions), Some(version)) => {
                if versions.iter().any(|v| v == version) {
                    Ok(())
                } else {
                    Err(Unmet::Differs(version.to_string()))
                }
            }
        }
    }
}

impl fmt::Display for Unmet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unmet::Exists => f.write_str("If-None-Match: * but the partition exists"),
            Unmet::Missing => f.write_str("If-Match but the partition does not exist"),
            Unmet::Differs(version) => write!(
                f,
                "If-Match does not match the partition's ETag \"{version}\""
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_of(versions: &[&str]) -> Expected {
        Expected::OneOf(versions.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn each_expectation_holds_or_says_why_not() {
        let cases = [
            (Expected::Any, None, Ok(())),
            (Expected::Any, Some("a"), Ok(())),
            (Expected::Absent, None, Ok(())),
            (Expected::Absent, Some("a"), Err(Unmet::Exists)),
            (Expected::Present, None, Err(Unmet::Missing)),
            (Expected::Present, Some("a"), Ok(())),
            (one_of(&["a", "b"]), Some("b"), Ok(())),
            (one_of(&["a"]), Some("c"), Err(Unmet::Differs("c".into()))),
            (one_of(&[]), Some("c"), Err(Unmet::Differs("c".into()))),
            (one_of(&["a"]), None, Err(Unmet::Missing)),
            (Expected::Never, None, Err(Unmet::Missing)),
            (Expected::Never, Some("a"), Err(Unmet::Exists)),
        ];
        for (expected, current, result) in cases {
            assert_eq!(expected.check(current), result, "{expected:?} {current:?}");
        }
    }

    #[test]
    fn reasons_keep_their_wording() {
        assert_eq!(
            Unmet::Exists.to_string(),
            "If-None-Match: * but the partition exists"
        );
        assert_eq!(
            Unmet::Missing.to_string(),
            "If-Match but the partition does not exist"
        );
        assert_eq!(
            Unmet::Differs("ab".into()).to_string(),
            "If-Match does not match the partition's ETag \"ab\""
        );
    }
}
