//! Idempotency keys: claimed by inserting their row at the start of a keyed
//! write, in the write's own transaction. The primary key does the locking:
//! a second request with the same key waits on the first one's uncommitted
//! row (bounded by `lock_timeout`) and then sees it completed, or takes the
//! key over if the first one rolled back.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, Postgres, Row, Transaction};

use super::locks::lock_key;
use super::sql::array_params;
use super::{Store, StoreError, StoreResult};
use crate::idempotency::{IdempotencyKey, OnCompleted, StoredAnswer, StoredKey};
use crate::ids::LoadId;
use crate::ids::Principal;
use crate::names::TableName;
use crate::schema::TableDef;

pub enum Claim {
    /// The key is ours: write in this transaction, then `complete` and
    /// commit. With the definition of the table asked for, if declared.
    Fresh(Transaction<'static, Postgres>, Option<TableDef>),
    /// The key was used by a completed request.
    Completed(StoredKey),
    /// The key was used by a completed request, and the claimer asked to
    /// hold it (`OnCompleted::Hold`): its lock is held in this transaction,
    /// where the request may run again (`renew_key`) or be let go.
    Held(Transaction<'static, Postgres>, StoredKey),
}

/// What `GET /idempotency-keys/{key}` can find.
pub enum KeyState {
    Completed(StoredKey),
    InFlight,
    Absent,
}

fn is_lock_timeout(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03"))
}

const STORED_KEY_SQL: &str =
    "select principal, key, fingerprint, load_id, response_status, response_body,
        response_etag, created_at, expires_at
   from idem.idempotency_keys where principal = $1 and key = $2";

/// `Store::begin_bounded` on a connection the caller keeps.
pub async fn begin_bounded_on(
    conn: &mut PgConnection,
    wait: Duration,
) -> StoreResult<Transaction<'_, Postgres>> {
    Ok(Transaction::begin(conn, Some(bounded_begin(wait).into())).await?)
}

/// A transaction's begin, its lock waits bounded by `wait`.
fn bounded_begin(wait: Duration) -> String {
    format!(
        "begin; set local lock_timeout = {}",
        wait.as_millis().max(1)
    )
}

/// The advisory lock every claimer of a key takes before it inserts the
/// key's row: so that no insert of a key row ever waits for another's, and
/// a batch can skip the keys in flight (`claim_keys`) instead of waiting.
pub fn key_lock(principal: &Principal, key: &str) -> i64 {
    lock_key("idempotency-key", &[&principal.to_string(), key])
}

/// Takes the key's lock (waiting, within the transaction's `lock_timeout`,
/// for a request in flight with it), then inserts the key's placeholder
/// row; an expired row is taken over. Returns whether the key is ours, and
/// the definition of `table` (when asked for and declared), read by the
/// same statement to spare the write a round trip.
async fn insert_placeholder(
    conn: &mut PgConnection,
    principal: &Principal,
    key: &str,
    table: Option<&TableName>,
    retention: Duration,
) -> Result<(bool, Option<TableDef>), sqlx::Error> {
    // language=PostgreSQL
    let (fresh, def): (bool, Option<Json<TableDef>>) = sqlx::query_as(
        "with claimed as (
           insert into idem.idempotency_keys as k
                  (principal, key, fingerprint, response_status, response_body, expires_at)
           select $1, $2, '', 0, 'null', now() + make_interval(secs => $5)
             from (select pg_advisory_xact_lock($4)) locked
           on conflict (principal, key) do update
              set fingerprint = '', response_status = 0, response_body = 'null', load_id = null,
                  created_at = now(), expires_at = excluded.expires_at
            where k.expires_at < now()
           returning 1)
         select exists (select from claimed),
                (select definition from idem.tables where name = $3)",
    )
    .bind(principal)
    .bind(key)
    .bind(table.map(TableName::as_str))
    .bind(key_lock(principal, key))
    .bind(retention.as_secs_f64())
    .fetch_one(conn)
    .await?;
    Ok((fresh, def.map(|d| d.0)))
}

/// What `claim_keys` found of a batch's keys.
pub struct ClaimedKeys {
    /// The keys claimed: the batch writes their requests.
    pub claimed: HashSet<(Principal, String)>,
    /// The keys found completed (and live), with their stored answers: their
    /// requests are replays, answered without a write.
    pub completed: HashMap<(Principal, String), StoredKey>,
    /// The tables' definitions as they are now, by name (a table not
    /// declared is not there).
    pub defs: HashMap<String, TableDef>,
}

