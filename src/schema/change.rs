//! How one definition of a table may become another: what an evolving body
//! wants of its table (`SchemaWants`), the safe changes (`SchemaChange`) a new
//! declaration plans from the stored one (`plan_changes`), and a definition
//! after them (`TableDef::apply`).

use serde::Serialize;

use super::audits::Audits;
use super::distribution::Distribution;
use super::error::SchemaError;
use super::policy::{
    BadRowPolicy, DuplicatePolicy, HistoryKind, MergeMode, RetryWindow, SchemaPolicy,
};
use super::retention::Retention;
use super::table::{check_width, Column, ColumnType, TableDef};
use crate::names::{ColumnName, NameError};

/// What a body under `schema: evolve` needs of its table: columns for the
/// fields it lacks, with their values' type, and wider types for columns
/// some of whose values do not fit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemaWants {
    /// `None`: only nulls seen so far (made text if nothing else comes).
    pub add: std::collections::BTreeMap<ColumnName, Option<ColumnType>>,
    pub widen: std::collections::BTreeMap<ColumnName, ColumnType>,
    /// The first field whose name no column can have: the body is refused
    /// (`invalid_name`), as a first write to a new table would be.
    pub refused: Option<NameError>,
}

impl SchemaWants {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.widen.is_empty() && self.refused.is_none()
    }

    /// A field that cannot become a column, for the name's reason.
    pub fn refuse_name(&mut self, error: NameError) {
        self.refused.get_or_insert(error);
    }

    /// A column for field `name`, holding a value of type `ty` (`None`: a
    /// null, which any type holds).
    pub fn add_column(&mut self, name: ColumnName, ty: Option<ColumnType>) {
        let slot = self.add.entry(name).or_insert(ty);
        *slot = match (*slot, ty) {
            (Some(a), Some(b)) => Some(wider_of(a, b)),
            (a, b) => a.or(b),
        };
    }

    /// Column `name` widened to at least `to`.
    pub fn widen_column(&mut self, name: ColumnName, to: ColumnType) {
        let slot = self.widen.entry(name).or_insert(to);
        *slot = wider_of(*slot, to);
    }

    /// What `from` lacks of `to`: its columns, and its wider types.
    pub fn to_reach(from: &TableDef, to: &TableDef) -> Self {
        let mut wants = SchemaWants::default();
        for column in &to.columns {
            match from.column(&column.name) {
                None => wants.add_column(column.name.clone(), Some(column.ty)),
                Some(have) if have.ty.widens_to(column.ty) => {
                    wants.widen_column(column.name.clone(), column.ty)
                }
                Some(_) => {}
            }
        }
        wants
    }

    /// The changes that give `def` what is wanted and it lacks (another
    /// writer may have given it already); a widening that is not safe is
    /// left out, and the rows that needed it stay bad.
    pub fn changes_for(&self, def: &TableDef) -> Vec<SchemaChange> {
        let mut changes = Vec::new();
        // A column another writer added meanwhile, narrower than this body's
        // values, is widened as if it had been there.
        let mut widen = self.widen.clone();
        for (name, ty) in &self.add {
            if let (Some(_), Some(ty)) = (def.column(name), ty) {
                let slot = widen.entry(name.clone()).or_insert(*ty);
                *slot = wider_of(*slot, *ty);
            }
        }
        for (name, to) in &widen {
            let Some(column) = def.column(name) else {
                continue;
            };
            let fixed = def.partition_by.as_ref() == Some(name)
                || def.primary_key.contains(name)
                || def.distributed_by(name);
            if !fixed && column.ty.widens_to(*to) {
                changes.push(SchemaChange::WidenColumn {
                    column: name.clone(),
                    from: column.ty,
                    to: *to,
                });
            }
        }
        for (name, ty) in &self.add {
            if def.column(name).is_none() {
                changes.push(SchemaChange::AddColumn {
                    column: name.clone(),
                    ty: ty.unwrap_or(ColumnType::Text),
                });
            }
        }
        changes
    }
}

/// The type that holds values of both `a` and `b`: the wider when one
/// widens to the other, text otherwise.
fn wider_of(a: ColumnType, b: ColumnType) -> ColumnType {
    if a == b || b.widens_to(a) {
        a
    } else if a.widens_to(b) {
        b
    } else {
        ColumnType::Text
    }
}

