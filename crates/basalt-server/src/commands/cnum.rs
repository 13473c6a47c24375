//! Numbers read and printed the way Redis's C code does: `strtod` (hex
//! floats included) for scores and weights, and x87 `long double`
//! arithmetic printed with `%.17Lf` for INCRBYFLOAT and HINCRBYFLOAT.
//!
//! The one idea: **Redis's float counters are 80-bit, not 64-bit.** Redis
//! adds INCRBYFLOAT's increment in a `long double` (64-bit mantissa on
//! x86-64) and prints the sum with 17 decimals, zeros trimmed. So
//! `0.1 + 0.2` is "0.3" there: the 80-bit sum is 0.3000000000000000000108…,
//! which rounds to 0.30000000000000000; an f64 sum would print
//! 0.30000000000000004. [`LongDouble`] reproduces it: parsing and the
//! addition are IEEE x87 extended precision with round-to-nearest-even
//! (`rustc_apfloat`, the Rust port of LLVM's APFloat, which is what
//! compilers use to fold such constants), and the printing is exact decimal
//! arithmetic on the value's bits, rounding half to even as glibc's
//! `printf` does.

use rustc_apfloat::ieee::{Double, X87DoubleExtended};
use rustc_apfloat::{Float, FloatConvert, Round, Status};

/// Redis's `MAX_LONG_DOUBLE_CHARS`: longer inputs are not numbers.
const MAX_LONG_DOUBLE_CHARS: usize = 5 * 1024;

/// The shape of a number `strtod` would consume whole.
enum Shape {
    /// Decimal digits, optional point and exponent (Rust's parser agrees).
    Decimal,
    /// `0x` hex digits, optional point and `p` exponent: the text to hand
    /// to APFloat (which wants the exponent), sign included.
    Hex(String),
    /// `inf` or `infinity`, any case; true when negative.
    Inf(bool),
}

/// Checks that all of `s` is one number in C's `strtod` syntax (no leading
/// space: callers decide about that). NaN spellings are not numbers here;
/// every caller refuses NaN.
fn shape(s: &str) -> Option<Shape> {
    let b = s.as_bytes();
    let (neg, body) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(Shape::Inf(neg));
    }
    let hex = body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x';
    let (digits, exp_mark): (fn(&u8) -> bool, u8) = if hex {
        (u8::is_ascii_hexdigit, b'p')
    } else {
        (u8::is_ascii_digit, b'e')
    };
    let mut i = if hex { 2 } else { 0 };
    let start = i;
    while i < body.len() && digits(&body[i]) {
        i += 1;
    }
    let mut seen = i > start;
    if i < body.len() && body[i] == b'.' {
        i += 1;
        let frac = i;
        while i < body.len() && digits(&body[i]) {
            i += 1;
        }
        seen |= i > frac;
    }
    if !seen {
        return None;
    }
    let mut has_exp = false;
    if i < body.len() && (body[i] | 0x20) == exp_mark {
        i += 1;
        if i < body.len() && (body[i] == b'+' || body[i] == b'-') {
            i += 1;
        }
        let e = i;
        while i < body.len() && body[i].is_ascii_digit() {
            i += 1;
        }
        if i == e {
            return None;
        }
        has_exp = true;
    }
    if i != body.len() {
        return None;
    }
    Some(if hex {
        let mut t = s.to_string();
        if !has_exp {
            t.push_str("p0");
        }
        Shape::Hex(t)
    } else {
        Shape::Decimal
    })
}

/// Whether an APFloat conversion is what C reports as `ERANGE` with a
/// result Redis refuses: overflow to infinity or underflow to zero.
fn out_of_range(status: Status, infinite: bool, zero: bool) -> bool {
    (status.contains(Status::OVERFLOW) && infinite) || (status.contains(Status::UNDERFLOW) && zero)
}

/// All of `s` as C's `strtod` reads it, hex floats included: the value,
/// and whether `strtod` would have set `ERANGE` with an infinite or zero
/// result (overflow, or underflow to zero). `None` if `s` is not wholly a
/// number, or is NaN. No leading space allowed (callers that allow it,
/// as `zslParseRange`, trim first).
pub fn strtod(s: &[u8]) -> Option<(f64, bool)> {
    let text = std::str::from_utf8(s).ok()?;
    match shape(text)? {
        Shape::Inf(neg) => Some((
            if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            },
            false,
        )),
        Shape::Decimal => {
            let v: f64 = text.parse().ok()?;
            let digits = text.trim_start_matches(['+', '-']);
            let mantissa = digits.split(['e', 'E']).next().unwrap_or("");
            let range = v.is_infinite()
                || (v == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)));
            Some((v, range))
        }
        Shape::Hex(t) => {
            let r = Double::from_str_r(&t, Round::NearestTiesToEven).ok()?;
            let v = f64::from_bits(r.value.to_bits() as u64);
            Some((v, out_of_range(r.status, v.is_infinite(), v == 0.0)))
        }
    }
}

/// An x87 80-bit `long double`, as Redis's INCRBYFLOAT computes with.
#[derive(Debug, Clone, Copy)]
pub struct LongDouble(X87DoubleExtended);

