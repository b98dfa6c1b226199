//! What a receipt says about this run. A replayed receipt (`"replayed":
//! true`: the server answered from its record of an earlier request under
//! the same key) counts what that earlier run wrote, so the summaries keep
//! it apart from what this run wrote; and a receipt whose write made its
//! table (`"table_created": true`) is worth a warning, since a misspelt
//! table name makes one too.

use serde::Serialize;
use serde_json::Value;

/// Whether `receipt` was answered from the server's record of an earlier
/// request.
pub(super) fn replayed(receipt: &Value) -> bool {
    receipt["replayed"] == true
}

/// The rows `receipt` says were written: by this run, or (replayed)
/// before it; in JSON, `rows_written` and `rows_written_before`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(super) struct Written {
    #[serde(rename = "rows_written")]
    pub now: u64,
    #[serde(rename = "rows_written_before")]
    pub before: u64,
}

impl Written {
    pub fn of(receipt: &Value) -> Self {
        let rows = receipt["rows_written"].as_u64().unwrap_or(0);
        match replayed(receipt) {
            true => Written {
                now: 0,
                before: rows,
            },
            false => Written {
                now: rows,
                before: 0,
            },
        }
    }

    pub fn add(&mut self, other: Written) {
        self.now += other.now;
        self.before += other.before;
    }

    /// As the summaries say it: `12 rows written by this run` and, when
    /// some were replayed, `; 600 written before, replayed`.
    pub fn said(self) -> String {
        let now = format!("{} rows written by this run", self.now);
        match self.before {
            0 => now,
            before => format!("{now}; {before} written before, replayed"),
        }
    }
}

impl std::iter::Sum for Written {
    fn sum<I: Iterator<Item = Written>>(all: I) -> Self {
        all.fold(Written::default(), |mut total, one| {
            total.add(one);
            total
        })
    }
}

/// The warning (for stderr) when the write of `receipt` made `table`,
/// which nobody had declared.
pub(super) fn table_created_warning(table: &str, receipt: &Value) -> Option<String> {
    if receipt["table_created"] != true {
        return None;
    }
    let by = match replayed(receipt) {
        true => "an earlier run of this write",
        false => "this write",
    };
    Some(format!(
        "idem: warning: table {table} was not declared; {by} created it, with columns \
         inferred from the file (a misspelt name does the same; --no-create refuses it)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replayed_receipt_counts_as_written_before_not_now() {
        let fresh = json!({"rows_written": 5, "replayed": false});
        let replayed = json!({"rows_written": 7, "replayed": true});
        let mut total = Written::of(&fresh);
        total.add(Written::of(&replayed));
        assert_eq!(total, Written { now: 5, before: 7 });
        assert_eq!(
            total.said(),
            "5 rows written by this run; 7 written before, replayed"
        );
        assert_eq!(Written::of(&fresh).said(), "5 rows written by this run");
    }

    #[test]
    fn only_a_receipt_that_made_its_table_warns() {
        let made = json!({"table_created": true, "replayed": false});
        let warning = table_created_warning("nosuch", &made).unwrap();
        assert!(warning.contains("table nosuch was not declared; this write created it"));
        let again = json!({"table_created": true, "replayed": true});
        let warning = table_created_warning("nosuch", &again).unwrap();
        assert!(warning.contains("an earlier run of this write created it"));
        assert_eq!(
            table_created_warning("orders", &json!({"changed": true})),
            None
        );
    }
}
