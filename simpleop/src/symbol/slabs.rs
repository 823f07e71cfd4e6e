//! The slab streamer: a fused step with a `dot` ahead of its program or a
//! reduction behind it runs slab by slab, so that the product or the
//! reduction's input stays in cache and never reaches memory.

use crate::engine::fused::{TileProgram, run_program_within};
use crate::{EnvArguments, Error, NDArray, OpCall, OpReqType, RunContext, Shape, TBlob, TBlobMut};

use super::steps::{self as plan, Plan, ValueId, slab};

/// A fused program with a [`plan::SlabHead`] or a [`plan::ReduceTail`],
/// run over slabs of rows: per slab, the head computes its output into a
/// slab buffer (still in cache) that the program reads, or the program
/// writes the reduction's input into it and the reduction reads it from
/// there. Each thread takes one contiguous run of rows and slabs it, with
/// its own buffer.
pub(crate) struct Slabs<'a> {
    pub(crate) plan: &'a Plan,
    /// The value that lives in the slab buffer (the head's output or the
    /// reduction's input); its shape is the program's iteration space.
    pub(crate) space: ValueId,
    /// Rows (of axis 0) per slab.
    pub(crate) rows: usize,
    /// Whether threads split at slab boundaries (multiples of `rows`).
    pub(crate) fixed: bool,
    /// Work per element, for the thread split.
    pub(crate) cost: usize,
    /// The slab ops' context: the executor's, on one thread.
    pub(crate) ctx: RunContext,
    pub(crate) prog: &'a TileProgram<'a>,
    /// Each program input and its base address; `None` for the head's
    /// output.
    pub(crate) inputs: &'a [Option<(ValueId, usize)>],
    /// Each program output and its base address; `None` for the
    /// reduction's input.
    pub(crate) outputs: &'a [Option<(ValueId, usize)>],
    pub(crate) head: Option<SlabOp<'a>>,
    pub(crate) tail: Option<SlabOp<'a>>,
}

/// A complex op run slab by slab beside a fused program.
pub(crate) struct SlabOp<'a> {
    pub(crate) node: usize,
    pub(crate) op: &'static crate::OpDef,
    pub(crate) forward: crate::ForwardFn,
    pub(crate) env: &'a EnvArguments,
    /// Its values besides the slab buffer, with base addresses: the head's
    /// inputs (the first taken row by row, the others whole), the tail's
    /// output.
    pub(crate) values: Vec<(ValueId, usize)>,
}

/// Which part of a slabbed step failed, so the error names its node.
pub(crate) enum SlabError {
    Program(Error),
    Op(usize, Error),
}