/// Claims, in the caller's transaction, every key of `keys` that is neither
/// in flight elsewhere (its lock taken: skipped, not waited for) nor
/// completed (its row live: handed back with its stored answer); and reads
/// the definitions of `tables` as they are now, all in one statement.
///
/// A claimed key's lock is the claim: no row is written for it until its
/// completion (`complete_sql`), which inserts the completed row at once
/// instead of a placeholder and then its update. A key completed by a
/// transaction that committed after this statement's snapshot but before
/// its lock was taken looks absent here; its completion then finds the live
/// row, writes nothing, and fails the transaction (`close_rows_writes`), so
/// the request is never run twice. The keys must differ (a transaction
/// holds a lock it took twice).
pub async fn claim_keys(
    conn: &mut PgConnection,
    keys: &[(&Principal, &IdempotencyKey)],
    tables: &[&TableName],
) -> StoreResult<ClaimedKeys> {
    let principals: Vec<String> = keys.iter().map(|(p, _)| p.to_string()).collect();
    let names: Vec<&str> = keys.iter().map(|(_, k)| k.as_str()).collect();
    let locks: Vec<i64> = keys.iter().map(|(p, k)| key_lock(p, k.as_str())).collect();
    // language=PostgreSQL
    type Claimed = (
        Vec<Principal>,
        Vec<String>,
        Json<Vec<StoredKey>>,
        Json<HashMap<String, TableDef>>,
    );
    let tables: Vec<&str> = tables.iter().map(|t| t.as_str()).collect();
    let (principals, keys, completed, defs): Claimed = sqlx::query_as(
        "with free as (
           select v.principal, v.key
             from unnest($1::text[], $2::text[], $3::bigint[]) v(principal, key, lock)
            where pg_try_advisory_xact_lock(v.lock)),
         completed as (
           select k.principal, k.key, k.fingerprint, k.load_id, k.response_status,
                  k.response_body, k.response_etag, k.created_at, k.expires_at
             from idem.idempotency_keys k join free using (principal, key)
            where k.expires_at >= now() and k.fingerprint <> ''),
         claimed as (
           select principal, key from free
            where (principal, key) not in (select principal, key from completed))
         select coalesce((select array_agg(principal order by principal, key) from claimed), '{}'),
                coalesce((select array_agg(key order by principal, key) from claimed), '{}'),
                coalesce((select json_agg(completed) from completed), '[]'),
                (select coalesce(json_object_agg(name, definition), '{}')
                   from idem.tables where name = any($4::text[]))",
    )
    .bind(principals)
    .bind(names)
    .bind(locks)
    .bind(tables)
    .fetch_one(conn)
    .await?;
    Ok(ClaimedKeys {
        claimed: principals.into_iter().zip(keys).collect(),
        completed: completed
            .0
            .into_iter()
            .map(|stored| ((stored.principal.clone(), stored.key.clone()), stored))
            .collect(),
        defs: defs.0,
    })
}

