//! Retention (`"retention"` in a table's declaration): a write to a period
//! already past it is refused, and expire rounds drop the partitions that
//! pass it. Any idem process may run a round; one runs at a time (see
//! `store::write::expire`). Each drop is a load of mode `expire` in the
//! ledger, made by `idem` itself, with the rows and content hash dropped.

use chrono::NaiveDateTime;

use crate::access::Actor;
use crate::ids::LoadId;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::ticket::LoadTicket;
use crate::pipeline::Pipeline;
use crate::schema::TableDef;
use crate::store::ledger::{LoadEntry, LoadStatus};
use crate::store::write::expire::ExpireRound;

/// The ledger mode of a partition dropped for retention.
pub const MODE: &str = "expire";

/// One partition an expire round dropped.
#[derive(Clone, Debug)]
pub struct Expired {
    pub table: TableName,
    pub period: Period,
    /// Its ledger row.
    pub load_id: LoadId,
    pub rows: u64,
}

impl Pipeline {
    /// Refuses a write to any of `periods` that is past `def`'s retention
    /// (it would be dropped by the next round). A write accepted before its
    /// period passed is dropped with it by the round after.
    pub(crate) fn refuse_expired(
        &self,
        def: &TableDef,
        periods: impl IntoIterator<Item = Period>,
    ) -> WriteResult<()> {
        let Some(retention) = def.retention else {
            return Ok(());
        };
        let now = self.settings.now();
        match periods.into_iter().find(|p| retention.expired(*p, now)) {
            None => Ok(()),
            Some(period) => Err(WriteError::PartitionExpired {
                table: def.name.clone(),
                period,
                retention,
                oldest_kept: retention.oldest_kept(def.grain, now),
            }),
        }
    }

    /// The partitions `def`'s table holds that its retention would drop
    /// now (what `PUT /tables/{table}?dry_run=true` answers), oldest first.
    pub async fn would_expire(&self, def: &TableDef) -> WriteResult<Vec<Period>> {
        let Some(retention) = def.retention else {
            return Ok(Vec::new());
        };
        let now = self.settings.now();
        let stored = self.store.partitions(&def.name, None, i64::MAX).await?;
        Ok(stored
            .iter()
            .filter_map(|p| Period::parse(&p.ds, def.grain))
            .filter(|p| retention.expired(*p, now))
            .collect())
    }

    /// Runs an expire round at idem's clock (`Settings::now`); see
    /// `expire_partitions_at`.
    pub async fn expire_partitions(&self) -> WriteResult<Option<Vec<Expired>>> {
        self.expire_partitions_at(self.settings.now()).await
    }

    /// Drops every partition past its table's retention at `now`, each in
    /// its own transaction with its ledger row, and the history versions
    /// that ended before the limit; `None` when another round is running.
    pub async fn expire_partitions_at(
        &self,
        now: NaiveDateTime,
    ) -> WriteResult<Option<Vec<Expired>>> {
        let Some(mut round) = self.store.begin_expire_round().await? else {
            return Ok(None);
        };
        let result = self.run_round(&mut round, now).await;
        round.finish().await;
        result.map(Some)
    }

    async fn run_round(
        &self,
        round: &mut ExpireRound,
        now: NaiveDateTime,
    ) -> WriteResult<Vec<Expired>> {
        let mut expired = Vec::new();
        for def in round.tables().await? {
            let Some(retention) = def.retention else {
                continue;
            };
            for label in round.partitions(&def.name).await? {
                let Some(period) = Period::parse(&label, def.grain) else {
                    continue;
                };
                if retention.expired(period, now) {
                    expired.extend(self.expire_one(round, &def, period).await?);
                }
            }
            round.expire_history(&def, retention.limit(now)).await?;
        }
        Ok(expired)
    }

    /// Drops one partition, recorded as a load of mode `expire`.
    async fn expire_one(
        &self,
        round: &mut ExpireRound,
        def: &TableDef,
        period: Period,
    ) -> WriteResult<Option<Expired>> {
        let ticket = LoadTicket::new(&def.name, Some(period), MODE, None, &Actor::idem());
        let entry = LoadEntry {
            status: LoadStatus::Published,
            changed: true,
            ..ticket.entry()
        };
        let wait = self.settings.idempotency_wait();
        let Some(dropped) = round.expire(def, period, entry, wait).await? else {
            return Ok(None);
        };
        self.metrics.partition_expired(def.name.as_str());
        tracing::info!(table = %def.name, ds = %period.label(), rows = dropped.rows,
                       "dropped a partition past its table's retention");
        Ok(Some(Expired {
            table: def.name.clone(),
            period,
            load_id: ticket.load_id,
            rows: dropped.rows,
        }))
    }
}
