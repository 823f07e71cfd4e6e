//! Convolution as matrix products, per image and channel group (a
//! *block*): `y_g (cout_g × P) += W_g (cout_g × K) · col (K × P)`, with
//! `col` the block's column matrix ([`super::im2col`]) built one tile of
//! output rows at a time, so the workspace stays bounded whatever the
//! image size. A 1×1 window at stride 1 without padding needs no columns:
//! the input is its own column matrix. The gradients are the two other
//! products of the same operands: `dcol = W_gᵀ · dy_g` (then added back
//! onto `dx` by `col2im`) and `dW_g += dy_g · colᵀ`.
//!
//! Every function here *adds* into its destination; the caller zeroes it
//! (write requests) or leaves it (`add`). Blocks are split over the rayon
//! pool, each thread with its own column tile (and its own partial weight
//! gradient), when there are at least two and the work pays; otherwise
//! the product's kernel splits each product itself.

use rayon::prelude::*;
use simpleop::kernel::with_isa;
use simpleop::{EnvArguments, Float, OpReqType, Result};

use super::geom::Geom;
use super::im2col::{col2im, im2col};
use crate::linalg::{Layout, Mm, gemm_on, worth_splitting_product};

/// Elements of one column tile a thread keeps, at most (unless one output
/// row alone is larger): about an L2's worth in f32.
const TILE_ELEMS: usize = 1 << 18;

/// The output rows of one tile.
fn tile_rows(g: &Geom) -> usize {
    let row = g.k_len() * g.out[2];
    (TILE_ELEMS / row.max(1)).clamp(1, g.out[0] * g.out[1])
}

/// The column tile's length (none for pointwise windows).
fn col_len(g: &Geom) -> usize {
    if g.is_pointwise() {
        0
    } else {
        g.k_len() * tile_rows(g) * g.out[2]
    }
}

/// Each tile's `(r0, r1)` output rows.
fn tiles(g: &Geom) -> impl Iterator<Item = (usize, usize)> {
    let (rows, step) = (g.out[0] * g.out[1], tile_rows(g));
    (0..rows)
        .step_by(step)
        .map(move |r0| (r0, (r0 + step).min(rows)))
}

/// How many threads share the blocks: all the pool has (up to one per
/// block) when there are two blocks or more and the work pays for it.
fn threads(g: &Geom) -> usize {
    let blocks = g.batch * g.groups;
    if blocks < 2 || !worth_splitting_product(g.macs()) {
        return 1;
    }
    rayon::current_num_threads().clamp(1, blocks)
}

/// A row-major `rows × cols` matrix whose rows are `rs` apart.
fn rows_apart(rs: usize) -> Layout {
    Layout {
        rs,
        cs: 1,
        batch: 0,
    }
}

/// `dst += lhs · rhs` (`m×k · k×n`).
fn product<C: Float>(
    (m, n, k): (usize, usize, usize),
    dst: (&mut [C], Layout),
    lhs: (&[C], Layout),
    rhs: (&[C], Layout),
    parallel: bool,
) {
    let mm = Mm {
        batch: 1,
        m,
        n,
        k,
        dst: dst.1,
        lhs: lhs.1,
        rhs: rhs.1,
    };
    gemm_on(&mm, dst.0, lhs.0, rhs.0, OpReqType::AddTo, parallel);
}

/// One block's work: `(source, weight group, destination)`, its column
/// tile, and whether it runs alone (then the product may be split).
type BlockFn<C> = fn(&Geom, (&[C], &[C], &mut [C]), &mut [C], bool);

/// Runs `block` on every block: block `b` reads `src`'s `b`-th chunk of
/// `src_len` and its group's weights, and adds into `out`'s `b`-th chunk
/// of `out_len`. The blocks split over `threads` contiguous ranges, each
/// with its own column tile.
fn each_block<C: Float>(
    g: &Geom,
    (src, src_len): (&[C], usize),
    w: &[C],
    (out, out_len): (&mut [C], usize),
    (op, env): (&str, &EnvArguments),
    block: BlockFn<C>,
) -> Result<()> {
    let (blocks, threads, ws_len) = (g.batch * g.groups, threads(g), col_len(g).max(1));
    let wl = g.cout_g() * g.k_len();
    let run = |range: std::ops::Range<usize>, outs: &mut [C], col: &mut [C], solo: bool| {
        let first = range.start;
        for b in range {
            let wg = &w[(b % g.groups) * wl..][..wl];
            let dst = &mut outs[(b - first) * out_len..][..out_len];
            block(g, (&src[b * src_len..][..src_len], wg, dst), col, solo);
        }
    };
    let mut ws = env.temp_space::<C>(op, ws_len * threads)?;
    if threads == 1 {
        run(0..blocks, out, &mut ws, true);
        return Ok(());
    }
    let per = blocks.div_ceil(threads);
    out.par_chunks_mut(per * out_len)
        .zip(ws.par_chunks_mut(ws_len))
        .enumerate()
        .for_each(|(t, (o, col))| run(t * per..((t + 1) * per).min(blocks), o, col, false));
    Ok(())
}

/// `y += conv(x, w)`.
pub(crate) fn forward<C: Float>(
    g: &Geom,
    (x, w, y): (&[C], &[C], &mut [C]),
    ctx: (&str, &EnvArguments),
) -> Result<()> {
    let (xb, yb) = (g.cin_g() * g.in_vol(), g.cout_g() * g.out_vol());
    each_block(g, (x, xb), w, (y, yb), ctx, forward_block)
}

