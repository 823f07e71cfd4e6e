//! Scratch tile buffers, the broadcast indexer and tile sources, and the
//! disjoint output views the drivers write through.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Range;

use crate::engine::half_io::TileIo;
use crate::pool::Line;
use crate::{Float, OpReqType, Shape};

/// Elements per tile: small enough that a few tiles stay in L1.
pub const TILE: usize = 1024;

thread_local! {
    /// Tile buffers of the drivers, kept per thread: zeroing tens of
    /// kilobytes of stack on every call would dominate small ops.
    static SCRATCH: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
}

/// Scratch buffers that each start on a cache line. A vector load or
/// store that straddles two lines slows the cheap kernels markedly, and
/// that is what 16-byte aligned heap buffers give.
pub(crate) struct Buffers<'a, C> {
    rest: &'a mut [C],
    stride: usize,
    cap: usize,
}

impl<'a, C> Buffers<'a, C> {
    /// Elements of `C` from one buffer's start to the next's: `cap`
    /// rounded up to whole lines.
    fn stride(cap: usize) -> usize {
        let per_line = (LINE_BYTES / std::mem::size_of::<C>()).max(1);
        cap.div_ceil(per_line) * per_line
    }

    /// The next buffer of `cap` elements.
    ///
    /// # Panics
    /// When more buffers are taken than were asked for (a driver bug).
    pub(crate) fn next(&mut self) -> &'a mut [C] {
        let rest = std::mem::take(&mut self.rest);
        let (buf, rest) = rest.split_at_mut(self.stride.min(rest.len()));
        self.rest = rest;
        assert!(
            buf.len() >= self.cap,
            "more scratch buffers taken than asked for"
        );
        &mut buf[..self.cap]
    }
}

const LINE_BYTES: usize = std::mem::size_of::<Line>();

/// Runs `f` with `count` line-aligned scratch buffers of `cap` elements of
/// type `C` each (contents unspecified).
pub(crate) fn with_buffers<C: Float, R>(
    count: usize,
    cap: usize,
    f: impl FnOnce(Buffers<'_, C>) -> R,
) -> R {
    let stride = Buffers::<C>::stride(cap);
    let elems = count * stride;
    let lines = (elems * std::mem::size_of::<C>()).div_ceil(LINE_BYTES);
    let carve = |v: &mut [Line]| {
        let rest = &mut bytemuck::cast_slice_mut(&mut v[..lines])[..elems];
        f(Buffers { rest, stride, cap })
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < lines {
                v.resize(lines, Line([0; LINE_BYTES]));
            }
            carve(&mut v)
        }
        // Only if a kernel re-enters the drivers on this thread.
        Err(_) => carve(&mut vec![Line([0; LINE_BYTES]); lines]),
    })
}

/// Runs `f` with `N` input buffers and one result buffer of `cap`
/// elements each, carved from the thread's scratch.
pub(crate) fn with_tile_buffers<C: Float, const N: usize, R>(
    cap: usize,
    f: impl FnOnce([&mut [C]; N], &mut [C]) -> R,
) -> R {
    with_buffers::<C, _>(N + 1, cap, |mut b| {
        let bufs: [&mut [C]; N] = std::array::from_fn(|_| b.next());
        f(bufs, b.next())
    })
}

/// A mutable slice that parallel workers carve into disjoint ranges.
pub(crate) struct DisjointMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: workers only ever touch disjoint ranges (see `range`), so sharing
// the handle is like sending each worker its own `&mut [T]`.
unsafe impl<T: Send> Sync for DisjointMut<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for DisjointMut<'_, T> {}

impl<'a, T> DisjointMut<'a, T> {
    pub(crate) fn new(s: &'a mut [T]) -> Self {
        DisjointMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// No two slices obtained from the same `DisjointMut` may overlap while
    /// both are alive.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn range(&self, r: Range<usize>) -> &mut [T] {
        assert!(r.start <= r.end && r.end <= self.len, "range out of bounds");
        // SAFETY: in bounds (checked above) of a slice borrowed mutably for
        // 'a; disjointness is the caller's obligation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r.start), r.end - r.start) }
    }
}

/// Maps output flat indices to the flat indices of a broadcast input.
#[derive(Clone, Debug)]
pub(crate) struct Indexer {
    dims: Vec<usize>,
    strides: Vec<usize>,
}

impl Indexer {
    pub(crate) fn new(input: &Shape, out: &Shape) -> Self {
        let dims = out.dims().to_vec();
        let strides = input.broadcast_strides(out);
        // A 0-d output still has one element.
        if dims.is_empty() {
            return Indexer {
                dims: vec![1],
                strides: vec![0],
            };
        }
        Indexer { dims, strides }
    }

    /// The input offset of output index `start`, when `start..start + len`
    /// is one stride-1 run of the input (a bias row under a matrix row).
    fn single_run(&self, start: usize, len: usize) -> Option<usize> {
        let last = self.dims.len() - 1;
        if self.strides[last] != 1 {
            return None;
        }
        let mut rem = start;
        let mut off = 0;
        let mut pos = 0;
        for d in (0..=last).rev() {
            let c = rem % self.dims[d];
            if d == last {
                pos = c;
            }
            rem /= self.dims[d];
            off += c * self.strides[d];
        }
        (pos + len <= self.dims[last]).then_some(off)
    }

