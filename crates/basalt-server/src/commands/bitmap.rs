//! Bit operations on strings (Redis `bitops.c`): GETBIT, SETBIT, BITCOUNT,
//! BITPOS, BITOP. A bitmap is an ordinary string value; bit `n` is bit
//! `7 - n % 8` of byte `n / 8` (the most significant bit first), and bytes
//! past the end read as zero.
//!
//! BITFIELD reads and writes integers of 1 to 64 bits at any bit offset,
//! with Redis's overflow rules (WRAP, SAT, FAIL) worked out in `u64`/`i64`
//! wrapping arithmetic so that every edge (i64 at its limits, u63) gives
//! the numbers Redis gives.
//!
//! SETBIT, GETBIT and BITFIELD read and write only the bytes they touch,
//! through the engine's ranged reads and writes (`Db::read_range`,
//! `Db::write_range`) under the key's stripe lock: a bitmap longer than
//! `basalt_engine::SEGMENT_ABOVE` is kept in 512-byte segments, so setting
//! one bit of a 1 MB bitmap appends one small record, not a megabyte.
//! BITCOUNT, BITPOS and BITOP read whole values.

use basalt_resp::Args;

use super::flags::*;
use super::strings::read_string;
use super::{def, int_arg, is, parse_i64, CommandDef, Ctx, Error, Group, Result};
use crate::notify::{GENERIC, NEW, STRING};

const G: Group = Group::Bitmap;

/// The bitmap family's table.
pub const COMMANDS: &[CommandDef] = &[
    def("getbit", 3, READONLY | FAST, (1, 1, 1), G, "2.2.0", "Returns a bit value by offset.", getbit),
    def("setbit", 4, WRITE | DENYOOM, (1, 1, 1), G, "2.2.0", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", setbit),
    def("bitcount", -2, READONLY, (1, 1, 1), G, "2.6.0", "Counts the number of set bits (population counting) in a string.", bitcount),
    def("bitpos", -3, READONLY, (1, 1, 1), G, "2.8.7", "Finds the first set (1) or clear (0) bit in a string.", bitpos),
    def("bitop", -4, WRITE | DENYOOM, (2, -1, 1), G, "2.6.0", "Performs bitwise operations on multiple strings, and stores the result.", bitop),
    def("bitfield", -2, WRITE | DENYOOM, (1, 1, 1), G, "3.2.0", "Performs arbitrary bitfield integer operations on strings.", bitfield),
    def("bitfield_ro", -2, READONLY | FAST, (1, 1, 1), G, "6.0.0", "Performs arbitrary read-only bitfield integer operations on strings.", bitfield_ro),
];

/// A bit offset: `0 <= offset` and its byte below `proto-max-bulk-len`.
fn offset_arg(ctx: &Ctx<'_>, arg: &[u8]) -> Result<u64> {
    let bad = || Error::err("bit offset is not an integer or out of range");
    let n = parse_i64(arg).ok_or_else(bad)?;
    if n < 0 || (n as u64 >> 3) >= ctx.shared.security.proto_max_bulk_len() {
        return Err(bad());
    }
    Ok(n as u64)
}

fn bit_at(v: &[u8], offset: u64) -> u8 {
    v.get((offset >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (offset & 7))) & 1)
}

/// The byte holding bit `offset` (0 past the end), `None` if the key is
/// absent: one ranged read.
fn byte_of(db: Option<&basalt_engine::Db>, key: &[u8], offset: u64) -> Result<Option<u8>> {
    let Some(db) = db else { return Ok(None) };
    Ok(db
        .read_range(key, offset >> 3, 1)?
        .map(|(b, _)| b.first().copied().unwrap_or(0)))
}

fn getbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let offset = offset_arg(ctx, &args[2])?;
    let b = byte_of(ctx.slot().db(), &args[1], offset)?;
    ctx.looked_up(&args[1], b.is_some());
    ctx.int(((b.unwrap_or(0) >> (7 - (offset & 7))) & 1) as i64);
    Ok(())
}

