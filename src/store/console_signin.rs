//! The console's count of failed sign-ins (`idem.console_signin_failures`):
//! a row a client address and one for all of them (`OVERALL`), each with
//! its failures since its window started. Every attempt takes a turn (a
//! failure counted in advance) in one statement that refuses it past the
//! limit, so that attempts arriving at once cannot all pass a check made
//! before any of them failed; a sign-in that succeeds gives its turn back.

use std::time::Duration;

use sqlx::Row;

use super::{Store, StoreResult};

/// The row that counts the failures of every address together.
pub const OVERALL: &str = "*";

/// How many failures a window allows, and how long it lasts.
#[derive(Clone, Copy, Debug)]
pub struct SigninLimits {
    pub per_address: u32,
    pub overall: u32,
    pub window: Duration,
}

/// What a sign-in attempt was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SigninTurn {
    /// It may try its token (its failure is counted already).
    Taken,
    /// Its address failed too often within the window: until it ends.
    AddressLimited { retry_after: Duration },
    /// All addresses together did.
    OverallLimited { retry_after: Duration },
}

impl Store {
    /// Takes a turn to sign in for `client` (and for all addresses), both
    /// or neither, after sweeping the windows that are over.
    /// The address's row and then the overall one, always in that order, so
    /// that two attempts never wait for each other in a circle.
    pub async fn take_signin_turn(
        &self,
        client: &str,
        limits: SigninLimits,
    ) -> StoreResult<SigninTurn> {
        let window_secs = i64::try_from(limits.window.as_secs()).unwrap_or(i64::MAX);
        self.sweep_signin_failures(window_secs).await?;
        let mut tx = self.begin().await?;
        for (key, limit) in [(client, limits.per_address), (OVERALL, limits.overall)] {
            if let Some(retry_after) = take(&mut tx, key, limit, window_secs).await? {
                // The transaction rolls back: the address's turn too.
                return Ok(match key {
                    OVERALL => SigninTurn::OverallLimited { retry_after },
                    _ => SigninTurn::AddressLimited { retry_after },
                });
            }
        }
        tx.commit().await?;
        Ok(SigninTurn::Taken)
    }

    /// Deletes the addresses' rows whose window is over (the overall row
    /// only ever starts anew). On its own, skipping rows another sign-in
    /// holds: it never waits, so it never takes part in a deadlock.
    async fn sweep_signin_failures(&self, window_secs: i64) -> StoreResult<()> {
        // language=PostgreSQL
        sqlx::query(
            "delete from idem.console_signin_failures where client in (
                 select client from idem.console_signin_failures
                  where window_start <= now() - $1 * interval '1 second' and client <> $2
                  for update skip locked)",
        )
        .bind(window_secs)
        .bind(OVERALL)
        .execute(&mut *self.acquire().await?)
        .await?;
        Ok(())
    }

    /// Gives back the turn of a sign-in that succeeded: it was no failure.
    pub async fn give_back_signin_turn(&self, client: &str) -> StoreResult<()> {
        // language=PostgreSQL
        sqlx::query(
            "update idem.console_signin_failures set failures = failures - 1
              where client = any($1) and failures > 0",
        )
        .bind(&[client, OVERALL][..])
        .execute(&mut *self.acquire().await?)
        .await?;
        Ok(())
    }
}

/// Counts one more failure on `key` unless it has `limit` in its window
/// already (a window that is over starts anew): `None` when counted, else
/// how long until its window ends.
async fn take(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    key: &str,
    limit: u32,
    window_secs: i64,
) -> StoreResult<Option<Duration>> {
    // language=PostgreSQL
    let counted = sqlx::query(
        "insert into idem.console_signin_failures as f (client, window_start, failures)
         values ($1, now(), 1)
         on conflict (client) do update
            set failures = case when f.window_start <= now() - $3 * interval '1 second'
                                then 1 else f.failures + 1 end,
                window_start = case when f.window_start <= now() - $3 * interval '1 second'
                                    then now() else f.window_start end
          where f.window_start <= now() - $3 * interval '1 second' or f.failures < $2
         returning 1",
    )
    .bind(key)
    .bind(i64::from(limit))
    .bind(window_secs)
    .fetch_optional(&mut **tx)
    .await?;
    if counted.is_some() {
        return Ok(None);
    }
    // language=PostgreSQL
    let row = sqlx::query(
        "select ceil(extract(epoch from window_start + $2 * interval '1 second' - now()))::bigint
                as wait
           from idem.console_signin_failures where client = $1",
    )
    .bind(key)
    .bind(window_secs)
    .fetch_one(&mut **tx)
    .await?;
    let wait: i64 = row.try_get("wait")?;
    Ok(Some(Duration::from_secs(
        u64::try_from(wait).unwrap_or(0).max(1),
    )))
}
