//! A fixed-size log-linear latency histogram (HDR-style, about 3% precision).
//!
//! Every operation is recorded, not a sample, in 1920 buckets regardless of
//! how many operations run, so a 100M-op run costs the same 15 KiB per
//! thread as a tiny one. Values below 32 ns are exact; above, each power of
//! two is split into 32 buckets.

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS + 1) as usize) * SUB as usize;

#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let mantissa = v >> (exp - SUB_BITS); // in SUB..2*SUB
    ((exp - SUB_BITS + 1) as u64 * SUB + (mantissa - SUB)) as usize
}

/// The largest value that lands in bucket `i`.
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = (i / SUB) as u32 + SUB_BITS - 1;
    let mantissa = i % SUB + SUB;
    let shift = exp - SUB_BITS;
    let end = u128::from(mantissa + 1) << shift;
    u64::try_from(end - 1).unwrap_or(u64::MAX)
}

impl Histogram {
    pub fn record(&mut self, nanos: u64) {
        self.counts[index(nanos)] += 1;
        self.total += 1;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1) in nanoseconds, reported as the
    /// upper edge of its bucket so it never flatters the engine.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper(i);
            }
        }
        upper(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_u64() {
        for v in [0, 1, 31, 32, 33, 63, 64, 65, 1000, 123_456, u64::MAX] {
            let i = index(v);
            assert!(v <= upper(i), "{v} above its bucket {i}");
            if i > 0 {
                assert!(v > upper(i - 1), "{v} not above bucket {}", i - 1);
            }
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn p99_of_uniform_is_close() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        let p99 = h.quantile_ns(0.99) as f64;
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.04, "p99 {p99}");
        assert_eq!(h.count(), 100_000);
    }
}
