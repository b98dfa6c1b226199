//! The catalog of user tables and the DDL that keeps each table's Postgres
//! shape equal to its definition. Every schema change (a declaration's in
//! `declare`, a write's under `schema: evolve` in `evolve_to_fit`) is
//! serialized per table by an advisory lock, under which the stored
//! definition is read again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Connection, PgConnection, Row};

use super::locks::{lock_table, lock_table_within};
use super::sql::{column_change_ddl, column_ddl, create_key_index, parent_table, partition_key};
use super::{distribute, Store, StoreError, StoreResult};
use crate::ids::LoadId;
use crate::names::TableName;
use crate::schema::{
    check_width, plan_changes, AdoptRepeats, Distribution, DistributionDefault, SchemaChange,
    SchemaPolicy, SchemaWants, TableDef,
};

#[derive(Clone, Debug)]
pub struct TableInfo {
    pub def: TableDef,
    pub inferred: bool,
    pub partitions: i64,
    pub rows: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One version of a table's schema: its creation (version 1), or a change.
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
pub struct SchemaVersion {
    pub version: i64,
    pub at: DateTime<Utc>,
    /// What the version changed (none for the creation).
    pub changes: sqlx::types::Json<serde_json::Value>,
    /// The load whose rows needed the change (`schema: evolve`); none for a
    /// declaration.
    pub load_id: Option<LoadId>,
}

pub enum Declared {
    Created(TableDef),
    Unchanged(TableDef),
    Changed(TableDef, Vec<SchemaChange>),
}

impl Declared {
    /// The table's definition after the declaration.
    pub fn into_def(self) -> TableDef {
        match self {
            Declared::Created(d) | Declared::Unchanged(d) | Declared::Changed(d, _) => d,
        }
    }
}

/// Where a definition comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `PUT /tables`: it may change the table (safely).
    Declared,
    /// Guessed from a body for an undeclared table: it creates the table, or
    /// yields to whatever definition is there (growing it by what it brings,
    /// under `schema: evolve`).
    Inferred,
}

const TABLE_INFO_SQL: &str = "
    select t.definition, t.inferred, t.created_at, t.updated_at,
           count(p.ds) filter (where p.ds <> '') as partitions,
           (coalesce(sum(p.row_count), 0)
            + (select coalesce(sum(d.row_delta), 0) from idem.partition_deltas d
                where d.table_name = t.name))::bigint as rows
      from idem.tables t
      left join idem.partitions p on p.table_name = t.name";

