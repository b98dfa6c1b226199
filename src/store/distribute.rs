//! A table's place on a Citus cluster: a new table (its parent, its stages,
//! its history) made hash-distributed or a reference table as its
//! definition says, a distribution changed while the table holds no rows,
//! and the checks that come first (is Citus there; does the table to be
//! colocated with exist, and is it hash-distributed).
//!
//! Table names travel as bind parameters cast to `regclass`, the quoted
//! identifiers `store::sql` makes; column names as text parameters.

use sqlx::PgConnection;

use super::sql::{history_table, parent_table, Ident};
use super::{StoreError, StoreResult};
use crate::names::TableName;
use crate::schema::{Distribution, DistributionColumn, DistributionDefault, TableDef};

/// Whether the database has the Citus extension.
pub async fn citus_installed(conn: &mut PgConnection) -> StoreResult<bool> {
    // language=PostgreSQL
    Ok(
        sqlx::query_scalar("select exists (select from pg_extension where extname = 'citus')")
            .fetch_one(conn)
            .await?,
    )
}

/// `def` with its distribution settled for a new table: the declared one,
/// or the server's `default` when the declaration said none. A table that
/// needs Citus on a database without it is refused.
pub async fn settle(
    conn: &mut PgConnection,
    def: &TableDef,
    default: DistributionDefault,
) -> StoreResult<TableDef> {
    let citus = citus_installed(&mut *conn).await?;
    let mut def = def.clone();
    if def.distribution == Distribution::Unstated {
        def.distribution = default.for_table(&def.primary_key, def.is_plain(), citus);
    }
    if def.distribution.needs_citus() && !citus {
        return Err(StoreError::CitusNotInstalled(def.name.to_string()));
    }
    Ok(def)
}

/// Places the new, empty parent table of `def` as its distribution says
/// (a local table stays as it is), beside `colocated`: the table its
/// `"colocate_with"` names, as the catalog holds it (the caller reads it).
pub async fn place_parent(
    conn: &mut PgConnection,
    def: &TableDef,
    colocated: Option<&TableDef>,
) -> StoreResult<()> {
    let parent = parent_table(&def.name);
    match &def.distribution {
        Distribution::Unstated | Distribution::Local => Ok(()),
        Distribution::Reference => reference(conn, &parent).await,
        Distribution::Hash {
            column,
            colocate_with,
        } => {
            let colocate = match colocate_with {
                Some(other) => Some(colocation_target(def, other, colocated)?),
                None => None,
            };
            hash(conn, &parent, column.as_str(), colocate.as_ref()).await
        }
    }
}

/// Places `table` (a stage, a part, a history table) beside the parent of
/// `def`: hash-distributed on the same column with its shards colocated,
/// a reference table beside a reference table; nothing for a local table.
pub async fn place_beside(
    conn: &mut PgConnection,
    def: &TableDef,
    table: &Ident,
) -> StoreResult<()> {
    let placed = match &def.distribution {
        Distribution::Unstated | Distribution::Local => Ok(()),
        Distribution::Reference => reference(conn, table).await,
        Distribution::Hash { column, .. } => {
            hash(conn, table, column.as_str(), Some(&parent_table(&def.name))).await
        }
    };
    match placed {
        // The table was dropped since its definition was read: as a swap
        // that finds it gone, the write reads what is there now.
        Err(StoreError::Database(sqlx::Error::Database(db)))
            if db.code().as_deref() == Some("42P01") =>
        {
            Err(StoreError::TableChanged(def.name.clone()))
        }
        other => other,
    }
}

/// Whether `def`'s rows pass through stages placed beside it: a
/// hash-distributed table's do (its stages are distributed too, so a
/// COPY sends each row to its worker once); a reference table's stage is
/// local, and the swap copies it to every node.
pub fn stages_distributed(def: &TableDef) -> bool {
    matches!(def.distribution, Distribution::Hash { .. })
}

async fn hash(
    conn: &mut PgConnection,
    table: &Ident,
    column: &str,
    colocate_with: Option<&Ident>,
) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "select create_distributed_table($1::regclass, $2,
                                         colocate_with => coalesce($3, 'default'))",
    )
    .bind(table.as_str())
    .bind(column)
    .bind(colocate_with.map(Ident::as_str))
    .persistent(false)
    .execute(conn)
    .await?;
    Ok(())
}