impl Slabs<'_> {
    pub(crate) fn run(&self, parallel: bool) -> std::result::Result<(), SlabError> {
        let space = &self.plan.values[self.space].shape;
        let n_rows = space.dims()[0];
        let row = space.size() / n_rows;
        // Split by elements at row (or slab) boundaries, so that the usual
        // grain rules apply; each thread slabs its own rows.
        let align = if self.fixed { row * self.rows } else { row };
        crate::engine::chunks::try_for_each_chunk(
            n_rows * row,
            self.cost,
            parallel,
            align,
            |elems| self.run_rows(elems.start / row..elems.end / row),
        )
    }

    fn call<'s>(&'s self, op: &'s SlabOp<'_>) -> OpCall<'s> {
        OpCall {
            op: op.op,
            env: op.env,
            ctx: &self.ctx,
        }
    }

    /// The sizes of the arrays the program's outputs are slabs of (the
    /// slab buffer, read again at once, counts as itself: 0).
    fn whole_outputs(&self) -> Vec<usize> {
        let values = &self.plan.values;
        self.outputs
            .iter()
            .map(|o| o.map_or(0, |(v, _)| values[v].shape.size()))
            .collect()
    }

    /// Rows `rows` of every value, slab by slab, on this thread.
    fn run_rows(&self, rows: std::ops::Range<usize>) -> std::result::Result<(), SlabError> {
        let values = &self.plan.values;
        let space = &values[self.space];
        let n_rows = space.shape.dims()[0];
        let shape = slab(&space.shape, self.rows.min(rows.len()));
        // Kept alive (`_buffer`) while `buffer_ptr` is used.
        let (_buffer, buffer_ptr) = NDArray::for_overwrite("slab", shape, space.dtype)
            .and_then(|mut b| b.make_unique_ptr().map(|p| (b, p)))
            .map_err(SlabError::Program)?;
        let view = |v: ValueId, base: usize, aligned: bool, r: std::ops::Range<usize>| {
            let (ptr, shape) = rows_of(&values[v], base, aligned, n_rows, r);
            // SAFETY: as for `view` in `Executor::run`: `ptr` lies in the
            // value's live allocation with `shape` in bounds (`rows_of`),
            // and inputs are only read.
            unsafe { TBlob::from_raw(ptr, values[v].dtype, shape) }
        };
        let view_mut = |v: ValueId, base: usize, r: std::ops::Range<usize>| {
            let (ptr, shape) = rows_of(&values[v], base, true, n_rows, r);
            // SAFETY: as above; every value written here has the `n_rows`
            // rows of the slabbed axis 0, so each thread's rows
            // (`for_each_chunk` hands out disjoint ones) are bytes no other
            // thread touches.
            unsafe { TBlobMut::from_raw(ptr.cast_mut(), values[v].dtype, shape) }
        };
        // SAFETY (both): the slab buffer is this thread's own and at least
        // `self.rows.min(rows.len())` rows long, and `rows` never exceeds
        // that; a view of it is dropped before the next one is made.
        let buffer_view = |rows: usize| unsafe {
            TBlob::from_raw(
                buffer_ptr.cast_const(),
                space.dtype,
                slab(&space.shape, rows),
            )
        };
        // SAFETY: see `buffer_view`.
        let buffer_view_mut = |rows: usize| unsafe {
            TBlobMut::from_raw(buffer_ptr, space.dtype, slab(&space.shape, rows))
        };
        let whole = self.whole_outputs();
        let mut r0 = rows.start;
        while r0 < rows.end {
            let r1 = (r0 + self.rows).min(rows.end);
            if let Some(h) = &self.head {
                let ins: Vec<TBlob<'_>> = h
                    .values
                    .iter()
                    .enumerate()
                    .map(|(k, &(v, base))| view(v, base, k == 0, r0..r1))
                    .collect();
                (h.forward)(
                    &self.call(h),
                    &ins,
                    &mut [buffer_view_mut(r1 - r0)],
                    &[OpReqType::WriteTo],
                )
                .map_err(|e| SlabError::Op(h.node, e))?;
            }
            let ins: Vec<TBlob<'_>> = self
                .inputs
                .iter()
                .map(|i| match *i {
                    // An input with fewer dimensions broadcasts along axis 0.
                    Some((v, base)) => view(
                        v,
                        base,
                        values[v].shape.ndim() == space.shape.ndim(),
                        r0..r1,
                    ),
                    None => buffer_view(r1 - r0),
                })
                .collect();
            let mut outs: Vec<TBlobMut<'_>> = self
                .outputs
                .iter()
                .map(|o| match *o {
                    Some((v, base)) => view_mut(v, base, r0..r1),
                    None => buffer_view_mut(r1 - r0),
                })
                .collect();
            run_program_within(self.prog, &ins, &mut outs, false, &whole)
                .map_err(SlabError::Program)?;
            drop(outs);
            if let Some(t) = &self.tail {
                let (v, base) = t.values[0];
                (t.forward)(
                    &self.call(t),
                    &[buffer_view(r1 - r0)],
                    &mut [view_mut(v, base, r0..r1)],
                    &[OpReqType::WriteTo],
                )
                .map_err(|e| SlabError::Op(t.node, e))?;
            }
            r0 = r1;
        }
        Ok(())
    }
}

/// Where rows `rows` of `value` (at `base`) start and their shape, when
/// its axis 0 is the `n_rows` rows (`aligned`, and that long); all of it
/// when it broadcasts along them.
fn rows_of(
    value: &plan::Value,
    base: usize,
    aligned: bool,
    n_rows: usize,
    rows: std::ops::Range<usize>,
) -> (*const u8, Shape) {
    let dims = value.shape.dims();
    if aligned && dims.first() == Some(&n_rows) {
        let row_bytes = value.shape.size() / n_rows * value.dtype.size();
        let at = base + rows.start * row_bytes;
        (at as *const u8, slab(&value.shape, rows.len()))
    } else {
        (base as *const u8, value.shape.clone())
    }
}
