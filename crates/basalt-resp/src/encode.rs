//! Reply encoding: each method appends one reply (or an aggregate header)
//! to the output buffer, spelled for the connection's protocol version the
//! way Redis 7.0's `addReply*` functions spell it. Nothing is allocated
//! besides the output buffer's own growth; numbers are formatted on the
//! stack.

use std::fmt::Write as _;

/// The protocol a connection speaks, chosen with `HELLO`. Redis starts every
/// connection in RESP2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2: no maps, sets, doubles, booleans or nulls of their own; they
    /// are sent as arrays, bulk strings, integers and `$-1` / `*-1`.
    #[default]
    Resp2,
    /// RESP3: every reply type has its own prefix.
    Resp3,
}

/// Appends replies to an output buffer in one protocol.
///
/// ```
/// use basalt_resp::{Encoder, Protocol};
///
/// let mut out = Vec::new();
/// let mut e = Encoder::new(&mut out, Protocol::Resp3);
/// e.map(1);
/// e.bulk(b"score");
/// e.double(1.5);
/// assert_eq!(out, b"%1\r\n$5\r\nscore\r\n,1.5\r\n");
/// ```
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
    protocol: Protocol,
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `out`.
    pub fn new(out: &'a mut Vec<u8>, protocol: Protocol) -> Self {
        Encoder { out, protocol }
    }

    /// The protocol replies are spelled in.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// `+<s>\r\n`. A `\r` or `\n` inside `s` would end the reply early, so
    /// each becomes a space (Redis does the same to error messages).
    pub fn simple(&mut self, s: &[u8]) {
        self.line(b'+', s);
    }

    /// `-<message>\r\n`. `message` includes the error code, e.g.
    /// `b"ERR syntax error"` or `b"WRONGTYPE Operation against ..."`; `\r`
    /// and `\n` become spaces.
    pub fn error(&mut self, message: &[u8]) {
        self.line(b'-', message);
    }

    /// `:<n>\r\n`.
    pub fn integer(&mut self, n: i64) {
        self.out.push(b':');
        write_i64(self.out, n);
        self.out.extend_from_slice(b"\r\n");
    }

    /// `$<len>\r\n<bytes>\r\n`.
    pub fn bulk(&mut self, bytes: &[u8]) {
        self.header(b'$', bytes.len());
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(b"\r\n");
    }

    /// A missing value, e.g. GET of an absent key: `$-1\r\n` in RESP2,
    /// `_\r\n` in RESP3 (Redis `addReplyNull`).
    pub fn null(&mut self) {
        self.out.extend_from_slice(match self.protocol {
            Protocol::Resp2 => b"$-1\r\n",
            Protocol::Resp3 => b"_\r\n",
        });
    }

    /// A missing aggregate, e.g. a timed-out BLPOP: `*-1\r\n` in RESP2,
    /// `_\r\n` in RESP3 (Redis `addReplyNullArray`).
    pub fn null_array(&mut self) {
        self.out.extend_from_slice(match self.protocol {
            Protocol::Resp2 => b"*-1\r\n",
            Protocol::Resp3 => b"_\r\n",
        });
    }

    /// `*<len>\r\n`; `len` replies must follow.
    pub fn array(&mut self, len: usize) {
        self.header(b'*', len);
    }

    /// A map of `pairs` key/value pairs: `%<pairs>\r\n` in RESP3, a flat
    /// array `*<2*pairs>\r\n` in RESP2. `2 * pairs` replies must follow,
    /// key then value.
    pub fn map(&mut self, pairs: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', 2 * pairs),
            Protocol::Resp3 => self.header(b'%', pairs),
        }
    }

    /// A set: `~<len>\r\n` in RESP3, `*<len>\r\n` in RESP2.
    pub fn set(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', len),
            Protocol::Resp3 => self.header(b'~', len),
        }
    }

    /// An out-of-band message such as a pub/sub delivery: `><len>\r\n` in
    /// RESP3, `*<len>\r\n` in RESP2.
    pub fn push(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', len),
            Protocol::Resp3 => self.header(b'>', len),
        }
    }

    /// A double, formatted like Redis 7.0's `addReplyDouble`: C's `%.17g`
    /// (`1.5`, `0.10000000000000001`, `1e+300`), infinities as `inf` and
    /// `-inf`. RESP3 `,<text>\r\n`; RESP2 a bulk string of the same text.
    pub fn double(&mut self, d: f64) {
        let mut text = StackBuf::new();
        format_g17(d, &mut text);
        match self.protocol {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => self.line(b',', text.as_bytes()),
        }
    }

    /// RESP3 `#t\r\n` / `#f\r\n`; RESP2 `:1\r\n` / `:0\r\n`.
    pub fn boolean(&mut self, b: bool) {
        self.out.extend_from_slice(match (self.protocol, b) {
            (Protocol::Resp2, true) => b":1\r\n",
            (Protocol::Resp2, false) => b":0\r\n",
            (Protocol::Resp3, true) => b"#t\r\n",
            (Protocol::Resp3, false) => b"#f\r\n",
        });
    }

    /// Text meant for humans (e.g. INFO), tagged with a three-byte format
    /// such as `*b"txt"` or `*b"mkd"`: RESP3 `=<len+4>\r\n<format>:<text>\r\n`;
    /// RESP2 a bulk string of `text` alone.
    pub fn verbatim(&mut self, format: &[u8; 3], text: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', text.len() + 4);
                self.out.extend_from_slice(format);
                self.out.push(b':');
                self.out.extend_from_slice(text);
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// An integer of any size given as decimal digits (optionally `-`):
    /// RESP3 `(<digits>\r\n`; RESP2 a bulk string of the digits.
    pub fn big_number(&mut self, digits: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(digits),
            Protocol::Resp3 => self.line(b'(', digits),
        }
    }

    /// The output buffer, for frame types the methods do not cover.
    pub(crate) fn out(&mut self) -> &mut Vec<u8> {
        self.out
    }

    /// `<prefix><len>\r\n`.
    fn header(&mut self, prefix: u8, len: usize) {
        self.out.push(prefix);
        write_u64(self.out, len as u64);
        self.out.extend_from_slice(b"\r\n");
    }

    /// `<prefix><text>\r\n` with CR/LF inside `text` turned into spaces.
    fn line(&mut self, prefix: u8, text: &[u8]) {
        self.out.push(prefix);
        let start = self.out.len();
        self.out.extend_from_slice(text);
        for b in &mut self.out[start..] {
            if *b == b'\r' || *b == b'\n' {
                *b = b' ';
            }
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Appends a command as a client sends it: a multibulk array of bulk
/// strings. Handy for clients, tests and benchmarks.
///
/// ```
/// let mut out = Vec::new();
/// basalt_resp::write_command(&mut out, [&b"GET"[..], b"k"]);
/// assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
/// ```
pub fn write_command<I, A>(out: &mut Vec<u8>, args: I)
where
    I: IntoIterator<Item = A>,
    I::IntoIter: ExactSizeIterator,
    A: AsRef<[u8]>,
{
    let args = args.into_iter();
    let mut e = Encoder::new(out, Protocol::Resp2);
    e.array(args.len());
    for arg in args {
        e.bulk(arg.as_ref());
    }
}

/// Two ASCII digits for every value 0..100, so integers are written two
/// digits per division (the trick the `itoa` crate uses).
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal.
pub(crate) fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    // Single digits (most lengths and counts) skip the buffer entirely.
    if n < 10 {
        out.push(b'0' + n as u8);
        return;
    }
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `n` in decimal, with `-` when negative.
pub(crate) fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

/// A fixed buffer that `fmt::Write` can target, so float formatting does not
/// allocate. 32 bytes hold any `{:.16e}` of an f64 (`-1.2345678901234567e-308`
/// is 24) and any `%.17g` result.
struct StackBuf {
    buf: [u8; 32],
    len: usize,
}

impl StackBuf {
    fn new() -> Self {
        StackBuf {
            buf: [0; 32],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.len + s.len() > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.push(s.as_bytes());
        Ok(())
    }
}

/// C's `printf("%.17g", d)` as glibc prints it (what Redis 7.0 sends).
///
/// `%.17g` rounds to 17 significant digits; with X the decimal exponent of
/// the rounded value it uses fixed notation when -4 <= X < 17 and
/// scientific (`1.5e+20`, at least two exponent digits) otherwise, then drops
/// trailing zeros and a bare decimal point. Rust's `{:.16e}` performs the
/// same correctly rounded (ties-to-even) conversion to 17 digits, so only
/// the layout is done here.
fn format_g17(d: f64, out: &mut StackBuf) {
    if d.is_nan() {
        // glibc prints the sign of a NaN.
        out.push(if d.is_sign_negative() {
            b"-nan"
        } else {
            b"nan"
        });
        return;
    }
    if d.is_infinite() {
        out.push(if d > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    // Whole numbers below 2^53 (most scores: ranks, timestamps, counters)
    // print as plain integers under %.17g; formatting them as integers
    // skips the 17-digit float formatting (~3 % of a ZPOPMIN).
    if d.fract() == 0.0 && d.abs() < (1u64 << 53) as f64 && !(d == 0.0 && d.is_sign_negative()) {
        let (mut digits, mut at) = ([0u8; 20], 20);
        let mut n = (d as i64).unsigned_abs();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if d < 0.0 {
            at -= 1;
            digits[at] = b'-';
        }
        out.push(&digits[at..]);
        return;
    }
    let mut sci = StackBuf::new();
    // Cannot fail: at most 24 bytes into 32.
    let _ = write!(sci, "{d:.16e}");
    let sci = sci.as_bytes();
    let (negative, sci) = match sci {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, sci),
    };
    // `sci` is now `D.DDDDDDDDDDDDDDDDe<exp>`: 17 digits and an exponent.
    let e_at = sci.iter().position(|&b| b == b'e').unwrap_or(sci.len());
    let mut digits = [0u8; 17];
    let mut count = 0;
    for &b in sci[..e_at].iter().filter(|b| b.is_ascii_digit()).take(17) {
        digits[count] = b;
        count += 1;
    }
    let exp: i32 = std::str::from_utf8(&sci[(e_at + 1).min(sci.len())..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Significant digits after dropping trailing zeros (at least one).
    let mut sig = count;
    while sig > 1 && digits[sig - 1] == b'0' {
        sig -= 1;
    }
    let digits = &digits[..sig];

    if negative {
        out.push(b"-");
    }
    if (-4..17).contains(&exp) {
        if exp < 0 {
            // 0.000ddd
            out.push(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b"0");
            }
            out.push(digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push(digits);
                for _ in digits.len()..int_len {
                    out.push(b"0");
                }
            } else {
                out.push(&digits[..int_len]);
                out.push(b".");
                out.push(&digits[int_len..]);
            }
        }
    } else {
        out.push(&digits[..1]);
        if digits.len() > 1 {
            out.push(b".");
            out.push(&digits[1..]);
        }
        out.push(if exp < 0 { b"e-" } else { b"e+" });
        let abs = exp.unsigned_abs();
        if abs < 10 {
            out.push(b"0");
        }
        let mut num = [0u8; 3];
        let mut i = num.len();
        let mut v = abs;
        loop {
            i -= 1;
            num[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        out.push(&num[i..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g17(d: f64) -> String {
        let mut b = StackBuf::new();
        format_g17(d, &mut b);
        String::from_utf8(b.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn doubles_match_c_printf_g17() {
        // Expected strings from C's printf("%.17g") (glibc).
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (1.5, "1.5"),
            (-2.5, "-2.5"),
            (0.1, "0.10000000000000001"),
            (1.0 / 3.0, "0.33333333333333331"),
            (100.0, "100"),
            (123456789.0, "123456789"),
            // Exact ties at the 18th digit round to even, as glibc does.
            (1234567890123456.0 + 0.25, "1234567890123456.2"),
            (1234567890123456.0 + 0.75, "1234567890123456.8"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (1.5e17, "1.5e+17"),
            (1e300, "1.0000000000000001e+300"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (0.000123, "0.00012300000000000001"),
            (5e-324, "4.9406564584124654e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-f64::MIN_POSITIVE, "-2.2250738585072014e-308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for &(d, want) in cases {
            assert_eq!(g17(d), want, "{d:e}");
        }
    }

    #[test]
    fn whole_numbers_take_the_integer_path_and_print_as_printf_does() {
        // Around the 2^53 limit of the fast path, and far below it: the
        // integer path and %.17g agree (from 1e16 on %.17g still prints
        // every digit, up to 1e17).
        let edge = (1u64 << 53) as f64;
        let cases: &[(f64, &str)] = &[
            (edge - 1.0, "9007199254740991"),
            (edge, "9007199254740992"),
            (edge + 2.0, "9007199254740994"),
            (-(edge - 1.0), "-9007199254740991"),
            (-7.0, "-7"),
            (1e15, "1000000000000000"),
            (99999999999999990.0, "99999999999999984"),
        ];
        for &(d, want) in cases {
            assert_eq!(g17(d), want, "{d:e}");
        }
    }

    #[test]
    fn integers_format_like_display() {
        let mut n: u64 = 1;
        for _ in 0..20 {
            for v in [n - 1, n, n + 1, n.saturating_mul(7)] {
                let mut out = Vec::new();
                write_u64(&mut out, v);
                assert_eq!(out, v.to_string().as_bytes());
            }
            n = n.saturating_mul(10);
        }
        for v in [i64::MIN, -1, 0, i64::MAX, -100, -99] {
            let mut out = Vec::new();
            write_i64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }
}
