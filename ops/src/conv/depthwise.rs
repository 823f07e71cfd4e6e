//! Depthwise convolution (one input channel per group, `cout_g` outputs
//! each) computed directly: a column matrix would copy every input
//! `k_vol` times for products only `cout_g` rows tall. Each tap of the
//! window is a scaled, strided row added onto an output row, which
//! vectorises at stride 1. Output planes (and, for the weight gradient,
//! filters) are independent and split over the rayon pool.
//!
//! As in [`super::gemm`], every function adds into its destination.

use rayon::prelude::*;
use simpleop::Float;
use simpleop::kernel::with_isa;

use super::geom::Geom;
use super::im2col::{source_row, taps, valid};
use crate::linalg::worth_splitting_product;

/// Runs `f(index, chunk)` over `out` in chunks of `len`, split over the
/// pool when `macs` of work pay for it.
fn each_chunk<C: Float>(
    out: &mut [C],
    len: usize,
    macs: usize,
    f: impl Fn(usize, &mut [C]) + Sync,
) {
    if len == 0 {
        return;
    }
    // Each chunk's loop compiled for the CPU.
    let f = |i: usize, c: &mut [C]| {
        with_isa(
            #[inline(always)]
            || f(i, c),
        )
    };
    if worth_splitting_product(macs) {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else {
        out.chunks_mut(len).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// Calls `f(out_offset, in_offset, count)` for each tap's run of output
/// columns in row `r` that reads input (row-major within the planes;
/// input columns are `stride` apart), with the tap's row index.
#[inline(always)]
fn runs(g: &Geom, mut f: impl FnMut(usize, usize, usize, usize)) {
    let (ow, iw) = (g.out[2], g.inp[2]);
    for (t, _, tap) in taps(g) {
        let off = (tap[2] * g.dilate[2]) as isize - g.pad[2] as isize;
        let (lo, hi) = valid(iw, ow, g.stride[2], off);
        if lo == hi {
            continue;
        }
        let first = ((lo * g.stride[2]) as isize + off) as usize;
        for r in 0..g.out[0] * g.out[1] {
            if let Some(src) = source_row(g, tap, r) {
                f(t, r * ow + lo, src * iw + first, hi - lo);
            }
        }
    }
}

/// The geometry of one plane: one input channel, one filter.
fn plane(g: &Geom) -> Geom {
    Geom {
        batch: 1,
        groups: 1,
        cin: 1,
        cout: 1,
        ..*g
    }
}

/// `y += conv(x, w)`.
pub(crate) fn forward<C: Float>(g: &Geom, (x, w, y): (&[C], &[C], &mut [C])) {
    each_chunk(
        y,
        g.out_vol(),
        g.macs(),
        #[inline(always)]
        |i, yp| forward_plane(g, x, w, i, yp),
    );
}

/// An input plane with each row's columns split by phase: row `r`'s
/// columns `p, p + s, p + 2s, ...` sit contiguously at
/// `(r·s + p)·width`. A tap at stride `s` then reads a contiguous run,
/// which vectorises, instead of every `s`-th element.
struct Phases<C> {
    data: Vec<C>,
    width: usize,
}

impl<C: Float> Phases<C> {
    /// `None` when the copy's memory cannot be had (the caller then reads
    /// the plane strided).
    fn split(xp: &[C], row: usize, s: usize) -> Option<Phases<C>> {
        let width = row.div_ceil(s);
        let rows = xp.len() / row;
        let mut data = Vec::new();
        data.try_reserve_exact(rows * s * width).ok()?;
        data.resize(rows * s * width, C::zero());
        for (r, src) in xp.chunks_exact(row).enumerate() {
            for p in 0..s.min(row) {
                let dst = &mut data[(r * s + p) * width..][..width];
                for (d, &v) in dst.iter_mut().zip(src[p..].iter().step_by(s)) {
                    *d = v;
                }
            }
        }
        Some(Phases { data, width })
    }

    /// The `len` columns from plane offset `at` (row-major, `row` wide)
    /// on, `s` apart.
    #[inline(always)]
    fn run(&self, at: usize, row: usize, s: usize, len: usize) -> &[C] {
        let (r, first) = (at / row, at % row);
        &self.data[(r * s + first % s) * self.width + first / s..][..len]
    }
}

/// Output plane `i` (image `i / cout`, filter `i % cout`). Inlined into
/// the caller's instruction-set dispatch, as are the two below.
#[inline(always)]
fn forward_plane<C: Float>(g: &Geom, x: &[C], w: &[C], i: usize, yp: &mut [C]) {
    let (iv, kv, mult, s) = (g.in_vol(), g.k_vol(), g.cout_g(), g.stride[2]);
    let (n, co) = (i / g.cout, i % g.cout);
    let xp = &x[(n * g.cin + co / mult) * iv..][..iv];
    let wf = &w[co * kv..][..kv];
    let iw = g.inp[2];
    if s > 1
        && iw > 0
        && let Some(ph) = Phases::split(xp, iw, s)
    {
        runs(
            &plane(g),
            #[inline(always)]
            |t, o, src, len| {
                let wv = wf[t];
                for (d, &v) in yp[o..o + len].iter_mut().zip(ph.run(src, iw, s, len)) {
                    *d += wv * v;
                }
            },
        );
        return;
    }
    runs(
        &plane(g),
        #[inline(always)]
        |t, o, src, len| {
            let wv = wf[t];
            let dst = &mut yp[o..o + len];
            if s == 1 {
                for (d, &v) in dst.iter_mut().zip(&xp[src..src + len]) {
                    *d += wv * v;
                }
            } else {
                for (d, &v) in dst.iter_mut().zip(xp[src..].iter().step_by(s)) {
                    *d += wv * v;
                }
            }
        },
    );
}

/// `dx += convᵀ(dy, w)`.
pub(crate) fn backward_data<C: Float>(g: &Geom, (dy, w, dx): (&[C], &[C], &mut [C])) {
    each_chunk(
        dx,
        g.in_vol(),
        g.macs(),
        #[inline(always)]
        |i, dxp| data_plane(g, dy, w, i, dxp),
    );
}

/// Input plane `i` (image `i / cin`, channel `i % cin`): every filter of
/// its group scattered back.
#[inline(always)]
fn data_plane<C: Float>(g: &Geom, dy: &[C], w: &[C], i: usize, dxp: &mut [C]) {
    let (ov, kv, mult, s) = (g.out_vol(), g.k_vol(), g.cout_g(), g.stride[2]);
    let (n, ci) = (i / g.cin, i % g.cin);
    for co in ci * mult..(ci + 1) * mult {
        let dyp = &dy[(n * g.cout + co) * ov..][..ov];
        let wf = &w[co * kv..][..kv];
        runs(
            &plane(g),
            #[inline(always)]
            |t, o, src, len| {
                let wv = wf[t];
                let from = &dyp[o..o + len];
                for (d, &v) in dxp[src..].iter_mut().step_by(s).zip(from) {
                    *d += wv * v;
                }
            },
        );
    }
}

/// `dw += ∂/∂w`, summed over the batch; one filter per task.
pub(crate) fn backward_weight<C: Float>(g: &Geom, (x, dy, dw): (&[C], &[C], &mut [C])) {
    each_chunk(
        dw,
        g.k_vol(),
        g.macs(),
        #[inline(always)]
        |co, wf| weight_filter(g, x, dy, co, wf),
    );
}

/// Filter `co`'s gradient, over every image.
#[inline(always)]
fn weight_filter<C: Float>(g: &Geom, x: &[C], dy: &[C], co: usize, wf: &mut [C]) {
    let (iv, ov, mult, s) = (g.in_vol(), g.out_vol(), g.cout_g(), g.stride[2]);
    for n in 0..g.batch {
        let xp = &x[(n * g.cin + co / mult) * iv..][..iv];
        let dyp = &dy[(n * g.cout + co) * ov..][..ov];
        runs(
            &plane(g),
            #[inline(always)]
            |t, o, src, len| {
                let mut acc = C::zero();
                for (&d, &v) in dyp[o..o + len].iter().zip(xp[src..].iter().step_by(s)) {
                    acc += d * v;
                }
                wf[t] += acc;
            },
        );
    }
}