fn setbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let offset = offset_arg(ctx, &args[2])?;
    let on = match parse_i64(&args[3]) {
        Some(b @ (0 | 1)) => b as u8,
        _ => return Err(Error::err("bit is not an integer or out of range")),
    };
    let shift = 7 - (offset & 7);
    // A bit already as asked, inside the value, is not written: Redis 7.0
    // then publishes nothing, counts no change and leaves WATCH alone (a
    // SETBIT that grows or creates the string writes even a 0). Seen
    // first without the key's lock from this thread's cache of segments,
    // as a read (a hot bitmap's repeated SETBITs, like PFADDs that raise
    // nothing); under the lock the engine's write compares the byte
    // before and after and writes nothing when it is the same.
    //
    // That check only pays when bits are often already as asked: on a
    // stream of SETBITs that change their bits (measured: 7 % of the
    // worker on a hot bitmap whose every SETBIT flips) it is a look at the
    // index and the cache for nothing. So each thread keeps a score of how
    // its SETBITs went (`WRITE_SCORE`) and skips the check while most of
    // them wrote.
    let byte = offset >> 3;
    let check = WRITE_SCORE.with(|s| s.get()) < WRITE_SCORE_SKIP;
    let unchanged = check
        && ctx.slot().db().is_some_and(|db| {
            let mut seen = None;
            db.read_ranges_cached(key, &[(byte, 1)], |_, b| seen = b.first().copied())
                .is_some_and(|len| byte < len && seen.is_some_and(|b| (b >> shift) & 1 == on))
        });
    if unchanged {
        score_setbit(false);
        ctx.int(on as i64);
        return Ok(());
    }
    let mut old = 0;
    // One read and one write of the byte's segment.
    let (existed, changed) = ctx.ranged_write(key, |db| {
        Ok(db
            .try_modify_range_if_changed(key, byte, 1, |b| {
                old = (b[0] >> shift) & 1;
                b[0] = (b[0] & !(1 << shift)) | (on << shift);
            })?
            .map(|(existed, _, changed)| (existed, changed)))
    })?;
    score_setbit(changed);
    if changed {
        if !existed {
            ctx.notify(NEW, "new", key);
        }
        ctx.notify(STRING, "setbit", key);
    }
    ctx.int(old as i64);
    Ok(())
}

thread_local! {
    /// How this thread's recent SETBITs went: up 1 for each that wrote,
    /// down 2 for each that found its bit already as asked, within
    /// `0..=WRITE_SCORE_MAX`. It climbs while more than two in three
    /// write, which is where the lock-free check stops paying for itself
    /// (it spares an unchanged SETBIT the key's lock and the engine's
    /// locked look, about twice what the check costs).
    static WRITE_SCORE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// [`WRITE_SCORE`] at or above which `setbit` skips its lock-free check.
const WRITE_SCORE_SKIP: u8 = 8;
const WRITE_SCORE_MAX: u8 = 15;

fn score_setbit(wrote: bool) {
    WRITE_SCORE.with(|s| {
        let v = s.get();
        s.set(if wrote {
            (v + 1).min(WRITE_SCORE_MAX)
        } else {
            v.saturating_sub(2)
        })
    });
}

/// `BYTE` (false) or `BIT` (true).
fn unit_arg(arg: &[u8]) -> Result<bool> {
    if is(arg, "bit") {
        Ok(true)
    } else if is(arg, "byte") {
        Ok(false)
    } else {
        Err(Error::Syntax)
    }
}

/// Clamps a `start end` range over `len` units as Redis does (negative
/// counts from the end); `None` when it is empty.
fn clamp(mut start: i64, mut end: i64, len: i64) -> Option<(u64, u64)> {
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    let start = start.max(0);
    let end = end.max(0).min(len - 1);
    (start <= end).then_some((start as u64, end as u64))
}

/// Bits set in bit positions `first..=last` of `v`.
fn count_bits(v: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    // Eight bytes at a time: a 1 MB bitmap is 128 k popcounts, not 1 M.
    let mut words = v[fb..=lb].chunks_exact(8);
    let mut n: u64 = (&mut words)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")).count_ones() as u64)
        .sum();
    n += words
        .remainder()
        .iter()
        .map(|b| b.count_ones() as u64)
        .sum::<u64>();
    // Bits of the edge bytes outside the range.
    if first & 7 != 0 {
        n -= (v[fb] >> (8 - (first & 7))).count_ones() as u64;
    }
    n -= (v[lb] & ((1u16 << (7 - (last & 7))) - 1) as u8).count_ones() as u64;
    n
}

fn bitcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let Some(v) = read_string(ctx.slot().db(), &args[1])? else {
        ctx.keymiss(&args[1]);
        ctx.int(0);
        return Ok(());
    };
    ctx.keyhit();
    let len = v.len() as i64;
    let (first, last) = match args.len() {
        2 => {
            if v.is_empty() {
                ctx.int(0);
                return Ok(());
            }
            (0, len as u64 * 8 - 1)
        }
        4 | 5 => {
            let (start, end) = (int_arg(&args[2])?, int_arg(&args[3])?);
            // Redis answers an inverted negative range before it reads
            // the unit, so `-1 -100 BAD` is 0, not a syntax error.
            if start < 0 && end < 0 && start > end {
                ctx.int(0);
                return Ok(());
            }
            let bits = args.len() == 5 && unit_arg(&args[4])?;
            let units = if bits { len * 8 } else { len };
            match clamp(start, end, units) {
                None => {
                    ctx.int(0);
                    return Ok(());
                }
                Some((s, e)) if bits => (s, e),
                Some((s, e)) => (s * 8, e * 8 + 7),
            }
        }
        _ => return Err(Error::Syntax),
    };
    ctx.int(count_bits(&v, first, last) as i64);
    Ok(())
}