    /// Calls `f(j, offset, run, stride)` for runs along the last axis
    /// covering output indices `start..start + len`; `j` counts from 0.
    pub(crate) fn for_each_run(
        &self,
        start: usize,
        len: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) {
        let nd = self.dims.len();
        let last = nd - 1;
        let mut coord = vec![0usize; nd];
        let mut rem = start;
        let mut off = 0;
        for d in (0..nd).rev() {
            coord[d] = rem % self.dims[d];
            rem /= self.dims[d];
            off += coord[d] * self.strides[d];
        }
        let (dl, sl) = (self.dims[last], self.strides[last]);
        let mut j = 0;
        while j < len {
            let run = (len - j).min(dl - coord[last]);
            f(j, off, run, sl);
            j += run;
            coord[last] += run;
            off += run * sl;
            if coord[last] == dl {
                off -= dl * sl;
                coord[last] = 0;
                for d in (0..last).rev() {
                    coord[d] += 1;
                    off += self.strides[d];
                    if coord[d] < self.dims[d] {
                        break;
                    }
                    off -= self.dims[d] * self.strides[d];
                    coord[d] = 0;
                }
            }
        }
    }
}

/// Where a kernel input comes from.
pub(crate) enum Src<'a, S> {
    /// Same shape as the output, its own memory.
    Contig(&'a [S]),
    /// Broadcast to the output shape.
    Bcast(&'a [S], Indexer),
    /// Exactly the memory of destination `k`: read each tile before writing it.
    Dst(usize),
    /// Not needed by the kernel: zeros.
    Zero,
}

impl<'a, S: TileIo> Src<'a, S> {
    /// The tile `start..start + len` in the compute type: borrowed when the
    /// input already is that, otherwise converted or gathered into `buf`.
    pub(crate) fn tile<'t>(
        &'t self,
        start: usize,
        len: usize,
        dsts: &[&mut [S]],
        buf: &'t mut [S::Compute],
    ) -> &'t [S::Compute] {
        if let Some(c) = self.contiguous(start, len).and_then(S::as_compute) {
            return c;
        }
        self.fill(start, len, dsts, buf);
        &buf[..len]
    }

    /// The tile `start..start + len` where it lies contiguously in the
    /// input's own memory: always for a same-shape input, and for a
    /// broadcast one when the tile is one run of it (a bias row).
    pub(crate) fn contiguous(&self, start: usize, len: usize) -> Option<&'a [S]> {
        match self {
            Src::Contig(data) => Some(&data[start..start + len]),
            Src::Bcast(data, idx) => idx.single_run(start, len).map(|off| &data[off..off + len]),
            Src::Dst(_) | Src::Zero => None,
        }
    }

    /// Converts or gathers the tile `start..start + len` into `buf`.
    pub(crate) fn fill(&self, start: usize, len: usize, dsts: &[&mut [S]], buf: &mut [S::Compute]) {
        let buf = &mut buf[..len];
        match self {
            Src::Contig(data) => S::load(&data[start..start + len], buf),
            Src::Bcast(data, idx) => idx.for_each_run(start, len, |j, off, run, stride| {
                let dst = &mut buf[j..j + run];
                if stride == 0 {
                    dst.fill(data[off].to_compute());
                } else if stride == 1 {
                    S::load(&data[off..off + run], dst);
                } else {
                    for (t, b) in dst.iter_mut().enumerate() {
                        *b = data[off + t * stride].to_compute();
                    }
                }
            }),
            // Copied, because this tile of the destination is about to be
            // overwritten.
            Src::Dst(k) => S::load(&dsts[*k][..len], buf),
            Src::Zero => buf.fill(<S::Compute as Float>::zero()),
        }
    }
}

/// Writes `res` into `dst` per `req`.
#[inline]
pub(crate) fn store<S: TileIo>(dst: &mut [S], res: &[S::Compute], req: OpReqType) {
    match req {
        OpReqType::Null => {}
        OpReqType::WriteTo | OpReqType::WriteInplace => S::store(dst, res, false),
        OpReqType::AddTo => S::store(dst, res, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<C: Float>(count: usize, cap: usize) {
        with_buffers::<C, _>(count, cap, |mut b| {
            let mut seen: Vec<Range<usize>> = Vec::new();
            for _ in 0..count {
                let buf = b.next();
                assert_eq!(buf.len(), cap);
                let start = buf.as_ptr() as usize;
                assert_eq!(start % LINE_BYTES, 0, "cap {cap}: buffer not on a line");
                let bytes = start..start + std::mem::size_of_val(buf);
                assert!(
                    seen.iter()
                        .all(|r| r.end <= bytes.start || bytes.end <= r.start)
                );
                seen.push(bytes);
                buf.fill(C::one());
            }
        });
    }

    #[test]
    fn scratch_buffers_start_on_lines_and_do_not_overlap() {
        for cap in [1, 3, 15, 16, 17, 100, TILE] {
            for count in [1, 2, 5] {
                check::<f32>(count, cap);
                check::<f64>(count, cap);
            }
        }
        // Re-entered (the thread's scratch is borrowed): still aligned.
        with_buffers::<f32, _>(2, 7, |_| check::<f64>(3, 9));
    }
}
