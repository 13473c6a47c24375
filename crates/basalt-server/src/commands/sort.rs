//! SORT and SORT_RO (Redis `sort.c`): the elements of a list, set or sorted
//! set, ordered as numbers or as strings, optionally by the values of other
//! keys (`BY weight_*`, `BY obj_*->field`), with other keys' values fetched
//! per element (`GET #`, `GET name_*`), a LIMIT, and STORE into a list.
//!
//! The one idea a reader needs: everything is decided in Redis's order, so
//! replies and errors match it: options first (a syntax error wins over a
//! missing or mistyped key), then the key's type, then the elements
//! are loaded, the sort keys looked up and parsed, and a score that does
//! not parse fails the whole command only after all were looked at. A `BY`
//! pattern without `*` means "do not sort": lists and sorted sets come back
//! in their own order (reversed by DESC), sets in the engine's order, except
//! that SORT ... STORE of a set still sorts it as strings so the stored list
//! does not depend on that order (Redis does the same).
//!
//! Other keys named by BY and GET patterns are read without their locks,
//! each as it is at that moment; the sorted key (and the STORE destination)
//! are held for the whole command.

use std::cmp::Ordering;

use basalt_engine::Db;
use basalt_resp::Args;

use super::flags::*;
use super::{cnum, def, is, parse_i64, CommandDef, Ctx, Error, Group, Result};
use crate::keyspace::RedisType;
use crate::notify::{GENERIC, LIST, NEW};

const G: Group = Group::Generic;

/// The table.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "sort",
        -2,
        WRITE | DENYOOM | MOVABLE_KEYS,
        (1, 1, 1),
        G,
        "1.0.0",
        "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.",
        sort,
    ),
    def(
        "sort_ro",
        -2,
        READONLY | MOVABLE_KEYS,
        (1, 1, 1),
        G,
        "7.0.0",
        "Returns the sorted elements of a list, a set, or a sorted set.",
        sort_ro,
    ),
];

fn sort(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sort_generic(ctx, args, false)
}

fn sort_ro(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    sort_generic(ctx, args, true)
}

/// The parsed options.
pub(super) struct Options<'a> {
    desc: bool,
    alpha: bool,
    pub(super) limit: Option<(i64, i64)>,
    store: Option<&'a [u8]>,
    pub(super) by: Option<&'a [u8]>,
    /// A BY pattern without `*`: keep the elements' own order.
    pub(super) dontsort: bool,
    pub(super) gets: Vec<&'a [u8]>,
}

pub(super) fn parse<'a>(args: &'a Args<'a>, readonly: bool) -> Result<Options<'a>> {
    let mut o = Options {
        desc: false,
        alpha: false,
        limit: None,
        store: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if is(a, "asc") {
            o.desc = false;
        } else if is(a, "desc") {
            o.desc = true;
        } else if is(a, "alpha") {
            o.alpha = true;
        } else if is(a, "limit") && left >= 2 {
            let int = |b: &[u8]| {
                parse_i64(b).ok_or_else(|| Error::err("value is not an integer or out of range"))
            };
            o.limit = Some((int(&args[j + 1])?, int(&args[j + 2])?));
            j += 2;
        } else if !readonly && is(a, "store") && left >= 1 {
            o.store = Some(&args[j + 1]);
            j += 1;
        } else if is(a, "by") && left >= 1 {
            let p: &[u8] = &args[j + 1];
            o.by = Some(p);
            o.dontsort = star(p).is_none();
            j += 1;
        } else if is(a, "get") && left >= 1 {
            o.gets.push(&args[j + 1]);
            j += 1;
        } else {
            return Err(Error::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// The bytes a C string function sees: up to the first NUL.
fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |i| &b[..i])
}

/// Where the `*` of a pattern is, as `strchr` finds it.
fn star(pattern: &[u8]) -> Option<usize> {
    c_str(pattern).iter().position(|&c| c == b'*')
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the
/// first `*` is replaced by the element, and a `->field` after it reads
/// that field of a hash. `None` when the pattern has no `*`, the key is
/// missing or of another type (a string is needed without `->`, a hash
/// with it), or the field is missing. The key's lookup is a read lookup
/// (a keyspace hit or miss, and `keymiss`), as in Redis.
fn lookup(ctx: &Ctx<'_>, db: &Db, pattern: &[u8], elem: &[u8]) -> Result<Option<Vec<u8>>> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some((key, field)) = pattern_key(pattern, elem) else {
        return Ok(None);
    };
    let meta = db.meta(&key);
    ctx.looked_up(&key, meta.is_some());
    let Some(meta) = meta else {
        return Ok(None);
    };
    Ok(match (RedisType::of(&meta), field) {
        (RedisType::Hash, Some(f)) => db.get_field(&key, f)?,
        (RedisType::String, None) => db.get(&key)?,
        _ => None,
    })
}

/// The key pattern `pattern` (not `#`) names for element `elem`, and the
/// hash field after its `->` if any: the first `*` replaced by the element,
/// `->` searched after it (`strstr`) with at least one byte after. `None`
/// when the pattern has no `*`.
pub(super) fn pattern_key<'p>(
    pattern: &'p [u8],
    elem: &[u8],
) -> Option<(Vec<u8>, Option<&'p [u8]>)> {
    let p = star(pattern)?;
    let rest = c_str(&pattern[p + 1..]);
    let arrow = rest
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&i| i + 2 < rest.len());
    let (suffix, field) = match arrow {
        Some(i) => (&pattern[p + 1..p + 1 + i], Some(&pattern[p + 1 + i + 2..])),
        None => (&pattern[p + 1..], None),
    };
    let mut key = Vec::with_capacity(p + elem.len() + suffix.len());
    key.extend_from_slice(&pattern[..p]);
    key.extend_from_slice(elem);
    key.extend_from_slice(suffix);
    Some((key, field))
}

