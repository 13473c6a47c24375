//! The layout of Redis 7.0's per-command latency histograms, so that INFO
//! `latencystats` and LATENCY HISTOGRAM read the same numbers Redis would
//! print for the same run times.
//!
//! Redis keeps one HDR histogram per command (values 1 ns to 1 s, two
//! significant digits) and records each call's run time in whole
//! microseconds times 1000, clamped to that range. With two significant
//! digits the histogram has 256 sub-buckets of which the upper 128 repeat
//! in every power of two: values below 256 are exact, values in
//! `[128 * 2^b, 256 * 2^b)` share a slot with the `2^b - 1` values after
//! them. 23 powers cover 1 s, so a histogram is 3,072 counters.
//!
//! Only the layout and the reading rules live here (pure functions over a
//! slice of counts); `cmdstats` owns the atomic counters, one row per
//! command and thread stripe, allocated on a command's first call.

/// Counters of one histogram: `(buckets + 1) * 128` for the 23 buckets
/// that reach 1 s.
pub const LEN: usize = 3072;
/// The largest value recorded (1 s in ns); larger ones are clamped.
pub const MAX: u64 = 1_000_000_000;
/// log2 of the half sub-bucket count (128).
const HALF_MAG: u32 = 7;
const HALF: usize = 1 << HALF_MAG;
/// The sub-bucket mask (256 sub-buckets).
const MASK: u64 = (2 * HALF as u64) - 1;

/// The value Redis records for a call that ran `nanos`: whole
/// microseconds, in ns, within `[1, MAX]`.
#[inline]
pub fn sample(nanos: u64) -> u64 {
    ((nanos / 1000) * 1000).clamp(1, MAX)
}

/// The power-of-two bucket of `v` (its slots are `2^bucket` wide).
#[inline]
fn bucket_of(v: u64) -> u32 {
    64 - (v | MASK).leading_zeros() - (HALF_MAG + 1)
}

/// The slot of `v` (at most [`MAX`]).
#[inline]
pub fn index(v: u64) -> usize {
    let b = bucket_of(v);
    let sub = (v >> b) as usize;
    ((b as usize + 1) << HALF_MAG) + sub - HALF
}

/// The lowest value of slot `i`.
pub fn lowest(i: usize) -> u64 {
    let (b, sub) = match (i >> HALF_MAG).checked_sub(1) {
        Some(b) => (b, (i & (HALF - 1)) + HALF),
        None => (0, i & (HALF - 1)),
    };
    (sub as u64) << b
}

/// The highest value of slot `i`, the value a percentile reports.
pub fn highest(i: usize) -> u64 {
    let v = lowest(i);
    v + (1u64 << bucket_of(v)) - 1
}

/// The value at `percentile` (0 to 100) of a histogram with these
/// `counts` and `total` (> 0), as Redis's `hdr_value_at_percentile`: the
/// slot where the running count first reaches `percentile * total / 100`
/// rounded half up (at least 1), reported as the slot's highest value, or
/// its lowest for the 0th percentile.
pub fn value_at_percentile(counts: &[u64], total: u64, percentile: f64) -> u64 {
    let p = percentile.min(100.0);
    let want = ((((p / 100.0) * total as f64) + 0.5) as u64).clamp(1, total.max(1));
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= want {
            return if percentile == 0.0 {
                lowest(i)
            } else {
                highest(i)
            };
        }
    }
    0
}