/// One safe change from a stored definition towards a declared one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SchemaChange {
    AddColumn {
        column: ColumnName,
        #[serde(rename = "type")]
        ty: ColumnType,
    },
    WidenColumn {
        column: ColumnName,
        from: ColumnType,
        to: ColumnType,
    },
    SetCursor {
        cursor: Option<ColumnName>,
    },
    SetSchemaPolicy {
        schema: SchemaPolicy,
    },
    SetBadRowPolicy {
        bad_rows: BadRowPolicy,
    },
    SetRejectRetryWindow {
        reject_retry_window: RetryWindow,
    },
    SetDuplicatePolicy {
        duplicates: DuplicatePolicy,
    },
    SetDuplicateLog {
        duplicate_log: bool,
    },
    SetAudits {
        audits: Box<Audits>,
    },
    SetWriteMode {
        write_mode: Option<MergeMode>,
    },
    /// History turned on (the store seeds it from the stored rows).
    SetHistory {
        history: Option<HistoryKind>,
    },
    /// The rows moved elsewhere on a Citus cluster (only while the table
    /// holds none; the store checks).
    SetDistribution {
        distribution: Distribution,
    },
    /// Partitions kept for another length of time (dropped by the next
    /// expire round when past it).
    SetRetention {
        retention: Option<Retention>,
    },
    /// A key declared on a table that had none (one a first write made):
    /// its stored rows take their ids from the key, which becomes NOT NULL
    /// and unique in each partition (the store checks, and resolves
    /// repeats when asked).
    AdoptKey {
        primary_key: Vec<ColumnName>,
    },
}

impl SchemaChange {
    /// Whether the change is to the definition only, not to the table's
    /// Postgres shape.
    pub fn is_policy(&self) -> bool {
        !matches!(
            self,
            SchemaChange::AddColumn { .. } | SchemaChange::WidenColumn { .. }
        )
    }
}

/// The safe changes that turn `old` into `new`, or a 409 saying why there is
/// none. Column order in the declaration does not matter for existing columns.
pub fn plan_changes(old: &TableDef, new: &TableDef) -> Result<Vec<SchemaChange>, SchemaError> {
    let conflict = SchemaError::Conflict;
    if old.partition_by != new.partition_by {
        return Err(conflict(match &old.partition_by {
            Some(column) => format!(
                "the partition column is {column:?}; changing it needs a new table"
            ),
            None => "the table has no partition column (partition_by null); adding one needs a new table".into(),
        }));
    }
    if old.grain != new.grain {
        return Err(conflict(format!(
            "the grain is {}; changing it needs a new table",
            old.grain.as_str()
        )));
    }
    let mut changes = Vec::new();
    if old.primary_key != new.primary_key {
        changes.push(adopt_key(old, new)?);
    }
    for col in &old.columns {
        let Some(declared) = new.column(&col.name) else {
            return Err(conflict(format!(
                "column {:?} exists and is not in the declaration; dropping a column is unsafe",
                col.name
            )));
        };
        if declared.ty != col.ty && old.distributed_by(&col.name) {
            return Err(SchemaError::Citus(format!(
                "column {:?} is the table's distribution column: Citus cannot change its type",
                col.name
            )));
        }
        if declared.ty != col.ty {
            if col.ty.widens_to(declared.ty) {
                changes.push(SchemaChange::WidenColumn {
                    column: col.name.clone(),
                    from: col.ty,
                    to: declared.ty,
                });
            } else {
                return Err(conflict(format!(
                    "column {:?} is {}; changing it to {} may lose data",
                    col.name,
                    col.ty.sql_name(),
                    declared.ty.sql_name()
                )));
            }
        }
    }
    for col in &new.columns {
        if old.column(&col.name).is_none() {
            changes.push(SchemaChange::AddColumn {
                column: col.name.clone(),
                ty: col.ty,
            });
        }
    }
    check_width(&old.apply(&changes).columns)?;
    check_versioning(old, new)?;
    changes.extend(policy_changes(old, new));
    Ok(changes)
}

