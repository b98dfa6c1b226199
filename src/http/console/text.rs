//! How the console's pages write numbers and the links that keep a page's
//! filters.

/// A count as a page shows it: `10,000+` past what was counted.
pub fn shown_count(count: i64, cap: i64) -> String {
    let digits = grouped(count.min(cap));
    if count > cap {
        format!("{digits}+")
    } else {
        digits
    }
}

/// `1234567` as `1,234,567`.
pub fn grouped(n: impl Into<i128>) -> String {
    let n: i128 = n.into();
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A query string from pairs, for links that keep a page's filters.
pub fn query_string(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<_> = pairs.iter().filter(|(_, v)| !v.is_empty()).collect();
    serde_urlencoded::to_string(kept).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped_and_capped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(-1000), "-1,000");
        assert_eq!(shown_count(10_001, 10_000), "10,000+");
        assert_eq!(shown_count(12, 10_000), "12");
    }
}
