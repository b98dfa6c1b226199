//! Where a table's rows live on a Citus cluster (`"distribution"` in a
//! declaration), and the server's default for tables that do not say.
//!
//! - `local`: on the coordinator only, as on a single Postgres;
//! - `{"column": c, "colocate_with": t}`: hash-distributed by `c` over the
//!   workers, its shards beside table `t`'s (the same key lands on the same
//!   node, so joins and moves between them stay on one node);
//! - `reference`: a copy on every node, for small plain tables.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::names::{ColumnName, TableName};

/// The system column a keyless table may be distributed by: its rows' ids.
pub const ROW_ID_COLUMN: &str = "_row_id";

/// Where a table's rows live.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Distribution {
    /// Only in a declaration that does not say: the table's own distribution
    /// when it exists, the server's default when it is made. Never stored.
    #[default]
    Unstated,
    Local,
    Hash {
        column: DistributionColumn,
        colocate_with: Option<TableName>,
    },
    Reference,
}

/// The column a hash-distributed table is distributed by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DistributionColumn {
    /// A column of the table (of its key, when it has one).
    Column(ColumnName),
    /// `_row_id`: a keyless table's rows' ids.
    RowId,
}

impl DistributionColumn {
    pub fn as_str(&self) -> &str {
        match self {
            DistributionColumn::Column(name) => name.as_str(),
            DistributionColumn::RowId => ROW_ID_COLUMN,
        }
    }
}

/// What the server does with a table made without a `"distribution"`
/// (`IDEM_DISTRIBUTION_DEFAULT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DistributionDefault {
    /// Local to the coordinator, as on a single Postgres.
    #[default]
    Local,
    /// On a Citus database: keyed tables by their first key column, keyless
    /// ones by their row id, plain tables as reference tables.
    Key,
}

impl DistributionDefault {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "local" => Some(Self::Local),
            "key" => Some(Self::Key),
            _ => None,
        }
    }

    /// The distribution of a new table whose declaration said none, on a
    /// database where Citus is installed or not.
    pub fn for_table(self, primary_key: &[ColumnName], plain: bool, citus: bool) -> Distribution {
        if self == Self::Local || !citus {
            return Distribution::Local;
        }
        if plain {
            return Distribution::Reference;
        }
        let column = primary_key.first().map_or(DistributionColumn::RowId, |c| {
            DistributionColumn::Column(c.clone())
        });
        Distribution::Hash {
            column,
            colocate_with: None,
        }
    }
}

impl Distribution {
    /// Whether the table's rows live anywhere but the coordinator (which
    /// needs Citus).
    pub fn needs_citus(&self) -> bool {
        matches!(self, Distribution::Hash { .. } | Distribution::Reference)
    }

    /// The hash distribution column, if the table has one.
    pub fn hash_column(&self) -> Option<&DistributionColumn> {
        match self {
            Distribution::Hash { column, .. } => Some(column),
            _ => None,
        }
    }
}

/// The wire form: `"local"`, `"reference"`, or `{"column": …,
/// "colocate_with": …}`.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum Wire {
    Word(String),
    Hash(HashWire),
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct HashWire {
    column: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    colocate_with: Option<String>,
}

impl Serialize for Distribution {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            Distribution::Unstated | Distribution::Local => Wire::Word("local".into()),
            Distribution::Reference => Wire::Word("reference".into()),
            Distribution::Hash {
                column,
                colocate_with,
            } => Wire::Hash(HashWire {
                column: column.as_str().into(),
                colocate_with: colocate_with.as_ref().map(|t| t.to_string()),
            }),
        };
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Distribution {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Wire::deserialize(deserializer).map_err(|_| {
            D::Error::custom(
                "distribution is \"local\", \"reference\" or {\"column\": …, \"colocate_with\": …}",
            )
        })? {
            Wire::Word(word) if word == "local" => Ok(Distribution::Local),
            Wire::Word(word) if word == "reference" => Ok(Distribution::Reference),
            Wire::Word(word) => Err(D::Error::custom(format!(
                "distribution {word:?} is not \"local\" or \"reference\""
            ))),
            Wire::Hash(HashWire {
                column,
                colocate_with,
            }) => {
                let column = if column == ROW_ID_COLUMN {
                    DistributionColumn::RowId
                } else {
                    DistributionColumn::Column(
                        ColumnName::parse(&column).map_err(D::Error::custom)?,
                    )
                };
                let colocate_with = colocate_with
                    .as_deref()
                    .map(TableName::parse)
                    .transpose()
                    .map_err(D::Error::custom)?;
                Ok(Distribution::Hash {
                    column,
                    colocate_with,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Distribution {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_form_reads_and_writes_back_as_it_was() {
        for json in [
            r#""local""#,
            r#""reference""#,
            r#"{"column":"customer_id"}"#,
            r#"{"column":"customer_id","colocate_with":"customers"}"#,
            r#"{"column":"_row_id"}"#,
        ] {
            assert_eq!(serde_json::to_string(&read(json)).unwrap(), json);
        }
        assert!(serde_json::from_str::<Distribution>(r#""sharded""#).is_err());
        assert!(serde_json::from_str::<Distribution>(r#"{"column":"Bad Name"}"#).is_err());
        assert!(serde_json::from_str::<Distribution>(r#"{"column":"id","x":1}"#).is_err());
    }

    #[test]
    fn the_default_distributes_by_the_first_key_column_or_the_row_id() {
        let id = ColumnName::parse("id").unwrap();
        let key = DistributionDefault::Key;
        assert_eq!(
            key.for_table(std::slice::from_ref(&id), false, true),
            Distribution::Hash {
                column: DistributionColumn::Column(id.clone()),
                colocate_with: None
            }
        );
        assert_eq!(
            key.for_table(&[], false, true).hash_column(),
            Some(&DistributionColumn::RowId)
        );
        assert_eq!(
            key.for_table(std::slice::from_ref(&id), true, true),
            Distribution::Reference
        );
        assert_eq!(key.for_table(&[id], false, false), Distribution::Local);
        assert_eq!(
            DistributionDefault::Local.for_table(&[], false, true),
            Distribution::Local
        );
    }
}
