//! A load's parts made into one stage per target partition, each ready to
//! be swapped in as `publish` swaps a PUT's stage: the partition's CHECK
//! bound, versions of one key resolved across all parts by the table's
//! `duplicates` rule, the unique index built.
//!
//! Three ways, cheapest first:
//! - a part that alone holds a partition's rows, and only them, becomes its
//!   stage where it lies (the bound and the index added; no row is copied),
//!   when its keys are distinct;
//! - the other partitions' rows are copied, in one pass over the parts,
//!   into a routing table partitioned like the target, whose children are
//!   then detached as the stages;
//! - a target partition no part holds rows for gets an empty stage.
//!
//! The new stages are claimed (as a PUT's stage is) by the caller's session,
//! which releases them once the load is published or given up.

use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use super::duplicates::Resolve;
use super::stage::{self, build_unique_index, staging_name};
use crate::ids::LoadId;
use crate::period::Period;
use crate::schema::TableDef;
use crate::store::distribute;
use crate::store::sql::{key_index_columns, partition_key, period_literal, staging_table, Ident};
use crate::store::{is_unique_violation, StoreResult};

/// Where a target partition's rows come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// One part holds them all, and nothing else.
    Sole(String),
    /// Several parts (or a part holding other partitions' rows too).
    Copy(Vec<String>),
    /// No part holds any.
    Empty,
}

/// A target partition's stage.
#[derive(Clone, Debug)]
pub struct Assembled {
    pub period: Period,
    pub stage_name: String,
    /// Whether the stage is one of the caller's claimed stages (an adopted
    /// part is its load's).
    pub claimed: bool,
    /// Digests of the versions not kept (see `stage::Staged`).
    pub dropped_row_hashes: Vec<[u8; 32]>,
}

/// Builds the stages of `plans`; on error, the stages made so far stay
/// claimed in `made` for the caller to release.
pub async fn assemble(
    conn: &mut PgConnection,
    def: &TableDef,
    plans: Vec<(Period, Source)>,
    repeats: Resolve,
    made: &mut Vec<Assembled>,
) -> StoreResult<()> {
    let mut copies = Vec::new();
    for (period, source) in plans {
        match source {
            Source::Sole(part) => match adopt(conn, def, period, &part).await? {
                true => made.push(Assembled {
                    period,
                    stage_name: part,
                    claimed: false,
                    dropped_row_hashes: Vec::new(),
                }),
                false => copies.push((period, vec![part])),
            },
            Source::Copy(parts) => copies.push((period, parts)),
            Source::Empty => made.push(empty_stage(conn, def, period, repeats.load_id).await?),
        }
    }
    if !copies.is_empty() {
        copy_through_router(conn, def, &copies, repeats, made).await?;
    }
    Ok(())
}

