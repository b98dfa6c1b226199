//! The way of a write: body → decode → validate → stage → publish (a PUT)
//! or merge (a POST).
//!
//! A folder for what happens to a body, then one for each kind of write,
//! holding its whole flow and its own `impl Pipeline`, entry points
//! included. Each imports only the folders above it in this list:
//!
//! - `intake/`: what every write does with its body: read it within its
//!   limits, spool it, decode it to COPY data; wait for a turn to write;
//!   find (or guess) the table it goes to; its ticket in the ledger.
//! - `table/`: a table's own changes: fitted to a body under `schema:
//!   evolve`, dropped (`DELETE /tables/{table}`), its partitions past
//!   retention refused and dropped; the definitions this process
//!   remembers.
//! - `day/`: a day replaced (`PUT /partitions/{table}/{ds}`): staged, then
//!   swapped in.
//! - `rows/`: rows merged into a table (`POST /rows`), and a table's
//!   rejects written again.
//! - `keyed/`: a write made once by its key (an Idempotency-Key around a
//!   PUT, a POST or a replay; a channel's offset around a POST), alone or
//!   in a batch of small POSTs, and the answer it stores.
//! - `loads/`: loads of several partitions: opened, staged part by part,
//!   audited and published; or a range or a whole table in one request.
//!
//! `error.rs` is what a write is refused or fails with. This file holds
//! `Pipeline`, what every write runs on, and the API `http/` uses (each
//! item re-exported from the file that defines it). The folders name
//! `Pipeline` from here, so this file imports only what `Pipeline` holds
//! (`intake/slots.rs`, `keyed/batch_queue.rs`, `table/definitions.rs`),
//! none of which reaches back to it.
//!
//! Nothing here knows HTTP: it takes a body stream and the store, and
//! answers domain receipts or a `WriteError`; `http/receipts.rs` gives the
//! receipts their JSON form (handed in as an `AnswerForm` where a keyed
//! answer is stored).

mod day;
mod error;
mod intake;
mod keyed;
mod loads;
mod rows;
mod table;

use std::sync::Arc;

pub use day::receipt::Receipt;
pub use day::request::PutPartition;
pub use error::{WriteError, WriteResult};
pub use intake::body::{BodyError, BodyHeaders, BodyLimits, BodySource, DigestMode, MinRate};
pub use keyed::answer::{AnswerBody, AnswerForm, KeyedAnswer};
pub use keyed::key::KeyedWrite;
pub use loads::many::PutMany;
pub use loads::open::{LoadView, OpenLoad};
pub use loads::part::PartUpload;
pub use loads::run::RunLoad;
pub use loads::target::LoadTarget;
pub use rows::receipt::{ReplayReceipt, RowsReceipt};
pub use rows::request::{PostRows, ReplayRejects};
pub use table::drop::{DropReceipt, MODE as DROP_MODE};
pub use table::retention::{Expired, MODE as EXPIRE_MODE};

use crate::config::Settings;
use crate::metrics::Metrics;
use crate::store::Store;
use intake::slots::LoadSlots;
use keyed::batch_queue::Batches;
use table::definitions::Definitions;

/// What a write needs of the application.
#[derive(Clone)]
pub struct Pipeline {
    pub store: Store,
    pub settings: Arc<Settings>,
    /// A write holds one while it holds database connections, so that
    /// writes never take the whole pool, nor one token all the turns.
    pub load_slots: Arc<LoadSlots>,
    pub metrics: Arc<Metrics>,
    /// Small POSTs waiting to be written together (see `keyed/batch.rs`).
    pub batches: Arc<Batches>,
    /// Table definitions read (see `table/definitions.rs`).
    pub definitions: Arc<Definitions>,
}

impl Pipeline {
    /// The write path over `store`: the turns to write its pool allows
    /// (`Settings::load_slots`), no batch waiting, no definition read yet.
    pub fn new(store: Store, settings: Arc<Settings>, metrics: Arc<Metrics>) -> Pipeline {
        let pool = store.pool_size();
        let slots = usize::try_from(settings.load_slots(pool)).unwrap_or(1);
        let share = usize::try_from(settings.load_slots_per_token(pool)).unwrap_or(1);
        Pipeline {
            store,
            settings,
            load_slots: Arc::new(LoadSlots::new(slots, share)),
            metrics,
            batches: Arc::default(),
            definitions: Arc::default(),
        }
    }
}
