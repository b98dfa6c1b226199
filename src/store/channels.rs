//! `idem.channels`: each principal's channels and the offset each last
//! committed. A write on a channel locks its row first in the write's
//! transaction (making it, if new), and commits its offset in that same
//! transaction; the lists and the reset answer `/channels`.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, Row};

use super::{Store, StoreError, StoreResult};
use crate::channel::{ChannelName, Offset, OffsetKind};
use crate::ids::LoadId;
use crate::ids::Principal;
use crate::names::TableName;
use crate::schema::TableDef;

/// A channel as the write that locked it found it.
pub struct LockedChannel {
    pub kind: OffsetKind,
    /// `None` for a channel this write is the first on.
    pub committed: Option<Offset>,
    /// The definition of the table the write goes to, if declared: read by
    /// the same statement, to spare the write a round trip.
    pub def: Option<TableDef>,
}

/// A channel as listed.
#[derive(Clone, Debug)]
pub struct ChannelInfo {
    pub name: String,
    pub offset_kind: OffsetKind,
    pub committed_offset: String,
    pub table: Option<String>,
    pub load_id: Option<LoadId>,
    pub committed_at: Option<DateTime<Utc>>,
    pub commits: i64,
}

fn corrupt() -> StoreError {
    StoreError::Corrupt("idem.channels holds an offset or offset kind idem does not know")
}

fn locked(row: &PgRow) -> StoreResult<LockedChannel> {
    let kind: String = row.try_get("offset_kind")?;
    let kind = OffsetKind::parse(&kind).map_err(|_| corrupt())?;
    let committed: Option<String> = row.try_get("committed_offset")?;
    let committed = committed
        .map(|text| Offset::parse(kind, &text).map_err(|_| corrupt()))
        .transpose()?;
    let def: Option<Json<TableDef>> = row.try_get("definition")?;
    Ok(LockedChannel {
        kind,
        committed,
        def: def.map(|d| d.0),
    })
}