/// A percentile as Redis prints it in INFO `latencystats` and CONFIG GET
/// `latency-tracking-info-percentiles`: `%f` with its trailing zeros (and
/// then a trailing point) removed (`50`, `99.9`).
pub fn format_percentile(p: f64) -> String {
    let mut s = format!("{p:.6}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    s
}

/// Parses `latency-tracking-info-percentiles` as Redis's CONFIG SET does:
/// the value split at every single space (`""` alone is the empty list),
/// each part a float as `strtod` reads it (hex too; no spaces, no NaN),
/// each within 0 to 100. The error is Redis's text for the first bad part.
pub fn parse_percentiles(value: &[u8]) -> Result<Vec<f64>, &'static str> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(|&b| b == b' ')
        .map(|part| {
            let p = match crate::commands::cnum::strtod(part) {
                Some((p, false)) if !part.first().is_some_and(u8::is_ascii_whitespace) => p,
                _ => return Err("Invalid latency-tracking-info-percentiles parameters"),
            };
            if !(0.0..=100.0).contains(&p) {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
                );
            }
            Ok(p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cover_one_second_with_two_significant_digits() {
        // Exact below 256, then slots 2^b wide.
        for v in [0u64, 1, 2, 127, 128, 255] {
            assert_eq!((lowest(index(v)), highest(index(v))), (v, v));
        }
        assert_eq!((lowest(index(256)), highest(index(257))), (256, 257));
        assert_eq!(index(256), index(257));
        assert_ne!(index(257), index(258));
        assert!(index(MAX) < LEN);
        // Every slot's values map back to it, and slots tile the range.
        let mut next = 0;
        for i in 0..=index(MAX) {
            assert_eq!(lowest(i), next, "slot {i}");
            assert_eq!(index(lowest(i)), i);
            assert_eq!(index(highest(i)), i);
            next = highest(i) + 1;
        }
    }

    #[test]
    fn percentiles_read_what_redis_prints() {
        // Values redis-server 7.0.15 printed for single calls of these
        // run times (INFO latencystats, in µs).
        for (us, printed) in [(9, 9023), (3, 3007), (63, 63231), (17, 17023), (0, 1)] {
            let mut counts = vec![0; LEN];
            counts[index(sample(us * 1000 + 400))] += 1;
            assert_eq!(value_at_percentile(&counts, 1, 50.0), printed, "{us} µs");
        }
        let mut counts = vec![0; LEN];
        counts[index(sample(17_000))] += 1;
        assert_eq!(value_at_percentile(&counts, 1, 0.0), 16896, "p0: lowest");
        // Three calls of 74, 2113 and 4095 µs: the rank is rounded half
        // up, as redis-server gave p40 = the first, p66.7 = the second.
        let mut counts = vec![0; LEN];
        for us in [74, 2100, 4090] {
            counts[index(sample(us * 1000))] += 1;
        }
        let at = |p| value_at_percentile(&counts, 3, p);
        assert_eq!(at(10.0), 74239);
        assert_eq!(at(40.0), 74239);
        assert_eq!(at(50.0), 2113535);
        assert_eq!(at(66.7), 2113535);
        assert_eq!(at(70.0), 2113535);
        assert_eq!(at(100.0), 4095999);
        // Two pings of 0 and 1 µs: a tiny percentile still reads the
        // first call (the rank is at least 1).
        let mut counts = vec![0; LEN];
        counts[index(sample(0))] += 1;
        counts[index(sample(1000))] += 1;
        assert_eq!(value_at_percentile(&counts, 2, 0.1), 1);
        assert_eq!(value_at_percentile(&counts, 2, 99.9999), 1003);
        assert_eq!(sample(5_000_000_000), MAX);
    }

    #[test]
    fn percentile_settings_parse_and_print_as_redis_does() {
        assert_eq!(parse_percentiles(b"50 99 99.9"), Ok(vec![50.0, 99.0, 99.9]));
        assert_eq!(parse_percentiles(b""), Ok(vec![]));
        assert_eq!(
            parse_percentiles(b"1e1 0x10 +5 .5 5."),
            Ok(vec![10.0, 16.0, 5.0, 0.5, 5.0])
        );
        let invalid = Err("Invalid latency-tracking-info-percentiles parameters");
        let range =
            Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]");
        for bad in [&b"abc"[..], b"nan", b" 5", b"5  7", b"5 ", b"1,2", b"'5'"] {
            assert_eq!(
                parse_percentiles(bad),
                invalid,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        for bad in [
            &b"101"[..],
            b"inf",
            b"-1",
            b"100.0000001",
            b"101 abc",
            b"10 101",
        ] {
            assert_eq!(
                parse_percentiles(bad),
                range,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let printed: Vec<String> = [50.0, 99.9, 0.0, -0.0, 5e-7, 99.99999999, 50.5, 100.0]
            .into_iter()
            .map(format_percentile)
            .collect();
        assert_eq!(
            printed,
            ["50", "99.9", "0", "-0", "0", "100", "50.5", "100"]
        );
    }
}
