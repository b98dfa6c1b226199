//! What a receipt says about this run. A replayed receipt (`"replayed":
//! true`: the server answered from its record of an earlier request under
//! the same key) counts what that earlier run wrote, so the summaries keep
//! it apart from what this run wrote; and a receipt whose write made its
//! table (`"table_created": true`) is worth a warning, since a misspelt
//! table name makes one too.

use idem::wire::loads::LoadReceipt;
use idem::wire::receipts::{PostAnswer, PutAnswer, PutReceipt, ReplayReceipt};
use serde::Serialize;

/// What the summaries read of a write's receipt, whatever its kind.
pub(super) trait Receipt {
    /// Answered from the server's record of an earlier request.
    fn replayed(&self) -> bool;
    /// The rows it says were written (by this request, or the one it
    /// replays).
    fn rows_written(&self) -> u64;
    /// Its write made the table, which nobody had declared.
    fn table_created(&self) -> bool {
        false
    }
}

impl Receipt for PutReceipt {
    fn replayed(&self) -> bool {
        self.replayed
    }

    fn rows_written(&self) -> u64 {
        self.rows_written
    }

    fn table_created(&self) -> bool {
        self.table_created
    }
}

impl Receipt for LoadReceipt {
    fn replayed(&self) -> bool {
        self.replayed == Some(true)
    }

    fn rows_written(&self) -> u64 {
        self.rows_written
    }
}

impl Receipt for PutAnswer {
    fn replayed(&self) -> bool {
        match self {
            PutAnswer::Day(r) => r.replayed(),
            PutAnswer::Load(r) => r.replayed(),
        }
    }

    fn rows_written(&self) -> u64 {
        match self {
            PutAnswer::Day(r) => r.rows_written(),
            PutAnswer::Load(r) => r.rows_written(),
        }
    }

    fn table_created(&self) -> bool {
        match self {
            PutAnswer::Day(r) => r.table_created(),
            PutAnswer::Load(r) => r.table_created(),
        }
    }
}

impl Receipt for PostAnswer {
    fn replayed(&self) -> bool {
        match self {
            PostAnswer::Rows(r) => r.replayed,
            PostAnswer::Skipped(r) => r.replayed,
        }
    }

    fn rows_written(&self) -> u64 {
        match self {
            PostAnswer::Rows(r) => r.rows_written,
            PostAnswer::Skipped(_) => 0,
        }
    }

    fn table_created(&self) -> bool {
        match self {
            PostAnswer::Rows(r) => r.table_created,
            PostAnswer::Skipped(_) => false,
        }
    }
}

impl Receipt for ReplayReceipt {
    fn replayed(&self) -> bool {
        self.replayed
    }

    fn rows_written(&self) -> u64 {
        self.rows_written
    }
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
    pub fn of(receipt: &impl Receipt) -> Self {
        let rows = receipt.rows_written();
        match receipt.replayed() {
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
pub(super) fn table_created_warning(table: &str, receipt: &impl Receipt) -> Option<String> {
    if !receipt.table_created() {
        return None;
    }
    let by = match receipt.replayed() {
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

    /// A receipt that says only what the summaries read.
    struct Said {
        rows_written: u64,
        replayed: bool,
        table_created: bool,
    }

    impl Receipt for Said {
        fn replayed(&self) -> bool {
            self.replayed
        }

        fn rows_written(&self) -> u64 {
            self.rows_written
        }

        fn table_created(&self) -> bool {
            self.table_created
        }
    }

    fn said(rows_written: u64, replayed: bool, table_created: bool) -> Said {
        Said {
            rows_written,
            replayed,
            table_created,
        }
    }

    #[test]
    fn a_replayed_receipt_counts_as_written_before_not_now() {
        let fresh = said(5, false, false);
        let replayed = said(7, true, false);
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
        let warning = table_created_warning("nosuch", &said(1, false, true)).unwrap();
        assert!(warning.contains("table nosuch was not declared; this write created it"));
        let warning = table_created_warning("nosuch", &said(1, true, true)).unwrap();
        assert!(warning.contains("an earlier run of this write created it"));
        assert_eq!(
            table_created_warning("orders", &said(1, false, false)),
            None
        );
    }
}
