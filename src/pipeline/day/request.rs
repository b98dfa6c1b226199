//! What a PUT of a day asks: the day, its body, the version it expects of
//! the day, and what becomes of its bad rows.

use crate::access::Actor;
use crate::names::TableName;
use crate::period::Period;
use crate::pipeline::intake::body::BodySource;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::schema::BadRowPolicy;
use crate::versions::Expected;

/// A `PUT /partitions/{table}/{ds}`.
pub struct PutPartition {
    pub table: TableName,
    pub ds: Period,
    pub body: BodySource,
    pub conditions: Expected,
    /// Who sent it, for the ledger.
    pub actor: Actor,
    /// `?bad_rows=`: the table's policy for this request only.
    pub bad_rows: Option<BadRowPolicy>,
    /// Whether an undeclared table may be made from the body (`?create=`,
    /// true unless asked otherwise).
    pub create_table: bool,
}

pub const MODE: &str = "replace";

impl PutPartition {
    /// The ledger's ticket for this load.
    pub fn ticket(&self, idempotency_key: Option<&str>) -> LoadTicket {
        LoadTicket::new(
            &self.table,
            Some(self.ds),
            MODE,
            idempotency_key,
            &self.actor,
        )
    }
}
