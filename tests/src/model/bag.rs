//! A fixed-capacity vector that lives inline, so that model states are `Copy` and cloning
//! one never allocates. Equality and hashing look at the used prefix only.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// Up to `N` values of `T`, inline.
#[derive(Clone, Copy)]
pub struct Bag<T: Copy + Default, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Default for Bag<T, N> {
    fn default() -> Self {
        Bag { len: 0, items: [T::default(); N] }
    }
}

impl<T: Copy + Default, const N: usize> Bag<T, N> {
    /// Appends `v`.
    ///
    /// # Panics
    ///
    /// When the bag is full: the model's capacity is too small for its configuration.
    pub fn push(&mut self, v: T) {
        let i = usize::from(self.len);
        assert!(i < N, "model capacity exceeded: more than {N} items (raise the capacity)");
        self.items[i] = v;
        self.len += 1;
    }

    /// Removes the item at `i`, keeping the order of the others.
    pub fn remove(&mut self, i: usize) -> T {
        let len = usize::from(self.len);
        assert!(i < len, "index {i} out of a bag of {len}");
        let v = self.items[i];
        self.items.copy_within(i + 1..len, i);
        self.len -= 1;
        self.items[usize::from(self.len)] = T::default();
        v
    }

    /// Keeps the items for which `f` returns true; `f` may change them.
    pub fn retain_mut(&mut self, mut f: impl FnMut(&mut T) -> bool) {
        let len = usize::from(self.len);
        let mut w = 0;
        for r in 0..len {
            let mut v = self.items[r];
            if f(&mut v) {
                self.items[w] = v;
                w += 1;
            }
        }
        for x in &mut self.items[w..len] {
            *x = T::default();
        }
        self.len = u8::try_from(w).expect("a bag holds at most 255 items");
    }

    /// Keeps the items for which `f` returns true.
    pub fn retain(&mut self, mut f: impl FnMut(&T) -> bool) {
        self.retain_mut(|v| f(v));
    }

    /// Sorts by `key`, computing each key once (insertion sort: bags are small).
    pub fn sort_by_key_cached(&mut self, key: impl Fn(&T) -> u64) {
        let len = usize::from(self.len);
        let mut keys = [0u64; N];
        for (k, v) in keys.iter_mut().zip(&self.items[..len]) {
            *k = key(v);
        }
        for i in 1..len {
            let (k, v) = (keys[i], self.items[i]);
            let mut j = i;
            while j > 0 && keys[j - 1] > k {
                keys[j] = keys[j - 1];
                self.items[j] = self.items[j - 1];
                j -= 1;
            }
            keys[j] = k;
            self.items[j] = v;
        }
    }

    /// Removes consecutive items for which `same(later, earlier)` holds.
    pub fn dedup_by(&mut self, mut same: impl FnMut(&T, &T) -> bool) {
        let len = usize::from(self.len);
        if len < 2 {
            return;
        }
        let mut w = 1;
        for r in 1..len {
            if !same(&self.items[r], &self.items[w - 1]) {
                self.items[w] = self.items[r];
                w += 1;
            }
        }
        for x in &mut self.items[w..len] {
            *x = T::default();
        }
        self.len = u8::try_from(w).expect("a bag holds at most 255 items");
    }
}

impl<T: Copy + Default, const N: usize> Deref for Bag<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..usize::from(self.len)]
    }
}

impl<T: Copy + Default, const N: usize> DerefMut for Bag<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..usize::from(self.len)]
    }
}

impl<'a, T: Copy + Default, const N: usize> IntoIterator for &'a Bag<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T: Copy + Default, const N: usize> IntoIterator for &'a mut Bag<T, N> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq for Bag<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Copy + Default + Eq, const N: usize> Eq for Bag<T, N> {}

impl<T: Copy + Default + PartialOrd, const N: usize> PartialOrd for Bag<T, N> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        (**self).partial_cmp(&**other)
    }
}

impl<T: Copy + Default + Ord, const N: usize> Ord for Bag<T, N> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl<T: Copy + Default + Hash, const N: usize> Hash for Bag<T, N> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<T: Copy + Default + fmt::Debug, const N: usize> fmt::Debug for Bag<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Bag;

    #[test]
    fn push_remove_retain_dedup() {
        let mut b: Bag<u8, 8> = Bag::default();
        for v in [3, 1, 1, 2, 2, 2] {
            b.push(v);
        }
        assert_eq!(b.remove(0), 3);
        assert_eq!(&*b, &[1, 1, 2, 2, 2]);
        b.dedup_by(|a, b| a == b);
        assert_eq!(&*b, &[1, 2]);
        b.retain(|v| *v != 1);
        assert_eq!(&*b, &[2]);
        let mut c: Bag<u8, 8> = Bag::default();
        c.push(2);
        assert_eq!(b, c);
    }
}
