//! [`NDArray`]: a shape, a dtype and shared, copy-on-write storage.
//!
//! Cloning an `NDArray` is cheap and shares storage. Writes never show
//! through another handle: an in-place op writes into the buffer only when
//! this handle is its sole owner, and otherwise replaces the handle.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::pool::{self, Buffer};
use crate::{DType, Element, Error, Result, Shape, TBlob, TBlobMut, dispatch_any};

/// An n-dimensional array on the CPU.
#[derive(Clone)]
pub struct NDArray {
    shape: Shape,
    dtype: DType,
    /// Taken out only in `drop`, which hands it back to the pool.
    storage: ManuallyDrop<Arc<Buffer>>,
    /// Where autograd recorded this value: a variable (`attach_grad`) or
    /// an op's output. Clones share it, as MXNet's handles do.
    tape: Option<TapeRef>,
}

/// A node of the autograd tape, seen from the array side: `autograd`
/// defines it, and an array only needs to report writes to it.
pub(crate) trait Recorded: std::any::Any + Send + Sync {
    /// An in-place write to the value of output `k` (its version counter).
    fn note_write(&self, k: usize);
    /// Whether the node is a variable of this shape and dtype, which stays
    /// a variable when an update outside recording replaces its value.
    fn holds(&self, shape: &Shape, dtype: DType) -> bool;
}

/// An array's place on the tape: output `output` of `node`.
#[derive(Clone)]
pub(crate) struct TapeRef {
    pub(crate) node: Arc<dyn Recorded>,
    pub(crate) output: usize,
}

impl Drop for NDArray {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and `self.storage` is not touched again.
        pool::release(unsafe { ManuallyDrop::take(&mut self.storage) });
    }
}