fn bitpos(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let bit = match int_arg(&args[2])? {
        b @ (0 | 1) => b as u8,
        _ => return Err(Error::err("The bit argument must be 1 or 0.")),
    };
    let Some(v) = read_string(ctx.slot().db(), &args[1])? else {
        // A missing key is an endless run of zeros.
        ctx.keymiss(&args[1]);
        ctx.int(if bit == 1 { -1 } else { 0 });
        return Ok(());
    };
    ctx.keyhit();
    let len = v.len() as i64;
    let mut end_given = false;
    let range = match args.len() {
        3 => clamp(0, len - 1, len).map(|(s, e)| (s * 8, e * 8 + 7)),
        4..=6 => {
            let start = int_arg(&args[3])?;
            let bits = args.len() == 6 && unit_arg(&args[5])?;
            let end = if args.len() >= 5 {
                end_given = true;
                int_arg(&args[4])?
            } else {
                len - 1
            };
            let units = if bits { len * 8 } else { len };
            match clamp(start, end, units) {
                Some((s, e)) if !bits => Some((s * 8, e * 8 + 7)),
                r => r,
            }
        }
        _ => return Err(Error::Syntax),
    };
    let Some((first, last)) = range else {
        // An empty range holds neither a 0 nor a 1.
        ctx.int(-1);
        return Ok(());
    };
    let pos = find_bit(&v, first, last, bit);
    let answer = match pos {
        Some(p) => p as i64,
        // Looking for a 0 past a run of ones with no end given: the bits
        // after the string are zeros.
        None if bit == 0 && !end_given => last as i64 + 1,
        None => -1,
    };
    ctx.int(answer);
    Ok(())
}

/// The first bit equal to `bit` in positions `first..=last` of `v`,
/// skipping whole bytes that cannot hold it.
fn find_bit(v: &[u8], first: u64, last: u64, bit: u8) -> Option<u64> {
    let skip = if bit == 1 { 0x00 } else { 0xff };
    let mut o = first;
    while o <= last {
        if o & 7 == 0 && o + 7 <= last && v[(o >> 3) as usize] == skip {
            o += 8;
            continue;
        }
        if bit_at(v, o) == bit {
            return Some(o);
        }
        o += 1;
    }
    None
}

