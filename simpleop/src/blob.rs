//! Dtype-erased views of array memory ([`TBlob`], [`TBlobMut`]) and the
//! request type ([`OpReqType`]) that says how a kernel writes its output.

use std::marker::PhantomData;
use std::ops::Range;

use crate::{DType, Element, Error, Float, Result, Shape};

/// How a kernel must write an output.
///
/// `WriteTo` and `WriteInplace` mean **every element is written**: the
/// buffer a kernel gets for them holds whatever was there before (old bytes
/// of a released array, or a value the planner placed there earlier), never
/// zeros. An op that skips elements hands that data back. The gradient
/// checker and `simpleop check` fill such buffers with NaN (see
/// [`crate::pool::set_poison`]) so that a kernel that skips elements fails
/// its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpReqType {
    /// Do not write at all.
    Null,
    /// Overwrite every element of the output.
    WriteTo,
    /// Overwrite every element of the output, which is the same buffer as
    /// one of the inputs.
    WriteInplace,
    /// Add to what the output holds.
    AddTo,
}

impl OpReqType {
    /// Every request type.
    pub const ALL: [OpReqType; 4] = [
        OpReqType::Null,
        OpReqType::WriteTo,
        OpReqType::WriteInplace,
        OpReqType::AddTo,
    ];

    /// Parses MXNet's `grad_req` strings: `null`, `write`, `inplace`, `add`.
    pub fn from_name(name: &str) -> Option<OpReqType> {
        match name {
            "null" => Some(OpReqType::Null),
            "write" => Some(OpReqType::WriteTo),
            "inplace" => Some(OpReqType::WriteInplace),
            "add" => Some(OpReqType::AddTo),
            _ => None,
        }
    }

    /// Stores one value computed in `T::Compute` into `dst` as this request
    /// says: nothing, overwrite, or accumulate. For blob-form kernels.
    #[inline(always)]
    pub fn assign<T: Float>(self, dst: &mut T, value: T::Compute) {
        match self {
            OpReqType::Null => {}
            OpReqType::WriteTo | OpReqType::WriteInplace => *dst = T::from_compute(value),
            OpReqType::AddTo => *dst = T::from_compute(dst.to_compute() + value),
        }
    }

    /// MXNet's name for this request.
    pub fn name(self) -> &'static str {
        match self {
            OpReqType::Null => "null",
            OpReqType::WriteTo => "write",
            OpReqType::WriteInplace => "inplace",
            OpReqType::AddTo => "add",
        }
    }
}

/// The accessors both blob kinds share.
macro_rules! blob_metadata {
    ($ptr:ty) => {
        /// The blob over `ptr`; the constructors check or require that it
        /// is valid for `shape` of `dtype`.
        #[inline]
        fn over(ptr: $ptr, dtype: DType, shape: Shape) -> Self {
            Self {
                ptr,
                dtype,
                len: shape.size(),
                shape,
                _borrow: PhantomData,
            }
        }
        /// The element type.
        #[inline]
        pub fn dtype(&self) -> DType {
            self.dtype
        }
        /// The shape.
        #[inline]
        pub fn shape(&self) -> &Shape {
            &self.shape
        }
        /// Number of elements.
        #[inline]
        pub fn len(&self) -> usize {
            self.len
        }
        /// True when there are no elements.
        #[inline]
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
        /// The start address, for aliasing checks.
        #[inline]
        pub fn as_ptr(&self) -> *const u8 {
            self.ptr
        }
        /// The byte range covered, for aliasing checks.
        #[inline]
        pub fn byte_range(&self) -> Range<usize> {
            let start = self.ptr as usize;
            start..start + self.len() * self.dtype.size()
        }
    };
}

/// A read-only, dtype-erased view of `shape.size()` contiguous elements.
///
/// # Aliasing contract
/// A `TBlob` may point at the same memory as a [`TBlobMut`] handed to the same
/// kernel only when the op declared the matching in-place option, the two
/// cover exactly the same elements, and the kernel is an elementwise driver
/// from [`crate::kernel`], which reads every aliased element before it
/// writes it. Blob-form kernels never see aliased arguments.
#[derive(Clone, Debug)]
pub struct TBlob<'a> {
    ptr: *const u8,
    dtype: DType,
    shape: Shape,
    /// `shape.size()`, computed once: kernels ask for it many times per call.
    len: usize,
    _borrow: PhantomData<&'a [u8]>,
}