impl Store {
    /// Claims `key` for `principal`, waiting up to `wait` for a request in
    /// flight with the same key (then 409).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn claim_key(
        &self,
        principal: &Principal,
        key: &IdempotencyKey,
        wait: Duration,
        table: Option<&TableName>,
        retention: Duration,
        on_completed: OnCompleted,
    ) -> StoreResult<Claim> {
        let mut tx = self.begin_bounded(wait).await?;
        match insert_placeholder(&mut tx, principal, key.as_str(), table, retention).await {
            Ok((true, def)) => Ok(Claim::Fresh(tx, def)),
            Ok((false, _)) => {
                let stored: StoredKey = sqlx::query_as(STORED_KEY_SQL)
                    .bind(principal)
                    .bind(key.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                if on_completed == OnCompleted::Hold {
                    return Ok(Claim::Held(tx, stored));
                }
                tx.rollback().await?;
                Ok(Claim::Completed(stored))
            }
            Err(e) if is_lock_timeout(&e) => Err(StoreError::KeyInFlight {
                retry_after: wait.max(Duration::from_secs(1)),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// A transaction whose lock waits end after `wait` (then `busy`, or
    /// `KeyInFlight` for a key's), begun in one round trip. The bound covers
    /// the write's every wait (its key, its partitions, its rows);
    /// `unbound_lock_waits` lifts it.
    pub async fn begin_bounded(
        &self,
        wait: Duration,
    ) -> StoreResult<Transaction<'static, Postgres>> {
        let conn = self.acquire().await?;
        Ok(Transaction::begin(conn, Some(bounded_begin(wait).into())).await?)
    }

    /// `completed_key`, and the definition of `table` read by the same
    /// statement (a write needs it next).
    pub async fn completed_key_and_table(
        &self,
        principal: &Principal,
        key: &IdempotencyKey,
        table: &TableName,
    ) -> StoreResult<(Option<StoredKey>, Option<TableDef>)> {
        if let Some(stored) = self.completed.get(principal, key) {
            return Ok((Some(stored), None));
        }
        // language=PostgreSQL
        let row = sqlx::query(&format!(
            "select k.*, (select definition from idem.tables where name = $3) as definition
               from (select 1) one left join ({STORED_KEY_SQL}) k on true"
        ))
        .bind(principal)
        .bind(key.as_str())
        .bind(table.as_str())
        .fetch_one(&mut *self.acquire().await?)
        .await?;
        let def: Option<Json<TableDef>> = row.try_get("definition")?;
        let stored = match row.try_get::<Option<Principal>, _>("principal")? {
            Some(_) => Some(StoredKey::from_row(&row)?),
            None => None,
        };
        Ok((self.live_completed(stored), def.map(|d| d.0)))
    }

    /// A completed key read from the table, if live (and then remembered).
    fn live_completed(&self, stored: Option<StoredKey>) -> Option<StoredKey> {
        let stored = stored.filter(|s| s.expires_at > Utc::now() && !s.fingerprint.is_empty());
        if let Some(stored) = &stored {
            self.completed.remember(stored.clone());
        }
        stored
    }

    /// The key's completed request, if there is one and it has not expired:
    /// from memory when this process has seen it completed, else one read,
    /// the whole cost of a replay.
    pub async fn completed_key(
        &self,
        principal: &Principal,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<StoredKey>> {
        if let Some(stored) = self.completed.get(principal, key) {
            return Ok(Some(stored));
        }
        let mut conn = self.acquire().await?;
        self.completed_key_now(&mut conn, principal, key).await
    }

    /// The key's completed request as the table holds it now, read on
    /// `conn`, never from memory: for a PUT's key, which a rerun under it
    /// (see `pipeline::keyed::key`) may have moved on in another process.
    pub async fn completed_key_now(
        &self,
        conn: &mut PgConnection,
        principal: &Principal,
        key: &IdempotencyKey,
    ) -> StoreResult<Option<StoredKey>> {
        let stored: Option<StoredKey> = sqlx::query_as(STORED_KEY_SQL)
            .bind(principal)
            .bind(key.as_str())
            .fetch_optional(conn)
            .await?;
        Ok(self.live_completed(stored))
    }

    /// The key's completed request, if this process remembers it.
    pub fn remembered_key(&self, principal: &Principal, key: &IdempotencyKey) -> Option<StoredKey> {
        self.completed.get(principal, key)
    }

    /// Remembers a key whose completion has committed.
    pub fn remember_completed(&self, stored: StoredKey) {
        self.completed.remember(stored);
    }

    pub async fn key_state(
        &self,
        principal: &Principal,
        key: &IdempotencyKey,
    ) -> StoreResult<KeyState> {
        if let Some(stored) = self.completed_key(principal, key).await? {
            return Ok(KeyState::Completed(stored));
        }
        // Not committed: either absent or held by a request in flight, which
        // only a write attempt can tell.
        let mut tx = self.begin().await?;
        sqlx::query("set local lock_timeout = 50")
            .execute(&mut *tx)
            .await?;
        let state = match insert_placeholder(&mut tx, principal, key.as_str(), None, Duration::ZERO)
            .await
        {
            Ok(_) => KeyState::Absent,
            Err(e) if is_lock_timeout(&e) => KeyState::InFlight,
            Err(e) => return Err(e.into()),
        };
        let _ = tx.rollback().await;
        Ok(state)
    }

    /// Deletes expired keys, a batch at a time; `skip locked` lets several
    /// idem processes reap side by side. Returns how many went.
    pub async fn reap_keys(&self) -> StoreResult<u64> {
        let mut total = 0;
        loop {
            // language=PostgreSQL
            let n = sqlx::query(
                "delete from idem.idempotency_keys where ctid in (
                   select ctid from idem.idempotency_keys where expires_at < now()
                    limit 1000 for update skip locked)",
            )
            .execute(&mut *self.acquire().await?)
            .await?
            .rows_affected();
            total += n;
            if n < 1000 {
                return Ok(total);
            }
        }
    }
}

/// A completed request, as its key keeps it.
#[derive(Clone, Debug)]
pub struct Completion<'a> {
    pub principal: &'a Principal,
    pub key: &'a IdempotencyKey,
    pub fingerprint: &'a str,
    pub load_id: Option<LoadId>,
    pub status: u16,
    pub body: &'a serde_json::Value,
    pub etag: Option<&'a str>,
    pub retention: Duration,
}

impl Completion<'_> {
    /// The key as stored once completed, its retention counted from
    /// `claimed_at` (taken before the claim: no later than the database's
    /// clock counts it, so the copy never outlives the row).
    pub fn stored(&self, claimed_at: DateTime<Utc>) -> StoredKey {
        StoredKey {
            principal: self.principal.clone(),
            key: self.key.as_str().to_string(),
            fingerprint: self.fingerprint.to_string(),
            load_id: self.load_id,
            response_status: i32::from(self.status),
            response_body: StoredAnswer::new(self.body.clone()),
            response_etag: self.etag.map(str::to_string),
            created_at: claimed_at,
            expires_at: claimed_at
                + chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::zero()),
        }
    }
}

