//! Who may do what: bearer-token secrets, scopes and table patterns.
//!
//! A token grants scopes (`read`, `write`, `admin`) on the tables its
//! patterns match. `admin` grants everything on every table. Secrets are
//! random, shown once, and kept only as SHA-256 digests.

use std::fmt;

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ids::{Principal, TokenId};
use crate::names::{TableName, MAX_NAME_LEN};

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// GET and HEAD of tables, partitions, loads and idempotency keys.
    Read,
    /// PUT, POST and DELETE of data, auto-creating and declaring tables.
    Write,
    /// Everything on every table, plus tokens and metrics.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        [Scope::Read, Scope::Write, Scope::Admin]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A table pattern: a table name in which `*` stands for any run of
/// characters (`orders`, `sales_*`, `*`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TablePattern(String);

impl TablePattern {
    /// Checks `^[a-z_*][a-z0-9_*]{0,47}$`.
    pub fn parse(text: &str) -> Result<TablePattern, String> {
        let bytes = text.as_bytes();
        let valid = !bytes.is_empty()
            && bytes.len() <= MAX_NAME_LEN
            && !bytes[0].is_ascii_digit()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_*".contains(b));
        if valid {
            Ok(TablePattern(text.to_string()))
        } else {
            Err(format!(
                "table pattern {text:?} must match ^[a-z_*][a-z0-9_*]{{0,47}}$"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `table` matches: `*` matches any run, everything else itself.
    pub fn matches(&self, table: &TableName) -> bool {
        glob_matches(self.0.as_bytes(), table.as_str().as_bytes())
    }

    /// The pattern as a SQL `LIKE` pattern (`_` escaped, `*` as `%`), so
    /// that lists can be filtered where they are read.
    pub fn like(&self) -> String {
        self.0.replace('_', "\\_").replace('*', "%")
    }
}

/// Matches `text` against `pattern`, where `*` is any run of bytes. Greedy
/// with backtracking to the last star: linear for one star, and patterns
/// are at most 48 bytes.
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut last_star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            last_star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star, matched)) = last_star {
            p = star + 1;
            t = matched + 1;
            last_star = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

impl TryFrom<String> for TablePattern {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        TablePattern::parse(&text)
    }
}

impl From<TablePattern> for String {
    fn from(pattern: TablePattern) -> String {
        pattern.0
    }
}

/// What a caller may do: scopes on the tables its patterns match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grants {
    pub scopes: Vec<Scope>,
    pub tables: Vec<TablePattern>,
}

impl Grants {
    /// Everything on every table (the bootstrap admin; open mode).
    pub fn all() -> Grants {
        Grants {
            scopes: vec![Scope::Admin],
            tables: vec![TablePattern("*".into())],
        }
    }

    pub fn is_admin(&self) -> bool {
        self.scopes.contains(&Scope::Admin)
    }

    /// Whether `scope` on `table` is granted.
    pub fn allows(&self, scope: Scope, table: &TableName) -> bool {
        self.is_admin()
            || (self.scopes.contains(&scope) && self.tables.iter().any(|p| p.matches(table)))
    }

    /// The `LIKE` patterns of the tables this caller may read, for lists
    /// filtered in SQL; empty when it may read none.
    pub fn readable_like(&self) -> Vec<String> {
        if self.is_admin() {
            vec!["%".into()]
        } else if self.scopes.contains(&Scope::Read) {
            self.tables.iter().map(TablePattern::like).collect()
        } else {
            Vec::new()
        }
    }
}

/// Who made a load, as the ledger records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Actor {
    /// What Idempotency-Keys, channels and load slots are kept apart by:
    /// the token, or a caller without one (the bootstrap admin, open mode).
    pub principal: Principal,
    pub token_name: String,
}

impl Actor {
    /// idem itself, for work no request asked for (an expire round, the
    /// repeats a key adoption resolved).
    pub fn idem() -> Actor {
        Actor {
            principal: Principal::Idem,
            token_name: "idem".to_string(),
        }
    }

    /// `None` for the bootstrap admin token and in open mode.
    pub fn token_id(&self) -> Option<TokenId> {
        self.principal.token_id()
    }
}

/// The prefix of every secret idem issues, so that one found in a log or a
/// repository is recognisable.
const SECRET_PREFIX: &str = "idem_";
/// Random bytes in a secret.
const SECRET_BYTES: usize = 32;

/// A new secret: `idem_` and 32 random bytes from the operating system, in
/// URL-safe base64 (43 characters).
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::getrandom(&mut bytes)?;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Ok(format!("{SECRET_PREFIX}{encoded}"))
}

/// The SHA-256 of a secret: all that is stored of it.
pub fn secret_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A secret derived from `secret` for one `purpose` (HMAC-SHA-256 keyed
/// with `secret`), in URL-safe base64: made again from `secret` alone, so
/// nothing of it is stored, and it tells nothing of `secret`.
pub fn derived_secret(secret: &str, purpose: &str) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(purpose.as_bytes());
    let bytes = mac.finalize().into_bytes();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Compares two digests in constant time.
pub fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str) -> TableName {
        TableName::parse(name).unwrap()
    }

    fn pattern(text: &str) -> TablePattern {
        TablePattern::parse(text).unwrap()
    }

    #[test]
    fn patterns_match_with_stars_anywhere() {
        assert!(pattern("orders").matches(&table("orders")));
        assert!(!pattern("orders").matches(&table("orders_2")));
        assert!(pattern("sales_*").matches(&table("sales_eu")));
        assert!(pattern("sales_*").matches(&table("sales_")));
        assert!(!pattern("sales_*").matches(&table("orders")));
        assert!(!pattern("sales_*").matches(&table("sales")));
        assert!(pattern("*").matches(&table("anything")));
        assert!(pattern("*_raw").matches(&table("events_raw")));
        assert!(pattern("a*b*c").matches(&table("axxbyyc")));
        assert!(!pattern("a*b*c").matches(&table("axxbyy")));
        assert!(pattern("a*a").matches(&table("aaa")));
    }

    #[test]
    fn patterns_outside_the_name_grammar_are_refused() {
        for bad in ["", "Orders", "1abc", "a-b", "a.b", "%", &"a".repeat(49)] {
            assert!(TablePattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn like_patterns_escape_underscores() {
        assert_eq!(pattern("sales_*").like(), "sales\\_%");
    }

    #[test]
    fn grants_need_the_scope_and_a_matching_pattern() {
        let grants = Grants {
            scopes: vec![Scope::Write],
            tables: vec![pattern("sales_*")],
        };
        assert!(grants.allows(Scope::Write, &table("sales_eu")));
        assert!(!grants.allows(Scope::Write, &table("orders")));
        assert!(!grants.allows(Scope::Read, &table("sales_eu")));
        assert!(grants.readable_like().is_empty());
        assert!(Grants::all().allows(Scope::Read, &table("orders")));
    }

    #[test]
    fn secrets_are_random_and_only_their_digest_compares() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), SECRET_PREFIX.len() + 43);
        assert!(digests_equal(&secret_digest(&a), &secret_digest(&a)));
        assert!(!digests_equal(&secret_digest(&a), &secret_digest(&b)));
    }
}