impl LongDouble {
    /// Zero (a missing key or field).
    pub fn zero() -> Self {
        LongDouble(X87DoubleExtended::ZERO)
    }

    /// What Redis's `string2ld` accepts: all of `s` in `strtold` syntax
    /// (hex and `inf` included), not empty, shorter than 5 KiB, no leading
    /// space, no overflow to infinity or underflow to zero, not NaN.
    pub fn parse(s: &[u8]) -> Option<Self> {
        if s.is_empty() || s.len() >= MAX_LONG_DOUBLE_CHARS || s[0].is_ascii_whitespace() {
            return None;
        }
        let text = std::str::from_utf8(s).ok()?;
        let text = match shape(text)? {
            Shape::Inf(neg) => {
                let inf = X87DoubleExtended::INFINITY;
                return Some(LongDouble(if neg { -inf } else { inf }));
            }
            Shape::Decimal => text.to_string(),
            Shape::Hex(t) => t,
        };
        let r = X87DoubleExtended::from_str_r(&text, Round::NearestTiesToEven).ok()?;
        if r.value.is_nan() || out_of_range(r.status, r.value.is_infinite(), r.value.is_zero()) {
            return None;
        }
        Some(LongDouble(r.value))
    }

    /// The rounded sum.
    pub fn plus(self, other: LongDouble) -> Self {
        LongDouble(self.0.add_r(other.0, Round::NearestTiesToEven).value)
    }

    /// The nearest f64 (infinite past f64's range).
    pub fn to_f64(&self) -> f64 {
        let d: Double = self.0.convert_r(Round::NearestTiesToEven, &mut false).value;
        f64::from_bits(d.to_bits() as u64)
    }

    /// `(long long) ceill(self * 1000)` as Redis computes a timeout in
    /// seconds in milliseconds: the product and the rounding up in this
    /// precision; `None` where the conversion overflows a long long (C
    /// leaves that undefined; x86 gives `LLONG_MIN`).
    pub fn ceil_thousandths(&self) -> Option<i64> {
        let thousand = X87DoubleExtended::from_u128(1000).value;
        let ms = self.0.mul_r(thousand, Round::NearestTiesToEven).value;
        let r = ms.to_i128_r(64, Round::TowardPositive, &mut false);
        if r.status.contains(Status::INVALID_OP) {
            return None;
        }
        i64::try_from(r.value).ok()
    }

    /// Neither infinite nor NaN.
    pub fn is_finite(&self) -> bool {
        self.0.is_finite()
    }

    /// Redis's `ld2string(.., LD_STR_HUMAN)`: `%.17Lf`, trailing zeros
    /// (and a trailing point) removed, "-0" printed as "0"; "inf", "-inf".
    pub fn to_human(&self) -> String {
        if self.0.is_infinite() {
            return if self.0.is_negative() { "-inf" } else { "inf" }.to_string();
        }
        if self.0.is_nan() {
            return "nan".to_string();
        }
        let bits = self.0.to_bits();
        let negative = (bits >> 79) & 1 == 1;
        let exp = ((bits >> 64) & 0x7fff) as i32;
        let mantissa = bits as u64;
        // value = mantissa * 2^e, with the integer bit explicit.
        let e = if exp == 0 {
            1 - 16383 - 63
        } else {
            exp - 16383 - 63
        };
        let mut digits = scaled_decimal(mantissa, e);
        if digits.len() < 18 {
            digits.insert_str(0, &"0".repeat(18 - digits.len()));
        }
        let point = digits.len() - 17;
        let mut text = String::with_capacity(digits.len() + 2);
        if negative {
            text.push('-');
        }
        text.push_str(&digits[..point]);
        let frac = digits[point..].trim_end_matches('0');
        if !frac.is_empty() {
            text.push('.');
            text.push_str(frac);
        }
        if text == "-0" {
            text = "0".to_string();
        }
        text
    }
}

