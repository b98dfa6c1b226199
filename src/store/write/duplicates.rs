//! Versions of one key in one body (`duplicates` policy): collapsed to one
//! (`keep_one`), or every version set aside (`hold`, `reject`); the versions
//! not written logged in `idem.duplicates` unless the table says not to.
//!
//! A POST resolves them in its transaction. A PUT resolves them in its
//! stage's transaction, which commits before the swap (and, for a keyed PUT,
//! before the key's transaction): its log rows are written then, and count
//! only once the load is in the ledger as published or unchanged, which
//! the swap's transaction records. A load that failed leaves log rows that
//! no list shows.

use std::collections::BTreeMap;

use sqlx::{PgConnection, Row};

use crate::ids::LoadId;
use crate::ingest::{BadRow, RowError};
use crate::schema::{DuplicatePolicy, TableDef};
use crate::store::duplicates_log::LOG_TABLE;
use crate::store::sql::{label_sql, logged_row, quote_literal, row_hash, Ident, ROW_HASH, ROW_ID};
use crate::store::{StoreError, StoreResult};

/// How a load's repeated keys are resolved.
#[derive(Clone, Copy, Debug)]
pub struct Resolve {
    pub policy: DuplicatePolicy,
    pub load_id: LoadId,
    /// Whether versions not written are logged.
    pub log: bool,
    /// Whether a repeated key refuses the whole load (`duplicates: reject`
    /// with bad rows refused); under a quarantine its versions are held
    /// and logged instead: they are valid rows, which no fix of the table
    /// makes fit, so there is nothing to replay.
    pub refuse: bool,
}

/// Most repeated keys a refusal lists.
const MAX_LISTED_KEYS: usize = 100;

/// Removes from `table` (a stage, or a POST's incoming rows) the versions
/// the policy does not write, logging them; returns their row hashes (to
/// take out of the content hash). Neither rule depends on arrival order.
pub async fn resolve(
    conn: &mut PgConnection,
    def: &TableDef,
    table: &Ident,
    how: Resolve,
) -> StoreResult<Vec<[u8; 32]>> {
    let removal = removal_sql(def, table, how.policy);
    let log = if how.log { log_sql() } else { String::new() };
    // The keys are read back only to be named in a refusal.
    let keys = if how.refuse {
        "key::text"
    } else {
        "null::text"
    };
    let rows = sqlx::query(&format!(
        "with {removal}{log} select {ROW_HASH}, {keys} as key from removed"
    ))
    .bind(def.name.as_str())
    .bind(how.load_id)
    .bind(how.policy.as_str())
    .fetch_all(conn)
    .await?;
    if how.refuse && !rows.is_empty() {
        return Err(repeated_keys(def, &rows));
    }
    rows.iter().map(|r| row_hash(r.try_get(0)?)).collect()
}

/// The statement's first steps: each key's versions ranked (the cursor's
/// largest first, then by row hash), and the versions `policy` does not
/// write deleted from `table`, answered as `removed`.
fn removal_sql(def: &TableDef, table: &Ident, policy: DuplicatePolicy) -> String {
    let order = match &def.cursor {
        Some(cursor) => format!("{} desc nulls last, {ROW_HASH}", Ident::column(cursor)),
        None => ROW_HASH.to_string(),
    };
    let (removed, kept) = match policy {
        DuplicatePolicy::KeepOne => ("r.version > 1", "r.winner"),
        DuplicatePolicy::Hold | DuplicatePolicy::Reject => ("r.versions > 1", "null::bytea"),
    };
    // language=PostgreSQL
    format!(
        "ranked as (
            select ctid as at, {ROW_ID}, row_number() over w as version,
                   count(*) over (partition by {ROW_ID}) as versions,
                   first_value({ROW_HASH}) over w as winner
              from {table}
            window w as (partition by {ROW_ID} order by {order})),
         removed as (
            delete from {table} _s using ranked r
             where _s.ctid = r.at and {removed}
         returning _s.{ROW_ID}, _s.{ROW_HASH}, {ds} as ds, {key} as key, {row} as row,
                   r.version, {kept} as kept)",
        ds = label_sql(def, "_s"),
        key = logged_key(def),
        row = logged_version(def),
    )
}

/// The key of row `_s` as the log keeps it, e.g. `{"order_id": 5}`; a
/// version's names its cursor too (`TableDef::identity`).
pub(crate) fn logged_key(def: &TableDef) -> String {
    let pairs = def
        .identity()
        .into_iter()
        .map(|c| format!("{}, _s.{}", quote_literal(c.as_str()), Ident::column(c)))
        .collect::<Vec<_>>()
        .join(", ");
    format!("jsonb_build_object({pairs})")
}

/// Row `_s`'s user columns as the log keeps them (`logged_row`, without
/// the system columns). `_s`: no user column is named like it, to be taken
/// for the row.
pub(super) fn logged_version(def: &TableDef) -> String {
    format!(
        "(select jsonb_object_agg(k, v) from jsonb_each({}) as e(k, v) where k not like '\\_%')",
        logged_row(def)
    )
}

/// The step that logs the removed versions (table `$1`, load `$2`, policy
/// `$3`).
fn log_sql() -> String {
    format!(
        ", logged as (
                insert into {LOG_TABLE} (table_name, load_id, ds, row_id, key, version, row, row_hash,
                                   kept_row_hash, policy)
                select $1, $2, ds, {ROW_ID}, key, version, row, {ROW_HASH}, kept, $3
                  from removed)"
    )
}

/// The refusal of a load whose body repeats keys: each key once, naming
/// its columns and how often it occurs (where the versions stand in the
/// body is not known by then, so no line is named: 0).
fn repeated_keys(def: &TableDef, removed: &[sqlx::postgres::PgRow]) -> StoreError {
    let mut versions: BTreeMap<String, u64> = BTreeMap::new();
    for row in removed {
        let key: String = row.try_get(1).unwrap_or_default();
        *versions.entry(key).or_default() += 1;
    }
    let column = def.primary_key.first().map(|c| c.to_string());
    let listed = versions
        .iter()
        .take(MAX_LISTED_KEYS)
        .map(|(key, n)| {
            BadRow::from(RowError {
                line: 0,
                record: 0,
                column: column.clone(),
                message: format!(
                    "the key {key} occurs {n} times in this body (duplicates: reject)"
                ),
            })
        })
        .collect();
    StoreError::RepeatedKeys {
        keys: u64::try_from(versions.len()).unwrap_or(u64::MAX),
        listed,
    }
}
