//! A key adopted by a table that had none (`SchemaChange::AdoptKey`): a
//! table a first write made stores its rows by their content; once it
//! declares a key, each stored row takes the id the key gives it, the
//! partition's unique index becomes the key's, and the key's columns NOT
//! NULL. Done in the declaration's transaction, under the table's lock
//! (writers wait for it, as for any declaration), so writers see the table
//! keyless or keyed, never half of each, and a process killed midway leaves
//! it keyless. The rows pass through idem a chunk at a time.
//!
//! A key the stored rows repeat within a partition, or leave null, is
//! refused (a 409 naming up to 5 repeats) before the lock is taken, so a
//! refused declaration keeps no writer waiting; under the lock Postgres's
//! own checks (NOT NULL, the unique index) catch what was written in
//! between. The declaration may ask to resolve repeats: then the table's
//! `duplicates` rule keeps each key's survivor, as it does for a body's
//! repeats, and logs the other versions.

mod rekey;

use sqlx::{PgConnection, Row};

use super::contents;
use super::ledger::{self, LoadEntry, LoadStatus};
use super::sql::{
    create_key_index, join, key_index, label_sql, live_partition, parent_table, Ident,
};
use super::write::duplicates::{self, Resolve};
use super::{checked_ddl, StoreError, StoreResult, NOT_NULL_VIOLATION, UNIQUE_VIOLATION};
use crate::access::Actor;
use crate::ids::LoadId;
use crate::period::Period;
use crate::schema::{AdoptRepeats, DuplicatePolicy, SchemaError, TableDef};
pub(in crate::store) use rekey::forget;
use rekey::rekey_partition;

/// Most repeated keys a refusal names.
const LISTED_REPEATS: i64 = 5;

/// Gives `keyed`'s key (adopted by `keyless`, its stored definition) to
/// the stored rows. The caller holds the table's lock, so this does no
/// work twice that Postgres does anyway: the key's NOT NULL finds a null
/// key, and its unique index a repeat (rows written since the declaration
/// was checked before the lock, `refusals`), each then named in a 409.
pub(super) async fn adopt_key(
    conn: &mut PgConnection,
    keyless: &TableDef,
    keyed: &TableDef,
    repeats: AdoptRepeats,
) -> StoreResult<()> {
    refuse_distributed(keyless)?;
    sqlx::query(&format!("drop index if exists {}", key_index(&keyed.name)))
        .execute(&mut *conn)
        .await?;
    set_key_not_null(conn, keyed).await?;
    // The versions set aside are a load of their own in the ledger, by
    // idem itself, so the duplicates log lists them.
    let load = AdoptionLoad::new(keyed);
    let resolving = resolves_repeats(keyed, repeats);
    let mut set_aside = 0;
    for period in partitions(conn, keyed).await? {
        rekey_partition(conn, keyed, period).await?;
        if resolving {
            set_aside += resolve_partition(conn, keyed, period, load.load_id).await?;
        }
    }
    if set_aside > 0 {
        load.record(conn, set_aside).await?;
    }
    build_key_index(conn, keyed).await
}

/// Makes the key's columns NOT NULL (Postgres checks every stored row); a
/// null key is a 409.
async fn set_key_not_null(conn: &mut PgConnection, keyed: &TableDef) -> StoreResult<()> {
    let not_null: Vec<String> = keyed
        .primary_key
        .iter()
        .map(|c| format!("alter column {} set not null", Ident::column(c)))
        .collect();
    let sql = format!(
        "alter table {} {}",
        parent_table(&keyed.name),
        not_null.join(", ")
    );
    match checked_ddl(&mut *conn, &sql, NOT_NULL_VIOLATION).await? {
        true => Ok(()),
        false => refuse_null_keys(conn, keyed).await,
    }
}

/// Builds the key's unique index (Postgres checks every stored row); a
/// repeated key is a 409 naming up to `LISTED_REPEATS` of them.
async fn build_key_index(conn: &mut PgConnection, keyed: &TableDef) -> StoreResult<()> {
    if checked_ddl(&mut *conn, &create_key_index(keyed), UNIQUE_VIOLATION).await? {
        return Ok(());
    }
    let repeated = repeated_keys(conn, keyed).await?;
    Err(repeats_refusal(keyed, &repeated).into())
}

