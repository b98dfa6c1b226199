//! What a write of rows asks: a POST's rows (and its body, when a batch
//! decoded it already), a replay of a table's rejects; and how a request
//! is read: the mode its rows are written in, the options they are encoded
//! with.

use bytes::Bytes;

use crate::access::Actor;
use crate::channel::ChannelOffset;
use crate::idempotency::IdempotencyKey;
use crate::ids::Principal;
use crate::ingest::EncodeOptions;
use crate::names::TableName;
use crate::pipeline::error::{WriteError, WriteResult};
use crate::pipeline::intake::body::BodySource;
use crate::pipeline::intake::decode::Decoded;
use crate::pipeline::intake::ticket::LoadTicket;
use crate::schema::{BadRowPolicy, MergeMode, TableDef};

/// A `POST /rows`.
pub struct PostRows {
    pub table: TableName,
    pub mode: Option<MergeMode>,
    pub body: BodySource,
    /// Who sent it and under which key: a keyless table's row ids are scoped
    /// by them (see `EncodeOptions::row_id_scope`).
    pub principal: Principal,
    /// Required but on a channel, whose offset makes the write idempotent.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The channel and offset it commits, if any (see `keyed/channel.rs`); boxed,
    /// as most POSTs have none.
    pub channel: Option<Box<ChannelOffset>>,
    /// Who sent it, for the ledger.
    pub actor: Actor,
    /// The table's definition, when the key's claim read it already.
    pub known_def: Option<TableDef>,
    /// The body, decoded already (it went to a batch, which could not
    /// write it; see `keyed/batch.rs`).
    pub predecoded: Option<Box<Predecoded>>,
    /// `?bad_rows=`: the table's policy for this request only.
    pub bad_rows: Option<BadRowPolicy>,
    /// Whether an undeclared table may be made from the body (`?create=`,
    /// true unless asked otherwise).
    pub create_table: bool,
}

/// A small body decoded before its write's transaction: for that table
/// definition and mode, under that ticket (its load id is in the rows).
pub struct Predecoded {
    pub def: TableDef,
    pub mode: MergeMode,
    pub ticket: LoadTicket,
    pub decoded: Decoded,
    /// The body as sent (after gunzip), to decode again if the table
    /// changed meanwhile.
    pub body: Bytes,
    /// The rows as binary COPY data.
    pub copy: Bytes,
}

impl PostRows {
    /// The ledger's ticket for this load; its mode is the one asked for, if
    /// any (the table's default is known only later).
    pub fn ticket(&self) -> LoadTicket {
        if let Some(predecoded) = &self.predecoded {
            return predecoded.ticket.clone();
        }
        let mode = self.mode.map(MergeMode::as_str).unwrap_or("default");
        LoadTicket::new(
            &self.table,
            None,
            mode,
            Some(&self.write_key()),
            &self.actor,
        )
    }

    /// What names this write in the ledger and scopes a keyless table's
    /// row ids: its Idempotency-Key, else its channel and offset.
    pub fn write_key(&self) -> String {
        match (&self.idempotency_key, &self.channel) {
            (Some(key), _) => key.to_string(),
            (None, Some(channel)) => channel.write_key(),
            (None, None) => String::new(),
        }
    }
}

/// How a POST's rows are encoded for `mode`.
pub fn encode_options(
    def: &TableDef,
    mode: MergeMode,
    principal: &Principal,
    key: &str,
) -> EncodeOptions {
    EncodeOptions {
        allowed: None,
        ds: None,
        // Without a key, a row's id is its content and its occurrence in
        // this request; the request's key keeps other requests' rows apart.
        row_id_scope: def
            .primary_key
            .is_empty()
            .then(|| format!("{principal}\0{key}").into_bytes()),
        tombstones: mode.replaces(),
        presence: mode == MergeMode::Patch,
    }
}

/// The mode asked for, or the table's default: its `write_mode`, else merge
/// with a key and append without. A table that keeps versions takes no
/// other mode, and no other table takes `versions`.
pub fn choose_mode(def: &TableDef, asked: Option<MergeMode>) -> WriteResult<MergeMode> {
    let keyed = !def.primary_key.is_empty();
    let versions = def.keeps_versions();
    match asked {
        None => Ok(def.write_mode.unwrap_or(if keyed {
            MergeMode::Merge
        } else {
            MergeMode::Append
        })),
        Some(mode) if versions && mode != MergeMode::Versions => Err(WriteError::Mode(format!(
            "table {:?} keeps every version (write_mode \"versions\"); send mode=versions or no mode, not mode={}",
            def.name,
            mode.as_str()
        ))),
        Some(MergeMode::Versions) if !versions => Err(WriteError::Mode(format!(
            "mode=versions needs a table declared with \"write_mode\": \"versions\", and table {:?} is not",
            def.name
        ))),
        Some(MergeMode::Append) if keyed => Err(WriteError::Mode(format!(
            "table {:?} has a primary key; use mode=merge or mode=insert_missing",
            def.name
        ))),
        Some(mode @ (MergeMode::Merge | MergeMode::Patch | MergeMode::InsertMissing)) if !keyed => {
            Err(WriteError::Mode(format!(
                "mode={} needs a primary key, and table {:?} has none; use mode=append",
                mode.as_str(),
                def.name
            )))
        }
        Some(mode) => Ok(mode),
    }
}

/// `POST /rejects/replay?table=`.
pub struct ReplayRejects {
    pub table: TableName,
    pub principal: Principal,
    pub idempotency_key: IdempotencyKey,
    pub actor: Actor,
    /// The request's body (none is expected; it is read for the key's
    /// fingerprint).
    pub body: BodySource,
}

impl ReplayRejects {
    pub fn ticket(&self) -> LoadTicket {
        LoadTicket::new(
            &self.table,
            None,
            REPLAY_MODE,
            Some(self.idempotency_key.as_str()),
            &self.actor,
        )
    }
}

/// A replay's mode in the ledger.
pub const REPLAY_MODE: &str = "replay";
