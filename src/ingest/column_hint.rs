//! What a refusal says of a field (or CSV header name) the table has no
//! column for: the column it most likely meant, when there is one.

use super::DELETED_FIELD;
use crate::schema::TableDef;

/// What is wrong with a field or CSV header `name` the table does not have,
/// with the declared column it most likely meant: the closest by edit
/// distance, when at most a third of the longer name differs (a typo, not
/// another word). Case is ignored: column names are lower case, and
/// `Amount` means `amount`.
pub fn not_a_column(def: &TableDef, name: &str) -> String {
    const NO_HINT: &str = "is not a column of this table";
    if name == DELETED_FIELD && def.primary_key.is_empty() {
        return format!(
            "marks a tombstone, and tombstones need a primary key: table {:?} has none",
            def.name
        );
    }
    // No name of a valid length is within a third of one this long; and a
    // hostile body's long names must not cost an edit distance each.
    if name.len() > 2 * crate::names::MAX_NAME_LEN {
        return NO_HINT.into();
    }
    let lower = name.to_lowercase();
    let closest = def
        .columns
        .iter()
        .map(|c| {
            (
                strsim::levenshtein(&lower, c.name.as_str()),
                c.name.as_str(),
            )
        })
        .filter(|(distance, column)| *distance * 3 <= name.chars().count().max(column.len()))
        .min_by_key(|(distance, _)| *distance);
    match closest {
        Some((_, column)) => format!("is not a column of this table; did you mean {column:?}?"),
        None => NO_HINT.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_named_with_the_column_it_most_likely_meant() {
        let def: TableDef = serde_json::from_str::<crate::schema::TableDeclaration>(
            r#"{"columns":{"order_id":"bigint","status":"text"},"primary_key":["order_id"]}"#,
        )
        .unwrap()
        .into_def(crate::names::TableName::parse("orders").unwrap())
        .unwrap();
        assert_eq!(
            not_a_column(&def, "staus"),
            "is not a column of this table; did you mean \"status\"?"
        );
        assert_eq!(
            not_a_column(&def, "Order_ID"),
            "is not a column of this table; did you mean \"order_id\"?"
        );
        assert_eq!(
            not_a_column(&def, "colour"),
            "is not a column of this table"
        );
        assert_eq!(not_a_column(&def, "x"), "is not a column of this table");
    }
}