/// The adoption of `new`'s key by `old`, a table without one whose columns
/// hold it; any other change of a key is a 409.
fn adopt_key(old: &TableDef, new: &TableDef) -> Result<SchemaChange, SchemaError> {
    if !old.primary_key.is_empty() {
        return Err(SchemaError::Conflict(format!(
            "the primary key is {:?}; changing the key is unsafe",
            old.primary_key
        )));
    }
    if let Some(missing) = new.primary_key.iter().find(|c| old.column(c).is_none()) {
        return Err(SchemaError::Conflict(format!(
            "key column {missing:?} is new: the stored rows have no value for it"
        )));
    }
    Ok(SchemaChange::AdoptKey {
        primary_key: new.primary_key.clone(),
    })
}

/// Whether `new`'s write mode, history and cursor may follow `old`'s. A
/// table that keeps versions identifies its rows by key and cursor, so
/// turning that on or off, or changing the cursor of a table that keeps
/// versions or history, would change what its stored rows are; turning
/// history off would drop it. History may be turned on where the cursor is
/// NOT NULL already (declared so, by `versions`).
fn check_versioning(old: &TableDef, new: &TableDef) -> Result<(), SchemaError> {
    let conflict = SchemaError::Conflict;
    if old.keeps_versions() != new.keeps_versions() {
        return Err(conflict(
            "write_mode \"versions\" stores rows by key and cursor; turning it on or off needs a new table".into(),
        ));
    }
    if (old.keeps_versions() || old.history.is_some()) && old.cursor != new.cursor {
        return Err(conflict(
            "the cursor orders this table's versions; changing it is unsafe".into(),
        ));
    }
    if old.history.is_some() && new.history.is_none() {
        return Err(conflict(
            "the table keeps history; turning it off would drop it (drop and declare the table again)".into(),
        ));
    }
    // History turned on later makes the cursor NOT NULL (the store
    // refuses it when a stored row has none: see `history::evolve`).
    Ok(())
}

/// The changes of `new`'s cursor and policies from `old`'s: to the
/// definition alone.
fn policy_changes(old: &TableDef, new: &TableDef) -> Vec<SchemaChange> {
    let mut changes = Vec::new();
    if old.cursor != new.cursor {
        changes.push(SchemaChange::SetCursor {
            cursor: new.cursor.clone(),
        });
    }
    if old.schema != new.schema {
        changes.push(SchemaChange::SetSchemaPolicy { schema: new.schema });
    }
    if old.bad_rows != new.bad_rows {
        changes.push(SchemaChange::SetBadRowPolicy {
            bad_rows: new.bad_rows,
        });
    }
    if old.reject_retry_window != new.reject_retry_window {
        changes.push(SchemaChange::SetRejectRetryWindow {
            reject_retry_window: new.reject_retry_window,
        });
    }
    if old.duplicates != new.duplicates {
        changes.push(SchemaChange::SetDuplicatePolicy {
            duplicates: new.duplicates,
        });
    }
    if old.duplicate_log != new.duplicate_log {
        changes.push(SchemaChange::SetDuplicateLog {
            duplicate_log: new.duplicate_log,
        });
    }
    if old.audits != new.audits {
        changes.push(SchemaChange::SetAudits {
            audits: new.audits.clone(),
        });
    }
    if old.write_mode != new.write_mode {
        changes.push(SchemaChange::SetWriteMode {
            write_mode: new.write_mode,
        });
    }
    if old.history != new.history {
        changes.push(SchemaChange::SetHistory {
            history: new.history,
        });
    }
    if old.retention != new.retention {
        changes.push(SchemaChange::SetRetention {
            retention: new.retention,
        });
    }
    if new.distribution != Distribution::Unstated && old.distribution != new.distribution {
        changes.push(SchemaChange::SetDistribution {
            distribution: new.distribution.clone(),
        });
    }
    changes
}