// SAFETY: a TBlob is a shared view of plain-old-data elements; sending it to
// another thread is the same as sending the `&[T]` it stands for.
unsafe impl Send for TBlob<'_> {}
// SAFETY: as above, `&[T]` of Pod is Sync.
unsafe impl Sync for TBlob<'_> {}

impl<'a> TBlob<'a> {
    /// Views a slice. Errors when `data.len() != shape.size()`.
    pub fn from_slice<T: Element>(data: &'a [T], shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        check_len(data.len(), &shape)?;
        Ok(Self::over(data.as_ptr().cast(), T::DTYPE, shape))
    }

    /// Views raw memory.
    ///
    /// # Safety
    /// `ptr` must be aligned for `dtype` and valid for reads of
    /// `shape.size()` elements for `'a`, and the memory must follow the
    /// aliasing contract in the type's documentation.
    pub unsafe fn from_raw(ptr: *const u8, dtype: DType, shape: Shape) -> Self {
        Self::over(ptr, dtype, shape)
    }

    blob_metadata!(*const u8);

    /// A view of no elements (shape `(0,)`), standing for an absent array
    /// such as the gradient of an output nothing reads.
    pub fn empty(dtype: DType) -> TBlob<'static> {
        // Aligned for every dtype and never read: the view has no elements.
        let ptr = std::ptr::NonNull::<u128>::dangling().as_ptr().cast::<u8>();
        TBlob::over(ptr, dtype, Shape::new(vec![0]))
    }

    /// The elements as a typed slice; errors when `T` is not the blob's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T]> {
        check_dtype::<T>(self.dtype)?;
        if self.is_empty() {
            return Ok(&[]);
        }
        check_storage(self.ptr)?;
        // SAFETY: `check_dtype` made `T` the dtype's size; `from_slice` or
        // the `from_raw` contract guarantee the
        // pointer is aligned and valid for `len` reads of `T` for 'a, and
        // (aliasing contract) nothing writes these elements while the slice
        // is alive.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>(), self.len()) })
    }

    /// The same memory under another shape of the same size.
    pub fn reshaped(&self, shape: Shape) -> Result<Self> {
        check_len(self.len(), &shape)?;
        Ok(TBlob {
            shape,
            ..self.clone()
        })
    }
}

/// A writable, dtype-erased view of `shape.size()` contiguous elements.
///
/// See [`TBlob`] for when it may share memory with an input.
#[derive(Debug)]
pub struct TBlobMut<'a> {
    ptr: *mut u8,
    dtype: DType,
    shape: Shape,
    /// `shape.size()`, computed once.
    len: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a TBlobMut stands for a `&mut [T]` of Pod elements, which is Send.
unsafe impl Send for TBlobMut<'_> {}
// SAFETY: shared access only exposes metadata; element access needs `&mut self`.
unsafe impl Sync for TBlobMut<'_> {}

impl<'a> TBlobMut<'a> {
    /// Views a mutable slice. Errors when `data.len() != shape.size()`.
    pub fn from_slice<T: Element>(data: &'a mut [T], shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        check_len(data.len(), &shape)?;
        Ok(Self::over(data.as_mut_ptr().cast(), T::DTYPE, shape))
    }

    /// Views raw memory.
    ///
    /// # Safety
    /// `ptr` must be aligned for `dtype` and valid for reads and writes of
    /// `shape.size()` elements for `'a`, with no other access during `'a`
    /// except the aliasing [`TBlob`] described in its documentation.
    pub unsafe fn from_raw(ptr: *mut u8, dtype: DType, shape: Shape) -> Self {
        Self::over(ptr, dtype, shape)
    }

    blob_metadata!(*mut u8);

