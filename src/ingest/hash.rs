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

impl ContentHash {
    pub fn add(&mut self, row_digest: &[u8; 32]) {
        let d = limbs(row_digest);
        let mut carry = false;
        for i in (0..4).rev() {
            let (s1, c1) = self.sum[i].overflowing_add(d[i]);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            self.sum[i] = s2;
            carry = c1 || c2;
        }
        self.count += 1;
    }

    pub fn remove(&mut self, row_digest: &[u8; 32]) {
        let d = limbs(row_digest);
        let mut borrow = false;
        for i in (0..4).rev() {
            let (s1, b1) = self.sum[i].overflowing_sub(d[i]);
            let (s2, b2) = s1.overflowing_sub(u64::from(borrow));
            self.sum[i] = s2;
            borrow = b1 || b2;
        }
        self.count -= 1;
    }

    /// Adds every row of `other`.
    pub fn add_all(&mut self, other: &ContentHash) {
        let mut carry = false;
        for i in (0..4).rev() {
            let (s1, c1) = self.sum[i].overflowing_add(other.sum[i]);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            self.sum[i] = s2;
            carry = c1 || c2;
        }
        self.count += other.count;
    }

    pub fn rows(&self) -> u64 {
        self.count
    }

    /// The running sum, big-endian, to be stored beside the digest so that
    /// later merges can add and remove rows without reading the partition.
    pub fn sum_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, limb) in self.sum.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&limb.to_be_bytes());
        }
        out
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
