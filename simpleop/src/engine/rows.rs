//! Reductions over contiguous rows that sum a function of each element
//! (`sum`, `mean`, the 1- and 2-norms), in one summation order whether a
//! row arrives whole (the reduction op) or piece by piece (a fused
//! program's tiles feeding it, so that the reduction's input never reaches
//! memory).
//!
//! The order: 32 running f64 sums, element `p` of a row going to sum
//! `p % 32` for the row's whole 32-element chunks; then the 32 sums added
//! in order; then the last `len % 32` elements one by one. It depends only
//! on the row, so every caller (fused or not, any split into pieces, any
//! instruction set) gets the same bits.

use crate::Float;
use crate::engine::isa::{self as simd, TileJob};
use std::ops::Range;

/// Running sums per row: four 8-wide f64 vectors on AVX-512, so that the
/// additions do not wait on each other.
pub const LANES: usize = 32;

/// What a row reduction adds up of each accumulated value, in f64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Summand {
    /// The value.
    Value,
    /// Its magnitude.
    Abs,
    /// Its square, squared in f64.
    Square,
}

/// What a row reduction sums, and how it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowReducer {
    /// `Σ x`.
    Sum,
    /// `Σ x / len`.
    Mean,
    /// `Σ |x|`.
    SumAbs,
    /// `sqrt(Σ x²)`.
    Norm2,
}

/// A reduction op's promise, for given arguments and input shape: output
/// element `r` is `reducer` over input elements `r·len .. (r+1)·len` (it
/// reduces exactly the trailing axes, whose sizes multiply to `len`).
/// Reduction ops declare it with a `fn rows` in their `#[simple_op]`
/// module; the fused executor then feeds the reduction from a program's
/// tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowReduction {
    /// What is summed.
    pub reducer: RowReducer,
    /// Elements per row (at least 1).
    pub len: usize,
}

/// A registered op's entry behind [`RowReduction`]: `None` when these
/// arguments and input shape reduce other than the trailing axes.
pub type RowReductionFn =
    fn(&[crate::Shape], &crate::EnvArguments) -> crate::Result<Option<RowReduction>>;

impl RowReducer {
    /// What is summed per element, for compiled code that sums a fused
    /// program's values in registers (`RowAcc::feed_sums`).
    pub fn summand(self) -> Summand {
        match self {
            RowReducer::Sum | RowReducer::Mean => Summand::Value,
            RowReducer::SumAbs => Summand::Abs,
            RowReducer::Norm2 => Summand::Square,
        }
    }

    #[inline(always)]
    fn map(self, v: f64) -> f64 {
        match self {
            RowReducer::Sum | RowReducer::Mean => v,
            RowReducer::SumAbs => v.abs(),
            RowReducer::Norm2 => v * v,
        }
    }

    fn finish(self, sum: f64, len: usize) -> f64 {
        match self {
            RowReducer::Sum | RowReducer::SumAbs => sum,
            RowReducer::Mean => sum / len as f64,
            RowReducer::Norm2 => sum.sqrt(),
        }
    }

    /// The reduction of one whole row.
    pub fn reduce<T: Float>(self, row: &[T]) -> f64 {
        let mut acc = RowAcc::new(self, row.len());
        acc.feed(row);
        acc.finish()
    }
}

/// One row's reduction in progress, fed its elements in order in pieces
/// of any size.
#[derive(Clone, Debug)]
pub struct RowAcc {
    reducer: RowReducer,
    len: usize,
    /// Elements fed so far.
    pos: usize,
    lanes: [f64; LANES],
    /// The lanes' total once the whole chunks are in.
    tail: Option<f64>,
}

impl RowAcc {
    /// An empty row of `len` elements.
    pub fn new(reducer: RowReducer, len: usize) -> RowAcc {
        RowAcc {
            reducer,
            len,
            pos: 0,
            lanes: [0.0; LANES],
            tail: None,
        }
    }

    /// Starts the next row (of the same reducer and length).
    pub fn restart(&mut self) {
        *self = RowAcc::new(self.reducer, self.len);
    }

    /// The row's length.
    pub fn row_len(&self) -> usize {
        self.len
    }

    /// Elements still to come.
    pub fn remaining(&self) -> usize {
        self.len - self.pos
    }

