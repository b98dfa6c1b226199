//! The tokens table: bearer tokens by the digest of their secret.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::Row;

use super::{Store, StoreError, StoreResult};
use crate::access::{Grants, Scope, TablePattern};
use crate::ids::TokenId;

/// A token as listed: never its secret.
#[derive(Clone, Debug, Serialize)]
pub struct TokenInfo {
    pub id: TokenId,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub tables: Vec<TablePattern>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TokenInfo {
    pub fn grants(&self) -> Grants {
        Grants {
            scopes: self.scopes.clone(),
            tables: self.tables.clone(),
        }
    }
}

/// A token to make.
pub struct NewToken<'a> {
    pub name: &'a str,
    pub secret_sha256: &'a [u8; 32],
    pub grants: &'a Grants,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What a presented secret turned out to be.
pub enum TokenLookup {
    /// A token that may be used, for `expires_in` more (by the database's
    /// clock) when it expires.
    Valid {
        token: TokenInfo,
        expires_in: Option<Duration>,
    },
    Revoked,
    Expired,
    Unknown,
}

const TOKEN_COLUMNS: &str = "id, name, scopes, tables, created_at, expires_at, revoked_at";

fn token_info(row: &sqlx::postgres::PgRow) -> StoreResult<TokenInfo> {
    let corrupt =
        || StoreError::Corrupt("idem.tokens holds a scope or table pattern idem does not know");
    let scopes: Vec<String> = row.try_get("scopes")?;
    let tables: Vec<String> = row.try_get("tables")?;
    Ok(TokenInfo {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        scopes: scopes
            .iter()
            .map(|s| Scope::parse(s).ok_or_else(corrupt))
            .collect::<StoreResult<_>>()?,
        tables: tables
            .iter()
            .map(|t| TablePattern::parse(t).map_err(|_| corrupt()))
            .collect::<StoreResult<_>>()?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}

impl Store {
    pub async fn create_token(&self, token: NewToken<'_>) -> StoreResult<TokenInfo> {
        let scopes: Vec<&str> = token.grants.scopes.iter().map(|s| s.as_str()).collect();
        let tables: Vec<&str> = token.grants.tables.iter().map(|t| t.as_str()).collect();
        let row = sqlx::query(&format!(
            "insert into idem.tokens (id, name, secret_sha256, scopes, tables, expires_at)
             values ($1, $2, $3, $4, $5, $6) returning {TOKEN_COLUMNS}"
        ))
        .bind(TokenId::new())
        .bind(token.name)
        .bind(&token.secret_sha256[..])
        .bind(scopes)
        .bind(tables)
        .bind(token.expires_at)
        .fetch_one(&mut *self.acquire().await?)
        .await?;
        token_info(&row)
    }

    /// The token whose secret has this digest, and whether it may be used
    /// now (the database's clock decides expiry, the same for every process).
    pub async fn token_by_secret(&self, secret_sha256: &[u8; 32]) -> StoreResult<TokenLookup> {
        let row = sqlx::query(&format!(
            "select {TOKEN_COLUMNS}, expires_at <= now() as expired,
                    extract(epoch from expires_at - now())::float8 as expires_in
               from idem.tokens where secret_sha256 = $1"
        ))
        .bind(&secret_sha256[..])
        .fetch_optional(&mut *self.acquire().await?)
        .await?;
        let Some(row) = row else {
            return Ok(TokenLookup::Unknown);
        };
        let info = token_info(&row)?;
        Ok(if info.revoked_at.is_some() {
            TokenLookup::Revoked
        } else if row.try_get::<Option<bool>, _>("expired")? == Some(true) {
            TokenLookup::Expired
        } else {
            let seconds: Option<f64> = row.try_get("expires_in")?;
            TokenLookup::Valid {
                token: info,
                expires_in: seconds.map(|s| Duration::try_from_secs_f64(s).unwrap_or_default()),
            }
        })
    }

    /// A live token (a revoked one is gone from the API; its row stays, for
    /// the ledger's `token_id`).
    pub async fn token(&self, id: TokenId) -> StoreResult<Option<TokenInfo>> {
        let row = sqlx::query(&format!(
            "select {TOKEN_COLUMNS} from idem.tokens where id = $1 and revoked_at is null"
        ))
        .bind(id)
        .fetch_optional(&mut *self.acquire().await?)
        .await?;
        row.as_ref().map(token_info).transpose()
    }

    /// Live tokens in the order they were made (ids are UUIDv7), after `after`.
    pub async fn tokens(&self, after: Option<TokenId>, limit: i64) -> StoreResult<Vec<TokenInfo>> {
        let rows = sqlx::query(&format!(
            "select {TOKEN_COLUMNS} from idem.tokens
              where ($1::uuid is null or id > $1) and revoked_at is null order by id limit $2"
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        rows.iter().map(token_info).collect()
    }

    /// Revokes a token (a second revocation keeps the first time); false
    /// when there is no such token.
    ///
    /// Every idem process hears of it when it commits (see `revocations`).
    pub async fn revoke_token(&self, id: TokenId) -> StoreResult<bool> {
        // language=PostgreSQL
        let revoked = sqlx::query(
            "with revoked as (
               update idem.tokens set revoked_at = coalesce(revoked_at, now()) where id = $1
               returning id)
             select pg_notify($2, id::text) from revoked",
        )
        .bind(id)
        .bind(REVOCATIONS_CHANNEL)
        .fetch_optional(&mut *self.acquire().await?)
        .await?;
        Ok(revoked.is_some())
    }

    /// Listens for token revocations, on a connection of its own (outside
    /// the pool, which it would otherwise hold one of for good).
    pub async fn revocations(&self) -> StoreResult<Revocations> {
        let options = self.pool.connect_options().as_ref().clone();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(REVOCATIONS_CHANNEL).await?;
        Ok(Revocations { listener })
    }
}

/// The channel `revoke_token` notifies, with the token's id.
const REVOCATIONS_CHANNEL: &str = "idem_token_revoked";

/// Token revocations as they commit, in any idem process.
pub struct Revocations {
    listener: PgListener,
}

impl Revocations {
    /// The next revoked token's id; `None` for a notice that names none.
    /// Fails when the connection is lost: revocations may have been missed.
    pub async fn next(&mut self) -> StoreResult<Option<TokenId>> {
        match self.listener.try_recv().await? {
            Some(notice) => Ok(notice.payload().parse().ok()),
            None => Err(StoreError::Unavailable(sqlx::Error::PoolClosed)),
        }
    }
}