impl TableDef {
    /// The definition after `changes` (as planned by `plan_changes`).
    pub fn apply(&self, changes: &[SchemaChange]) -> TableDef {
        let mut def = self.clone();
        for change in changes {
            match change {
                SchemaChange::AddColumn { column, ty } => def.columns.push(Column {
                    name: column.clone(),
                    ty: *ty,
                    nullable: true,
                }),
                SchemaChange::WidenColumn { column, to, .. } => {
                    if let Some(c) = def.columns.iter_mut().find(|c| &c.name == column) {
                        c.ty = *to;
                    }
                }
                SchemaChange::SetCursor { cursor } => def.cursor = cursor.clone(),
                SchemaChange::SetSchemaPolicy { schema } => def.schema = *schema,
                SchemaChange::SetBadRowPolicy { bad_rows } => def.bad_rows = *bad_rows,
                SchemaChange::SetRejectRetryWindow {
                    reject_retry_window,
                } => def.reject_retry_window = *reject_retry_window,
                SchemaChange::SetDuplicatePolicy { duplicates } => def.duplicates = *duplicates,
                SchemaChange::SetDuplicateLog { duplicate_log } => {
                    def.duplicate_log = *duplicate_log
                }
                SchemaChange::SetAudits { audits } => def.audits = audits.clone(),
                SchemaChange::SetWriteMode { write_mode } => def.write_mode = *write_mode,
                SchemaChange::SetHistory { history } => {
                    def.history = *history;
                    // A version's start is its cursor: it may not be null.
                    if let (Some(_), Some(cursor)) = (history, &def.cursor) {
                        if let Some(c) = def.columns.iter_mut().find(|c| &c.name == cursor) {
                            c.nullable = false;
                        }
                    }
                }
                SchemaChange::SetDistribution { distribution } => {
                    def.distribution = distribution.clone()
                }
                SchemaChange::SetRetention { retention } => def.retention = *retention,
                SchemaChange::AdoptKey { primary_key } => {
                    def.primary_key = primary_key.clone();
                    for column in def.columns.iter_mut() {
                        if primary_key.contains(&column.name) {
                            column.nullable = false;
                        }
                    }
                }
            }
        }
        def
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::TableName;
    use crate::schema::TableDeclaration;

    fn decl(json: &str) -> TableDeclaration {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn changing_the_key_or_narrowing_is_refused_and_widening_is_planned() {
        let old = decl(r#"{"columns":{"id":"integer","n":"integer"},"primary_key":["id"]}"#)
            .into_def(TableName::parse("t").unwrap())
            .unwrap();
        let rekeyed = decl(r#"{"columns":{"id":"integer","n":"integer"},"primary_key":["n"]}"#)
            .into_def(TableName::parse("t").unwrap())
            .unwrap();
        assert!(plan_changes(&old, &rekeyed).is_err());
        let widened =
            decl(r#"{"columns":{"id":"integer","n":"bigint","m":"text"},"primary_key":["id"]}"#)
                .into_def(TableName::parse("t").unwrap())
                .unwrap();
        let changes = plan_changes(&old, &widened).unwrap();
        assert_eq!(changes.len(), 2);
        assert!(plan_changes(&widened, &old).is_err());
    }

    #[test]
    fn versions_and_history_cannot_be_undone_or_reordered() {
        let t = TableName::parse("t").unwrap();
        let def = |json: &str| decl(json).into_def(t.clone()).unwrap();
        let plain = def(
            r#"{"columns":{"id":"bigint","at":"timestamptz"},"primary_key":["id"],"cursor":"at"}"#,
        );
        let versions = def(
            r#"{"columns":{"id":"bigint","at":"timestamptz"},"primary_key":["id"],"cursor":"at","write_mode":"versions"}"#,
        );
        let history = def(
            r#"{"columns":{"id":"bigint","at":"timestamptz"},"primary_key":["id"],"cursor":"at","write_mode":"versions","history":"scd2"}"#,
        );
        assert!(plan_changes(&plain, &versions).is_err());
        assert!(plan_changes(&versions, &plain).is_err());
        // The cursor of `plain` allows NULL: history turned on makes it
        // NOT NULL (the store refuses it if a stored row has none).
        let plain_history = def(
            r#"{"columns":{"id":"bigint","at":"timestamptz"},"primary_key":["id"],"cursor":"at","history":"scd2"}"#,
        );
        let on = plan_changes(&plain, &plain_history).unwrap();
        assert!(!plain.apply(&on).column("at").unwrap().nullable);
        let on = plan_changes(&versions, &history).unwrap();
        assert_eq!(
            on,
            [SchemaChange::SetHistory {
                history: Some(HistoryKind::Scd2)
            }]
        );
        assert!(plan_changes(&history, &versions).is_err());
        let merge_default = def(
            r#"{"columns":{"id":"bigint","at":"timestamptz"},"primary_key":["id"],"cursor":"at","write_mode":"insert_missing"}"#,
        );
        assert_eq!(plan_changes(&plain, &merge_default).unwrap().len(), 1);
    }
}