fn bitop(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = [
        ("and", Op::And),
        ("or", Op::Or),
        ("xor", Op::Xor),
        ("not", Op::Not),
    ]
    .into_iter()
    .find(|(name, _)| is(&args[1], name))
    .map(|(_, op)| op)
    .ok_or(Error::Syntax)?;
    let dest: &[u8] = &args[2];
    let sources: Vec<&[u8]> = (3..args.len()).map(|i| &args[i][..]).collect();
    if op == Op::Not && sources.len() != 1 {
        return Err(Error::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let db = ctx.db_w()?;
    let n = ctx.conn.db;
    let _g = ctx.shared.keyspace.lock_many(
        std::iter::once(dest)
            .chain(sources.iter().copied())
            .map(|k| (n, k)),
    );
    let mut values = Vec::with_capacity(sources.len());
    for k in sources {
        // Each source is a read lookup (a hit even if of the wrong type).
        let v = db.get(k);
        ctx.looked_up(k, !matches!(v, Ok(None)));
        values.push(v?.unwrap_or_default());
    }
    let longest = values.iter().map(|v| v.len()).max().unwrap_or(0);
    let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..longest)
        .map(|i| {
            let mut it = values.iter().map(|v| byte(v, i));
            let first = it.next().unwrap_or(0);
            match op {
                Op::And => it.fold(first, |a, b| a & b),
                Op::Or => it.fold(first, |a, b| a | b),
                Op::Xor => it.fold(first, |a, b| a ^ b),
                Op::Not => !first,
            }
        })
        .collect();
    if result.is_empty() {
        if db.delete(dest)? {
            ctx.notify(GENERIC, "del", dest);
        }
    } else {
        let existed = db.exists(dest);
        db.put(dest, &result)?;
        if !existed {
            ctx.notify(NEW, "new", dest);
        }
        ctx.notify(STRING, "set", dest);
    }
    ctx.int(result.len() as i64);
    Ok(())
}

/// How a BITFIELD write treats a result that does not fit its type.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One BITFIELD operation on the integer of `bits` bits at bit `offset`.
#[derive(Clone, Copy, Debug)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63` (lower case only, as Redis 7.0): `(signed, bits)`.
fn field_type(arg: &[u8]) -> Result<(bool, u32)> {
    let bad = || {
        Error::err(
            "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
        )
    };
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(bad()),
    };
    match parse_i64(&arg[1..]) {
        Some(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => Err(bad()),
    }
}

/// A field offset: bits, or `#n` for the n-th field of this width.
fn field_offset(ctx: &Ctx<'_>, arg: &[u8], bits: u32) -> Result<u64> {
    let bad = || Error::err("bit offset is not an integer or out of range");
    let (hash, digits) = match arg.split_first() {
        Some((b'#', rest)) => (true, rest),
        _ => (false, arg),
    };
    let mut n = parse_i64(digits).ok_or_else(bad)?;
    if hash {
        n = n.checked_mul(bits as i64).ok_or_else(bad)?;
    }
    if n < 0 || (n as u64 >> 3) >= ctx.shared.security.proto_max_bulk_len() {
        return Err(bad());
    }
    Ok(n as u64)
}

/// Parses every operation first, as Redis does: one bad argument anywhere
/// fails the whole command before anything is read or written.
fn parse_fields(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Vec<Field>> {
    let mut out = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let sub = &args[j];
        let kind = if is(sub, "get") && rest >= 2 {
            0
        } else if is(sub, "set") && rest >= 3 {
            1
        } else if is(sub, "incrby") && rest >= 3 {
            2
        } else if is(sub, "overflow") && rest >= 1 {
            let w = &args[j + 1];
            overflow = if is(w, "wrap") {
                Overflow::Wrap
            } else if is(w, "sat") {
                Overflow::Sat
            } else if is(w, "fail") {
                Overflow::Fail
            } else {
                return Err(Error::err("Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(Error::Syntax);
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = field_offset(ctx, &args[j + 2], bits)?;
        let op = match kind {
            0 => FieldOp::Get,
            1 => FieldOp::Set(int_arg(&args[j + 3])?),
            _ => FieldOp::IncrBy(int_arg(&args[j + 3])?),
        };
        out.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += if kind == 0 { 3 } else { 4 };
    }
    Ok(out)
}

/// The unsigned integer of `bits` bits at bit `offset` (bytes past the end
/// read as zero).
fn get_field_bits(v: &[u8], offset: u64, bits: u32) -> u64 {
    (0..bits as u64).fold(0, |acc, i| (acc << 1) | bit_at(v, offset + i) as u64)
}

/// Writes the low `bits` bits of `value` at bit `offset` (`v` is long
/// enough).
fn set_field_bits(v: &mut [u8], offset: u64, bits: u32, value: u64) {
    for i in 0..bits as u64 {
        let bit = (value >> (bits as u64 - 1 - i)) & 1;
        let o = offset + i;
        let shift = 7 - (o & 7);
        let b = &mut v[(o >> 3) as usize];
        *b = (*b & !(1 << shift)) | ((bit as u8) << shift);
    }
}

fn sign_extend(v: u64, bits: u32) -> i64 {
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        v as i64
    }
}

/// `value + incr` in a signed field of `bits` bits: `(overflowed, result)`
/// where the result is wrapped or saturated as `how` says (FAIL's result is
/// not used).
fn signed_add(value: i64, incr: i64, bits: u32, how: Overflow) -> (bool, i64) {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let c = (value as u64).wrapping_add(incr as u64);
        sign_extend(
            c & if bits == 64 {
                u64::MAX
            } else {
                !(u64::MAX << bits)
            },
            bits,
        )
    };
    if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr)
    {
        (true, if how == Overflow::Sat { max } else { wrapped() })
    } else if value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr)
    {
        (true, if how == Overflow::Sat { min } else { wrapped() })
    } else {
        (false, value.wrapping_add(incr))
    }
}

/// `value + incr` in an unsigned field of `bits` (< 64) bits; `value` may
/// be a SET argument read as unsigned, so larger than the field.
fn unsigned_add(value: u64, incr: i64, bits: u32, how: Overflow) -> (bool, u64) {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let wrapped = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > max_incr) {
        (true, if how == Overflow::Sat { max } else { wrapped() })
    } else if incr < 0 && incr < min_incr {
        (true, if how == Overflow::Sat { 0 } else { wrapped() })
    } else {
        (false, value.wrapping_add(incr as u64))
    }
}