    /// Adds the row's next `xs.len()` elements (at most
    /// [`RowAcc::remaining`]; more is a caller bug and panics).
    pub fn feed<T: Float>(&mut self, xs: &[T]) {
        assert!(
            xs.len() <= self.remaining(),
            "more elements than the row has"
        );
        let chunked = self.len - self.len % LANES;
        let in_chunks = chunked.saturating_sub(self.pos).min(xs.len());
        let (body, rest) = xs.split_at(in_chunks);
        // Up to the next lane-0 element one by one, then whole chunks in
        // vectors, then the chunked part's last lanes one by one.
        let head = ((LANES - self.pos % LANES) % LANES).min(body.len());
        let (first, body) = body.split_at(head);
        let whole = body.len() - body.len() % LANES;
        let (middle, last) = body.split_at(whole);
        let r = self.reducer;
        let lane0 = self.pos % LANES;
        for (i, x) in first.iter().enumerate() {
            self.lanes[lane0 + i] += r.map(x.to_f64());
        }
        if !middle.is_empty() {
            let lanes = &mut self.lanes;
            // One loop per function, not a match per element.
            match r {
                RowReducer::Sum | RowReducer::Mean => simd::run(Lanes::new(middle, lanes, |v| v)),
                RowReducer::SumAbs => simd::run(Lanes::new(middle, lanes, f64::abs)),
                RowReducer::Norm2 => simd::run(Lanes::new(middle, lanes, |v| v * v)),
            }
        }
        for (i, x) in last.iter().enumerate() {
            self.lanes[i] += r.map(x.to_f64());
        }
        self.pos += in_chunks;
        if rest.is_empty() {
            return;
        }
        // In lane order: a pairwise fold makes LLVM lay the vector loop out
        // 2 wide (half the speed), and the order is part of the result.
        let mut s = match self.tail {
            Some(s) => s,
            None => self.lanes.iter().sum(),
        };
        for x in rest {
            s += r.map(x.to_f64());
        }
        self.tail = Some(s);
        self.pos += rest.len();
    }

    /// Adds the row's next `n` elements through `add(sums, part)`, which
    /// must add the summand ([`RowReducer::summand`]) of element `j` of
    /// `part` (a range of the `n`) to `sums[j % LANES]`, in order, and
    /// leave the other sums as they are: compiled code that computes the
    /// elements and sums them in registers. The chunked part goes to the
    /// row's lanes; the last `len % LANES` elements, which [`RowAcc::feed`]
    /// adds one by one after the lanes' total, are summed into zeros first
    /// and then added in that order, so the bits are `feed`'s. The row
    /// must be at a chunk boundary and the `n` elements end on one or at
    /// the row's end (true of pieces [`RowAcc::summable`] cuts); anything
    /// else is a caller bug and panics.
    pub fn feed_sums(&mut self, n: usize, mut add: impl FnMut(&mut [f64; LANES], Range<usize>)) {
        let chunked = self.len - self.len % LANES;
        let in_chunks = chunked.saturating_sub(self.pos).min(n);
        assert!(
            self.pos.is_multiple_of(LANES)
                && in_chunks.is_multiple_of(LANES)
                && (in_chunks == n || self.pos + n == self.len),
            "whole chunks of the row, or all of its rest"
        );
        if in_chunks > 0 {
            add(&mut self.lanes, 0..in_chunks);
        }
        if in_chunks < n {
            // `+0.0 + v` is `v` but for -0.0, and the total is never -0.0
            // (the lanes start at +0.0), so adding either gives one sum
            let mut rest = [0.0; LANES];
            add(&mut rest, in_chunks..n);
            let mut s: f64 = self.lanes.iter().sum();
            for v in &rest[..n - in_chunks] {
                s += v;
            }
            self.tail = Some(s);
        }
        self.pos += n;
    }

    /// The most elements, up to `n`, that can be fed from here (by
    /// [`RowAcc::feed_sums`] for this row and whole rows after it) so
    /// that the feeding stops at a chunk boundary or a row's end: `n`
    /// rounded down to a chunk boundary of the row it ends in. Positive
    /// when `n` is at least `2 * LANES` and the row is at a chunk
    /// boundary.
    pub fn summable(&self, n: usize) -> usize {
        let ends_at = (self.pos + n) % self.len.max(1);
        n - ends_at % LANES
    }

    /// The row's reduced value, in f64 (missing elements count as absent).
    pub fn finish(&self) -> f64 {
        let s = match self.tail {
            Some(s) => s,
            None => self.lanes.iter().sum(),
        };
        self.reducer.finish(s, self.len)
    }
}

/// Whole 32-element chunks into the lanes, compiled for the best
/// instruction set.
struct Lanes<'a, T, F> {
    xs: &'a [T],
    lanes: &'a mut [f64; LANES],
    f: F,
}

impl<'a, T, F> Lanes<'a, T, F> {
    fn new(xs: &'a [T], lanes: &'a mut [f64; LANES], f: F) -> Self {
        Lanes { xs, lanes, f }
    }
}

