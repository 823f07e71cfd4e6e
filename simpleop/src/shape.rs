//! [`Shape`] and NumPy broadcasting.

use std::fmt;

use smallvec::SmallVec;

/// The dimensions of an array, row-major. A scalar has no dimensions.
///
/// Up to four dimensions are stored inline, so shapes are copied without
/// allocating on every eager call.
#[derive(Default)]
pub struct Shape(SmallVec<[usize; 4]>);

impl PartialEq for Shape {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        // An element loop, not the slice comparison's `memcmp` call: shapes
        // are compared on every eager call.
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| a == b)
    }
}

impl Eq for Shape {}

impl std::hash::Hash for Shape {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dims().hash(state);
    }
}

impl Clone for Shape {
    #[inline]
    fn clone(&self) -> Self {
        // SmallVec's `clone` extends one element at a time; an inline shape
        // is one array copy (this is on every eager call's path).
        // A variable-length `copy_from_slice` is a `memcpy` call; four
        // fixed loads are not.
        let len = self.0.len();
        if len <= 4 {
            let buf: [usize; 4] = std::array::from_fn(|i| self.0.get(i).copied().unwrap_or(0));
            Shape(SmallVec::from_buf_and_len(buf, len))
        } else {
            Shape(self.0.clone())
        }
    }
}

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(SmallVec::from_slice(&dims.into()))
    }

    /// The 0-d shape.
    pub fn scalar() -> Self {
        Shape(SmallVec::new())
    }

    /// The dimensions.
    #[inline]
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar); `usize::MAX` when the product
    /// overflows, which no array can hold, so a shape that size is never
    /// taken for one that fits a buffer (see [`Shape::bytes`]).
    #[inline]
    pub fn size(&self) -> usize {
        // saturating: zero times an overflowed product is still zero
        self.0.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// Bytes an array of this shape takes with elements of `elem_size`
    /// bytes, or `None` when that exceeds `isize::MAX` (the most one
    /// allocation, or one slice, may span).
    pub fn bytes(&self, elem_size: usize) -> Option<usize> {
        let n = self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        // a zero dimension makes any product zero
        let n = if self.0.contains(&0) { Some(0) } else { n };
        n.and_then(|n| n.checked_mul(elem_size))
            .filter(|&b| isize::try_from(b).is_ok())
    }

    /// The number of elements, or `None` when it overflows `usize` (a
    /// shape from user input that no array could have).
    pub fn checked_size(&self) -> Option<usize> {
        if self.0.contains(&0) {
            return Some(0);
        }
        self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Row-major strides in elements. They saturate where the product
    /// overflows `usize`, which only a shape no array can have reaches
    /// (every allocation checks [`Shape::bytes`]).
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1usize; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1].saturating_mul(self.0[i + 1]);
        }
        strides
    }

    /// The NumPy broadcast of two shapes, or `None` when they are incompatible.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        let n = self.ndim().max(other.ndim());
        let mut dims = vec![0; n];
        for (i, d) in dims.iter_mut().enumerate() {
            let a = self.dim_from_right(n - 1 - i);
            let b = other.dim_from_right(n - 1 - i);
            *d = match (a, b) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => return None,
            };
        }
        Some(Shape::from(dims))
    }

    /// Whether this shape broadcasts to `target` without changing `target`.
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        self.broadcast(target).as_ref() == Some(target)
    }

    /// Strides for reading this shape as if it were broadcast to `target`
    /// (0 on broadcast axes), one per axis of `target`. The caller has
    /// checked [`Shape::broadcasts_to`].
    pub fn broadcast_strides(&self, target: &Shape) -> Vec<usize> {
        let own = self.strides();
        let offset = target.ndim() - self.ndim();
        (0..target.ndim())
            .map(|i| {
                if i < offset || self.0[i - offset] == 1 {
                    0
                } else {
                    own[i - offset]
                }
            })
            .collect()
    }

    fn dim_from_right(&self, i: usize) -> usize {
        if i < self.0.len() {
            self.0[self.0.len() - 1 - i]
        } else {
            1
        }
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    /// MXNet's tuple form: `(2, 3)`, `(5,)`, `()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [d] => write!(f, "({d},)"),
            dims => {
                f.write_str("(")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(SmallVec::from_slice(&v))
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(SmallVec::from_slice(v))
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(SmallVec::from_slice(&v))
    }
}
impl From<&Shape> for Shape {
    fn from(v: &Shape) -> Self {
        v.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_saturate_and_bytes_stop_at_isize_max() {
        let s = |d: &[usize]| Shape::from(d);
        assert_eq!(s(&[]).size(), 1);
        assert_eq!(s(&[3, 4]).bytes(8), Some(96));
        let big = 1usize << 62;
        assert_eq!(s(&[big, 4]).size(), usize::MAX); // wraps to 0 unsaturated
        assert_eq!(s(&[big, 4, 0]).size(), 0);
        assert_eq!(s(&[big, 4, 0]).bytes(4), Some(0));
        assert_eq!(s(&[big, 4]).bytes(1), None);
        assert_eq!(s(&[big, 4]).checked_size(), None);
        assert_eq!(s(&[big, 4, 0]).checked_size(), Some(0));
        assert_eq!(s(&[3, 4]).checked_size(), Some(12));
        assert_eq!(s(&[2, big, 4]).strides(), [usize::MAX, 4, 1]);
        assert_eq!(s(&[big]).bytes(2), None); // 2^63 bytes
        assert_eq!(s(&[big - 1]).bytes(2), Some(isize::MAX as usize - 1));
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let s = |d: &[usize]| Shape::from(d);
        assert_eq!(s(&[2, 3, 4]).broadcast(&s(&[1, 3, 1])), Some(s(&[2, 3, 4])));
        assert_eq!(s(&[3, 1]).broadcast(&s(&[1, 5])), Some(s(&[3, 5])));
        assert_eq!(s(&[4]).broadcast(&s(&[2, 4])), Some(s(&[2, 4])));
        assert_eq!(s(&[]).broadcast(&s(&[2])), Some(s(&[2])));
        assert_eq!(s(&[3]).broadcast(&s(&[4])), None);
        assert!(s(&[1, 3]).broadcasts_to(&s(&[2, 3])));
        assert!(!s(&[2, 3]).broadcasts_to(&s(&[1, 3])));
        assert_eq!(s(&[3, 1]).broadcast_strides(&s(&[2, 3, 5])), vec![0, 1, 0]);
    }

    #[test]
    fn displays_like_mxnet() {
        assert_eq!(Shape::from([2, 3]).to_string(), "(2, 3)");
        assert_eq!(Shape::from([5]).to_string(), "(5,)");
        assert_eq!(Shape::scalar().to_string(), "()");
        assert_eq!(Shape::from([2, 3, 4]).strides(), vec![12, 4, 1]);
    }
}
