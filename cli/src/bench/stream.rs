//! STREAM-style baselines: the same bytes as the kernels' rows, split
//! over the same threads and vectorised by the same ISA dispatch.

use std::hint::black_box;

use rayon::prelude::*;

use simpleop::__private::engine::isa::{self as simd, TileJob};
use simpleop::Result;

struct Triad<'a> {
    a: &'a mut [f32],
    b: &'a [f32],
    c: &'a [f32],
}

impl TileJob for Triad<'_> {
    #[inline(always)]
    fn run(self) {
        for ((a, &b), &c) in self.a.iter_mut().zip(self.b).zip(self.c) {
            *a = b + 3.0 * c;
        }
    }
}

struct Read2<'a> {
    b: &'a [f32],
    c: &'a [f32],
}

impl TileJob for Read2<'_> {
    #[inline(always)]
    fn run(self) {
        // 32 independent sums, so the loop vectorises and the additions
        // do not wait on each other.
        let mut acc = [0.0f32; 32];
        for (b, c) in self.b.chunks_exact(32).zip(self.c.chunks_exact(32)) {
            for ((a, &b), &c) in acc.iter_mut().zip(b).zip(c) {
                *a += b * c;
            }
        }
        black_box(acc);
    }
}

/// Splits `0..n` into one chunk per thread, as the kernels do for cheap ops.
fn chunks(n: usize) -> usize {
    n.div_ceil(rayon::current_num_threads().max(1))
        .next_multiple_of(64)
}

/// The copy baseline: `dst = src` (a call's result, for the timing
/// closures; the copy is kept from being optimised away).
pub(super) fn stream_copy(dst: &mut [f32], src: &[f32]) -> Result<()> {
    let c = chunks(src.len());
    dst.par_chunks_mut(c)
        .zip(src.par_chunks(c))
        .for_each(|(d, s)| d.copy_from_slice(s));
    black_box(dst);
    Ok(())
}

/// The read baseline: `Σ b c` in 32 independent sums per thread (kept
/// from being optimised away), one chunk per thread, compiled for the
/// active instruction set. Public for the profiling examples, which
/// alternate a graph with it.
pub fn stream_read2(b: &[f32], c: &[f32]) -> Result<()> {
    let k = chunks(b.len());
    b.par_chunks(k)
        .zip(c.par_chunks(k))
        .for_each(|(b, c)| simd::run(Read2 { b, c }));
    Ok(())
}

/// The triad baseline: `a = b + 3 c`, as [`stream_copy`].
pub(super) fn stream_triad(a: &mut [f32], b: &[f32], c: &[f32]) -> Result<()> {
    let k = chunks(a.len());
    a.par_chunks_mut(k)
        .zip(b.par_chunks(k).zip(c.par_chunks(k)))
        .for_each(|(a, (b, c))| simd::run(Triad { a, b, c }));
    black_box(a);
    Ok(())
}
