//! Deterministic key and value generation.
//!
//! Every run with the same seed touches the same keys in the same order, so
//! engines see identical work. Keys are an index formatted as zero-padded
//! hex, so any index maps to exactly one fixed-size key and a read of index
//! `i < N` must hit. Values are slices of a pre-filled random buffer: not
//! compressible, and costing no generation time inside the timed loop.

use anyhow::{ensure, Result};

/// SplitMix64: tiny, fast, and good enough to pick keys uniformly.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (Lemire's multiply-shift; the bias is negligible
    /// for the `n` a benchmark uses).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Formats key indexes into fixed-size byte strings.
#[derive(Debug, Clone, Copy)]
pub struct KeyFormat {
    size: usize,
}

impl KeyFormat {
    /// `size` bytes per key; it must hold the largest index in hex.
    pub fn new(size: usize, keys: u64) -> Result<Self> {
        let digits = (64 - keys.saturating_sub(1).leading_zeros() as usize)
            .div_ceil(4)
            .max(1);
        ensure!(
            size >= digits,
            "--key-size {size} is too small for {keys} keys (needs at least {digits} bytes)"
        );
        Ok(KeyFormat { size })
    }

    /// Writes the key for `index` into `buf` (which must be `size` bytes).
    pub fn write(&self, index: u64, buf: &mut [u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut v = index;
        for b in buf.iter_mut().rev() {
            *b = HEX[(v & 0xf) as usize];
            v >>= 4;
        }
    }

    pub fn buffer(&self) -> Vec<u8> {
        vec![0; self.size]
    }
}

/// A shared pool of random bytes that values are sliced from.
#[derive(Debug)]
pub struct ValuePool {
    bytes: Vec<u8>,
    value_size: usize,
}

impl ValuePool {
    pub fn new(value_size: usize, seed: u64) -> Self {
        let len = (1 << 20).max(value_size * 2);
        let mut rng = SplitMix64::new(seed);
        let mut bytes = Vec::with_capacity(len + 8);
        while bytes.len() < len {
            bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        ValuePool { bytes, value_size }
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }

    /// A value at a random offset of the pool.
    pub fn pick(&self, rng: &mut SplitMix64) -> &[u8] {
        let max_start = (self.bytes.len() - self.value_size) as u64;
        let start = rng.below(max_start + 1) as usize;
        &self.bytes[start..start + self.value_size]
    }
}

/// The indexes `0..n` in a random order (Fisher-Yates), for fillrandom.
pub fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_size_and_distinct() {
        let f = KeyFormat::new(16, 1000).unwrap();
        let mut a = f.buffer();
        let mut b = f.buffer();
        f.write(0, &mut a);
        f.write(999, &mut b);
        assert_eq!(a, b"0000000000000000");
        assert_eq!(b, b"00000000000003e7");
    }

    #[test]
    fn too_small_key_size_is_refused() {
        assert!(KeyFormat::new(2, 1 << 12).is_err());
        assert!(KeyFormat::new(3, 1 << 12).is_ok());
    }

    #[test]
    fn permutation_holds_every_index_once() {
        let mut p = permutation(10_000, 7);
        assert_ne!(p[..10], (0..10).collect::<Vec<_>>()[..]);
        p.sort_unstable();
        assert_eq!(p, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn values_are_not_constant() {
        let pool = ValuePool::new(100, 1);
        let mut rng = SplitMix64::new(2);
        let v = pool.pick(&mut rng);
        assert_eq!(v.len(), 100);
        assert!(v.iter().any(|&b| b != v[0]));
    }
}
