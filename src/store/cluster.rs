//! The database's place in a Citus cluster, when it has Citus: idem's
//! advisory locks and idempotency records live on the node it is connected
//! to, so every idem process must use the coordinator, the one node every
//! process can share. A plain Postgres is its own coordinator.

use super::{Store, StoreError, StoreResult};

/// What the database idem connected to is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterRole {
    /// A Postgres without Citus.
    Plain,
    /// A Citus coordinator (group 0), or a database with the extension
    /// whose nodes are not registered yet.
    Coordinator,
    /// A Citus worker: its group in the cluster.
    Worker(i32),
}

impl Store {
    /// The database's role: plain, a Citus coordinator or a worker.
    pub async fn cluster_role(&self) -> StoreResult<ClusterRole> {
        let mut conn = self.acquire().await?;
        if !super::distribute::citus_installed(&mut conn).await? {
            return Ok(ClusterRole::Plain);
        }
        // language=PostgreSQL
        let group: i32 = sqlx::query_scalar("select groupid from pg_catalog.pg_dist_local_group")
            .fetch_one(&mut *conn)
            .await?;
        Ok(match group {
            0 => ClusterRole::Coordinator,
            group => ClusterRole::Worker(group),
        })
    }

    /// Refuses a Citus worker: locks taken there would not be seen by the
    /// processes connected to the coordinator or to another worker.
    pub async fn refuse_citus_worker(&self) -> StoreResult<ClusterRole> {
        match self.cluster_role().await? {
            ClusterRole::Worker(group) => Err(StoreError::CitusWorker(group)),
            role => Ok(role),
        }
    }
}
