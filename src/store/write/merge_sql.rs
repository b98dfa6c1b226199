//! The SQL a merge is made of (see `merge`): the statements' pieces,
//! written once per request from the table's validated definition, where
//! the incoming rows are read from (the session's table or a small body's
//! arrays), the tombstones' delete, the upsert and its read-back, and the
//! statement that fills in a patch's missing fields.

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row};

use super::arrays::TupleArrays;
use super::incoming::{incoming_table, IncomingRows};
use crate::period::{Grain, Period};
use crate::schema::{MergeMode, TableDef};
use crate::store::sql::{
    self, all_columns, columns_equal, key_index_column_list, key_index_columns, label_of,
    label_sql, parent_table, partition_key, Ident, DELETED, LOAD_ID, PRESENT, PREV_HASH, ROW_HASH,
    ROW_ID,
};
use crate::store::{StoreError, StoreResult};

/// The row hash of a row given as its columns' text (NULL as `None`), in
/// the table's column order; `None` when a value does not read back.
pub type Rehash<'a> = &'a (dyn Fn(&[Option<String>]) -> Option<[u8; 32]> + Sync);

/// The pieces of SQL a merge is made of, written once per request from the
/// table's (validated) definition.
pub(super) struct MergeSql {
    pub(super) parent: Ident,
    /// The label of stored row `t`'s partition, as SQL (see `label_sql`).
    pub(super) label: String,
    /// The partition key column.
    pub(super) part_key: Ident,
    /// The label of the partition `w.part` (an upsert's written rows).
    pub(super) written_label: String,
    pub(super) grain: Grain,
    pub(super) all_columns: String,
    pub(super) conflict: String,
    /// Incoming `s` and stored `t` rows of one key.
    pub(super) join: String,
    /// The session's table of incoming rows (see `incoming_table`).
    pub(super) incoming: Ident,
    /// Where statements read the incoming rows `s` from: that table, or
    /// the arrays of a small body.
    pub(super) from_incoming: String,
    /// The arrays `from_incoming` reads, bound to every statement.
    pub(super) arrays: Option<TupleArrays>,
    /// `col = excluded.col` for every column (an upsert's update).
    pub(super) excluded: String,
    /// Whether the incoming version (`excluded`, in an upsert) may replace
    /// the stored one `t`. NULL is the smallest cursor: it never replaces a
    /// stored one.
    pub(super) newer: String,
    /// Whether a tombstone `s` may delete the stored `t`; without a cursor it
    /// deletes whatever is stored.
    pub(super) tombstone_newer: String,
}

impl MergeSql {
    pub(super) fn new(def: &TableDef, rows: IncomingRows) -> Self {
        let join = columns_equal("t", "s", &key_index_column_list(def));
        let columns = all_columns(def);
        let excluded = columns
            .iter()
            .map(|c| format!("{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cursor = def.cursor.as_ref().map(Ident::column);
        let incoming = incoming_table(def);
        let (from_incoming, arrays) = match rows {
            IncomingRows::Session => (format!("{incoming} s"), None),
            IncomingRows::Arrays(arrays) => (unnest_arrays(def, &arrays), Some(arrays)),
        };
        MergeSql {
            parent: parent_table(&def.name),
            label: label_sql(def, "t"),
            part_key: partition_key(def),
            written_label: label_of(def, "w.part"),
            grain: def.grain,
            all_columns: sql::join(&columns),
            conflict: key_index_columns(def),
            join,
            incoming,
            from_incoming,
            arrays,
            excluded,
            newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(t.{c} is null or (excluded.{c} is not null and excluded.{c} >= t.{c}))")
            }),
            tombstone_newer: cursor.as_ref().map_or("true".into(), |c| {
                format!("(s.{c} is null or t.{c} is null or s.{c} >= t.{c})")
            }),
        }
    }

