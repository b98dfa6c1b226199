//! A history table's shape (`HistoryShape`), from its table's definition:
//! what `super` makes and reads, and what `write::history` records a
//! write's versions with.

use crate::names::ColumnName;
use crate::schema::{ColumnType, TableDef};
use crate::store::sql::{
    self, columns_equal, history_table, partition_key, Ident, DELETED, LOAD_ID, PART, RECORDED_AT,
    ROW_HASH, VALID_FROM,
};

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
        let part = (!def.is_plain() && def.keyed_by_part()).then(|| (PART, def.partition_type()));
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
        columns.extend([VALID_FROM, DELETED, LOAD_ID, ROW_HASH]);
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
        values.push(format!("{valid_from} as {VALID_FROM}"));
        values.push(format!("{deleted} as {DELETED}"));
        values.push(format!("{load_id} as {LOAD_ID}"));
        values.push(format!(
            "case when {deleted} then null else {alias}.{ROW_HASH} end as {ROW_HASH}"
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
        let key = columns_equal("t", "excluded", &self.key);
        self.on_conflict_where(&format!(
            "case when excluded.{DELETED}
                  then not exists (select 1 from {parent} t where {key})
                  else exists (select 1 from {parent} t
                                where {key} and t.{ROW_HASH} = excluded.{ROW_HASH}) end"
        ))
    }

    fn on_conflict_where(&self, condition: &str) -> String {
        let update = self
            .column_idents()
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        // `excluded`'s recorded instant is the column's default, now():
        // Citus takes no function but an immutable one in a distributed
        // table's DO UPDATE SET.
        format!(
            "on conflict ({}, {VALID_FROM}) do update set {update}, {RECORDED_AT} = excluded.{RECORDED_AT}
              where h.{ROW_HASH} is distinct from excluded.{ROW_HASH} and {condition}",
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