impl NDArray {
    /// An array of zeros.
    ///
    /// # Panics
    /// If the array would take more than `isize::MAX` bytes, as `Vec`
    /// does; [`NDArray::try_zeros`] returns an error instead.
    pub fn zeros(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::try_zeros(shape, dtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An array of zeros, or [`Error::Alloc`] when its size overflows or
    /// the memory cannot be had (a shape read from a file or a graph, say).
    pub fn try_zeros(shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::allocate("NDArray::zeros", shape.into(), dtype, true)
    }

    /// An array whose contents are unspecified (left over from pooled
    /// storage, or NaN when poisoning), for outputs that a kernel is about
    /// to overwrite; [`Error::Alloc`] names `op` when it cannot be had.
    pub(crate) fn for_overwrite(op: &str, shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::allocate(op, shape.into(), dtype, false)
    }

    /// An array of zeros; [`Error::Alloc`] names `op` when it cannot be had.
    pub(crate) fn zeros_for(op: &str, shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        Self::allocate(op, shape.into(), dtype, true)
    }

    /// [`NDArray::full`], or [`Error::Alloc`] naming `op`.
    pub(crate) fn full_for(
        op: &str,
        shape: impl Into<Shape>,
        value: f64,
        dtype: DType,
    ) -> Result<Self> {
        let mut a = Self::allocate(op, shape.into(), dtype, false)?;
        dispatch_any!(dtype, T => {
            let v = <T as Element>::from_f64(value);
            a.typed_mut::<T>().fill(v);
        });
        Ok(a)
    }

    fn allocate(op: &str, shape: Shape, dtype: DType, zeroed: bool) -> Result<Self> {
        check_size(op, &shape, dtype)?;
        let bytes = shape.bytes(dtype.size());
        let storage = bytes
            .and_then(|b| pool::shared(b, zeroed))
            .ok_or_else(|| alloc_error(op, &shape, dtype, bytes))?;
        Ok(NDArray {
            shape,
            dtype,
            storage: ManuallyDrop::new(storage),
            tape: None,
        })
    }

    /// This handle's storage, made its own: copied when shared.
    fn unique_storage(&mut self) -> Result<&mut Buffer> {
        // The common case (unshared) pays one uniqueness check, an atomic
        // compare-exchange, where asking `get_mut` again after it would
        // pay two: a measurable part of a one-element call.
        if let Some(unique) = Arc::get_mut(&mut self.storage) {
            let unique: *mut Buffer = unique;
            // SAFETY: `unique` comes from `Arc::get_mut` on
            // `self.storage`, so it is the only reference to the buffer,
            // and it is returned at once under `self`'s unique borrow
            // (the pointer only ends the borrow early, which the
            // borrow checker cannot see across the two branches).
            return Ok(unsafe { &mut *unique });
        }
        let copy = self.storage.try_clone().ok_or_else(|| {
            let bytes = self.storage.bytes().len();
            alloc_error(
                "NDArray (copy on write)",
                &self.shape,
                self.dtype,
                Some(bytes),
            )
        })?;
        pool::release(std::mem::replace(&mut *self.storage, Arc::new(copy)));
        Ok(Arc::get_mut(&mut self.storage).expect("unshared: just copied"))
    }

    /// An array of ones.
    ///
    /// # Panics
    /// As [`NDArray::zeros`].
    pub fn ones(shape: impl Into<Shape>, dtype: DType) -> Self {
        Self::full(shape, 1.0, dtype)
    }

    /// An array filled with `value` (converted to `dtype`).
    ///
    /// # Panics
    /// As [`NDArray::zeros`].
    pub fn full(shape: impl Into<Shape>, value: f64, dtype: DType) -> Self {
        let mut a = Self::zeros(shape, dtype);
        dispatch_any!(dtype, T => {
            let v = <T as Element>::from_f64(value);
            a.typed_mut::<T>().fill(v);
        });
        a
    }

    /// Takes ownership of `data` laid out row-major in `shape`.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Self> {
        Self::from_slice(&data, shape)
    }

    /// Copies `data`, laid out row-major in `shape`.
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Result<Self> {
        stored_width::<T>("NDArray::from_slice")?;
        let mut a = Self::for_data("NDArray::from_slice", data.len(), shape.into(), T::DTYPE)?;
        a.typed_mut::<T>().copy_from_slice(data);
        Ok(a)
    }

    /// Converts `data` (f64) to `dtype`, laid out in `shape`.
    pub fn from_f64(data: &[f64], shape: impl Into<Shape>, dtype: DType) -> Result<Self> {
        let mut a = Self::for_data("NDArray::from_f64", data.len(), shape.into(), dtype)?;
        dispatch_any!(dtype, T => {
            for (o, &v) in a.typed_mut::<T>().iter_mut().zip(data) {
                *o = <T as Element>::from_f64(v);
            }
        });
        Ok(a)
    }

    /// Storage for `len` elements of data under `shape`, about to be
    /// overwritten; errors when the two disagree.
    fn for_data(op: &str, len: usize, shape: Shape, dtype: DType) -> Result<Self> {
        if shape.checked_size() != Some(len) {
            return Err(Error::ShapeMismatch {
                op: op.into(),
                arg: "data".into(),
                expected: format!("as many elements as the shape {shape}"),
                got: Shape::new([len]),
            });
        }
        Self::allocate(op, shape, dtype, false)
    }

    /// `start, start + step, ...` up to but excluding `stop`, as NumPy.
    pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Self> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(Error::invalid(
                "NDArray::arange",
                "step",
                format!(
                    "expected a finite non-zero step and finite bounds, got start {start}, stop {stop}, step {step}"
                ),
            ));
        }
        // `as` saturates: a count past usize fails the allocation below.
        let n = ((stop - start) / step).ceil().max(0.0) as usize;
        let mut a = Self::allocate("NDArray::arange", Shape::new([n]), dtype, false)?;
        dispatch_any!(dtype, T => {
            for (i, o) in a.typed_mut::<T>().iter_mut().enumerate() {
                *o = <T as Element>::from_f64(start + i as f64 * step);
            }
        });
        Ok(a)
    }

    /// Uniform samples in `[low, high)`, reproducible for a given `seed`.
    ///
    /// Matches the op `_random_uniform` called with the same seed, and
    /// refuses what it refuses: bounds that are not finite, `low > high`.
    pub fn random_uniform(
        shape: impl Into<Shape>,
        low: f64,
        high: f64,
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        let op = "NDArray::random_uniform";
        if !(low.is_finite() && high.is_finite()) {
            return Err(Error::invalid(
                op,
                "low, high",
                format!("expected finite bounds, got {low} and {high}"),
            ));
        }
        if low > high {
            return Err(Error::invalid(
                op,
                "high",
                format!("expected at least `low` ({low}), got {high}"),
            ));
        }
        let mut a = Self::allocate(op, shape.into(), dtype, true)?;
        crate::engine::drivers::fill_random(&mut a.blob_mut(), seed, move |r| {
            low + (high - low) * r.uniform()
        })?;
        Ok(a)
    }

    /// Normal samples with mean `loc` and standard deviation `scale`
    /// (finite, and `scale >= 0`, as the op `_random_normal` asks).
    pub fn random_normal(
        shape: impl Into<Shape>,
        loc: f64,
        scale: f64,
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        if !(loc.is_finite() && scale.is_finite() && scale >= 0.0) {
            return Err(Error::invalid(
                "NDArray::random_normal",
                "loc, scale",
                format!(
                    "expected a finite mean and a finite non-negative scale, got {loc} and {scale}"
                ),
            ));
        }
        let op = "NDArray::random_normal";
        let mut a = Self::allocate(op, shape.into(), dtype, true)?;
        crate::engine::drivers::fill_random(&mut a.blob_mut(), seed, move |r| {
            loc + scale * r.normal()
        })?;
        Ok(a)
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.shape.size()
    }
    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.ndim()
    }
    /// Whether another handle shares this array's storage.
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.storage) > 1 || Arc::weak_count(&self.storage) > 0
    }
    /// Whether two arrays share storage.
    pub fn shares_storage_with(&self, other: &NDArray) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The elements; errors when `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        Ok(self.as_slice::<T>()?.to_vec())
    }

    /// The elements converted to f64, whatever the dtype.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        dispatch_any!(self.dtype, T => self.typed::<T>().iter().map(|v| v.to_f64()).collect())
    }

    /// An error (for `op`) when `T` is not the dtype.
    fn check_element<T: Element>(&self, op: &str) -> Result<()> {
        stored_width::<T>(op)?;
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                op: op.into(),
                arg: "T".into(),
                expected: self.dtype.to_string(),
                got: T::DTYPE,
            });
        }
        Ok(())
    }

    /// Borrows the elements; errors when `T` is not the dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        self.check_element::<T>("NDArray::as_slice")?;
        Ok(self.typed::<T>())
    }

    /// Mutably borrows the elements, copying first if the storage is shared.
    pub fn as_slice_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        self.check_element::<T>("NDArray::as_slice_mut")?;
        Ok(self.typed_mut::<T>())
    }

    /// The same data under a new shape of the same size; shares storage.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<NDArray> {
        let shape = shape.into();
        if shape.checked_size() != Some(self.size()) {
            return Err(Error::ShapeMismatch {
                op: "reshape".into(),
                arg: "shape".into(),
                expected: format!("a shape with {} elements", self.size()),
                got: shape,
            });
        }
        Ok(NDArray {
            shape,
            dtype: self.dtype,
            storage: self.storage.clone(),
            tape: None,
        })
    }

    /// A copy converted to `dtype` (round to nearest; saturating for integers).
    ///
    /// # Panics
    /// When the copy cannot be allocated.
    pub fn astype(&self, dtype: DType) -> NDArray {
        if dtype == self.dtype {
            return self.clone();
        }
        let values = self.to_f64_vec();
        let mut out = NDArray::zeros(self.shape.clone(), dtype);
        dispatch_any!(dtype, T => {
            for (o, v) in out.typed_mut::<T>().iter_mut().zip(values) {
                *o = <T as Element>::from_f64(v);
            }
        });
        out
    }

    /// A copy with storage of its own.
    ///
    /// # Panics
    /// When the copy cannot be allocated.
    pub fn deep_copy(&self) -> NDArray {
        let copy = self.storage.try_clone().unwrap_or_else(|| {
            let bytes = Some(self.storage.bytes().len());
            panic!(
                "{}",
                alloc_error("NDArray::deep_copy", &self.shape, self.dtype, bytes)
            )
        });
        NDArray {
            shape: self.shape.clone(),
            dtype: self.dtype,
            storage: ManuallyDrop::new(Arc::new(copy)),
            tape: None,
        }
    }

    /// A read-only blob view.
    pub fn blob(&self) -> TBlob<'_> {
        // SAFETY: the buffer is 64-byte aligned, holds `size()` elements of
        // `dtype`, and `&self` keeps it alive and unwritten for the borrow.
        unsafe {
            TBlob::from_raw(
                self.storage.bytes().as_ptr(),
                self.dtype,
                self.shape.clone(),
            )
        }
    }

    /// A writable blob view; copies first if the storage is shared.
    ///
    /// # Panics
    /// When the storage is shared and the copy cannot be allocated.
    pub fn blob_mut(&mut self) -> TBlobMut<'_> {
        self.try_blob_mut().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`NDArray::blob_mut`], with a failed copy as an error.
    pub fn try_blob_mut(&mut self) -> Result<TBlobMut<'_>> {
        self.note_write();
        let dtype = self.dtype;
        let shape = self.shape.clone();
        let bytes = self.unique_storage()?.bytes_mut();
        // SAFETY: `unique_storage` made this handle the sole owner, `&mut self`
        // gives exclusive access for the borrow, and the buffer is aligned
        // and sized for `shape` elements of `dtype`.
        Ok(unsafe { TBlobMut::from_raw(bytes.as_mut_ptr(), dtype, shape) })
    }

    /// Makes the storage unique without copying old contents (they are
    /// about to be overwritten).
    pub(crate) fn make_unique_for_overwrite(&mut self, op: &str) -> Result<()> {
        self.note_write();
        if self.is_shared() {
            let mut fresh = NDArray::zeros_for(op, self.shape.clone(), self.dtype)?;
            fresh.tape = self.tape.take();
            *self = fresh;
        }
        Ok(())
    }

    /// When this handle is the storage's sole owner, a pointer to it for
    /// in-place kernels.
    pub(crate) fn unique_ptr(&mut self) -> Option<*mut u8> {
        let ptr = Arc::get_mut(&mut self.storage).map(|b| b.bytes_mut().as_mut_ptr());
        if ptr.is_some() {
            self.note_write();
        }
        ptr
    }

    /// Makes this handle the storage's sole owner (copying if shared) and
    /// returns a pointer to it, for kernels that update it in place.
    pub(crate) fn make_unique_ptr(&mut self) -> Result<*mut u8> {
        self.note_write();
        Ok(self.unique_storage()?.bytes_mut().as_mut_ptr())
    }

    /// This array's place on the autograd tape, if it has one.
    pub(crate) fn tape(&self) -> Option<&TapeRef> {
        self.tape.as_ref()
    }

    /// Puts this array on the tape (or takes it off, with `None`).
    pub(crate) fn set_tape(&mut self, tape: Option<TapeRef>) {
        self.tape = tape;
    }

    /// Tells the tape that this array's value is about to change in place,
    /// so that a gradient that saved the old value refuses to run.
    pub(crate) fn note_write(&self) {
        if let Some(t) = &self.tape {
            t.node.note_write(t.output);
        }
    }

    /// Replaces the value behind this handle (an in-place update outside
    /// recording). A variable stays a variable when the new value has its
    /// shape and dtype (an optimizer step); anything else leaves the tape,
    /// as the new value is no recorded call's output.
    pub(crate) fn replace_keeping_tape(&mut self, mut value: NDArray) {
        let tape = self.tape.take();
        value.tape = tape.filter(|t| t.node.holds(&value.shape, value.dtype));
        *self = value;
    }

    /// The same value, off the tape: no gradient flows through it.
    pub fn detach(&self) -> NDArray {
        NDArray {
            shape: self.shape.clone(),
            dtype: self.dtype,
            storage: self.storage.clone(),
            tape: None,
        }
    }

    /// The bytes of this array's storage and its address, which identifies
    /// the storage among live arrays.
    pub(crate) fn storage_id(&self) -> (usize, usize) {
        (
            Arc::as_ptr(&self.storage) as *const u8 as usize,
            self.storage.bytes().len(),
        )
    }

    fn typed<T: Element>(&self) -> &[T] {
        bytemuck::cast_slice(self.storage.bytes())
    }
    /// # Panics
    /// As [`NDArray::blob_mut`].
    fn typed_mut<T: Element>(&mut self) -> &mut [T] {
        self.note_write();
        let storage = self.unique_storage().unwrap_or_else(|e| panic!("{e}"));
        bytemuck::cast_slice_mut(storage.bytes_mut())
    }
}

/// An error (for `op`) when `T` is wider than its dtype's elements (a
/// [`crate::Dual`], which reports its value's dtype): arrays hold only
/// the dtypes themselves.
fn stored_width<T: Element>(op: &str) -> Result<()> {
    if !crate::dtype::stored_as_dtype::<T>() {
        return Err(Error::invalid(
            op,
            "T",
            format!(
                "an element type of the dtype's {} bytes, got {} (a dual number is never stored)",
                T::DTYPE.size(),
                std::mem::size_of::<T>()
            ),
        ));
    }
    Ok(())
}

impl fmt::Debug for NDArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.to_f64_vec();
        let shown: Vec<f64> = values.iter().copied().take(16).collect();
        write!(
            f,
            "NDArray({}, {}, {:?}{})",
            self.shape,
            self.dtype,
            shown,
            if values.len() > 16 { " ..." } else { "" }
        )
    }
}

impl PartialEq for NDArray {
    /// Same shape, dtype and elements (NaN ≠ NaN, as IEEE).
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape
            && self.dtype == other.dtype
            && self.to_f64_vec() == other.to_f64_vec()
    }
}

/// Errors when an array of `shape` and `dtype` would take more than
/// `isize::MAX` bytes: no allocation could hold it, and its element count
/// may not even fit a `usize`. `op` names who asked (an op's output, a
/// constructor).
pub(crate) fn check_size(op: &str, shape: &Shape, dtype: DType) -> Result<()> {
    if shape.bytes(dtype.size()).is_none() {
        return Err(Error::invalid(
            op,
            "shape",
            format!(
                "an array of shape {shape} and dtype {} would take more than isize::MAX bytes",
                dtype.name()
            ),
        ));
    }
    Ok(())
}

/// [`Error::Alloc`] for an array of `shape` and `dtype` (`bytes`: `None`
/// past `isize::MAX`).
pub(crate) fn alloc_error(op: &str, shape: &Shape, dtype: DType, bytes: Option<usize>) -> Error {
    Error::alloc(
        op,
        format!("an array of shape {shape} ({})", dtype.name()),
        bytes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors() {
        let a = NDArray::arange(0.0, 5.0, 1.0, DType::F32).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        let b = NDArray::full([2, 2], 1.5, DType::BF16);
        assert_eq!(b.to_f64_vec(), vec![1.5; 4]);
        assert!(NDArray::from_vec(vec![1.0f32; 3], [2, 2]).is_err());
        assert!(NDArray::arange(0.0, 1.0, 0.0, DType::F32).is_err());
        let r = a.reshape([5, 1]).unwrap();
        assert!(r.shares_storage_with(&a));
        assert!(a.reshape([2, 2]).is_err());
        assert!(a.to_vec::<f64>().is_err());
    }

    #[test]
    fn storage_is_aligned_and_copy_on_write() {
        let mut a = NDArray::zeros([3], DType::F64);
        assert_eq!(a.blob().as_ptr() as usize % 64, 0);
        let b = a.clone();
        a.as_slice_mut::<f64>().unwrap()[0] = 1.0;
        assert_eq!(b.to_vec::<f64>().unwrap(), vec![0.0; 3]);
        assert_eq!(a.to_vec::<f64>().unwrap(), vec![1.0, 0.0, 0.0]);
    }

    #[test]
    fn random_is_seeded() {
        let a = NDArray::random_uniform([100], -1.0, 1.0, DType::F32, 3).unwrap();
        let b = NDArray::random_uniform([100], -1.0, 1.0, DType::F32, 3).unwrap();
        let c = NDArray::random_uniform([100], -1.0, 1.0, DType::F32, 4).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.to_f64_vec().iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