/// What an adoption does before the table's lock is taken, keeping no
/// writer waiting: its refusals (`refusals`), then the new ids of the
/// stored rows, worked out (`rekey::map_before_lock`).
pub(super) async fn before_lock(
    conn: &mut PgConnection,
    keyless: &TableDef,
    keyed: &TableDef,
    repeats: AdoptRepeats,
) -> StoreResult<()> {
    refusals(&mut *conn, keyless, keyed, repeats).await?;
    let periods = partitions(&mut *conn, keyed).await?;
    rekey::map_before_lock(conn, keyed, &periods).await
}

/// Refuses the adoption when the stored rows cannot take the key (a null
/// key, a repeat it may not resolve, a table Citus places by row id).
async fn refusals(
    conn: &mut PgConnection,
    keyless: &TableDef,
    keyed: &TableDef,
    repeats: AdoptRepeats,
) -> StoreResult<()> {
    refuse_distributed(keyless)?;
    refuse_null_keys(conn, keyed).await?;
    let repeated = repeated_keys(conn, keyed).await?;
    if !repeated.is_empty() && !resolves_repeats(keyed, repeats) {
        return Err(repeats_refusal(keyed, &repeated).into());
    }
    Ok(())
}

/// Whether the adoption keeps one version of each repeated key: asked to,
/// by a `duplicates` rule that picks one.
fn resolves_repeats(keyed: &TableDef, repeats: AdoptRepeats) -> bool {
    repeats == AdoptRepeats::Resolve && keyed.duplicates != DuplicatePolicy::Reject
}

/// A 409 for a table Citus places by its row id.
fn refuse_distributed(keyless: &TableDef) -> StoreResult<()> {
    if !keyless.distribution.needs_citus() {
        return Ok(());
    }
    Err(SchemaError::Citus(
        "a distributed table's rows are placed by their row id, which a key changes; \
         Citus cannot move them: load the rows into a new keyed table instead"
            .into(),
    )
    .into())
}

/// A 409 when a stored row has no value for a key column.
async fn refuse_null_keys(conn: &mut PgConnection, keyed: &TableDef) -> StoreResult<()> {
    let any_null = keyed
        .primary_key
        .iter()
        .map(|c| format!("{} is null", Ident::column(c)))
        .collect::<Vec<_>>()
        .join(" or ");
    let nulls: i64 = sqlx::query_scalar(&format!(
        "select count(*) from {} where {any_null}",
        parent_table(&keyed.name)
    ))
    .fetch_one(&mut *conn)
    .await?;
    if nulls == 0 {
        return Ok(());
    }
    Err(SchemaError::Conflict(format!(
        "{nulls} stored row(s) have no value for the key {:?}; a key column cannot be null",
        keyed.primary_key
    ))
    .into())
}

/// A key that repeats in a partition: its partition, its values, its rows.
struct Repeated {
    ds: String,
    key: String,
    rows: i64,
}

/// Up to `LISTED_REPEATS` keys the stored rows repeat within a partition.
async fn repeated_keys(conn: &mut PgConnection, keyed: &TableDef) -> StoreResult<Vec<Repeated>> {
    let key = join(
        &keyed
            .primary_key
            .iter()
            .map(Ident::column)
            .collect::<Vec<_>>(),
    );
    // language=PostgreSQL
    let sql = format!(
        "select {ds}, {logged}::text, count(*)
           from {parent} _s
          group by {ds}, {key}
         having count(*) > 1
          order by 1, 2
          limit $1",
        ds = label_sql(keyed, "_s"),
        logged = duplicates::logged_key(keyed),
        parent = parent_table(&keyed.name),
    );
    let rows = sqlx::query(&sql)
        .bind(LISTED_REPEATS)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Repeated {
                ds: r.try_get(0)?,
                key: r.try_get(1)?,
                rows: r.try_get(2)?,
            })
        })
        .collect()
}