    /// Deletes the stored rows the incoming tombstones remove. It answers
    /// the version it removed (the latest, locked one) and the load whose
    /// tombstone removed it.
    pub(super) fn delete_tombstoned(&self) -> String {
        let MergeSql {
            parent,
            part_key,
            written_label,
            join,
            tombstone_newer,
            from_incoming,
            ..
        } = self;
        // The label is printed outside the DELETE: Citus runs a distributed
        // table's RETURNING on the workers, and takes only immutable
        // functions there (`to_char` depends on settings).
        // language=PostgreSQL
        // The tombstones are read into a CTE of their own first: Citus
        // joins a distributed or reference table's DELETE with the
        // session's (local) table only through one.
        format!(
            "with tombstones as materialized (
           select s.* from {from_incoming} where s.{DELETED}),
         gone as (
           delete from {parent} t using tombstones s
            where {join} and {tombstone_newer}
        returning t.{part_key} as part, t.{ROW_HASH} as row_hash, s.{LOAD_ID} as load_id)
         select {written_label}, w.row_hash, w.load_id from gone w"
        )
    }

    /// Writes every incoming row in key order, by `mode`'s rule, and answers
    /// one row per partition and load (not a row each: a batch of 10,000
    /// costs one message) with the hashes the rows replaced: the partition's
    /// label, the load (unless `shape.one_load`), the rows written, the
    /// hashes replaced.
    pub(super) fn upsert(&self, mode: MergeMode, shape: UpsertShape) -> String {
        let MergeSql {
            parent,
            all_columns,
            conflict,
            excluded,
            newer,
            from_incoming,
            part_key,
            written_label,
            ..
        } = self;
        let on_conflict = match mode {
            // An appended row's id is its content, its occurrence and its
            // request's key (or channel offset): one stored already under
            // them (the key reaped, the channel reset, and the request sent
            // again) is the same row, not a second one.
            MergeMode::Append | MergeMode::InsertMissing | MergeMode::Versions => {
                format!("on conflict ({conflict}) do nothing")
            }
            MergeMode::Merge | MergeMode::Patch => format!(
                "on conflict ({conflict}) do update set {excluded}, {PREV_HASH} = t.{ROW_HASH}
              where {newer} and t.{ROW_HASH} <> excluded.{ROW_HASH}"
            ),
        };
        // Rows that came in key order are read in it: sorting them again
        // costs Postgres about 8% of the upsert (10,000 rows).
        let order = if shape.in_key_order {
            String::new()
        } else {
            format!("order by {conflict}")
        };
        // One load's rows all carry its id: grouping by it would cost a hash
        // of every row for nothing.
        let (load, load_group) = if shape.one_load {
            (String::new(), "")
        } else {
            (format!(", t.{LOAD_ID} as load_id"), ", w.load_id")
        };
        // language=PostgreSQL
        format!(
            "with written as (
           insert into {parent} as t ({all_columns})
           select {all_columns} from {from_incoming} where not s.{DELETED} {order}
           {on_conflict}
           returning t.{part_key} as part{load}, t.{PREV_HASH} as replaced)
         select {written_label}{load_group}, count(*),
                coalesce(array_agg(w.replaced) filter (where w.replaced is not null), '{{}}')
           from written w group by w.part{load_group}"
        )
    }

    /// Reads back the hashes of the rows the upsert wrote for the loads
    /// bound after the arrays, per partition and load.
    pub(super) fn written_hashes(&self) -> String {
        let MergeSql {
            parent,
            label,
            join,
            from_incoming,
            ..
        } = self;
        let loads_param = self.next_param();
        // language=PostgreSQL
        format!(
            "select {label}, t.{LOAD_ID}, array_agg(t.{ROW_HASH})
           from {from_incoming} join {parent} t on {join} and t.{LOAD_ID} = s.{LOAD_ID}
          where not s.{DELETED} and s.{LOAD_ID} = any(${loads_param}::uuid[])
          group by 1, 2"
        )
    }

    /// Counts, per load, the incoming rows (tombstones aside) whose identity
    /// another load stored: with the same row hash (the row is there
    /// already), and with another.
    pub(super) fn stored_matches(&self) -> String {
        let MergeSql {
            parent,
            join,
            from_incoming,
            ..
        } = self;
        // language=PostgreSQL
        format!(
            "select s.{LOAD_ID}, count(*) filter (where t.{ROW_HASH} = s.{ROW_HASH}),
                count(*) filter (where t.{ROW_HASH} <> s.{ROW_HASH})
           from {from_incoming} join {parent} t on {join} and t.{LOAD_ID} <> s.{LOAD_ID}
          where not s.{DELETED}
          group by 1"
        )
    }

    /// The number of a statement's first parameter after the arrays.
    pub(super) fn next_param(&self) -> usize {
        self.arrays.as_ref().map_or(0, |a| a.columns.len()) + 1
    }

    /// A statement that reads `from_incoming`, with its arrays bound.
    pub(super) fn query<'q>(&'q self, sql: &'q str) -> Query<'q, Postgres, PgArguments> {
        let mut query = sqlx::query(sql);
        for column in self.arrays.iter().flat_map(|a| &a.columns) {
            query = query.bind(column);
        }
        query
    }
}

/// What an upsert may rely on of its incoming rows (see `MergeSql::upsert`).
#[derive(Clone, Copy, Debug)]
pub(super) struct UpsertShape {
    /// They come in the order of the unique index, where they are read.
    pub in_key_order: bool,
    /// They are one load's.
    pub one_load: bool,
}