async fn reference(conn: &mut PgConnection, table: &Ident) -> StoreResult<()> {
    // language=PostgreSQL
    on_table(conn, "select create_reference_table($1::regclass)", table).await
}

/// Runs Citus's function `call` on `table` (its `$1`, cast to `regclass`).
async fn on_table(conn: &mut PgConnection, call: &str, table: &Ident) -> StoreResult<()> {
    sqlx::query(call)
        .bind(table.as_str())
        .persistent(false)
        .execute(conn)
        .await?;
    Ok(())
}

/// The parent of table `other` (`target`, as the catalog holds it), when
/// it can be `def`'s colocation target: an idem table, hash-distributed,
/// by a column of the same type.
fn colocation_target(
    def: &TableDef,
    other: &TableName,
    target: Option<&TableDef>,
) -> StoreResult<Ident> {
    let refuse = |why: String| {
        StoreError::CitusUnsupported(format!(
            "{} cannot be colocated with {other}: {why}",
            def.name
        ))
    };
    let Some(target) = target else {
        return Err(refuse("no such table".into()));
    };
    let (Some(mine), Some(theirs)) = (
        def.distribution.hash_column(),
        target.distribution.hash_column(),
    ) else {
        return Err(refuse(format!(
            "it is not hash-distributed (its distribution is {})",
            serde_json::to_string(&target.distribution).unwrap_or_default()
        )));
    };
    let type_of = |d: &TableDef, c: &DistributionColumn| {
        d.column(c.as_str()).map_or("bytea", |c| c.ty.sql_name())
    };
    if type_of(def, mine) != type_of(target, theirs) {
        return Err(refuse(format!(
            "Citus colocates tables whose distribution columns have one type; {:?} is {}, {:?} is {}",
            mine.as_str(),
            type_of(def, mine),
            theirs.as_str(),
            type_of(target, theirs)
        )));
    }
    Ok(parent_table(other))
}

/// Moves an existing table of `stored`'s (which holds no rows: the caller
/// checked) to `to`: between local and hash-distributed, or between hash
/// columns. A reference table is made or unmade only with the table.
pub async fn redistribute(
    conn: &mut PgConnection,
    stored: &TableDef,
    to: &TableDef,
    colocated: Option<&TableDef>,
) -> StoreResult<()> {
    use Distribution::*;
    let parent = parent_table(&stored.name);
    let history = stored
        .history
        .is_some()
        .then(|| history_table(&stored.name));
    match (&stored.distribution, &to.distribution) {
        (Local | Unstated, Hash { .. }) => {
            place_with_history(conn, to, colocated, history.as_ref()).await
        }
        (Hash { .. }, Local) => {
            if let Some(history) = &history {
                undistribute(&mut *conn, history).await?;
            }
            undistribute(conn, &parent).await
        }
        (Hash { .. }, Hash { .. }) => {
            if let Some(history) = &history {
                undistribute(&mut *conn, history).await?;
            }
            undistribute(&mut *conn, &parent).await?;
            place_with_history(conn, to, colocated, history.as_ref()).await
        }
        (from, to) => Err(StoreError::CitusUnsupported(format!(
            "{} cannot move from {} to {}: a reference table has no partitions and a partitioned table cannot be one; drop the table and declare it again",
            stored.name,
            serde_json::to_string(from).unwrap_or_default(),
            serde_json::to_string(to).unwrap_or_default()
        ))),
    }
}

async fn place_with_history(
    conn: &mut PgConnection,
    def: &TableDef,
    colocated: Option<&TableDef>,
    history: Option<&Ident>,
) -> StoreResult<()> {
    place_parent(&mut *conn, def, colocated).await?;
    match history {
        Some(history) => place_beside(conn, def, history).await,
        None => Ok(()),
    }
}

async fn undistribute(conn: &mut PgConnection, table: &Ident) -> StoreResult<()> {
    // language=PostgreSQL
    let call = "select undistribute_table($1::regclass, cascade_via_foreign_keys => false)";
    on_table(conn, call, table).await
}