fn forward_block<C: Float>(g: &Geom, (x, w, y): (&[C], &[C], &mut [C]), col: &mut [C], solo: bool) {
    let (k, m, ov) = (g.k_len(), g.cout_g(), g.out_vol());
    let parallel = solo && worth_splitting_product(m * ov * k);
    if g.is_pointwise() {
        let lhs = (w, rows_apart(k));
        product(
            (m, ov, k),
            (y, rows_apart(ov)),
            lhs,
            (x, rows_apart(ov)),
            parallel,
        );
        return;
    }
    for rows in tiles(g) {
        let n = (rows.1 - rows.0) * g.out[2];
        with_isa(
            #[inline(always)]
            || im2col(g, x, rows, col),
        );
        let dst = &mut y[rows.0 * g.out[2]..];
        let lhs = (w, rows_apart(k));
        product(
            (m, n, k),
            (dst, rows_apart(ov)),
            lhs,
            (&col[..k * n], rows_apart(n)),
            parallel,
        );
    }
}

/// `dx += convᵀ(dy, w)`: the gradient of `data`.
pub(crate) fn backward_data<C: Float>(
    g: &Geom,
    (dy, w, dx): (&[C], &[C], &mut [C]),
    ctx: (&str, &EnvArguments),
) -> Result<()> {
    let (xb, yb) = (g.cin_g() * g.in_vol(), g.cout_g() * g.out_vol());
    each_block(g, (dy, yb), w, (dx, xb), ctx, data_block)
}

fn data_block<C: Float>(g: &Geom, (dy, w, dx): (&[C], &[C], &mut [C]), col: &mut [C], solo: bool) {
    let (k, m, ov) = (g.k_len(), g.cout_g(), g.out_vol());
    let parallel = solo && worth_splitting_product(m * ov * k);
    // Wᵀ: `k × m`, read through W's row-major `m × k` storage.
    let wt = (w, rows_apart(k).t());
    if g.is_pointwise() {
        product(
            (k, ov, m),
            (dx, rows_apart(ov)),
            wt,
            (dy, rows_apart(ov)),
            parallel,
        );
        return;
    }
    for rows in tiles(g) {
        let n = (rows.1 - rows.0) * g.out[2];
        let tile = &mut col[..k * n];
        tile.fill(C::zero());
        let src = (&dy[rows.0 * g.out[2]..], rows_apart(ov));
        product((k, n, m), (&mut *tile, rows_apart(n)), wt, src, parallel);
        with_isa(
            #[inline(always)]
            || col2im(g, tile, rows, dx),
        );
    }
}

/// `dw += ∂/∂w`: the gradient of `weight`, summed over the batch. Each
/// thread sums its blocks into its own copy, added up at the end.
pub(crate) fn backward_weight<C: Float>(
    g: &Geom,
    (x, dy, dw): (&[C], &[C], &mut [C]),
    (op, env): (&str, &EnvArguments),
) -> Result<()> {
    let (blocks, threads) = (g.batch * g.groups, threads(g));
    let (wl, cl) = (g.w_len(), col_len(g).max(1));
    let mut space = env.temp_space::<C>(op, (threads - 1) * wl + threads * cl)?;
    let (partials, ws) = space.split_at_mut((threads - 1) * wl);
    let per = blocks.div_ceil(threads);
    let mut targets: Vec<&mut [C]> = vec![&mut *dw];
    targets.extend(partials.chunks_mut(wl.max(1)));
    let run = |t: usize, dst: &mut [C], col: &mut [C]| {
        for b in t * per..((t + 1) * per).min(blocks) {
            weight_block(g, b, (x, dy, dst), col, threads == 1);
        }
    };
    if threads == 1 {
        run(0, targets.pop().expect("one target"), ws);
        return Ok(());
    }
    targets
        .into_par_iter()
        .zip(ws.par_chunks_mut(cl))
        .enumerate()
        .for_each(|(t, (dst, col))| run(t, dst, col));
    for part in partials.chunks(wl.max(1)) {
        for (d, &p) in dw.iter_mut().zip(part) {
            *d += p;
        }
    }
    Ok(())
}

fn weight_block<C: Float>(
    g: &Geom,
    b: usize,
    (x, dy, dw): (&[C], &[C], &mut [C]),
    col: &mut [C],
    solo: bool,
) {
    let (k, m, ov) = (g.k_len(), g.cout_g(), g.out_vol());
    let (xb, yb) = (g.cin_g() * g.in_vol(), m * ov);
    let (xg, dyg) = (&x[b * xb..][..xb], &dy[b * yb..][..yb]);
    let dwg = &mut dw[(b % g.groups) * m * k..][..m * k];
    let parallel = solo && worth_splitting_product(m * ov * k);
    if g.is_pointwise() {
        let xt = (xg, rows_apart(ov).t());
        product(
            (m, k, ov),
            (dwg, rows_apart(k)),
            (dyg, rows_apart(ov)),
            xt,
            parallel,
        );
        return;
    }
    for rows in tiles(g) {
        let n = (rows.1 - rows.0) * g.out[2];
        with_isa(
            #[inline(always)]
            || im2col(g, xg, rows, col),
        );
        let src = (&dyg[rows.0 * g.out[2]..], rows_apart(ov));
        let colt = (&col[..k * n], rows_apart(n).t());
        product((m, k, n), (&mut *dwg, rows_apart(k)), src, colt, parallel);
    }
}
