//! Order-independent content hashes.
//!
//! A partition's hash must not depend on the order of its rows, and must be
//! computable while streaming. Each row's SHA-256 is added into a 256-bit sum
//! (mod 2^256); the sum and the row count are then hashed once more. Addition
//! is invertible, so a row dropped later (a duplicate resolved in the
//! database) is taken out again with `remove`.

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContentHash {
    /// Big-endian limbs: `sum[0]` is the most significant.
    sum: [u64; 4],
    count: u64,
}

fn limbs(digest: &[u8; 32]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for (i, limb) in out.iter_mut().enumerate() {
        *limb = u64::from_be_bytes(digest[i * 8..i * 8 + 8].try_into().unwrap());
    }
    out
}

/// `sum += d` mod 2^256.
fn add_limbs(sum: &mut [u64; 4], d: &[u64; 4]) {
    let mut carry = false;
    for i in (0..4).rev() {
        let (s1, c1) = sum[i].overflowing_add(d[i]);
        let (s2, c2) = s1.overflowing_add(u64::from(carry));
        sum[i] = s2;
        carry = c1 || c2;
    }
}

/// `sum -= d` mod 2^256.
fn sub_limbs(sum: &mut [u64; 4], d: &[u64; 4]) {
    let mut borrow = false;
    for i in (0..4).rev() {
        let (s1, b1) = sum[i].overflowing_sub(d[i]);
        let (s2, b2) = s1.overflowing_sub(u64::from(borrow));
        sum[i] = s2;
        borrow = b1 || b2;
    }
}

fn limb_bytes(sum: &[u64; 4]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, limb) in sum.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&limb.to_be_bytes());
    }
    out
}

impl ContentHash {
    pub fn add(&mut self, row_digest: &[u8; 32]) {
        add_limbs(&mut self.sum, &limbs(row_digest));
        self.count += 1;
    }

    pub fn remove(&mut self, row_digest: &[u8; 32]) {
        sub_limbs(&mut self.sum, &limbs(row_digest));
        self.count -= 1;
    }

    /// Adds every row of `other`.
    pub fn add_all(&mut self, other: &ContentHash) {
        add_limbs(&mut self.sum, &other.sum);
        self.count += other.count;
    }

    /// Applies a change; `None` when it would take away more rows than
    /// there are (the change was not made to this content).
    pub fn apply(&mut self, delta: &ContentDelta) -> Option<()> {
        self.count = self.count.checked_add_signed(delta.rows)?;
        add_limbs(&mut self.sum, &delta.sum);
        Some(())
    }

    pub fn rows(&self) -> u64 {
        self.count
    }

    /// The running sum, big-endian, to be stored beside the digest so that
    /// later merges can add and remove rows without reading the partition.
    pub fn sum_bytes(&self) -> [u8; 32] {
        limb_bytes(&self.sum)
    }

    pub fn from_parts(sum: &[u8; 32], count: u64) -> Self {
        ContentHash {
            sum: limbs(sum),
            count,
        }
    }

    /// The hex SHA-256 that names this multiset of rows.
    pub fn hex(&self) -> String {
        let mut h = Sha256::new();
        h.update(b"idem-content-v1\0");
        for limb in self.sum {
            h.update(limb.to_be_bytes());
        }
        h.update(self.count.to_be_bytes());
        hex::encode(h.finalize())
    }
}

/// A change to a content: the rows one write added and removed, as one sum
/// (added minus removed, mod 2^256) and a signed count. Writers of one
/// partition each record their own change and never read each other's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContentDelta {
    sum: [u64; 4],
    rows: i64,
}

impl ContentDelta {
    pub fn add(&mut self, row_digest: &[u8; 32]) {
        add_limbs(&mut self.sum, &limbs(row_digest));
        self.rows += 1;
    }

    pub fn remove(&mut self, row_digest: &[u8; 32]) {
        sub_limbs(&mut self.sum, &limbs(row_digest));
        self.rows -= 1;
    }