/// The decimal digits of `m * 2^e * 10^17`, rounded half to even to an
/// integer (no leading zeros; "0" for zero).
fn scaled_decimal(m: u64, e: i32) -> String {
    // m < 2^64 and 10^17 < 2^57: the product fits in a u128.
    let x = m as u128 * 100_000_000_000_000_000u128;
    if e < 0 {
        let s = e.unsigned_abs();
        if s >= 128 {
            // x < 2^121 < half of 2^s: rounds to zero.
            return "0".to_string();
        }
        let q = x >> s;
        let r = x & ((1u128 << s) - 1);
        let half = 1u128 << (s - 1);
        let up = r > half || (r == half && q & 1 == 1);
        return (q + up as u128).to_string();
    }
    // An exact integer: x * 2^e in base-10^9 limbs, least significant first.
    const BASE: u64 = 1_000_000_000;
    let mut limbs: Vec<u64> = Vec::new();
    let mut v = x;
    while v > 0 {
        limbs.push((v % BASE as u128) as u64);
        v /= BASE as u128;
    }
    let mut left = e as u32;
    while left > 0 {
        let step = left.min(32);
        let mut carry = 0u64;
        for l in limbs.iter_mut() {
            let t = (*l << step) + carry;
            *l = t % BASE;
            carry = t / BASE;
        }
        while carry > 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
        left -= step;
    }
    let Some((top, rest)) = limbs.split_last() else {
        return "0".to_string();
    };
    let mut out = top.to_string();
    for l in rest.iter().rev() {
        out.push_str(&format!("{l:09}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> String {
        let a = LongDouble::parse(a.as_bytes()).unwrap();
        let b = LongDouble::parse(b.as_bytes()).unwrap();
        a.plus(b).to_human()
    }

    #[test]
    fn sums_print_as_redis_long_doubles_do() {
        // Values checked against redis-server 7.0.15.
        assert_eq!(incr("0.1", "0.2"), "0.3");
        assert_eq!(incr("1.1", "2.2"), "3.3");
        assert_eq!(incr("10.50", "0.1"), "10.6");
        assert_eq!(incr("5.0e3", "200"), "5200");
        assert_eq!(incr("9223372036854775807", "1"), "9223372036854775808");
        assert_eq!(incr("9007199254740993", "0"), "9007199254740993");
        assert_eq!(incr("0.1", "1e17"), "100000000000000000.1015625");
        assert_eq!(incr("1e-4940", "0"), "0", "a denormal is a number");
        assert_eq!(incr("-0", "-0"), "0");
        assert_eq!(incr("3", "-3"), "0");
        assert_eq!(incr("0x10", "1"), "17");
        assert_eq!(incr("0X1P-3", "-0xA.8"), "-10.375");
        assert_eq!(incr("1e-30", "0"), "0");
        assert_eq!(incr("-1e-30", "0"), "0");
        assert_eq!(incr("-2.5", "0"), "-2.5");
    }

    #[test]
    fn large_finite_long_doubles_print_every_digit() {
        // Both checked whole against redis-server 7.0.15 (same MD5).
        let v = incr("1e400", "0");
        assert_eq!(v.len(), 401);
        assert!(v.starts_with("100000000000000000002818806839"), "{v}");
        assert!(v.ends_with("309734806343732497430221946880"), "{v}");
        let sum = incr("1.5e308", "1.5e308");
        assert_eq!(sum.len(), 309);
        assert!(sum.starts_with("299999999999999999999802952978"), "{sum}");
        assert!(sum.ends_with("377808905266593729023699845120"), "{sum}");
    }

    #[test]
    fn printing_rounds_the_18th_decimal_half_to_even() {
        // 2^-18 = 0.000003814697265625: the 18th decimal is a tie.
        assert_eq!(incr("0x1p-18", "0"), "0.00000381469726562");
        // 3 * 2^-18 = 0.000011444091796875: tie, odd neighbour rounds up.
        assert_eq!(incr("0x3p-18", "0"), "0.00001144409179688");
    }

    #[test]
    fn string2ld_refuses_what_redis_refuses() {
        for bad in [
            "", " 1", "1 ", "abc", "1e", "1e+", ".", "0x", "0xp3", "nan", "-nan", "1e99999",
            "1e-99999", "1e-5000", "1,5",
        ] {
            assert!(LongDouble::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        let long = "1".repeat(MAX_LONG_DOUBLE_CHARS);
        assert!(LongDouble::parse(long.as_bytes()).is_none());
        for good in [
            "1",
            "-1.",
            ".5",
            "+2e3",
            "inf",
            "-Infinity",
            "0x1.8p3",
            "1e400",
        ] {
            assert!(LongDouble::parse(good.as_bytes()).is_some(), "{good:?}");
        }
        assert!(!LongDouble::parse(b"inf").unwrap().is_finite());
        let f = |s: &str| LongDouble::parse(s.as_bytes()).unwrap().to_f64();
        assert_eq!(f("0x1p-5"), 0.03125);
        assert_eq!(f("0.1"), 0.1);
        assert_eq!(f("1e400"), f64::INFINITY);
    }

    #[test]
    fn strtod_reads_hex_and_reports_range_errors() {
        assert_eq!(strtod(b"0x10"), Some((16.0, false)));
        assert_eq!(strtod(b"-0x1.8p3"), Some((-12.0, false)));
        assert_eq!(strtod(b"0x.8"), Some((0.5, false)));
        assert_eq!(strtod(b"0X1P-3"), Some((0.125, false)));
        assert_eq!(strtod(b"+0xA.8"), Some((10.5, false)));
        assert_eq!(strtod(b"1.5"), Some((1.5, false)));
        assert_eq!(strtod(b"-INF"), Some((f64::NEG_INFINITY, false)));
        assert_eq!(strtod(b"1e400"), Some((f64::INFINITY, true)));
        assert_eq!(strtod(b"1e-400"), Some((0.0, true)));
        assert_eq!(strtod(b"0x1p99999"), Some((f64::INFINITY, true)));
        assert_eq!(strtod(b"0e5"), Some((0.0, false)));
        for bad in ["", "0x", "1e", "nan", " 1", "1 ", "0x1q", "--1"] {
            assert_eq!(strtod(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