/// Lifts the bound `Store::claim_key` puts on lock waits, for a write that
/// may wait as long as it must (a swap waits for readers of its partition).
pub async fn unbound_lock_waits(conn: &mut PgConnection) -> StoreResult<()> {
    sqlx::query("set local lock_timeout to default")
        .execute(conn)
        .await?;
    Ok(())
}

/// A held key (`Claim::Held`) about to be completed again: its retention
/// starts over, as for a key claimed afresh, and it is a placeholder again
/// (an empty fingerprint), which the completion then replaces with its
/// record. Until the transaction commits, others see the old record.
pub async fn renew_key(
    conn: &mut PgConnection,
    principal: &Principal,
    key: &IdempotencyKey,
    retention: Duration,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "update idem.idempotency_keys
            set fingerprint = '', created_at = now(), expires_at = now() + make_interval(secs => $3)
          where principal = $1 and key = $2",
    )
    .bind(principal)
    .bind(key.as_str())
    .bind(retention.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the completed request in the claiming transaction.
pub async fn complete_key(conn: &mut PgConnection, done: &Completion<'_>) -> StoreResult<()> {
    let completed = bind_completions(sqlx::query(&complete_sql(1)), std::slice::from_ref(done))
        .execute(conn)
        .await?
        .rows_affected();
    all_completed(completed, 1)
}

/// Whether a completion statement completed all `expected` keys: a key it
/// found completed by another request (see `claim_keys`) fails the
/// transaction, whose requests then run again, each under its own claim.
pub(super) fn all_completed(completed: u64, expected: usize) -> StoreResult<()> {
    if usize::try_from(completed).ok() == Some(expected) {
        return Ok(());
    }
    Err(StoreError::KeyInFlight {
        retry_after: Duration::from_secs(1),
    })
}

/// The statement completing keys (one per element of its array parameters),
/// its parameters numbered from `first` (see `store::write::closing`).
pub(super) fn complete_sql(first: usize) -> String {
    let types = [
        "text", "text", "text", "uuid", "integer", "jsonb", "text", "float8",
    ];
    let arrays = array_params(first, &types);
    // An upsert: a key claimed by its lock alone (a batch's) is inserted
    // completed; one claimed with a placeholder (a write alone's, made by
    // this transaction: the only row with an empty fingerprint) or expired
    // is overwritten; a live completed row, another request's, is left as
    // it is (and not counted: `all_completed`). The placeholder holds the
    // same `created_at` and `expires_at` (`now()` is the same all through
    // the transaction), so no indexed column changes and its update can
    // stay on its page, without new index entries.
    // language=PostgreSQL
    format!(
        "insert into idem.idempotency_keys as k
                (principal, key, fingerprint, load_id, response_status, response_body,
                 response_etag, created_at, expires_at)
         select v.principal, v.key, v.fingerprint, v.load_id, v.status, v.body, v.etag, now(),
                now() + make_interval(secs => v.retention)
           from unnest({arrays}) v(principal, key, fingerprint, load_id, status, body, etag, retention)
         on conflict (principal, key) do update
            set fingerprint = excluded.fingerprint, load_id = excluded.load_id,
                response_status = excluded.response_status, response_body = excluded.response_body,
                response_etag = excluded.response_etag, created_at = excluded.created_at,
                expires_at = excluded.expires_at
          where k.fingerprint = '' or k.expires_at < now()"
    )
}

/// Binds `done` to the parameters of `complete_sql`, a column at a time.
pub(super) fn bind_completions<'q>(
    query: Query<'q, Postgres, PgArguments>,
    done: &[Completion<'_>],
) -> Query<'q, Postgres, PgArguments> {
    let text = |f: &dyn Fn(&Completion<'_>) -> Option<String>| -> Vec<Option<String>> {
        done.iter().map(f).collect()
    };
    query
        .bind(text(&|d| Some(d.principal.to_string())))
        .bind(text(&|d| Some(d.key.to_string())))
        .bind(text(&|d| Some(d.fingerprint.to_string())))
        .bind(done.iter().map(|d| d.load_id).collect::<Vec<_>>())
        .bind(done.iter().map(|d| i32::from(d.status)).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.body.clone()).collect::<Vec<_>>())
        .bind(text(&|d| d.etag.map(str::to_string)))
        .bind(
            done.iter()
                .map(|d| d.retention.as_secs_f64())
                .collect::<Vec<_>>(),
        )
}
