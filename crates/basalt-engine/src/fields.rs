//! [`Fields`]: one map's field table (field name -> record location).
//!
//! The one idea a reader needs: most maps are hash tables, but a map whose
//! field names are all 8-byte big-endian numbers forming one unbroken run
//! (`base`, `base + 1`, ..., `base + len - 1`) is kept as a [`VecDeque`] of
//! locations indexed by `name - base`, with no names stored and nothing
//! hashed. A caller that numbers its fields densely and grows or shrinks
//! them only at the ends (a queue: a list's positions) gets O(1) pushes and
//! pops at 24 bytes per field instead of ~65, and no table to rehash as it
//! grows. The engine knows nothing of lists: any map whose names happen to
//! fit is stored this way, and the first write that breaks the run (a name
//! of another length, a gap, a removal from the middle) turns the map into
//! a hash table for good, keeping every field and its index order.
//!
//! Both forms give each field an index `0..len` (for random picks and for
//! removal by index, as `IndexMap` does): in a run it is `name - base`, so
//! the order is numeric.

use std::collections::VecDeque;
use std::ops::Deref;

use crate::field::FieldName;
use crate::keydir::Loc;

/// The hash-table form. An `IndexMap` rather than a plain hash map so that
/// a random field is one index away (SPOP and SRANDMEMBER on a set of a
/// million members stay O(1)); fields are removed with `swap_remove`, so
/// their order is not insertion order.
type Table = indexmap::IndexMap<FieldName, Loc, hashbrown::DefaultHashBuilder>;

/// A map's fields and where each field's record lies.
#[derive(Debug)]
pub(crate) enum Fields {
    /// Names `base + i` (8 bytes, big-endian) for `i` in `0..locs.len()`.
    /// Also the form of an empty map, whose first name decides.
    Run {
        base: u64,
        locs: VecDeque<Loc>,
    },
    Table(Table),
}

impl Default for Fields {
    fn default() -> Self {
        Fields::Run {
            base: 0,
            locs: VecDeque::new(),
        }
    }
}

/// A field name handed out by [`Fields`]: borrowed from the table, or
/// spelled out from a run's number.
pub(crate) enum Name<'a> {
    Borrowed(&'a [u8]),
    Number([u8; 8]),
}

impl Deref for Name<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Name::Borrowed(b) => b,
            Name::Number(n) => n,
        }
    }
}

/// The number an 8-byte name spells, if it has 8 bytes.
fn number(name: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(name.try_into().ok()?))
}

