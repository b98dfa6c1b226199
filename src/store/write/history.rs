//! A write's versions recorded in its table's history (see
//! `store::history`), one statement in the write's own transaction: a
//! POST's incoming rows after its upsert, a swap's differences between the
//! live partition and its stage before the swap, a dropped partition's keys
//! as removals. Tables without history pay nothing: no statement runs.
//! `HistoryShape` says what a history table holds, for these statements and
//! for `store::history`, which makes and reads the tables.

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::merge_sql::MergeSql;
use crate::names::ColumnName;
use crate::schema::{ColumnType, MergeMode, TableDef};
use crate::store::sql::{self, history_table, partition_key, Ident, PART_COLUMN};
use crate::store::StoreResult;

/// A history table's shape, from its table's definition.
pub(crate) struct HistoryShape {
    pub table: Ident,
    /// A version's key: the partition key (a partitioned table's), then the
    /// primary key.
    pub key: Vec<Ident>,
    pub cursor: Ident,
    pub cursor_type: ColumnType,
    /// The user columns, and whether a removal keeps their value (the key,
    /// the partition column and the cursor).
    pub user: Vec<(Ident, ColumnType, bool)>,
    /// `_part`, where the table's partitions are keyed by it.
    pub part: Option<(Ident, ColumnType)>,
}

impl HistoryShape {
    /// The shape of `def`'s history; none when it keeps none.
    pub fn of(def: &TableDef) -> Option<HistoryShape> {
        def.history?;
        let cursor_name = def.cursor.as_ref()?;
        let cursor_type = def.column(cursor_name)?.ty;
        let mut key = Vec::new();
        if !def.is_plain() {
            key.push(partition_key(def));
        }
        for column in def.primary_key.iter().map(Ident::column) {
            if !key.contains(&column) {
                key.push(column);
            }
        }
        let kept = |name: &ColumnName| {
            def.primary_key.contains(name)
                || def.partition_by.as_ref() == Some(name)
                || name == cursor_name
        };
        let user = def
            .columns
            .iter()
            .map(|c| (Ident::column(&c.name), c.ty, kept(&c.name)))
            .collect();
        let part = (!def.is_plain() && def.keyed_by_part())
            .then(|| (Ident::system(PART_COLUMN), def.partition_type()));
        Some(HistoryShape {
            table: history_table(&def.name),
            key,
            cursor: Ident::column(cursor_name),
            cursor_type,
            user,
            part,
        })
    }

    /// The key's columns, comma-separated.
    pub fn key_list(&self) -> String {
        sql::join(&self.key)
    }

    /// The columns a recorded version fills, in the order `version_values`
    /// gives them.
    pub fn columns(&self) -> String {
        sql::join(&self.column_idents())
    }

    fn column_idents(&self) -> Vec<Ident> {
        let mut columns: Vec<Ident> = self.user.iter().map(|(c, _, _)| c.clone()).collect();
        columns.extend(self.part.iter().map(|(c, _)| c.clone()));
        columns.extend(["_valid_from", "_deleted", "_load_id", "_row_hash"].map(Ident::system));
        columns
    }

    /// A version of row `alias` as the values `columns` names: valid from
    /// `valid_from` (which is also its cursor), a removal where `deleted`
    /// holds (keeping only the key, partition column and cursor), written by
    /// `load_id`. Each value is named after its column.
    pub fn version_values(
        &self,
        alias: &str,
        valid_from: &str,
        deleted: &str,
        load_id: &str,
    ) -> String {
        let mut values: Vec<String> = self
            .user
            .iter()
            .map(|(c, _, kept)| match (c == &self.cursor, kept) {
                (true, _) => format!("{valid_from} as {c}"),
                (false, true) => format!("{alias}.{c}"),
                (false, false) => {
                    format!("case when {deleted} then null else {alias}.{c} end as {c}")
                }
            })
            .collect();
        values.extend(self.part.iter().map(|(c, _)| format!("{alias}.{c}")));
        values.push(format!("{valid_from} as \"_valid_from\""));
        values.push(format!("{deleted} as \"_deleted\""));
        values.push(format!("{load_id} as \"_load_id\""));
        values.push(format!(
            "case when {deleted} then null else {alias}.\"_row_hash\" end as \"_row_hash\""
        ));
        values.join(", ")
    }

