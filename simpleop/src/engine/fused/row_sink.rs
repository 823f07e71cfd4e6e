//! Row sinks: a row reduction fed straight from a program's slot, tile by
//! tile, so that the reduction's input never reaches memory; summed in
//! registers by compiled code where it can.

use std::ops::Range;

use super::program::PerSlot;
use crate::engine::buffers::{Src, TILE};
use crate::engine::half_io::TileIo;
use crate::engine::hints::prefetch_op_loop;
use crate::engine::jit;
use crate::engine::rows::{RowAcc, RowReduction};
use crate::engine::switch::Switch;
use crate::{Float, TBlobMut};

static ROW_SINKS: Switch = Switch::on();

/// Whether the symbolic executor feeds reductions that declare a row
/// form straight from their fused program's tiles ([`RowSink`]; on unless
/// `SIMPLEOP_ROW_SINKS=0` at the first use, or [`set_row_sinks`]); off,
/// they read slab buffers the program writes.
pub fn row_sinks_enabled() -> bool {
    ROW_SINKS.get()
}

/// Turns row sinks on or off for later runs, which is how the benchmark
/// shows what they buy.
pub fn set_row_sinks(on: bool) {
    ROW_SINKS.set(on);
}

/// A row reduction fed by a program's slot, tile by tile, so that the
/// reduction's input never reaches memory: `dst[r]` is the reduction of
/// the slot's values at flat indices `r·len .. (r+1)·len` of the
/// iteration space.
pub struct RowSink<'a> {
    /// The slot whose values are reduced.
    pub slot: usize,
    /// What is reduced, per row.
    pub reduction: RowReduction,
    /// The reduction's output: one element per row, of the program's dtype.
    pub dst: TBlobMut<'a>,
}

/// Rows whose length is not a multiple of `ROW_LANES` are summed in
/// registers only from this length: each costs two compiled calls (its
/// chunks, then its partial last chunk into zeroed sums), where storing
/// the values for the sink costs one call per tile, which short rows do
/// not repay; longer rows gain, the more the longer they are.
pub const SUM_TAIL_MIN_ROW: usize = 512;

/// A worker's part of a [`RowSink`]: its rows of the output and the row
/// in progress.
pub(super) struct Rows<'a, S> {
    /// The sink's slot.
    pub(super) slot: usize,
    dst: &'a mut [S],
    /// The row being fed (an index into `dst`).
    next: usize,
    acc: RowAcc,
}

impl<'a, S: Float> Rows<'a, S> {
    /// A worker's rows `dst` of a sink reducing `slot` per `reduction`.
    pub(super) fn new(slot: usize, dst: &'a mut [S], reduction: RowReduction) -> Self {
        Rows {
            slot,
            dst,
            next: 0,
            acc: RowAcc::new(reduction.reducer, reduction.len),
        }
    }

    /// Feeds a tile's values of the sink slot, finishing the rows it ends.
    pub(super) fn feed(&mut self, values: &[S::Compute]) {
        self.by_row_piece(values.len(), |acc, piece| acc.feed(&values[piece]));
    }

    /// Runs accumulating compiled code over a tile of `len` elements, a
    /// row piece at a time, its sums being the rows' own: the row sums
    /// the tile's values in registers, with the bits [`Rows::feed`] gives.
    ///
    /// # Safety
    /// As for [`jit::Compiled::run_accumulating`] over the whole tile
    /// (`ptrs` covering `len` elements). The tile starts on a chunk
    /// boundary of a row and ends on one or at a row's end (else
    /// `RowAcc::feed_sums` panics, before any call).
    pub(super) unsafe fn run_compiled(
        &mut self,
        code: &jit::Compiled,
        ptrs: &[*mut f32],
        len: usize,
    ) {
        self.by_row_piece(len, |acc, piece| {
            acc.feed_sums(piece.len(), |sums, part| {
                // unread slots' pointers may be null: offset without a claim
                let at: PerSlot<*mut f32> = ptrs
                    .iter()
                    .map(|p| p.wrapping_add(piece.start + part.start))
                    .collect();
                // SAFETY: the caller's contract for the tile, of which this
                // is the part `part` of `piece`.
                unsafe { code.run_accumulating(&at, part.len(), sums) }
            });
        });
    }

    /// As [`Rows::tile_len`] for summing code, but whole rows when at
    /// least one fits in `len` (each costs two calls then, one for its
    /// chunks and one for its last partial chunk, where a tile ending
    /// inside a row adds a third; a tile's worth of calls is also where
    /// the inputs are asked for ahead, so it stays near `len`).
    fn whole_rows(&self, len: usize) -> usize {
        let row = self.acc.remaining();
        if row == self.acc.row_len() && row <= len {
            len - len % row
        } else {
            self.acc.summable(len)
        }
    }

    /// The length of the next tile, at most `len`: one that ends on a
    /// chunk boundary of a row or at a row's end when compiled code is to
    /// sum it ([`RowAcc::summable`]), else `len`.
    pub(super) fn tile_len(&self, len: usize, summed: bool) -> usize {
        if summed { self.acc.summable(len) } else { len }
    }

    /// Splits a tile of `len` elements at row ends, hands each piece (as
    /// a range of the tile) to `feed` with the row it belongs to, and
    /// finishes the rows that end.
    fn by_row_piece(&mut self, len: usize, mut feed: impl FnMut(&mut RowAcc, Range<usize>)) {
        let mut done = 0;
        while done < len {
            let take = self.acc.remaining().min(len - done);
            feed(&mut self.acc, done..done + take);
            done += take;
            if self.acc.remaining() == 0 {
                self.dst[self.next] = S::from_f64(self.acc.finish());
                self.next += 1;
                self.acc.restart();
            }
        }
    }
}

/// Runs accumulating compiled code over `range` a tile's length at a
/// time (split at row ends), asking for each next piece of the inputs
/// ahead as single-op loops do where that helps
/// ([`prefetch_op_loop`]).
///
/// # Safety
/// As for [`Rows::run_compiled`] over `range`, with `ptrs` from
/// [`super::range::whole_range`].
pub(super) unsafe fn sum_rows_compiled<S: TileIo>(
    code: &jit::Compiled,
    (srcs, ptrs): (&[Src<'_, S>], &[*mut f32]),
    range: &Range<usize>,
    rows: &mut Rows<'_, S>,
) {
    let n = range.len();
    let mut done = 0;
    while done < n {
        let len = rows.whole_rows(TILE.min(n - done));
        let next = range.start + done + len..(range.start + done + 2 * len).min(range.end);
        for &s in code.reads() {
            if let Some(Src::Contig(data)) = srcs.get(s) {
                prefetch_op_loop(&data[next.clone()]);
            }
        }
        let piece: PerSlot<*mut f32> = ptrs.iter().map(|p| p.wrapping_add(done)).collect();
        // SAFETY: the caller's contract, for the part `done..done + len`
        // of the range, which starts and ends on chunk boundaries of rows
        // or at rows' ends (`tile_len`).
        unsafe { rows.run_compiled(code, &piece, len) };
        done += len;
    }
}