    /// Adds every row of `content`.
    pub fn add_all(&mut self, content: &ContentHash) -> Option<()> {
        add_limbs(&mut self.sum, &content.sum);
        self.rows = self.rows.checked_add(i64::try_from(content.count).ok()?)?;
        Some(())
    }

    /// Adds another delta (two writes' changes as one); `None` when the
    /// row count overflows.
    pub fn merge(&mut self, other: &ContentDelta) -> Option<()> {
        add_limbs(&mut self.sum, &other.sum);
        self.rows = self.rows.checked_add(other.rows)?;
        Some(())
    }

    /// Adds another delta's sum (its rows are counted apart).
    pub fn add_sum(&mut self, sum: &[u8; 32]) {
        add_limbs(&mut self.sum, &limbs(sum));
    }

    pub fn is_empty(&self) -> bool {
        *self == ContentDelta::default()
    }

    pub fn rows(&self) -> i64 {
        self.rows
    }

    pub fn sum_bytes(&self) -> [u8; 32] {
        limb_bytes(&self.sum)
    }

    pub fn from_parts(sum: &[u8; 32], rows: i64) -> Self {
        ContentDelta {
            sum: limbs(sum),
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_deltas_merged_change_a_content_as_both_do() {
        let (a, b, c) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let mut first = ContentDelta::default();
        first.add(&a);
        first.add(&b);
        let mut second = ContentDelta::default();
        second.remove(&a);
        second.add(&c);
        let mut merged = first;
        merged.merge(&second).unwrap();
        let (mut one, mut both) = (ContentHash::default(), ContentHash::default());
        one.apply(&merged).unwrap();
        both.apply(&first).unwrap();
        both.apply(&second).unwrap();
        assert_eq!(one.hex(), both.hex());
        assert_eq!(merged.rows(), 2);
    }

    fn digest(s: &str) -> [u8; 32] {
        Sha256::digest(s.as_bytes()).into()
    }

    #[test]
    fn order_does_not_matter_but_multiplicity_does() {
        let mut a = ContentHash::default();
        let mut b = ContentHash::default();
        for s in ["x", "y", "z"] {
            a.add(&digest(s));
        }
        for s in ["z", "x", "y"] {
            b.add(&digest(s));
        }
        assert_eq!(a.hex(), b.hex());
        b.add(&digest("x"));
        assert_ne!(a.hex(), b.hex());
        b.remove(&digest("x"));
        assert_eq!(a.hex(), b.hex());
        assert_eq!(ContentHash::from_parts(&a.sum_bytes(), a.rows()), a);
        let mut whole = ContentHash::default();
        whole.add(&digest("w"));
        whole.add_all(&a);
        let mut one_by_one = a;
        one_by_one.add(&digest("w"));
        assert_eq!(whole, one_by_one);
    }

    #[test]
    fn empty_content_has_a_stable_hash() {
        assert_eq!(ContentHash::default().hex(), ContentHash::default().hex());
        assert_eq!(ContentHash::default().rows(), 0);
    }

    #[test]
    fn deltas_recorded_apart_add_up_to_the_same_content() {
        let mut direct = ContentHash::default();
        for s in ["a", "b", "c"] {
            direct.add(&digest(s));
        }
        let mut base = direct;
        // One writer replaces b by d, another removes a and adds e.
        let (mut one, mut two) = (ContentDelta::default(), ContentDelta::default());
        one.remove(&digest("b"));
        one.add(&digest("d"));
        two.remove(&digest("a"));
        two.add(&digest("e"));
        base.apply(&two).unwrap();
        base.apply(&one).unwrap();
        for (gone, new) in [("b", "d"), ("a", "e")] {
            direct.remove(&digest(gone));
            direct.add(&digest(new));
        }
        assert_eq!(base, direct);
        let mut too_much = ContentDelta::default();
        too_much.remove(&digest("x"));
        assert!(ContentHash::default().apply(&too_much).is_none());
    }
}