    /// An insert's end: a version already recorded at the same instant with
    /// the same hash stays as it is; another content replaces it (the latest
    /// write wins, as the `>=` cursor rule of the current rows has it).
    pub fn on_conflict(&self) -> String {
        self.on_conflict_where("true")
    }

    /// `on_conflict` for versions a POST sent: a recorded version takes the
    /// other content only where that content is now the key's current row
    /// (a merge replaced it at an equal cursor), or a removal where the key
    /// is gone. A late version the current row did not take leaves the
    /// recorded one as it was: a past version is never rewritten silently.
    pub fn on_conflict_if_current(&self, parent: &Ident) -> String {
        let key = self
            .key
            .iter()
            .map(|c| format!("t.{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(" and ");
        self.on_conflict_where(&format!(
            "case when excluded.\"_deleted\"
                  then not exists (select 1 from {parent} t where {key})
                  else exists (select 1 from {parent} t
                                where {key} and t.\"_row_hash\" = excluded.\"_row_hash\") end"
        ))
    }

    fn on_conflict_where(&self, condition: &str) -> String {
        let update = self
            .column_idents()
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "on conflict ({}, \"_valid_from\") do update set {update}, \"_recorded_at\" = now()
              where h.\"_row_hash\" is distinct from excluded.\"_row_hash\" and {condition}",
            self.key_list()
        )
    }

    /// The instant a removal takes effect: just after the removed version's
    /// cursor `cursor`. Ranges are in the cursor's time, not the clock's:
    /// a removal at the PUT's wall-clock time would stand after versions
    /// the key gets later with older cursors.
    pub fn after(&self, cursor: &str) -> String {
        match self.cursor_type {
            ColumnType::Date => format!("{cursor} + 1"),
            _ => format!("{cursor} + interval '1 microsecond'"),
        }
    }

    /// The transaction's instant, in the cursor's type (a tombstone's
    /// version when it carries no cursor).
    pub fn now(&self) -> &'static str {
        match self.cursor_type {
            ColumnType::Date => "current_date",
            _ => "now()",
        }
    }
}

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
) -> StoreResult<Vec<(Uuid, i64)>> {
    let Some(shape) = HistoryShape::of(def) else {
        return Ok(Vec::new());
    };
    let cursor = &shape.cursor;
    let valid_from = format!("coalesce(s.{cursor}, {})", shape.now());
    let values = shape.version_values("s", &valid_from, "s.\"_deleted\"", "s.\"_load_id\"");
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
    let insert = format!(
        "with written as (
           insert into {} as h ({})
           select distinct on ({key}, \"_valid_from\") *
             from (select {values} from {} where {filter}) v
            order by {key}, \"_valid_from\"
           {}
           returning h.\"_load_id\")
         select \"_load_id\", count(*) from written group by 1",
        shape.table,
        shape.columns(),
        sql.from_incoming,
        shape.on_conflict_if_current(&sql.parent)
    );
    let written = sql.query(&insert).fetch_all(&mut *conn).await?;
    written
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// Whether incoming row `s` is stored as it was sent: a row of the same
/// identity and hash is in the table.
fn stored_as_sent(def: &TableDef, sql: &MergeSql) -> String {
    let identity: Vec<String> = std::iter::once(partition_key(def))
        .chain(def.identity().into_iter().map(Ident::column))
        .map(|c| format!("t.{c} = s.{c}"))
        .collect();
    format!(
        "not s.\"_deleted\" and exists (select 1 from {} t where {} and t.\"_row_hash\" = s.\"_row_hash\")",
        sql.parent,
        identity.join(" and ")
    )
}

/// The partition a swap replaces and the stage it is replaced with (either
/// may be absent: a new partition, a dropped one).
pub(crate) struct Replacement<'a> {
    pub live: Option<&'a Ident>,
    pub stage: Option<&'a Ident>,
    pub load_id: Uuid,
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
         select * from ({}) v order by {key}, \"_valid_from\"
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

/// `p.c = s.c and …` for `columns`.
fn matching(columns: &[Ident]) -> String {
    columns
        .iter()
        .map(|c| format!("p.{c} = s.{c}"))
        .collect::<Vec<_>>()
        .join(" and ")
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
            "where not exists (select 1 from {live} p where {} and p.\"_row_hash\" = s.\"_row_hash\")",
            matching(&identity)
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
            matching(&shape.key)
        )
    });
    format!(
        "select {values} from (select distinct on ({key}) * from {live} p {kept}
                                order by {key}, {cursor} desc) p"
    )
}