/// A sort key read as Redis reads it (`strtod` on the C string, leading
/// space allowed, nothing after, no overflow, not NaN); `None` if it does
/// not convert.
fn score_of(b: &[u8]) -> Option<f64> {
    let s = c_str(b);
    if s.is_empty() {
        // strtod converts nothing and stops at the terminator: 0.
        return Some(0.0);
    }
    let t = s
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
        .map_or(&s[s.len()..], |i| &s[i..]);
    match cnum::strtod(t) {
        Some((v, false)) if !v.is_nan() => Some(v),
        _ => None,
    }
}

/// One element and what it is sorted by.
struct Item {
    elem: Vec<u8>,
    score: f64,
    /// The BY value compared as a string (ALPHA with BY); `None` if missing.
    by: Option<Vec<u8>>,
}

fn sort_generic(ctx: &mut Ctx<'_>, args: Args<'_>, readonly: bool) -> Result {
    let mut o = parse(&args, readonly)?;
    let key: &[u8] = &args[1];
    // Lock order: the database slot, then the key stripes.
    let slot = match o.store {
        Some(_) => super::list::slot_w(ctx)?,
        None => ctx.slot(),
    };
    let n = ctx.conn.db;
    let _g = match o.store {
        Some(dst) => ctx.shared.keyspace.lock_many([(n, key), (n, dst)]),
        None => ctx.shared.keyspace.lock_many([(n, key)]),
    };
    let db = slot.db();
    let kind = db.and_then(|db| db.meta(key)).map(|m| RedisType::of(&m));
    match kind {
        None | Some(RedisType::List | RedisType::Set | RedisType::ZSet) => {}
        Some(_) => return Err(Error::WrongType),
    }
    if kind == Some(RedisType::ZSet) {
        // A big set's index not cached is built off the worker first
        // (`zbuild`), before the lookup counts.
        if super::zset::ZDb::of(&slot)
            .expect("opened")
            .defer_uncached(key)
        {
            return Err(super::zbuild::stop());
        }
    }
    // Redis looks the key up for reading even with STORE.
    ctx.looked_up(key, kind.is_some());
    // A set has no order of its own to keep: stored, it is sorted as strings.
    if o.dontsort && kind == Some(RedisType::Set) && o.store.is_some() {
        o.dontsort = false;
        o.alpha = true;
        o.by = None;
    }
    let elems: Vec<Vec<u8>> = match (db, kind) {
        (Some(db), Some(RedisType::List)) => super::list::elements(db, slot.generation(), n, key)?,
        (Some(db), Some(RedisType::Set)) => {
            // A set Redis would hold as an intset comes out in ascending
            // order, which is the order its BY-without-`*` and tied ALPHA
            // sorts show; other sets come in the engine's order.
            let mut names = db.field_names(key)?;
            if super::set::is_intset(&names) {
                names.sort_by_key(|m| parse_i64(m).unwrap_or_default());
            }
            names
        }
        (Some(_), Some(RedisType::ZSet)) => {
            let z = super::zset::ZDb::of(&slot).expect("opened");
            match z.load(key)? {
                Some(ix) => {
                    let items = match ix.len() {
                        0 => Vec::new(),
                        len => ix.range_by_rank(0, len - 1, false),
                    };
                    z.put_back(key, ix);
                    items.into_iter().map(|(m, _)| m).collect()
                }
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    };
    let len = elems.len() as i64;
    // LIMIT as Redis clamps it: a negative offset is 0, a negative count
    // is "to the end".
    let (lstart, lcount) = o.limit.unwrap_or((0, -1));
    let mut start = lstart.max(0);
    let mut end = if lcount < 0 {
        len - 1
    } else {
        start.saturating_add(lcount).saturating_sub(1)
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);

    let mut items: Vec<Item> = elems
        .into_iter()
        .map(|elem| Item {
            elem,
            score: 0.0,
            by: None,
        })
        .collect();
    if o.dontsort {
        // Lists and sorted sets keep their order; DESC reverses it.
        if o.desc && kind != Some(RedisType::Set) {
            items.reverse();
        }
    } else {
        let mut bad_score = false;
        if let Some(db) = db {
            for it in &mut items {
                let by = match o.by {
                    Some(p) => match lookup(ctx, db, p, &it.elem)? {
                        Some(v) => v,
                        None => continue,
                    },
                    None => {
                        if o.alpha {
                            continue;
                        }
                        it.elem.clone()
                    }
                };
                if o.alpha {
                    it.by = Some(by);
                } else {
                    match score_of(&by) {
                        Some(s) => it.score = s,
                        None => bad_score = true,
                    }
                }
            }
        }
        if bad_score {
            return Err(Error::err(
                "One or more scores can't be converted into double",
            ));
        }
        let (alpha, by, desc) = (o.alpha, o.by.is_some(), o.desc);
        items.sort_by(|a, b| {
            let c = if alpha {
                if by {
                    match (&a.by, &b.by) {
                        (None, None) => Ordering::Equal,
                        (None, Some(_)) => Ordering::Less,
                        (Some(_), None) => Ordering::Greater,
                        (Some(x), Some(y)) => x.cmp(y),
                    }
                } else {
                    a.elem.cmp(&b.elem)
                }
            } else {
                match a.score.partial_cmp(&b.score) {
                    Some(Ordering::Equal) | None => a.elem.cmp(&b.elem),
                    Some(c) => c,
                }
            };
            if desc {
                c.reverse()
            } else {
                c
            }
        });
    }

    let picked = if end >= start {
        &items[start as usize..=end as usize]
    } else {
        &[][..]
    };
    // What each picked element gives: itself, or one value per GET.
    let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(picked.len() * o.gets.len().max(1));
    for it in picked {
        if o.gets.is_empty() {
            out.push(Some(it.elem.clone()));
        }
        for g in &o.gets {
            out.push(match db {
                Some(db) => lookup(ctx, db, g, &it.elem)?,
                None => None,
            });
        }
    }
    let Some(dst) = o.store else {
        drop(slot);
        ctx.array(out.len());
        for v in &out {
            match v {
                Some(v) => ctx.bulk(v),
                None => ctx.null(),
            }
        }
        return Ok(());
    };
    let db = db.expect("opened for STORE");
    let stored = store(ctx, db, slot.generation(), dst, out)?;
    drop(slot);
    ctx.int(stored as i64);
    Ok(())
}

/// SORT ... STORE: replaces `dst` with a list of `values` (a missing value
/// stored as an empty string), or deletes it if there are none. Returns
/// the list's length. The caller holds `dst`'s stripe.
fn store(
    ctx: &mut Ctx<'_>,
    db: &Db,
    generation: u64,
    dst: &[u8],
    values: Vec<Option<Vec<u8>>>,
) -> Result<usize> {
    let n = ctx.conn.db;
    let existed = db.exists(dst);
    if values.is_empty() {
        if db.delete(dst)? {
            ctx.notify(GENERIC, "del", dst);
        }
        return Ok(0);
    }
    let values: Vec<Vec<u8>> = values.into_iter().map(Option::unwrap_or_default).collect();
    super::list::replace(db, generation, n, dst, &values)?;
    if !existed {
        ctx.notify(NEW, "new", dst);
    }
    ctx.notify(LIST, "sortstore", dst);
    ctx.shared.blocking.signal(n, dst);
    Ok(values.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_convert_as_strtod_on_a_c_string() {
        assert_eq!(score_of(b"1.5"), Some(1.5));
        assert_eq!(score_of(b"  -2"), Some(-2.0));
        assert_eq!(score_of(b""), Some(0.0));
        assert_eq!(score_of(b"0x10"), Some(16.0));
        assert_eq!(score_of(b"inf"), Some(f64::INFINITY));
        assert_eq!(score_of(b"3\0junk"), Some(3.0));
        for bad in [&b"1 "[..], b"  ", b"abc", b"nan", b"1e400", b"1e-400"] {
            assert_eq!(score_of(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn patterns_split_at_the_first_star_and_an_arrow_after_it() {
        assert_eq!(star(b"w_*"), Some(2));
        assert_eq!(star(b"w_\0*"), None);
        assert_eq!(star(b"fixed"), None);
    }
}