    /// A view of an output nothing reads, whose request is `Null`: it has
    /// the output's shape and dtype but no storage, and element access is
    /// an error, so a kernel that honours `Null` never notices.
    pub fn discarded(dtype: DType, shape: Shape) -> TBlobMut<'static> {
        TBlobMut::over(std::ptr::null_mut(), dtype, shape)
    }

    /// Whether this is a [`TBlobMut::discarded`] view.
    pub fn is_discarded(&self) -> bool {
        self.ptr.is_null()
    }

    /// The elements as a typed mutable slice; errors when `T` is not the
    /// dtype or the view is [discarded](TBlobMut::discarded).
    pub fn as_slice_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        check_dtype::<T>(self.dtype)?;
        if self.is_empty() {
            return Ok(&mut []);
        }
        check_storage(self.ptr.cast_const())?;
        // SAFETY: `check_dtype` made `T` the dtype's size; the constructors
        // guarantee alignment and validity for `len`
        // elements and exclusive access for 'a; `&mut self` makes this the
        // only live slice.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.len()) })
    }

    /// Fills every byte with `0xff` (NaN in every float dtype), when
    /// storage poisoning is on ([`crate::pool::set_poison`]).
    pub(crate) fn poison_if_asked(&mut self) {
        if crate::pool::poison() && !self.is_empty() && !self.ptr.is_null() {
            // SAFETY: the constructors guarantee validity for `len` elements
            // of `dtype`, that is `len * dtype.size()` bytes, and exclusive
            // access for 'a; any byte pattern is a valid element.
            unsafe { self.ptr.write_bytes(0xff, self.len() * self.dtype.size()) }
        }
    }

    /// Reborrows as a shorter-lived view.
    pub fn reborrow(&mut self) -> TBlobMut<'_> {
        TBlobMut {
            ptr: self.ptr,
            dtype: self.dtype,
            shape: self.shape.clone(),
            len: self.len,
            _borrow: PhantomData,
        }
    }

    /// The same memory under another shape of the same size.
    pub fn reshaped(self, shape: Shape) -> Result<Self> {
        check_len(self.len(), &shape)?;
        Ok(TBlobMut { shape, ..self })
    }

    /// A read-only view of the same memory (for reading the previous value
    /// under [`OpReqType::AddTo`] in blob kernels, one at a time).
    pub fn as_blob(&self) -> TBlob<'_> {
        TBlob {
            ptr: self.ptr,
            dtype: self.dtype,
            shape: self.shape.clone(),
            len: self.len,
            _borrow: PhantomData,
        }
    }
}

/// Errors for the storage-less view of a discarded output.
fn check_storage(ptr: *const u8) -> Result<()> {
    if ptr.is_null() {
        return Err(Error::invalid(
            "TBlobMut",
            "output",
            "this output's request is Null (nothing reads it): it has no storage to write",
        ));
    }
    Ok(())
}

fn check_len(len: usize, shape: &Shape) -> Result<()> {
    if len != shape.size() {
        return Err(Error::invalid(
            "TBlob",
            "data",
            format!("{len} elements do not fill shape {shape}"),
        ));
    }
    Ok(())
}

/// Inlined to one comparison: every kernel call views its blobs this way.
#[inline]
fn check_dtype<T: Element>(dtype: DType) -> Result<()> {
    // The size too: a `Dual` reports its value's dtype but is wider, and
    // the typed views below read `len` elements of `T`.
    if T::DTYPE != dtype || !crate::dtype::stored_as_dtype::<T>() {
        return Err(dtype_mismatch(T::DTYPE, dtype));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn dtype_mismatch(expected: DType, got: DType) -> Error {
    Error::DTypeMismatch {
        op: "TBlob".into(),
        arg: "data".into(),
        expected: expected.to_string(),
        got,
    }
}

/// Whether two byte ranges overlap.
pub(crate) fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access_checks_dtype_and_length() {
        let data = [1.0f32, 2.0, 3.0, 4.0];
        let blob = TBlob::from_slice(&data, [2, 2]).unwrap();
        assert_eq!(blob.as_slice::<f32>().unwrap(), &data);
        assert!(blob.as_slice::<f64>().is_err());
        assert!(TBlob::from_slice(&data, [3]).is_err());
        let mut out = [0.0f64; 2];
        let mut blob = TBlobMut::from_slice(&mut out, [2]).unwrap();
        blob.as_slice_mut::<f64>().unwrap()[1] = 5.0;
        assert_eq!(out, [0.0, 5.0]);
    }

    #[test]
    fn assign_honours_the_request() {
        let mut v = 2.0f32;
        OpReqType::Null.assign(&mut v, 5.0);
        assert_eq!(v, 2.0);
        OpReqType::AddTo.assign(&mut v, 5.0);
        assert_eq!(v, 7.0);
        OpReqType::WriteTo.assign(&mut v, 1.0);
        assert_eq!(v, 1.0);
        let mut h = half::f16::from_f32(1.0);
        OpReqType::AddTo.assign(&mut h, 0.5f32);
        assert_eq!(h.to_f32(), 1.5);
    }

    #[test]
    fn req_names_round_trip() {
        for r in OpReqType::ALL {
            assert_eq!(OpReqType::from_name(r.name()), Some(r));
        }
    }
}