/// Locks the channel's row in the caller's transaction, first made (with
/// `kind`, and no offset) when the channel is new: a second write on the
/// channel waits here until this one commits or rolls back, then reads what
/// it left, and the definition of `table` as it is then. The common case, a
/// channel that exists, costs one statement.
pub async fn lock_channel(
    conn: &mut PgConnection,
    principal: &Principal,
    name: &ChannelName,
    kind: OffsetKind,
    table: &TableName,
) -> StoreResult<LockedChannel> {
    // language=PostgreSQL
    const SELECT: &str = "select offset_kind, committed_offset,
                                 (select definition from idem.tables where name = $3) as definition
                            from idem.channels where principal = $1 and name = $2 for update";
    let found = sqlx::query(SELECT)
        .bind(principal)
        .bind(name.as_str())
        .bind(table.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(row) = found {
        return locked(&row);
    }
    // Waits for a first write in flight on the same new channel: when that
    // one commits, nothing is inserted and the row is read again, locked.
    // language=PostgreSQL
    let made = sqlx::query(
        "insert into idem.channels (principal, name, offset_kind) values ($1, $2, $4)
         on conflict (principal, name) do nothing
         returning offset_kind, committed_offset,
                   (select definition from idem.tables where name = $3) as definition",
    )
    .bind(principal)
    .bind(name.as_str())
    .bind(table.as_str())
    .bind(kind.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    let row = match made {
        Some(row) => row,
        // Gone again between the two statements (a reset committed): the
        // producer is told to retry, as when a channel stays locked.
        None => sqlx::query(SELECT)
            .bind(principal)
            .bind(name.as_str())
            .bind(table.as_str())
            .fetch_optional(&mut *conn)
            .await?
            .ok_or(StoreError::Busy(sqlx::Error::RowNotFound))?,
    };
    locked(&row)
}

/// Deletes the channels (of every principal) whose last commit wrote to
/// `table`, in the caller's transaction: the table is being dropped.
/// Waits for a write in flight on one of them. Returns how many.
pub async fn forget_table(conn: &mut PgConnection, table: &TableName) -> StoreResult<u64> {
    let deleted = sqlx::query("delete from idem.channels where table_name = $1")
        .bind(table.as_str())
        .execute(conn)
        .await?;
    Ok(deleted.rows_affected())
}

/// What a batch found of its channels once it held them.
pub struct LockedChannels {
    /// Each channel's kind and committed offset, in the order asked for:
    /// `None` for a channel not made yet, or whose first commit is still in
    /// flight (a batch leaves both to a write alone, which makes or waits
    /// for the channel).
    pub channels: Vec<Option<(OffsetKind, Offset)>>,
    /// The definition of the batch's table as it is once the channels are
    /// held (read when any channel was locked, by the same statement).
    pub def: Option<TableDef>,
}

/// Locks the rows of existing channels `(principal, name)`, in one order
/// (the channels of one table's POSTs in a batch; a batch spanning tables
/// locks each table's in turn, so two such batches may deadlock: Postgres
/// ends one, whose POSTs then go alone), and reads `table`'s definition
/// with them: a wait for a channel may outlast a change of the table.
pub async fn lock_channels(
    conn: &mut PgConnection,
    channels: &[(&Principal, &ChannelName)],
    table: &TableName,
) -> StoreResult<LockedChannels> {
    let principals: Vec<&Principal> = channels.iter().map(|(p, _)| *p).collect();
    let names: Vec<&str> = channels.iter().map(|(_, n)| n.as_str()).collect();
    // The definition comes on the first row only: it may be large.
    // language=PostgreSQL
    let rows = sqlx::query(
        "with locked as (
           select c.principal, c.name, c.offset_kind, c.committed_offset
             from idem.channels c
             join unnest($1::text[], $2::text[]) v(principal, name)
               on c.principal = v.principal and c.name = v.name
            where c.committed_offset is not null
            order by c.principal, c.name
              for update of c)
         select l.principal, l.name, l.offset_kind, l.committed_offset,
                case when row_number() over () = 1
                     then (select definition from idem.tables where name = $3) end as definition
           from locked l",
    )
    .bind(&principals)
    .bind(&names)
    .bind(table.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut found = std::collections::HashMap::new();
    let mut def = None;
    for row in rows {
        let kind: String = row.try_get("offset_kind")?;
        let kind = OffsetKind::parse(&kind).map_err(|_| corrupt())?;
        let committed: String = row.try_get("committed_offset")?;
        let committed = Offset::parse(kind, &committed).map_err(|_| corrupt())?;
        let key: (Principal, String) = (row.try_get("principal")?, row.try_get("name")?);
        found.insert(key, (kind, committed));
        if let Some(Json(read)) = row.try_get::<Option<Json<TableDef>>, _>("definition")? {
            def = Some(read);
        }
    }
    let channels = channels
        .iter()
        .map(|(p, n)| found.remove(&((*p).clone(), n.to_string())))
        .collect();
    Ok(LockedChannels { channels, def })
}

/// Records several writes' offsets on their channels' rows, which
/// `lock_channels` locked, in one statement.
pub async fn commit_offsets(
    conn: &mut PgConnection,
    commits: &[OffsetCommit<'_>],
) -> StoreResult<()> {
    let column =
        |f: &dyn Fn(&OffsetCommit<'_>) -> String| commits.iter().map(f).collect::<Vec<_>>();
    let principals = column(&|c| c.principal.to_string());
    let names = column(&|c| c.name.to_string());
    let offsets = column(&|c| c.offset.to_string());
    let tables = column(&|c| c.table.to_string());
    let loads: Vec<LoadId> = commits.iter().map(|c| c.load_id).collect();
    // language=PostgreSQL
    sqlx::query(
        "update idem.channels c
            set committed_offset = v.committed_offset, table_name = v.table_name, load_id = v.load_id,
                committed_at = clock_timestamp(), commits = c.commits + 1
           from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[])
                  v(principal, name, committed_offset, table_name, load_id)
          where c.principal = v.principal and c.name = v.name",
    )
    .bind(&principals)
    .bind(&names)
    .bind(&offsets)
    .bind(&tables)
    .bind(&loads)
    .execute(conn)
    .await?;
    Ok(())
}

/// What a write commits on its channel, in its transaction.
pub struct OffsetCommit<'a> {
    pub principal: &'a Principal,
    pub name: &'a ChannelName,
    pub offset: &'a Offset,
    pub table: &'a TableName,
    pub load_id: LoadId,
}

/// Records the offset on the channel's row, which `lock_channel` locked.
pub async fn commit_offset(conn: &mut PgConnection, commit: &OffsetCommit<'_>) -> StoreResult<()> {
    // language=PostgreSQL
    sqlx::query(
        "update idem.channels
            set committed_offset = $3, table_name = $4, load_id = $5,
                committed_at = clock_timestamp(), commits = commits + 1
          where principal = $1 and name = $2",
    )
    .bind(commit.principal)
    .bind(commit.name.as_str())
    .bind(commit.offset.to_string())
    .bind(commit.table.as_str())
    .bind(commit.load_id)
    .execute(conn)
    .await?;
    Ok(())
}

// language=PostgreSQL
const INFO_COLUMNS: &str =
    "name, offset_kind, committed_offset, table_name, load_id, committed_at, commits";

fn info(row: &PgRow) -> StoreResult<ChannelInfo> {
    let kind: String = row.try_get("offset_kind")?;
    Ok(ChannelInfo {
        name: row.try_get("name")?,
        offset_kind: OffsetKind::parse(&kind).map_err(|_| corrupt())?,
        committed_offset: row.try_get("committed_offset")?,
        table: row.try_get("table_name")?,
        load_id: row.try_get("load_id")?,
        committed_at: row.try_get("committed_at")?,
        commits: row.try_get("commits")?,
    })
}

impl Store {
    /// `principal`'s channels by name, `limit` of them after `after`.
    pub async fn channels(
        &self,
        principal: &Principal,
        after: Option<&ChannelName>,
        limit: i64,
    ) -> StoreResult<Vec<ChannelInfo>> {
        // A row without an offset is a first write's, not committed yet.
        // language=PostgreSQL
        let rows = sqlx::query(&format!(
            "select {INFO_COLUMNS} from idem.channels
              where principal = $1 and committed_offset is not null
                and ($2::text is null or name > $2)
              order by name limit $3"
        ))
        .bind(principal)
        .bind(after.map(ChannelName::as_str))
        .bind(limit)
        .fetch_all(&mut *self.acquire().await?)
        .await?;
        rows.iter().map(info).collect()
    }

    /// One of `principal`'s channels, if it committed an offset.
    pub async fn channel(
        &self,
        principal: &Principal,
        name: &ChannelName,
    ) -> StoreResult<Option<ChannelInfo>> {
        // language=PostgreSQL
        let row = sqlx::query(&format!(
            "select {INFO_COLUMNS} from idem.channels
              where principal = $1 and name = $2 and committed_offset is not null"
        ))
        .bind(principal)
        .bind(name.as_str())
        .fetch_optional(&mut *self.acquire().await?)
        .await?;
        row.as_ref().map(info).transpose()
    }

    /// Forgets the channel, its kind included: its next write starts it
    /// afresh. Waits for a write in flight on it. Whether there was one.
    pub async fn reset_channel(
        &self,
        principal: &Principal,
        name: &ChannelName,
    ) -> StoreResult<bool> {
        // language=PostgreSQL
        let done = sqlx::query("delete from idem.channels where principal = $1 and name = $2")
            .bind(principal)
            .bind(name.as_str())
            .execute(&mut *self.acquire().await?)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
