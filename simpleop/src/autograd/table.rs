//! The engine's maps from tape values to their state: a scan of a short
//! inline list while a backward touches few values (a backward over a few
//! recorded calls allocates no table and hashes nothing), a hash table
//! keyed by node address past that. The list never outgrows its array
//! (it moves to the table first), so it is an `ArrayVec`: no spill checks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use arrayvec::ArrayVec;

/// Entries kept in the inline list before moving to a hash table.
const INLINE: usize = 4;

/// Keys are node addresses: a multiply-rotate hash spreads them, where
/// SipHash's resistance to chosen keys buys nothing.
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|&b| self.write_usize(usize::from(b)));
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type Fast = BuildHasherDefault<AddressHasher>;

pub(crate) enum Table<K, V> {
    Few(ArrayVec<(K, V), INLINE>),
    Many(HashMap<K, V, Fast>),
}

impl<K: Copy + Eq + Hash, V> Default for Table<K, V> {
    fn default() -> Self {
        Table::Few(ArrayVec::new())
    }
}

impl<K: Copy + Eq + Hash, V> Table<K, V> {
    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        match self {
            Table::Few(list) => list.iter().find(|(key, _)| key == k).map(|(_, v)| v),
            Table::Many(map) => map.get(k),
        }
    }

    pub(crate) fn contains(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// The entry for `k`, made with `V::default()` when absent.
    pub(crate) fn entry(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        if let Table::Few(list) = self
            && list.len() == INLINE
            && !list.iter().any(|(key, _)| *key == k)
        {
            let map = std::mem::take(list).into_iter().collect();
            *self = Table::Many(map);
        }
        match self {
            Table::Few(list) => match list.iter().position(|(key, _)| *key == k) {
                Some(at) => &mut list[at].1,
                None => {
                    list.push((k, V::default()));
                    &mut list.last_mut().expect("just pushed").1
                }
            },
            Table::Many(map) => map.entry(k).or_default(),
        }
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        match self {
            Table::Few(list) => {
                let at = list.iter().position(|(key, _)| key == k)?;
                Some(list.swap_remove(at).1)
            }
            Table::Many(map) => map.remove(k),
        }
    }
}

/// A set of keys, as a [`Table`] of nothing.
pub(crate) struct Set<K>(Table<K, ()>);

impl<K: Copy + Eq + Hash> Default for Set<K> {
    fn default() -> Self {
        Set(Table::default())
    }
}

impl<K: Copy + Eq + Hash> Set<K> {
    /// Adds `k`; whether it was new.
    pub(crate) fn insert(&mut self, k: K) -> bool {
        let new = !self.0.contains(&k);
        self.0.entry(k);
        new
    }

    pub(crate) fn contains(&self, k: &K) -> bool {
        self.0.contains(k)
    }
}

impl<K: Copy + Eq + Hash> FromIterator<K> for Set<K> {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        let mut set = Set::default();
        iter.into_iter().for_each(|k| {
            set.insert(k);
        });
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_keeps_every_entry_across_the_move_to_a_hash_table() {
        let mut t: Table<usize, usize> = Table::default();
        for k in 0..3 * INLINE {
            *t.entry(k * 7) += k;
            *t.entry(k * 7) += 1;
            assert_eq!(matches!(t, Table::Few(_)), k < INLINE, "after {k}");
        }
        for k in 0..3 * INLINE {
            assert_eq!(t.get(&(k * 7)), Some(&(k + 1)));
        }
        assert_eq!(t.remove(&14), Some(3));
        assert_eq!(t.remove(&14), None);
        assert!(!t.contains(&14) && t.contains(&21));
        let mut s: Set<usize> = (0..2 * INLINE).chain(0..4).collect();
        assert!(!s.insert(5) && s.insert(100) && s.contains(&100));
    }

    #[test]
    fn removing_from_a_short_table_keeps_the_rest() {
        let mut t: Table<usize, usize> = Table::default();
        (0..5).for_each(|k| *t.entry(k) = k * 10);
        assert_eq!(t.remove(&1), Some(10));
        assert_eq!(
            (0..5).map(|k| t.get(&k).copied()).collect::<Vec<_>>(),
            [Some(0), None, Some(20), Some(30), Some(40)]
        );
    }
}