/// Runs one write on `v` (long enough for it): the reply, `None` when
/// OVERFLOW FAIL refused it (nothing written).
fn write_field(v: &mut [u8], f: &Field) -> Option<i64> {
    let raw = get_field_bits(v, f.offset, f.bits);
    let (overflowed, new, reply) = if f.signed {
        let old = sign_extend(raw, f.bits);
        match f.op {
            FieldOp::IncrBy(d) => {
                let (o, n) = signed_add(old, d, f.bits, f.overflow);
                (o, n as u64, n)
            }
            FieldOp::Set(x) => {
                let (o, n) = signed_add(x, 0, f.bits, f.overflow);
                (o, n as u64, old)
            }
            FieldOp::Get => unreachable!("GET is not a write"),
        }
    } else {
        match f.op {
            FieldOp::IncrBy(d) => {
                let (o, n) = unsigned_add(raw, d, f.bits, f.overflow);
                (o, n, n as i64)
            }
            FieldOp::Set(x) => {
                let (o, n) = unsigned_add(x as u64, 0, f.bits, f.overflow);
                (o, n, raw as i64)
            }
            FieldOp::Get => unreachable!("GET is not a write"),
        }
    };
    if overflowed && f.overflow == Overflow::Fail {
        return None;
    }
    set_field_bits(v, f.offset, f.bits, new);
    Some(reply)
}

fn read_field(v: &[u8], f: &Field) -> i64 {
    let raw = get_field_bits(v, f.offset, f.bits);
    if f.signed {
        sign_extend(raw, f.bits)
    } else {
        raw as i64
    }
}

fn bitfield(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bitfield_generic(ctx, args, false)
}

