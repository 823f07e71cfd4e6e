//! The kernel benchmark behind `simpleop bench`: every row with a baseline
//! is timed in alternating pairs with its baseline's call, and its ratio is
//! the median of the pairs' ratios (see `time_paired`; it is not the
//! quotient of the two rows' printed medians), because absolute speeds
//! drift on a shared machine, even within one run, while ratios of calls
//! made moments apart hold.
//!
//! Rows (16M f32 elements unless named otherwise):
//! * `stream/copy` and `stream/triad`: STREAM-style baselines over the same
//!   bytes as a unary and a binary op, vectorised and split over the same
//!   threads as the kernels; `stream/read2`: the same for reading two
//!   arrays and writing nothing (a dot product in 32 f32 sums per thread),
//!   what a reduction of two inputs moves.
//! * `<op>/f32/out`: the op into an existing output (`out=`), against the
//!   baseline for its bytes; `<op>/f32/fresh`: a new output per call,
//!   against `out=` (the pooled allocator's job).
//! * `<op>/float16/out`, `<op>/bfloat16/out`: against the f32 row (half the
//!   bytes);
//!   `tanh/<half>/computed`: lookup tables off (`Tuning::half_tables` off),
//!   against the `out=` row: what reading a table instead of computing buys
//!   (about 1 where the table lost its timing and is not read anyway).
//! * `<op>/f32/scalar-isa`: the same kernel compiled without SIMD
//!   (`Isa::Scalar`), against the vectorised row: what vectorising
//!   the author's scalar code buys (`smooth_l1` has a branch).
//! * `<op>/f32/in-cache` (exp, tanh, sigmoid, log): the same element
//!   count computed in 16 calls over a 4 MB array that stays in the
//!   last-level cache, against `relu/f32/out`: the op's compute time
//!   alone. Its `out` ratio cannot fall below this one however well the
//!   loop overlaps compute with memory; above 1, the op is bound by
//!   compute.
//! * `<op>/f32/no-prefetch` (relu, exp, tanh): software prefetching of
//!   the next block off (`Tuning::prefetch` off), against the `out=` row:
//!   what asking for memory ahead buys (about 1 on AMD CPUs, where
//!   single-op loops do not prefetch: `Tuning::op_loop_prefetch`).
//! * `chain6/eager`: six elementwise ops one after another, against one
//!   `elemwise_add`.
//! * `chain6/fused`: the same chain as a graph with fusion on (one pass:
//!   read x and y, write the result), against one `elemwise_add`;
//!   `chain6/fused/bandwidth` is the same call against `stream/triad`
//!   (same bytes); `chain6/fused/cached-stores`: streaming stores of the
//!   output off (`Tuning::stream_stores` off), against `chain6/fused`;
//!   `chain6/fused/interpreted`: code generation off
//!   (`BindConfig::codegen` off), so the tile interpreter runs the ops,
//!   against `chain6/fused`;
//!   `chain6/unfused`: fusion off, against `chain6/fused` (the ratio is
//!   what fusion buys).
//! * `smooth_l1/composed-fused`: `smooth_l1` written as `where(|x| < 1,
//!   0.5 x², |x| - 0.5)` from six primitive ops, fused, against the
//!   registered op; `smooth_l1/composed-interpreted`: code generation off,
//!   against the compiled row.
//! * `row_sq_dist/fused`: `sum((x - y)², axis = 1)` over 1,024-element rows
//!   of the same number of f32 elements, fused (the squares are summed in
//!   registers by the compiled program, or from L1 where the program is
//!   interpreted: a row sink), against one `elemwise_add`
//!   (which reads the same two inputs); `row_sq_dist/fused/bandwidth`: the
//!   same call against `stream/read2` (the same bytes, so about 1 when the
//!   reduction runs at the speed of reading memory);
//!   `row_sq_dist/fused-slabs`: row
//!   sinks off (`BindConfig::row_sinks` off), so the program writes slabs of
//!   squares that the reduction then reads from cache, against
//!   `row_sq_dist/fused`; `row_sq_dist/unfused` against `row_sq_dist/fused`.
//! * `dot/1024/f32`: 1024² matrix product (baseline: none; see `peers.py`).
//! * `dense/dot`: `dot(x, w)` of `(n/1024, 64) · (64, 1024)` into an
//!   existing output; `dense/fused`: `relu(dot(x, w) + b)` as a graph with
//!   fusion on (the product runs slab by slab and the bias and relu read
//!   it from cache), against `dense/dot`; `dense/unfused` against it.
//! * `<op>/f32/backward` (relu, tanh, sigmoid, smooth_l1, elemwise_mul):
//!   the op's hand-written gradient into existing arrays;
//!   `<op>/f32/backward-autodiff`: the gradient `#[simple_op(autodiff)]`
//!   derives from the same forward by dual numbers, against it.
//! * `tiny/relu/typed` and `tiny/relu/by-name`: µs per call on one element;
//!   `tiny/relu/recorded`: the call recorded by autograd plus its backward;
//!   `tiny/relu/recorded-chain8`: per call of eight recorded calls in a
//!   chain with one backward.
//!
//! Ops are called by name, so the rows need the standard ops linked in.

mod autodiff;
mod graphs;
mod rows;
mod stream;
mod timing;

mod report;

pub use graphs::{chain6_symbol, dense_symbol, row_sq_dist_symbol, smooth_l1_symbol};
pub use report::{Options, Row, meta_json, table};
pub use stream::stream_read2;

use simpleop::Result;

/// Runs every row, calling `progress` after each.
pub fn run(opts: Options, mut progress: impl FnMut(&Row)) -> Result<Vec<Row>> {
    let mut bench = timing::Bench::new(opts, &mut progress);
    rows::all(&mut bench)?;
    Ok(bench.into_rows())
}