fn table_info(row: &sqlx::postgres::PgRow) -> StoreResult<TableInfo> {
    let def: sqlx::types::Json<TableDef> = row.try_get("definition")?;
    Ok(TableInfo {
        def: def.0,
        inferred: row.try_get("inferred")?,
        partitions: row.try_get("partitions")?,
        rows: row.try_get("rows")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

impl Store {
    pub async fn table(&self, name: &TableName) -> StoreResult<Option<TableDef>> {
        let mut conn = self.acquire().await?;
        table_def(&mut conn, name).await
    }

    pub async fn table_info(&self, name: &TableName) -> StoreResult<Option<TableInfo>> {
        let sql = format!("{TABLE_INFO_SQL} where t.name = $1 group by t.name");
        let row = sqlx::query(&sql)
            .bind(name.as_str())
            .fetch_optional(&mut *self.acquire().await?)
            .await?;
        row.as_ref().map(table_info).transpose()
    }

    /// Tables in name order, after the name `after`.
    /// Tables in name order, after `after`, whose names are `LIKE` one of
    /// `visible` (the caller's readable patterns).
    pub async fn tables(
        &self,
        after: Option<&TableName>,
        visible: &[String],
        limit: i64,
    ) -> StoreResult<Vec<TableInfo>> {
        let sql = format!(
            "{TABLE_INFO_SQL} where ($1::text is null or t.name > $1) and t.name like any($3)
              group by t.name order by t.name limit $2"
        );
        let rows = sqlx::query(&sql)
            .bind(after.map(TableName::as_str))
            .bind(limit)
            .bind(visible)
            .fetch_all(&mut *self.acquire().await?)
            .await?;
        rows.iter().map(table_info).collect()
    }

    /// `declare` on a connection of its own, a key adopted by a table
    /// without one treating the keys its stored rows repeat as `repeats`
    /// says, the table's lock waited for at most `lock_wait` (writes in
    /// flight hold it; then a busy answer, nothing changed).
    pub async fn declare_table(
        &self,
        def: &TableDef,
        origin: Origin,
        repeats: AdoptRepeats,
        lock_wait: Duration,
    ) -> StoreResult<Declared> {
        let mut conn = self.acquire().await?;
        let default = self.distribution_default();
        let how = Declaring {
            origin,
            repeats,
            lock_wait: Some(lock_wait),
        };
        declare_with(&mut conn, def, default, how).await
    }

    /// Table `name`'s schema versions, oldest first (none: no such table).
    pub async fn history(&self, name: &TableName) -> StoreResult<Vec<SchemaVersion>> {
        // language=PostgreSQL
        Ok(sqlx::query_as(
            "select 1::bigint as version, created_at as at, '[]'::jsonb as changes,
                    null::uuid as load_id
               from idem.tables where name = $1
             union all
             select 1 + row_number() over (order by id), applied_at, changes, load_id
               from idem.schema_changes where table_name = $1
              order by version",
        )
        .bind(name.as_str())
        .fetch_all(&mut *self.acquire().await?)
        .await?)
    }
}

pub async fn table_def(conn: &mut PgConnection, name: &TableName) -> StoreResult<Option<TableDef>> {
    let def: Option<sqlx::types::Json<TableDef>> =
        sqlx::query_scalar("select definition from idem.tables where name = $1")
            .bind(name.as_str())
            .fetch_optional(conn)
            .await?;
    Ok(def.map(|d| d.0))
}

/// Creates the table, or moves it to `def` by safe changes, or answers
/// that it already is `def`. Two processes declaring one table at once
/// serialize on the table's advisory lock; the second sees the first's work.
/// Inside a transaction of the caller's, it runs in a savepoint and holds the
/// lock until that transaction ends.
#[tracing::instrument(skip_all, fields(table = %def.name))]
pub async fn declare(
    conn: &mut PgConnection,
    def: &TableDef,
    origin: Origin,
    distribution_default: DistributionDefault,
) -> StoreResult<Declared> {
    declare_with(
        conn,
        def,
        distribution_default,
        Declaring::unbounded(origin),
    )
    .await
}

/// How a declaration is made: by whom (`origin`), what an adopted key
/// does with repeats, and how long it waits for the table's lock (`None`:
/// as long as it takes, for a writer's declaration inside its own
/// bounded write).
#[derive(Clone, Copy)]
struct Declaring {
    origin: Origin,
    repeats: AdoptRepeats,
    lock_wait: Option<Duration>,
}

impl Declaring {
    fn unbounded(origin: Origin) -> Self {
        Declaring {
            origin,
            repeats: AdoptRepeats::Refuse,
            lock_wait: None,
        }
    }
}

async fn declare_with(
    conn: &mut PgConnection,
    def: &TableDef,
    distribution_default: DistributionDefault,
    how: Declaring,
) -> StoreResult<Declared> {
    let adopting =
        how.origin == Origin::Declared && prepare_adoption(&mut *conn, def, how.repeats).await?;
    let declared = declare_locked(&mut *conn, def, distribution_default, how).await;
    if adopting {
        // The adoption's work table goes with the declaration; a
        // connection that failed is closed by the pool, and it with it.
        let _ = super::adopt_key::forget(&mut *conn).await;
    }
    declared
}

/// `declare_with`'s work under the table's lock.
async fn declare_locked(
    conn: &mut PgConnection,
    def: &TableDef,
    distribution_default: DistributionDefault,
    how: Declaring,
) -> StoreResult<Declared> {
    let mut tx = conn.begin().await?;
    match how.lock_wait {
        Some(wait) => lock_table_within(&mut tx, &def.name, wait).await?,
        None => lock_table(&mut tx, &def.name).await?,
    }
    let outcome = match (table_def(&mut tx, &def.name).await?, how.origin) {
        (None, _) => {
            let def = distribute::settle(&mut tx, def, distribution_default).await?;
            create(&mut tx, &def, how.origin).await?
        }
        // An inferred write racing another write that created the table
        // first grows it by what it brings (under `schema: evolve`).
        (Some(stored), Origin::Inferred) if stored.schema == SchemaPolicy::Evolve => {
            let changes = SchemaWants::to_reach(&stored, def).changes_for(&stored);
            if changes.is_empty() {
                Declared::Unchanged(stored)
            } else {
                check_width(&stored.apply(&changes).columns)?;
                let cause = ChangeCause::Write(None);
                let new_def = apply_changes(&mut tx, &stored, &changes, cause).await?;
                Declared::Changed(new_def, changes)
            }
        }
        // An inferred write racing a declaration takes what is there.
        (Some(stored), Origin::Inferred) => Declared::Unchanged(stored),
        (Some(stored), Origin::Declared) => evolve(&mut tx, stored, def, how.repeats).await?,
    };
    tx.commit().await?;
    Ok(outcome)
}

/// The part of a key adoption done before the table's lock
/// (`adopt_key::before_lock`): a declaration the stored rows refuse keeps
/// no writer waiting (an orchestrator's run repeats its declaration each
/// time), and one they take holds the lock for less. Whether the
/// declaration adopts a key; anything else is decided under the lock.
async fn prepare_adoption(
    conn: &mut PgConnection,
    declared: &TableDef,
    repeats: AdoptRepeats,
) -> StoreResult<bool> {
    let Some(stored) = table_def(&mut *conn, &declared.name).await? else {
        return Ok(false);
    };
    let Ok(changes) = plan_changes(&stored, declared) else {
        return Ok(false);
    };
    if !changes
        .iter()
        .any(|c| matches!(c, SchemaChange::AdoptKey { .. }))
    {
        return Ok(false);
    }
    let keyed = stored.apply(&changes);
    super::adopt_key::before_lock(&mut *conn, &stored, &keyed, repeats).await?;
    Ok(true)
}

/// Makes the table of `def`, its distribution settled.
async fn create(conn: &mut PgConnection, def: &TableDef, origin: Origin) -> StoreResult<Declared> {
    create_table(&mut *conn, def).await?;
    let colocated = colocated_with(&mut *conn, def).await?;
    distribute::place_parent(&mut *conn, def, colocated.as_ref()).await?;
    super::history::create(&mut *conn, def).await?;
    sqlx::query("insert into idem.tables (name, definition, inferred) values ($1, $2, $3)")
        .bind(def.name.as_str())
        .bind(sqlx::types::Json(def))
        .bind(origin == Origin::Inferred)
        .execute(&mut *conn)
        .await?;
    Ok(Declared::Created(def.clone()))
}

/// Moves the stored definition towards the declared one by safe changes,
/// recording them; a declaration that needs an unsafe change is refused.
async fn evolve(
    conn: &mut PgConnection,
    stored: TableDef,
    declared: &TableDef,
    repeats: AdoptRepeats,
) -> StoreResult<Declared> {
    let changes = plan_changes(&stored, declared)?;
    if changes.is_empty() {
        return Ok(Declared::Unchanged(stored));
    }
    if changes
        .iter()
        .any(|c| matches!(c, SchemaChange::AdoptKey { .. }))
    {
        super::adopt_key::adopt_key(&mut *conn, &stored, &stored.apply(&changes), repeats).await?;
    }
    let new_def = apply_changes(&mut *conn, &stored, &changes, ChangeCause::Declaration).await?;
    Ok(Declared::Changed(new_def, changes))
}

/// Who changed a table.
#[derive(Clone, Copy, Debug)]
enum ChangeCause {
    /// `PUT /tables`: the table is declared from now on.
    Declaration,
    /// A write under `schema: evolve` (its load, when known).
    Write(Option<LoadId>),
}

/// Makes `changes` to the stored definition `stored`: the DDL, the new
/// definition, and a record of them in the table's history (with the load
/// that caused them, if one did). The caller holds the table's lock.
async fn apply_changes(
    conn: &mut PgConnection,
    stored: &TableDef,
    changes: &[SchemaChange],
    cause: ChangeCause,
) -> StoreResult<TableDef> {
    let (by_write, load_id) = match cause {
        ChangeCause::Declaration => (false, None),
        ChangeCause::Write(load_id) => (true, load_id),
    };
    let new_def = stored.apply(changes);
    if stored.distribution != new_def.distribution {
        redistribute(&mut *conn, stored, &new_def).await?;
    }
    alter_table(&mut *conn, &new_def, changes).await?;
    super::history::evolve(&mut *conn, stored, &new_def, changes).await?;
    // A change a write made keeps the table's origin; a declaration makes
    // the table declared.
    sqlx::query(
        "update idem.tables set definition = $2, inferred = inferred and $3, updated_at = now()
          where name = $1",
    )
    .bind(new_def.name.as_str())
    .bind(sqlx::types::Json(&new_def))
    .bind(by_write)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "insert into idem.schema_changes (table_name, changes, load_id) values ($1, $2, $3)",
    )
    .bind(new_def.name.as_str())
    .bind(sqlx::types::Json(changes))
    .bind(load_id)
    .execute(&mut *conn)
    .await?;
    Ok(new_def)
}

/// Gives table `name` what a body under `schema: evolve` wants of it, in a
/// transaction of its own on `conn` (a savepoint of the caller's, when it
/// has one open: the change then commits with the caller's write, and the
/// table's lock is held until then). The definition is read again under
/// the lock, so concurrent writers' wants merge: the first makes one change
/// with all it needs, the next find theirs made already (or make only what
/// is left). A table no longer under `evolve` is left as it is. Lock waits
/// end after `lock_wait`, when given. Returns the definition after.
pub async fn evolve_to_fit(
    conn: &mut PgConnection,
    name: &TableName,
    wants: &SchemaWants,
    load_id: LoadId,
    lock_wait: Option<Duration>,
) -> StoreResult<Option<TableDef>> {
    let mut tx = conn.begin().await?;
    if let Some(wait) = lock_wait {
        sqlx::query(&format!("set local lock_timeout = {}", wait.as_millis()))
            .execute(&mut *tx)
            .await?;
    }
    lock_table(&mut tx, name).await?;
    let Some(stored) = table_def(&mut tx, name).await? else {
        return Ok(None);
    };
    let changes = match stored.schema {
        SchemaPolicy::Evolve => wants.changes_for(&stored),
        _ => Vec::new(),
    };
    if changes.is_empty() {
        tx.commit().await?;
        return Ok(Some(stored));
    }
    check_width(&stored.apply(&changes).columns)?;
    let cause = ChangeCause::Write(Some(load_id));
    let new_def = apply_changes(&mut tx, &stored, &changes, cause).await?;
    tx.commit().await?;
    Ok(Some(new_def))
}

async fn create_table(conn: &mut PgConnection, def: &TableDef) -> StoreResult<()> {
    let parent = parent_table(&def.name);
    // A reference table holds its one pseudo-partition itself: Citus copies
    // no partitioned table to every node.
    let partitioned = match def.distribution {
        Distribution::Reference => String::new(),
        _ => format!(" partition by list ({})", partition_key(def)),
    };
    sqlx::query(&format!(
        "create table {parent} ({}){partitioned}",
        column_ddl(def)
    ))
    .execute(&mut *conn)
    .await?;
    // Unique per partition; a staged table carries the same index, so ATTACH
    // adopts it instead of building one under the swap's lock.
    sqlx::query(&create_key_index(def))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Moves an empty table to another distribution; one with rows is refused
/// (moving rows between nodes is a job for Citus's own tools, see the docs'
/// Citus page).
async fn redistribute(
    conn: &mut PgConnection,
    stored: &TableDef,
    to: &TableDef,
) -> StoreResult<()> {
    if !distribute::citus_installed(&mut *conn).await? && to.distribution.needs_citus() {
        return Err(StoreError::CitusNotInstalled(to.name.to_string()));
    }
    // language=PostgreSQL
    let rows: i64 = sqlx::query_scalar(
        "select coalesce(sum(row_count), 0)::int8 from idem.partitions where table_name = $1",
    )
    .bind(stored.name.as_str())
    .fetch_one(&mut *conn)
    .await?;
    if rows > 0 {
        return Err(StoreError::CitusUnsupported(format!(
            "table {} holds {rows} rows; its distribution changes only while it is empty (see the docs' Citus page for moving a table with rows)",
            stored.name
        )));
    }
    let colocated = colocated_with(&mut *conn, to).await?;
    distribute::redistribute(conn, stored, to, colocated.as_ref()).await
}

/// The table `def`'s `"colocate_with"` names, if it names one that exists.
async fn colocated_with(conn: &mut PgConnection, def: &TableDef) -> StoreResult<Option<TableDef>> {
    match &def.distribution {
        Distribution::Hash {
            colocate_with: Some(other),
            ..
        } => table_def(conn, other).await,
        _ => Ok(None),
    }
}

async fn alter_table(
    conn: &mut PgConnection,
    def: &TableDef,
    changes: &[SchemaChange],
) -> StoreResult<()> {
    let parent = parent_table(&def.name);
    for sql in changes.iter().filter_map(|c| column_change_ddl(&parent, c)) {
        sqlx::query(&sql).execute(&mut *conn).await?;
    }
    Ok(())
}