fn bitfield_ro(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    bitfield_generic(ctx, args, true)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, args: Args<'_>, read_only: bool) -> Result {
    let key = &args[1];
    let fields = parse_fields(ctx, &args)?;
    let highest = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + f.bits as u64 - 1)
        .max();
    let Some(highest) = highest else {
        let v = read_string(ctx.slot().db(), key);
        ctx.looked_up(key, !matches!(v, Ok(None)));
        let v = v?.unwrap_or_default();
        ctx.array(fields.len());
        for f in &fields {
            ctx.int(read_field(&v, f));
        }
        return Ok(());
    };
    if read_only {
        return Err(Error::err("BITFIELD_RO only supports the GET subcommand"));
    }
    // Several writes (growth, then one per operation): the batch comes
    // first, then the key's stripe, as for every batched command.
    let batch = ctx.shared.keyspace.batch();
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    // Redis grows (or creates) the string to the highest written bit even
    // when OVERFLOW FAIL refuses every write.
    let need = (highest >> 3) + 1;
    let len = db.value_len(key)?;
    let created = len.is_none();
    let len = len.unwrap_or(0);
    if len < need {
        db.write_range(key, len, &vec![0u8; (need - len) as usize])?;
    }
    // Each operation reads and writes only the bytes its field spans.
    let mut replies = Vec::with_capacity(fields.len());
    for f in &fields {
        let first = f.offset >> 3;
        let span = ((f.offset & 7) + f.bits as u64).div_ceil(8) as usize;
        let mut window = db
            .read_range(key, first, span)?
            .map(|(b, _)| b)
            .unwrap_or_default();
        window.resize(span, 0);
        let local = Field {
            offset: f.offset & 7,
            ..*f
        };
        replies.push(match f.op {
            FieldOp::Get => Some(read_field(&window, &local)),
            _ => {
                let before = window.clone();
                let r = write_field(&mut window, &local);
                if window != before {
                    db.write_range(key, first, &window)?;
                }
                r
            }
        });
    }
    drop(_g);
    drop(db);
    batch.commit()?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "setbit", key);
    ctx.array(replies.len());
    for r in replies {
        match r {
            Some(n) => ctx.int(n),
            None => ctx.null(),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counting_a_bit_range_leaves_out_the_edge_bits_outside_it() {
        let v = [0xffu8, 0xff, 0xff];
        assert_eq!(count_bits(&v, 0, 23), 24);
        assert_eq!(count_bits(&v, 3, 20), 18);
        assert_eq!(count_bits(&v, 5, 5), 1);
        assert_eq!(count_bits(&[0b1010_0000], 0, 2), 2);
    }

    #[test]
    fn signed_fields_wrap_and_saturate_at_their_width() {
        assert_eq!(signed_add(127, 1, 8, Overflow::Wrap), (true, -128));
        assert_eq!(signed_add(127, 1, 8, Overflow::Sat), (true, 127));
        assert_eq!(signed_add(-128, -1, 8, Overflow::Sat), (true, -128));
        assert_eq!(signed_add(-128, -1, 8, Overflow::Wrap), (true, 127));
        assert_eq!(
            signed_add(i64::MAX, 1, 64, Overflow::Wrap),
            (true, i64::MIN)
        );
        assert_eq!(
            signed_add(i64::MIN, -1, 64, Overflow::Sat),
            (true, i64::MIN)
        );
        assert_eq!(signed_add(5, -3, 4, Overflow::Wrap), (false, 2));
        // SET of a value too big for the field: the value wraps.
        assert_eq!(signed_add(300, 0, 8, Overflow::Wrap), (true, 44));
    }

    #[test]
    fn unsigned_fields_wrap_and_saturate_at_their_width() {
        assert_eq!(unsigned_add(255, 1, 8, Overflow::Wrap), (true, 0));
        assert_eq!(unsigned_add(255, 1, 8, Overflow::Sat), (true, 255));
        assert_eq!(unsigned_add(0, -1, 8, Overflow::Sat), (true, 0));
        assert_eq!(unsigned_add(0, -1, 8, Overflow::Wrap), (true, 255));
        // SET u8 -1 reads -1 as 2^64 - 1.
        assert_eq!(unsigned_add(u64::MAX, 0, 8, Overflow::Wrap), (true, 255));
    }

    #[test]
    fn fields_cross_byte_boundaries_most_significant_bit_first() {
        let mut v = vec![0u8; 3];
        set_field_bits(&mut v, 5, 10, 0b11_0000_0001);
        assert_eq!(v, [0b0000_0110, 0b0000_0010, 0]);
        assert_eq!(get_field_bits(&v, 5, 10), 0b11_0000_0001);
        assert_eq!(get_field_bits(&v, 20, 16), 0);
    }
}