fn repeats_refusal(keyed: &TableDef, repeated: &[Repeated]) -> SchemaError {
    let listed: Vec<String> = repeated
        .iter()
        .map(|r| format!("{} in {} ({} rows)", r.key, r.ds, r.rows))
        .collect();
    let how = match keyed.duplicates {
        DuplicatePolicy::Reject => "the table's duplicates rule (reject) keeps none of them",
        _ => "declare it with \"adopt\": {\"repeats\": \"resolve\"} to keep one version of each by the table's duplicates rule (the others go to the duplicates log)",
    };
    SchemaError::Conflict(format!(
        "the stored rows repeat the key {:?}: {}; {how}",
        keyed.primary_key,
        listed.join(", ")
    ))
}

/// The table's partitions, as the registry has them.
async fn partitions(conn: &mut PgConnection, def: &TableDef) -> StoreResult<Vec<Period>> {
    let labels: Vec<String> =
        sqlx::query_scalar("select ds from idem.partitions where table_name = $1 order by ds")
            .bind(def.name.as_str())
            .fetch_all(&mut *conn)
            .await?;
    labels
        .iter()
        .map(|label| {
            Period::parse(label, def.grain)
                .ok_or(StoreError::Corrupt("a registered partition has no period"))
        })
        .collect()
}

/// The ledger row of an adoption that set versions aside.
struct AdoptionLoad<'a> {
    load_id: LoadId,
    def: &'a TableDef,
    started_at: chrono::DateTime<chrono::Utc>,
}

impl<'a> AdoptionLoad<'a> {
    fn new(def: &'a TableDef) -> Self {
        AdoptionLoad {
            load_id: LoadId::new(),
            def,
            started_at: chrono::Utc::now(),
        }
    }

    /// Records the adoption as a load of mode `adopt_key` that wrote
    /// nothing and set `set_aside` versions aside (its `duplicates`).
    async fn record(&self, conn: &mut PgConnection, set_aside: u64) -> StoreResult<()> {
        let actor = Actor::idem();
        let entry = LoadEntry {
            status: LoadStatus::Published,
            changed: true,
            duplicates: set_aside,
            ..LoadEntry::new(
                self.load_id,
                &self.def.name,
                None,
                ADOPT_MODE,
                None,
                self.started_at,
                &actor,
            )
        };
        ledger::insert(conn, &entry).await
    }
}

/// The ledger mode of the versions a key adoption set aside.
pub const ADOPT_MODE: &str = "adopt_key";

/// Keeps one version of each key partition `period` repeats (the
/// duplicates rule's), logs the others under load `load_id`, and takes
/// them out of the partition's count and content hash; how many it set
/// aside.
async fn resolve_partition(
    conn: &mut PgConnection,
    keyed: &TableDef,
    period: Period,
    load_id: LoadId,
) -> StoreResult<u64> {
    let table = live_partition(keyed, period);
    let how = Resolve {
        policy: keyed.duplicates,
        load_id,
        log: keyed.duplicate_log,
        refuse: false,
    };
    let removed = duplicates::resolve(&mut *conn, keyed, &table, how).await?;
    if removed.is_empty() {
        return Ok(0);
    }
    let set_aside = u64::try_from(removed.len()).unwrap_or(u64::MAX);
    let Some(live) = contents::live(&mut *conn, &keyed.name, period).await? else {
        return Ok(set_aside);
    };
    let mut content = live.content;
    for hash in &removed {
        content.remove(hash);
    }
    contents::clear_deltas(&mut *conn, &keyed.name, period).await?;
    sqlx::query(
        "update idem.partitions set row_count = $3, content_sha256 = $4, content_sum = $5
          where table_name = $1 and ds = $2",
    )
    .bind(keyed.name.as_str())
    .bind(period.label())
    .bind(i64::try_from(content.rows()).map_err(|_| StoreError::Corrupt("a row count overflows"))?)
    .bind(content.hex())
    .bind(&content.sum_bytes()[..])
    .execute(&mut *conn)
    .await?;
    Ok(set_aside)
}