/// `unnest($1, $2, …) s(…)`: the arrays as rows `s`, with the columns a COPY
/// into the session's table would fill (see `small_body`).
fn unnest_arrays(def: &TableDef, arrays: &TupleArrays) -> String {
    let params = arrays
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| column.cast_param(i + 1))
        .collect::<Vec<_>>()
        .join(", ");
    let names: Vec<Ident> = all_columns(def).into_iter().chain([DELETED]).collect();
    format!("unnest({params}) s({})", sql::join(&names))
}

/// The stored rows of a patch's keys, on Citus (see `fill_sql`).
const PATCH_STORED: &str = "idem_patch_stored";

/// `fill_in_patches`' statement: each patch row filled in from its stored
/// row, answering its id and its values as text.
fn fill_sql(def: &TableDef, sql: &MergeSql) -> String {
    let fill = def
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = Ident::column(&c.name);
            format!("{c} = case when get_bit(s.{PRESENT}, {i}) = 1 then s.{c} else t.{c} end")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let listed = |prefix: &str, suffix: &str| {
        def.columns
            .iter()
            .map(|c| format!("{prefix}.{}{suffix}", Ident::column(&c.name)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (columns, as_text) = (listed("s", ""), listed("f", "::text"));
    let MergeSql {
        parent,
        join,
        incoming,
        ..
    } = sql;
    // On Citus the stored rows of the patches' keys were read into a
    // table of the session first (`PATCH_STORED`: Citus updates the
    // session's local table from a distributed or reference one only so),
    // and the values are printed outside the UPDATE (Citus takes no
    // function but an immutable one in the RETURNING of a statement that
    // reads a distributed table; a timestamptz's text depends on settings).
    let from = match def.distribution.needs_citus() {
        true => format!("{PATCH_STORED} t"),
        false => format!("{parent} t"),
    };
    // language=PostgreSQL
    format!(
        "with filled as (
           update {incoming} s set {fill}
             from {from} where {join} and not s.{DELETED}
        returning s.{ROW_ID}, {columns})
         select f.{ROW_ID}, {as_text} from filled f"
    )
}

/// A patch's rows whose key is stored take the stored value of every column
/// they did not give, and then the row hash of the whole row (which only the
/// caller's canonical encoding can tell, through `rehash`). Under the
/// partitions' locks, so the stored rows cannot change meanwhile.
pub(super) async fn fill_in_patches(
    conn: &mut PgConnection,
    def: &TableDef,
    sql: &MergeSql,
    rehash: Rehash<'_>,
) -> StoreResult<()> {
    let filled = fill_sql(def, sql);
    let incoming = &sql.incoming;
    if def.distribution.needs_citus() {
        // language=PostgreSQL
        sqlx::query(&format!(
            "create temp table {PATCH_STORED} on commit drop as
             select t.* from {} t join (select distinct {} from {incoming}) s on {}",
            sql.parent,
            key_index_columns(def),
            sql.join
        ))
        .execute(&mut *conn)
        .await?;
    }
    let rows = sqlx::query(&filled).fetch_all(&mut *conn).await?;
    if def.distribution.needs_citus() {
        sqlx::query(&format!("drop table {PATCH_STORED}"))
            .execute(&mut *conn)
            .await?;
    }
    let mut row_ids = Vec::with_capacity(rows.len());
    let mut hashes = Vec::with_capacity(rows.len());
    for row in rows {
        let values = (1..=def.columns.len())
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<Vec<_>, _>>()?;
        let hash =
            rehash(&values).ok_or(StoreError::Corrupt("a stored value does not read back"))?;
        row_ids.push(row.try_get::<Vec<u8>, _>(0)?);
        hashes.push(hash.to_vec());
    }
    // language=PostgreSQL
    sqlx::query(&format!(
        "update {incoming} s set {ROW_HASH} = v.hash
           from unnest($1::bytea[], $2::bytea[]) v(row_id, hash)
          where s.{ROW_ID} = v.row_id"
    ))
    .bind(&row_ids)
    .bind(&hashes)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// "No partition of the table for a row": its day was dropped while this
/// write waited for its lock (see `lock_existing_shared`); a retry makes it.
pub(super) fn partition_gone_is_busy(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("23514") => StoreError::Busy(err),
        _ => err.into(),
    }
}

pub(super) fn period_of(label: &str, grain: Grain) -> StoreResult<Period> {
    Period::parse(label, grain).ok_or(StoreError::Corrupt("a partition key out of its grain"))
}
