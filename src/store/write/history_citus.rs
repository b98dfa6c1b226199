//! `history::record_incoming` for a table on Citus. There, a history
//! insert's conflict condition cannot read the table's stored rows (a
//! shard's statement takes no subquery of another distributed table), and
//! Citus 13.2 crashed on the same work written as one statement of several
//! CTEs. So it is done in steps on the coordinator, each a statement Citus
//! plans simply: the versions a merge sent into a temporary table, the
//! stored rows of their keys beside them, each version told whether it is
//! its key's current row (a removal: whether the key is gone), then two
//! inserts into the history, one that may replace a version recorded at
//! the same instant and one that leaves it alone.

use sqlx::{PgConnection, Row};

use super::merge_sql::MergeSql;
use crate::ids::LoadId;
use crate::schema::{MergeMode, TableDef};
use crate::store::history::HistoryShape;
use crate::store::sql::{columns_equal, Ident, DELETED, LOAD_ID, ROW_HASH, VALID_FROM};
use crate::store::StoreResult;

const VERSIONS: &str = "idem_history_versions";
const STORED: &str = "idem_history_stored";

pub(super) async fn record_incoming(
    conn: &mut PgConnection,
    def: &TableDef,
    shape: &HistoryShape,
    sql: &MergeSql,
    mode: MergeMode,
) -> StoreResult<Vec<(LoadId, i64)>> {
    let steps = Steps::new(def, shape, sql, mode);
    sqlx::query(&steps.make_versions())
        .execute(&mut *conn)
        .await?;
    // The one statement that reads the merge's incoming rows (and binds
    // their arrays, when they came as arrays).
    sql.query(&steps.fill_versions())
        .execute(&mut *conn)
        .await?;
    for statement in steps.tell_current() {
        sqlx::query(&statement).execute(&mut *conn).await?;
    }
    let mut written: Vec<(LoadId, i64)> = Vec::new();
    for insert in [steps.insert(true), steps.insert(false)] {
        for row in sqlx::query(&insert).fetch_all(&mut *conn).await? {
            let (load_id, count): (LoadId, i64) = (row.try_get(0)?, row.try_get(1)?);
            match written.iter_mut().find(|(l, _)| *l == load_id) {
                Some((_, total)) => *total += count,
                None => written.push((load_id, count)),
            }
        }
    }
    for table in [VERSIONS, STORED] {
        sqlx::query(&format!("drop table {table}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(written)
}

/// The statements, written from the table's definition.
struct Steps<'a> {
    shape: &'a HistoryShape,
    sql: &'a MergeSql,
    mode: MergeMode,
    /// A stored row's identity: the version's key, and its cursor where
    /// the table keeps versions.
    identity: Vec<Ident>,
}

impl<'a> Steps<'a> {
    fn new(def: &TableDef, shape: &'a HistoryShape, sql: &'a MergeSql, mode: MergeMode) -> Self {
        let mut identity = shape.key.clone();
        if def.keeps_versions() {
            identity.push(shape.cursor.clone());
        }
        Steps {
            shape,
            sql,
            mode,
            identity,
        }
    }

    fn make_versions(&self) -> String {
        format!(
            "create temp table {VERSIONS} (like {} including defaults, current boolean) on commit drop",
            self.shape.table
        )
    }

    /// The versions the merge's incoming rows are.
    fn fill_versions(&self) -> String {
        let shape = self.shape;
        let valid_from = format!("coalesce(s.{}, {})", shape.cursor, shape.now());
        let (deleted, load_id) = (format!("s.{DELETED}"), format!("s.{LOAD_ID}"));
        let values = shape.version_values("s", &valid_from, &deleted, &load_id);
        format!(
            "insert into {VERSIONS} ({}) select {values} from {}",
            shape.columns(),
            self.sql.from_incoming
        )
    }

    /// The stored rows of the versions' keys, each version told whether
    /// it is its key's current row; under the modes that leave stored rows
    /// alone, only the versions the table holds as sent are kept.
    fn tell_current(&self) -> Vec<String> {
        let key = self.shape.key_list();
        let stored = self
            .identity
            .iter()
            .chain([&ROW_HASH])
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let key_match = columns_equal("t", "v", &self.shape.key);
        let mut statements = vec![
            format!(
                "create temp table {STORED} on commit drop as
                 select {stored} from {} t join (select distinct {key} from {VERSIONS}) v on {key_match}",
                self.sql.parent
            ),
            format!(
                "update {VERSIONS} v set current = case when v.{DELETED}
                    then not exists (select 1 from {STORED} t where {key_match})
                    else exists (select 1 from {STORED} t where {key_match} and t.{ROW_HASH} = v.{ROW_HASH}) end"
            ),
        ];
        if !matches!(self.mode, MergeMode::Merge | MergeMode::Patch) {
            statements.push(format!(
                "delete from {VERSIONS} v where v.{DELETED} or not exists
                   (select 1 from {STORED} t where {} and t.{ROW_HASH} = v.{ROW_HASH})",
                columns_equal("t", "v", &self.identity)
            ));
        }
        statements
    }

    /// Writes the versions that are (`current`) or are not their key's
    /// current row, one per key and instant, in key order; answers each
    /// load's versions written.
    fn insert(&self, current: bool) -> String {
        let shape = self.shape;
        let key = shape.key_list();
        let columns = shape.columns();
        let on_conflict = match current {
            true => shape.on_conflict(),
            false => "on conflict do nothing".to_string(),
        };
        let which = if current { "" } else { "not " };
        // language=PostgreSQL
        format!(
            "with written as (
               insert into {table} as h ({columns})
               select {columns} from (
                 select distinct on ({key}, {VALID_FROM}) * from {VERSIONS}
                  order by {key}, {VALID_FROM}, {DELETED}, {ROW_HASH}) v
                where {which}v.current
                order by {key}, {VALID_FROM}
               {on_conflict}
               returning h.{LOAD_ID})
             select {LOAD_ID}, count(*) from written group by 1",
            table = shape.table
        )
    }
}
