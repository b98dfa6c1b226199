//! A versions write's rows whose version (key and cursor) is stored already
//! with other content: conflicts. A version is written once and never
//! changed, so its load is refused for them (`bad_rows: reject`), or they
//! are held in the duplicates log under the policy `conflict`
//! (`quarantine`), the stored version named as the one kept.

use sqlx::{PgConnection, Row};

use super::duplicates::{logged_key, logged_version};
use super::merge_sql::MergeSql;
use crate::ingest::{BadRow, RowError};
use crate::schema::TableDef;
use crate::store::duplicates_log::LOG_TABLE;
use crate::store::sql::{label_sql, DELETED, LOAD_ID, ROW_HASH, ROW_ID};
use crate::store::{StoreError, StoreResult};

/// The policy a held conflict is logged under.
pub const CONFLICT_POLICY: &str = "conflict";

/// Most conflicting versions a refusal lists.
const MAX_LISTED: usize = 100;

/// The incoming versions stored by another load with another row hash, as
/// the CTE `conflicting`, with the stored hash beside them
/// (`_stored_hash`: a system name, so the logged row leaves it out).
/// Materialized first, so that the functions that print them run on the
/// coordinator (Citus runs only immutable ones on a distributed table's
/// shards).
fn conflicting(sql: &MergeSql) -> String {
    let MergeSql {
        parent,
        join,
        from_incoming,
        ..
    } = sql;
    // language=PostgreSQL
    format!(
        "conflicting as materialized (
           select s.*, t.{ROW_HASH} as \"_stored_hash\"
             from {from_incoming} join {parent} t on {join} and t.{LOAD_ID} <> s.{LOAD_ID}
            where not s.{DELETED} and t.{ROW_HASH} <> s.{ROW_HASH})"
    )
}

/// The refusal of a load that carries `count` conflicting versions: the
/// first of them (by key) listed as bad rows, each naming its key and
/// cursor (where it stands in the body is not known by then: line 0).
pub(super) async fn refusal(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    count: u64,
) -> StoreResult<StoreError> {
    let list = format!(
        "with {conflicting} select {key}::text from conflicting _s order by 1 limit {MAX_LISTED}",
        key = logged_key(def),
        conflicting = conflicting(sql),
    );
    let rows = sql.query(&list).fetch_all(&mut *conn).await?;
    let column = def.cursor.as_ref().map(|c| c.to_string());
    let listed = rows
        .iter()
        .map(|row| {
            let version: String = row.try_get(0)?;
            Ok(BadRow::from(RowError {
                line: 0,
                record: 0,
                column: column.clone(),
                message: format!(
                    "the version {version} is stored already with other content; a version is written once and never changed"
                ),
            }))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok(StoreError::ConflictingVersions {
        versions: count,
        listed,
    })
}

/// Holds the conflicting versions in the duplicates log (policy
/// `conflict`, the stored version's hash as the one kept); returns how many.
pub(super) async fn hold(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
) -> StoreResult<u64> {
    let table_param = sql.next_param();
    // language=PostgreSQL
    let log = format!(
        "with {conflicting}
         insert into {LOG_TABLE} (table_name, load_id, ds, row_id, key, version, row, row_hash,
                                 kept_row_hash, policy)
         select ${table_param}, _s.{LOAD_ID}, {ds}, _s.{ROW_ID}, {key}, 1, {row},
                _s.{ROW_HASH}, _s.\"_stored_hash\", '{CONFLICT_POLICY}'
           from conflicting _s",
        ds = label_sql(def, "_s"),
        key = logged_key(def),
        row = logged_version(def),
        conflicting = conflicting(sql),
    );
    let done = sql
        .query(&log)
        .bind(def.name.as_str())
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}
