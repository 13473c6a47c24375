//! Bit operations on strings (Redis `bitops.c`): GETBIT, SETBIT, BITCOUNT,
//! BITPOS, BITOP. A bitmap is an ordinary string value; bit `n` is bit
//! `7 - n % 8` of byte `n / 8` (the most significant bit first), and bytes
//! past the end read as zero.
//!
//! SETBIT is a read-modify-write of the whole value under the key's stripe
//! lock, as SETRANGE is: correct and crash-atomic, but it rewrites the
//! value, so its cost grows with the string (see `docs/compatibility.md`).

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

fn getbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let offset = offset_arg(ctx, &args[2])?;
    let v = read_string(ctx.slot().db(), &args[1])?;
    if v.is_none() {
        ctx.keymiss(&args[1]);
    }
    ctx.int(bit_at(v.as_deref().unwrap_or_default(), offset) as i64);
    Ok(())
}

fn setbit(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let key = &args[1];
    let offset = offset_arg(ctx, &args[2])?;
    let on = match parse_i64(&args[3]) {
        Some(b @ (0 | 1)) => b as u8,
        _ => return Err(Error::err("bit is not an integer or out of range")),
    };
    let db = ctx.db_w()?;
    let _g = ctx.lock(key);
    let found = db.get_versioned(key)?;
    let created = found.is_none();
    let (mut value, at) = found.map_or((Vec::new(), None), |v| (v.value, v.expires_at));
    let byte = (offset >> 3) as usize;
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let shift = 7 - (offset & 7);
    let old = (value[byte] >> shift) & 1;
    value[byte] = (value[byte] & !(1 << shift)) | (on << shift);
    db.put_with_expiry(key, &value, at)?;
    if created {
        ctx.notify(NEW, "new", key);
    }
    ctx.notify(STRING, "setbit", key);
    ctx.int(old as i64);
    Ok(())
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
    let mut n: u64 = v[fb..=lb].iter().map(|b| b.count_ones() as u64).sum();
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
            let bits = args.len() == 5 && unit_arg(&args[4])?;
            if start < 0 && end < 0 && start > end {
                ctx.int(0);
                return Ok(());
            }
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
        values.push(db.get(k)?.unwrap_or_default());
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
}