impl<T: Float, F: Fn(f64) -> f64> TileJob for Lanes<'_, T, F> {
    #[inline(always)]
    fn run(self) {
        // A local copy, kept in registers across the loop.
        let mut acc = *self.lanes;
        for c in self.xs.chunks_exact(LANES) {
            for (a, x) in acc.iter_mut().zip(c) {
                *a += (self.f)(x.to_f64());
            }
        }
        *self.lanes = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.013 + 1e-3 * i as f32)
            .collect()
    }

    /// The reference order, written out plainly.
    fn plain(r: RowReducer, xs: &[f32]) -> f64 {
        let chunked = xs.len() - xs.len() % LANES;
        let mut lanes = [0.0f64; LANES];
        for (i, x) in xs[..chunked].iter().enumerate() {
            lanes[i % LANES] += r.map(f64::from(*x));
        }
        let mut s: f64 = lanes.iter().sum();
        for x in &xs[chunked..] {
            s += r.map(f64::from(*x));
        }
        r.finish(s, xs.len())
    }

    #[test]
    fn any_split_into_pieces_gives_the_whole_rows_bits() {
        let reducers = [
            RowReducer::Sum,
            RowReducer::Mean,
            RowReducer::SumAbs,
            RowReducer::Norm2,
        ];
        for n in [1, 5, 31, 32, 33, 64, 95, 1000, 1024, 1057] {
            let xs = row(n);
            for r in reducers {
                let whole = r.reduce(&xs);
                assert_eq!(whole.to_bits(), plain(r, &xs).to_bits(), "{r:?} n={n}");
                for piece in [1, 3, 17, 32, 40, 100, 1024] {
                    let mut acc = RowAcc::new(r, n);
                    for p in xs.chunks(piece) {
                        acc.feed(p);
                    }
                    assert_eq!(acc.remaining(), 0);
                    assert_eq!(
                        acc.finish().to_bits(),
                        whole.to_bits(),
                        "{r:?} n={n} pieces of {piece}"
                    );
                }
            }
        }
    }

    /// What compiled summing code does with a part of a row: adds the
    /// summand of its element `j` to `sums[j % LANES]`.
    fn add_summands(r: RowReducer, xs: &[f32], sums: &mut [f64; LANES]) {
        for (j, x) in xs.iter().enumerate() {
            sums[j % LANES] += r.map(f64::from(*x));
        }
    }

    #[test]
    fn summed_pieces_cut_where_summing_may_stop_give_feeds_bits() {
        let reducers = [
            RowReducer::Sum,
            RowReducer::Mean,
            RowReducer::SumAbs,
            RowReducer::Norm2,
        ];
        // some values -0.0, which the partial chunk sums into zeros
        let signed = |n: usize| -> Vec<f32> {
            let mut xs = row(n);
            xs.iter_mut().step_by(3).for_each(|x| *x = -0.0);
            xs
        };
        for n in [1, 5, 31, 32, 33, 64, 95, 1000, 1024, 1057] {
            for xs in [row(n), signed(n), vec![-0.0; n]] {
                for r in reducers {
                    let whole = r.reduce(&xs);
                    for tile in [64, 100, 1024] {
                        let mut acc = RowAcc::new(r, n);
                        let mut at = 0;
                        while at < n {
                            let len = acc.summable(tile.min(n - at));
                            assert!(len > 0, "n={n} tile {tile}: stuck at {at}");
                            let part = &xs[at..at + len];
                            acc.feed_sums(len, |sums, p| add_summands(r, &part[p], sums));
                            at += len;
                        }
                        assert_eq!(
                            acc.finish().to_bits(),
                            whole.to_bits(),
                            "{r:?} n={n} tiles of {tile}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn summable_cuts_on_chunk_boundaries_or_row_ends() {
        let mut acc = RowAcc::new(RowReducer::Sum, 1000);
        assert_eq!(acc.summable(1024), 1000); // 24 into the next row: back to its start
        assert_eq!(acc.summable(1000), 1000);
        assert_eq!(acc.summable(640), 640);
        assert_eq!(acc.summable(990), 960); // inside the partial chunk: back to its start
        acc.feed(&[0.0f32; 960]);
        assert_eq!(acc.summable(1024), 40 + 960); // the rest, and 960 of the next row
        assert_eq!(acc.summable(1100), 40 + 1000 + 32);
        // rows of 40: 25 rows and 24 of the next, which is back to its start
        assert_eq!(RowAcc::new(RowReducer::Sum, 40).summable(1024), 1000);
        assert_eq!(RowAcc::new(RowReducer::Sum, 40).summable(1056), 1040);
        assert_eq!(RowAcc::new(RowReducer::Sum, 40).summable(1072), 1072); // 32 in: a chunk
    }

    #[test]
    #[should_panic(expected = "whole chunks of the row, or all of its rest")]
    fn summing_a_piece_that_ends_inside_a_chunk_is_a_bug() {
        RowAcc::new(RowReducer::Sum, 100).feed_sums(40, |_, _| {});
    }

    #[test]
    fn values_are_the_reductions() {
        let xs = [3.0f64, -4.0];
        assert_eq!(RowReducer::Sum.reduce(&xs), -1.0);
        assert_eq!(RowReducer::Mean.reduce(&xs), -0.5);
        assert_eq!(RowReducer::SumAbs.reduce(&xs), 7.0);
        assert_eq!(RowReducer::Norm2.reduce(&xs), 5.0);
        assert_eq!(RowReducer::Sum.reduce::<f32>(&[]), 0.0);
    }

    #[test]
    #[should_panic(expected = "more elements than the row has")]
    fn feeding_past_the_row_is_a_bug() {
        RowAcc::new(RowReducer::Sum, 2).feed(&[1.0f32, 2.0, 3.0]);
    }
}
