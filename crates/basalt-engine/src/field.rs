//! [`FieldName`]: the name of one field of a map, as the field table keeps it.
//!
//! Most field names are short (list positions are 8 bytes, typical hash
//! fields and set members a dozen or two), so names of up to
//! [`INLINE`] bytes are stored inside the 24-byte value itself and only
//! longer ones get a heap allocation. A boxed name would cost a 16-byte
//! pointer plus a 32-byte allocator chunk per field, and a lookup would
//! follow the pointer (one more cache miss) to compare the name.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Longest name stored inline.
pub(crate) const INLINE: usize = 22;

/// A field name; derefs to its bytes, hashes and compares like `[u8]`, so
/// a field table keyed by it is looked up with a plain `&[u8]`.
#[derive(Clone)]
pub(crate) struct FieldName(Repr);

#[derive(Clone)]
enum Repr {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

const _: () = assert!(std::mem::size_of::<FieldName>() == 24);

impl From<&[u8]> for FieldName {
    fn from(b: &[u8]) -> Self {
        if b.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..b.len()].copy_from_slice(b);
            FieldName(Repr::Inline(b.len() as u8, buf))
        } else {
            FieldName(Repr::Heap(b.into()))
        }
    }
}

impl From<Box<[u8]>> for FieldName {
    fn from(b: Box<[u8]>) -> Self {
        if b.len() <= INLINE {
            FieldName::from(&b[..])
        } else {
            FieldName(Repr::Heap(b))
        }
    }
}

impl Deref for FieldName {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(n, buf) => &buf[..*n as usize],
            Repr::Heap(b) => b,
        }
    }
}

impl FieldName {
    /// Heap bytes held beyond the value itself.
    pub(crate) fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline(..) => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

impl Borrow<[u8]> for FieldName {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl Hash for FieldName {
    // Must hash exactly as `[u8]` does: lookups hash the borrowed form.
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl PartialEq for FieldName {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for FieldName {}

impl fmt::Debug for FieldName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn short_and_long_names_round_trip_and_hash_like_slices() {
        let s = hashbrown::DefaultHashBuilder::default();
        for len in [0, 1, 8, INLINE, INLINE + 1, 100] {
            let b: Vec<u8> = (0..len as u8).collect();
            let f = FieldName::from(&b[..]);
            assert_eq!(&f[..], &b[..]);
            assert_eq!(f.heap_bytes(), if len > INLINE { len } else { 0 });
            assert_eq!(s.hash_one(&f), s.hash_one(&b[..]));
            let g = FieldName::from(b.clone().into_boxed_slice());
            assert_eq!(f, g);
        }
        let mut m: indexmap::IndexMap<FieldName, u32, hashbrown::DefaultHashBuilder> =
            Default::default();
        m.insert(FieldName::from(&b"short"[..]), 1);
        m.insert(FieldName::from(&[7u8; 40][..]), 2);
        assert_eq!(m.get(&b"short"[..]), Some(&1));
        assert_eq!(m.get(&[7u8; 40][..]), Some(&2));
        assert_eq!(m.get(&b"shor"[..]), None);
    }
}