impl Fields {
    /// The first name of a non-empty run (`None` for a table or an empty
    /// map).
    pub fn run_base(&self) -> Option<u64> {
        match self {
            Fields::Run { base, locs } if !locs.is_empty() => Some(*base),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Fields::Run { locs, .. } => locs.len(),
            Fields::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the map is held as a run.
    #[cfg(test)]
    pub fn is_run(&self) -> bool {
        matches!(self, Fields::Run { .. })
    }

    /// Index of `name` within a run, if it is in it.
    fn run_index(base: u64, locs: &VecDeque<Loc>, name: &[u8]) -> Option<usize> {
        let i = number(name)?.wrapping_sub(base);
        (i < locs.len() as u64).then_some(i as usize)
    }

    pub fn get(&self, name: &[u8]) -> Option<Loc> {
        self.get_full(name).map(|(_, loc)| loc)
    }

    /// The field's index and location.
    pub fn get_full(&self, name: &[u8]) -> Option<(usize, Loc)> {
        match self {
            Fields::Run { base, locs } => Self::run_index(*base, locs, name).map(|i| (i, locs[i])),
            Fields::Table(t) => t.get_full(name).map(|(i, _, &loc)| (i, loc)),
        }
    }

    pub fn get_mut(&mut self, name: &[u8]) -> Option<&mut Loc> {
        match self {
            Fields::Run { base, locs } => {
                Self::run_index(*base, locs, name).map(move |i| &mut locs[i])
            }
            Fields::Table(t) => t.get_mut(name),
        }
    }

    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get_full(name).is_some()
    }

    /// Sets `name` to `loc`; returns the location it replaced.
    pub fn insert(&mut self, name: &[u8], loc: Loc) -> Option<Loc> {
        if let Fields::Run { base, locs } = self {
            if let Some(n) = number(name) {
                let len = locs.len() as u64;
                if len == 0 {
                    *base = n;
                    locs.push_back(loc);
                    return None;
                }
                let i = n.wrapping_sub(*base);
                if i < len {
                    return Some(std::mem::replace(&mut locs[i as usize], loc));
                }
                if i == len && base.checked_add(len).is_some() {
                    locs.push_back(loc);
                    return None;
                }
                if n.checked_add(1) == Some(*base) {
                    *base = n;
                    locs.push_front(loc);
                    return None;
                }
            }
        }
        self.table().insert(name.into(), loc)
    }

    /// Removes the field at `index` (as [`Fields::get_full`] gave it); the
    /// last field takes its index, as in `IndexMap::swap_remove_index`.
    pub fn swap_remove_index(&mut self, index: usize) -> Option<Loc> {
        if let Fields::Run { base, locs } = self {
            if index == 0 {
                let loc = locs.pop_front()?;
                *base = base.wrapping_add(1);
                return Some(loc);
            }
            if index + 1 == locs.len() {
                return locs.pop_back();
            }
            if index >= locs.len() {
                return None;
            }
        }
        self.table().swap_remove_index(index).map(|(_, loc)| loc)
    }

    pub fn swap_remove(&mut self, name: &[u8]) -> Option<Loc> {
        let (i, _) = self.get_full(name)?;
        self.swap_remove_index(i)
    }

    /// The name of the field at `index`.
    pub fn name_at(&self, index: usize) -> Option<Name<'_>> {
        match self {
            Fields::Run { base, locs } => (index < locs.len())
                .then(|| Name::Number(base.wrapping_add(index as u64).to_be_bytes())),
            Fields::Table(t) => t.get_index(index).map(|(f, _)| Name::Borrowed(f)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (Name<'_>, Loc)> + '_ {
        let (run, table) = match self {
            Fields::Run { base, locs } => (Some((*base, locs)), None),
            Fields::Table(t) => (None, Some(t)),
        };
        let run = run.into_iter().flat_map(|(base, locs)| {
            locs.iter().enumerate().map(move |(i, &loc)| {
                (Name::Number(base.wrapping_add(i as u64).to_be_bytes()), loc)
            })
        });
        let table = table
            .into_iter()
            .flat_map(|t| t.iter().map(|(f, &loc)| (Name::Borrowed(f), loc)));
        run.chain(table)
    }

    pub fn values(&self) -> impl Iterator<Item = Loc> + '_ {
        self.iter().map(|(_, loc)| loc)
    }

    /// Keeps the fields for which `keep` says so. A run that would lose a
    /// field anywhere but at its ends becomes a table.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8], Loc) -> bool) {
        if let Fields::Run { base, locs } = self {
            let kept: Vec<bool> = locs
                .iter()
                .enumerate()
                .map(|(i, &loc)| keep(&base.wrapping_add(i as u64).to_be_bytes(), loc))
                .collect();
            let first = kept.iter().position(|&k| k).unwrap_or(kept.len());
            let end = kept.iter().rposition(|&k| k).map_or(first, |i| i + 1);
            if kept[first..end].iter().all(|&k| k) {
                locs.truncate(end);
                locs.drain(..first);
                *base = base.wrapping_add(first as u64);
                return;
            }
            let mut i = 0;
            self.table().retain(|_, _| {
                i += 1;
                kept[i - 1]
            });
            return;
        }
        self.table().retain(|f, loc| keep(f, *loc));
    }

    /// Turns a table whose names form a run back into a run (recovery
    /// inserts fields in file order, which can break a run that the live
    /// map had).
    pub fn shrink_to_run(&mut self) {
        let Fields::Table(t) = self else { return };
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for f in t.keys() {
            let Some(n) = number(f) else { return };
            lo = lo.min(n);
            hi = hi.max(n);
        }
        if t.is_empty() || hi - lo + 1 != t.len() as u64 {
            return;
        }
        let mut locs: VecDeque<Loc> = VecDeque::with_capacity(t.len());
        locs.resize(t.len(), Loc::default());
        for (f, &loc) in t.iter() {
            locs[(number(f).expect("checked above") - lo) as usize] = loc;
        }
        *self = Fields::Run { base: lo, locs };
    }

    /// The table form, converting a run (in index order) first.
    fn table(&mut self) -> &mut Table {
        if let Fields::Run { base, locs } = self {
            let mut t = Table::with_capacity_and_hasher(locs.len() + 1, Default::default());
            for (i, &loc) in locs.iter().enumerate() {
                t.insert(base.wrapping_add(i as u64).to_be_bytes()[..].into(), loc);
            }
            *self = Fields::Table(t);
        }
        match self {
            Fields::Table(t) => t,
            Fields::Run { .. } => unreachable!("converted above"),
        }
    }

    /// Bytes of memory held, estimated from capacities.
    pub fn memory_bytes(&self) -> usize {
        match self {
            Fields::Run { locs, .. } => locs.capacity() * std::mem::size_of::<Loc>(),
            // Entries (hash, name, location) plus the index table, plus
            // the heap bytes of names too long to be stored inline.
            Fields::Table(t) => {
                t.capacity() * (8 + 24 + 24 + 8 + 1)
                    + t.keys().map(|f| f.heap_bytes()).sum::<usize>()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn loc(seq: u64) -> Loc {
        Loc {
            file: 1,
            offset: seq as u32,
            len: 10,
            seq,
        }
    }

    fn name(n: u64) -> [u8; 8] {
        n.to_be_bytes()
    }

    #[test]
    fn pushes_and_pops_at_both_ends_stay_a_run() {
        let mut f = Fields::default();
        let mid = 1u64 << 63;
        for i in 0..100u64 {
            assert_eq!(f.insert(&name(mid + i), loc(i)), None);
            assert_eq!(f.insert(&name(mid - 1 - i), loc(1000 + i)), None);
        }
        assert!(f.is_run());
        assert_eq!(f.len(), 200);
        assert_eq!(f.get(&name(mid - 100)), Some(loc(1099)));
        assert_eq!(f.get_full(&name(mid - 100)).map(|x| x.0), Some(0));
        assert_eq!(f.insert(&name(mid), loc(7)), Some(loc(0)));
        let (first, _) = f.get_full(&name(mid - 100)).unwrap();
        assert_eq!(f.swap_remove_index(first), Some(loc(1099)));
        assert_eq!(f.swap_remove(&name(mid + 99)), Some(loc(99)));
        assert!(f.is_run());
        assert_eq!(f.len(), 198);
        assert_eq!(&*f.name_at(0).unwrap(), &name(mid - 99));
        assert_eq!(f.get(&name(mid - 100)), None);
        assert_eq!(f.get(&b"short"[..]), None);
    }

    #[test]
    fn breaking_the_run_keeps_every_field_and_index_order() {
        let mut f = Fields::default();
        for i in 0..10u64 {
            f.insert(&name(50 + i), loc(i));
        }
        let before: Vec<(Vec<u8>, Loc)> = f.iter().map(|(n, l)| (n.to_vec(), l)).collect();
        // A removal from the middle turns it into a table.
        assert_eq!(f.swap_remove(&name(55)), Some(loc(5)));
        assert!(!f.is_run());
        assert_eq!(f.len(), 9);
        for (n, l) in &before {
            if n[..] != name(55) {
                assert_eq!(f.get(n), Some(*l));
            }
        }
        let mut g = Fields::default();
        g.insert(b"hash-field", loc(1));
        assert!(!g.is_run());
        let mut h = Fields::default();
        h.insert(&name(5), loc(1));
        h.insert(&name(7), loc(2));
        assert!(!h.is_run());
        assert_eq!(h.get(&name(5)), Some(loc(1)));
        assert_eq!(h.get(&name(7)), Some(loc(2)));
    }

    #[test]
    fn the_ends_of_the_number_space_do_not_wrap() {
        let mut f = Fields::default();
        f.insert(&name(0), loc(1));
        f.insert(&name(u64::MAX), loc(2));
        assert_eq!(f.len(), 2);
        assert_eq!(f.get(&name(0)), Some(loc(1)));
        assert_eq!(f.get(&name(u64::MAX)), Some(loc(2)));
        let mut g = Fields::default();
        g.insert(&name(u64::MAX), loc(1));
        g.insert(&name(0), loc(2));
        assert_eq!(g.len(), 2);
        assert_eq!(g.get(&name(u64::MAX)), Some(loc(1)));
        assert_eq!(g.get(&name(0)), Some(loc(2)));
    }

    #[test]
    fn a_table_holding_a_run_shrinks_back_and_retain_trims_the_ends() {
        let mut f = Fields::default();
        for i in [3u64, 1, 2, 0, 4] {
            f.insert(&name(10 + i), loc(i));
        }
        assert!(!f.is_run());
        f.shrink_to_run();
        assert!(f.is_run());
        let got: Vec<(Vec<u8>, Loc)> = f.iter().map(|(n, l)| (n.to_vec(), l)).collect();
        let want: Vec<(Vec<u8>, Loc)> =
            (0..5u64).map(|i| (name(10 + i).to_vec(), loc(i))).collect();
        assert_eq!(got, want);
        f.retain(|n, _| n != name(10) && n != name(14));
        assert!(f.is_run());
        assert_eq!(f.len(), 3);
        assert_eq!(f.get(&name(11)), Some(loc(1)));
        f.retain(|n, _| n != name(12));
        assert!(!f.is_run());
        assert_eq!(f.len(), 2);
        assert_eq!(f.get(&name(13)), Some(loc(3)));
        f.retain(|_, _| false);
        assert!(f.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        RemoveIndex(usize),
        Retain(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Names near one another, so runs form and break often.
        prop_oneof![
            4 => (0u64..24, any::<u64>()).prop_map(|(n, s)| Op::Insert(n, s)),
            2 => (0u64..24).prop_map(Op::Remove),
            2 => (0usize..30).prop_map(Op::RemoveIndex),
            1 => (2u64..6).prop_map(Op::Retain),
        ]
    }

    proptest! {
        #[test]
        fn fields_behave_like_a_map(ops in proptest::collection::vec(op(), 1..200)) {
            let mut f = Fields::default();
            let mut model: BTreeMap<u64, Loc> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(n, s) => {
                        prop_assert_eq!(f.insert(&name(n), loc(s)), model.insert(n, loc(s)));
                    }
                    Op::Remove(n) => {
                        prop_assert_eq!(f.swap_remove(&name(n)), model.remove(&n));
                    }
                    Op::RemoveIndex(i) => {
                        let n = f.name_at(i).map(|n| number(&n).unwrap());
                        let got = f.swap_remove_index(i);
                        match n {
                            Some(n) => prop_assert_eq!(got, model.remove(&n)),
                            None => prop_assert_eq!(got, None),
                        }
                    }
                    Op::Retain(m) => {
                        f.retain(|n, _| !number(n).unwrap().is_multiple_of(m));
                        model.retain(|n, _| !n.is_multiple_of(m));
                    }
                }
                prop_assert_eq!(f.len(), model.len());
                let mut all: Vec<(u64, Loc)> = f.iter().map(|(n, l)| (number(&n).unwrap(), l)).collect();
                all.sort_by_key(|x| x.0);
                prop_assert_eq!(all, model.iter().map(|(&n, &l)| (n, l)).collect::<Vec<_>>());
                for i in 0..f.len() {
                    let n = f.name_at(i).unwrap().to_vec();
                    prop_assert_eq!(f.get_full(&n).map(|x| x.0), Some(i));
                }
                if f.is_run() && !f.is_empty() {
                    let first = *model.keys().next().unwrap();
                    let last = *model.keys().last().unwrap();
                    prop_assert_eq!(last - first + 1, model.len() as u64);
                }
            }
        }
    }
}