/// Makes part `part` the stage of `period` where it lies: its bound and
/// unique index added where it lacks them (a part sent with `?ds=` was
/// staged with both). False (and the part left as it was) when it repeats
/// a key, which a copy resolves.
async fn adopt(
    conn: &mut PgConnection,
    def: &TableDef,
    period: Period,
    part: &str,
) -> StoreResult<bool> {
    let table = staging_table(part);
    let bounded = stage::has_bound(conn, part).await?;
    if bounded && stage::has_key_index(conn, part).await? {
        return Ok(true);
    }
    let mut tx = conn.begin().await?;
    if !bounded {
        sqlx::query(&format!(
            "alter table {table} add constraint idem_partition_bound check ({pk} is not null and {pk} = {})",
            period_literal(def, period),
            pk = partition_key(def),
        ))
        .execute(&mut *tx)
        .await?;
    }
    let index = format!(
        "create unique index on {table} ({})",
        key_index_columns(def)
    );
    match sqlx::query(&index).execute(&mut *tx).await {
        Ok(_) => {
            tx.commit().await?;
            Ok(true)
        }
        Err(e) if is_unique_violation(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A stage with no rows for `period`.
async fn empty_stage(
    conn: &mut PgConnection,
    def: &TableDef,
    period: Period,
    load_id: LoadId,
) -> StoreResult<Assembled> {
    let name = new_stage_name(load_id);
    stage::claim(&mut *conn, &name).await?;
    let mut tx = conn.begin().await?;
    stage::create_bounded(&mut tx, def, &name, period).await?;
    sqlx::query(&format!(
        "create unique index on {} ({})",
        staging_table(&name),
        key_index_columns(def)
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Assembled {
        period,
        stage_name: name,
        claimed: true,
        dropped_row_hashes: Vec::new(),
    })
}

/// Copies the rows of every partition in `copies` out of their parts in one
/// pass: into a table partitioned like the target, with a child per
/// partition (each with its bound as a CHECK, which stays once it is
/// detached); the children become the stages, each with its versions
/// resolved and its unique index.
async fn copy_through_router(
    conn: &mut PgConnection,
    def: &TableDef,
    copies: &[(Period, Vec<String>)],
    repeats: Resolve,
    made: &mut Vec<Assembled>,
) -> StoreResult<()> {
    let router = new_stage_name(repeats.load_id);
    stage::claim(&mut *conn, &router).await?;
    let router_table = staging_table(&router);
    let mut children = Vec::with_capacity(copies.len());
    for (period, _) in copies {
        let name = new_stage_name(repeats.load_id);
        stage::claim(&mut *conn, &name).await?;
        children.push((*period, name));
    }
    let mut tx = conn.begin().await?;
    sqlx::query(&format!(
        "create table {router_table} (like {} ) partition by list ({})",
        staging_table(&copies[0].1[0]),
        partition_key(def)
    ))
    .execute(&mut *tx)
    .await?;
    // Its children are distributed like the table's stages, so it is too.
    if distribute::stages_distributed(def) {
        distribute::place_beside(&mut tx, def, &router_table).await?;
    }
    for (period, name) in &children {
        stage::create_bounded(&mut tx, def, name, *period).await?;
        sqlx::query(&format!(
            "alter table {router_table} attach partition {} for values in ({})",
            staging_table(name),
            period_literal(def, *period)
        ))
        .execute(&mut *tx)
        .await?;
    }
    insert_from_parts(&mut tx, def, &router_table, copies).await?;
    for (_, name) in &children {
        sqlx::query(&format!(
            "alter table {router_table} detach partition {}",
            staging_table(name)
        ))
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(&format!("drop table {router_table}"))
        .execute(&mut *tx)
        .await?;
    for (period, name) in children {
        let dropped = build_unique_index(&mut tx, def, &staging_table(&name), repeats).await?;
        made.push(Assembled {
            period,
            stage_name: name,
            claimed: true,
            dropped_row_hashes: dropped,
        });
    }
    tx.commit().await?;
    stage::release(&mut *conn, &router, stage::StageFate::Discarded).await
}

/// One INSERT of every part's rows of the partitions copied (each part read
/// once).
async fn insert_from_parts(
    tx: &mut PgConnection,
    def: &TableDef,
    router: &Ident,
    copies: &[(Period, Vec<String>)],
) -> StoreResult<()> {
    let mut parts: Vec<&String> = copies.iter().flat_map(|(_, parts)| parts).collect();
    parts.sort();
    parts.dedup();
    let wanted: Vec<String> = copies
        .iter()
        .map(|(period, _)| period_literal(def, *period))
        .collect();
    let columns = stage::copied_columns(def);
    let selects: Vec<String> = parts
        .iter()
        .map(|part| {
            format!(
                "select {columns} from {} where {} in ({})",
                staging_table(part),
                partition_key(def),
                wanted.join(", ")
            )
        })
        .collect();
    sqlx::query(&format!(
        "insert into {router} ({columns}) {}",
        selects.join(" union all ")
    ))
    .execute(tx)
    .await?;
    Ok(())
}

fn new_stage_name(load_id: LoadId) -> String {
    // Several stages per load: each its own suffix.
    let unique = Uuid::now_v7().simple().to_string();
    format!("{}_{}", staging_name(load_id), &unique[20..])
}
