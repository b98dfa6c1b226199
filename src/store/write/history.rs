//! A write's versions recorded in its table's history (see
//! `store::history`), one statement in the write's own transaction: a
//! POST's incoming rows after its upsert, a swap's differences between the
//! live partition and its stage before the swap, a dropped partition's keys
//! as removals. Tables without history pay nothing: no statement runs.
//! `store::history::HistoryShape` says what a history table holds.

use crate::ids::LoadId;
use sqlx::{PgConnection, Row};

use super::merge_sql::MergeSql;
use crate::schema::{MergeMode, TableDef};
use crate::store::history::HistoryShape;
use crate::store::sql::{
    columns_equal, partition_key, Ident, DELETED, LOAD_ID, ROW_HASH, VALID_FROM,
};
use crate::store::StoreResult;

/// Records the incoming rows a merge read (`sql.from_incoming`) as
/// versions, after its upsert: under `merge` and `patch` (filled in) every
/// version sent, late ones included, and tombstones as removals at their
/// cursor (or now, without one); under the other modes the rows the table
/// now holds as sent (the ones written, or found written already).
/// Returns how many versions each load wrote (inserted or replaced),
/// counted in the statement: a late version changes the history and no
/// current row, and its write's receipt must still count it.
pub(super) async fn record_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    mode: MergeMode,
) -> StoreResult<Vec<(LoadId, i64)>> {
    let Some(shape) = HistoryShape::of(def) else {
        return Ok(Vec::new());
    };
    if def.distribution.needs_citus() {
        return super::history_citus::record_incoming(conn, def, &shape, sql, mode).await;
    }
    let insert = versions_sql(def, &shape, sql, mode);
    let written = sql.query(&insert).fetch_all(&mut *conn).await?;
    written
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// `record_incoming`'s statement: one insert, whose conflicts check the
/// stored rows.
fn versions_sql(def: &TableDef, shape: &HistoryShape, sql: &MergeSql, mode: MergeMode) -> String {
    let cursor = &shape.cursor;
    let valid_from = format!("coalesce(s.{cursor}, {})", shape.now());
    let (deleted, load_id) = (format!("s.{DELETED}"), format!("s.{LOAD_ID}"));
    let values = shape.version_values("s", &valid_from, &deleted, &load_id);
    let filter = match mode {
        MergeMode::Merge | MergeMode::Patch => "true".to_string(),
        MergeMode::InsertMissing | MergeMode::Append | MergeMode::Versions => {
            stored_as_sent(def, sql)
        }
    };
    let key = shape.key_list();
    // In key order, as the upsert locked its keys: two writers wait for
    // each other's versions of a key in one order, and cannot deadlock.
    // language=PostgreSQL
    format!(
        "with written as (
           insert into {} as h ({})
           select distinct on ({key}, {VALID_FROM}) *
             from (select {values} from {} where {filter}) v
            order by {key}, {VALID_FROM}
           {}
           returning h.{LOAD_ID})
         select {LOAD_ID}, count(*) from written group by 1",
        shape.table,
        shape.columns(),
        sql.from_incoming,
        shape.on_conflict_if_current(&sql.parent)
    )
}

/// Whether incoming row `s` is stored as it was sent: a row of the same
/// identity and hash is in the table.
fn stored_as_sent(def: &TableDef, sql: &MergeSql) -> String {
    let identity: Vec<String> = std::iter::once(partition_key(def))
        .chain(def.identity().into_iter().map(Ident::column))
        .map(|c| format!("t.{c} = s.{c}"))
        .collect();
    format!(
        "not s.{DELETED} and exists (select 1 from {} t where {} and t.{ROW_HASH} = s.{ROW_HASH})",
        sql.parent,
        identity.join(" and ")
    )
}

/// The partition a swap replaces and the stage it is replaced with (either
/// may be absent: a new partition, a dropped one).
pub(crate) struct Replacement<'a> {
    pub live: Option<&'a Ident>,
    pub stage: Option<&'a Ident>,
    pub load_id: LoadId,
}

/// Records what replacing `live` by `stage` changes, before the swap: each
/// staged row that is not in the live partition as it is (a new key, or a
/// new content) is a version; each key of the live partition that the stage
/// lacks is removed, just after its latest version or now, whichever is
/// later.
pub(crate) async fn record_replacement(
    conn: &mut PgConnection,
    def: &TableDef,
    replacement: Replacement<'_>,
) -> StoreResult<()> {
    let Some(shape) = HistoryShape::of(def) else {
        return Ok(());
    };
    let Replacement {
        live,
        stage,
        load_id,
    } = replacement;
    let parts: Vec<String> = [
        stage.map(|stage| new_versions(def, &shape, stage, live)),
        live.map(|live| removals(&shape, live, stage)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        return Ok(());
    }
    let key = shape.key_list();
    // language=PostgreSQL
    let insert = format!(
        "insert into {} as h ({})
         select * from ({}) v order by {key}, {VALID_FROM}
         {}",
        shape.table,
        shape.columns(),
        parts.join(" union all "),
        shape.on_conflict()
    );
    sqlx::query(&insert)
        .bind(load_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// The staged rows that are not in the live partition as they are (a new
/// key, or a new content), as versions of load `$1`.
fn new_versions(
    def: &TableDef,
    shape: &HistoryShape,
    stage: &Ident,
    live: Option<&Ident>,
) -> String {
    let values = shape.version_values("s", &format!("s.{}", shape.cursor), "false", "$1::uuid");
    let unchanged = live.map_or(String::new(), |live| {
        let identity: Vec<Ident> = std::iter::once(partition_key(def))
            .chain(def.identity().into_iter().map(Ident::column))
            .collect();
        format!(
            "where not exists (select 1 from {live} p where {} and p.{ROW_HASH} = s.{ROW_HASH})",
            columns_equal("p", "s", &identity)
        )
    });
    format!("select {values} from {stage} s {unchanged}")
}

/// The keys of the live partition the stage lacks, each removed just after
/// its latest version (or now), by load `$1`.
fn removals(shape: &HistoryShape, live: &Ident, stage: Option<&Ident>) -> String {
    let cursor = &shape.cursor;
    let key = shape.key_list();
    let values = shape.version_values(
        "p",
        &shape.after(&format!("p.{cursor}")),
        "true",
        "$1::uuid",
    );
    let kept = stage.map_or(String::new(), |stage| {
        format!(
            "where not exists (select 1 from {stage} s where {})",
            columns_equal("p", "s", &shape.key)
        )
    });
    format!(
        "select {values} from (select distinct on ({key}) * from {live} p {kept}
                                order by {key}, {cursor} desc) p"
    )
}
